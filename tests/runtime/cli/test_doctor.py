"""`slime-flashqla doctor` and `check`, run as the user runs them (a subprocess of the installed CLI)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from slime_flashqla.cli.doctor import report_rows

NO_GPU = not torch.cuda.is_available()


def cli(*args, check=False, env=None, **variables):
    """`slime-flashqla ARGS` in a subprocess, with `env` (default: this one's) and `variables` set on top."""
    return subprocess.run(
        [sys.executable, "-m", "slime_flashqla", *args],
        capture_output=True, text=True, timeout=300, check=check, env={**(env or os.environ), **variables},
    )  # fmt: skip


@pytest.fixture(scope="module")
def report():
    return json.loads(cli("doctor", "--json", check=True).stdout)


def test_json_report_has_every_field(report):
    for key in (
        "torch",
        "torch_cuda",
        "cuda_available",
        "driver",
        "gpus",
        "packages",
        "backends",
        "flashqla",
        "fla_kernel",
        "auto",
        "fla_forwards_to_flashqla",
        "tilelang_cache_dir",
        "kernel_fingerprint",
        "warnings",
        "notes",
    ):
        assert key in report, key
    assert report["torch"] == torch.__version__
    assert set(report["packages"]) == {"fla", "flash_qla", "tilelang", "triton"}
    assert report["backends"]["torch"]["available"] is True


@pytest.mark.skipif(not NO_GPU, reason="describes a machine without a GPU")
def test_json_report_on_a_machine_without_gpu(report):
    assert report["cuda_available"] is False
    assert report["gpus"] == []
    assert report["auto"]["backend"] == "torch"
    assert report["flashqla"]["ok"] is False
    assert "CUDA" in report["flashqla"]["reason"]


@pytest.mark.skipif(not NO_GPU, reason="describes a machine without a GPU")
def test_require_flashqla_fails_without_gpu():
    """An unmet `--require` is said on stderr, so `doctor --require x > /dev/null` still says it (issue 35 item 14)."""
    result = cli("doctor", "--require", "flashqla")
    assert result.returncode == 1
    assert "REQUIREMENT NOT MET: FlashQLA is not usable for training" in result.stderr
    assert "REQUIREMENT NOT MET" not in result.stdout


INVALID = {"SLIME_FLASHQLA_SLIME": "off", "SLIME_FLASHQLA_COMM_CHECK": "never"}


def test_settings_the_integration_refuses_are_warnings():
    """A setting the integration would refuse is a WARNING, in the table and in the JSON (issue 35 item 13)."""
    report = json.loads(cli("doctor", "--json", **INVALID).stdout)
    warned = " ".join(report["warnings"])
    assert "$SLIME_FLASHQLA_SLIME is 'off'" in warned and "$SLIME_FLASHQLA_COMM_CHECK is 'never'" in warned
    table = cli("doctor", **INVALID, COLUMNS="400")
    assert table.returncode == 0
    warnings = [line for line in table.stdout.splitlines() if "WARNING" in line]
    assert any("SLIME_FLASHQLA_SLIME" in line for line in warnings), table.stdout
    assert any("SLIME_FLASHQLA_COMM_CHECK" in line for line in warnings), table.stdout


def test_require_is_not_met_while_a_setting_is_refused():
    """`--require` is unmet while a setting the integration refuses is set (issue 35 item 13)."""
    result = cli("doctor", "--json", "--require", "fla", "--require", "flashqla", **INVALID)
    assert result.returncode == 1
    unmet = " ".join(json.loads(result.stdout)["unmet_requirements"])
    assert "$SLIME_FLASHQLA_SLIME is 'off'" in unmet and "$SLIME_FLASHQLA_COMM_CHECK is 'never'" in unmet
    assert "$SLIME_FLASHQLA_SLIME is 'off'" in cli("doctor", "--require", "fla", **INVALID).stderr


@pytest.mark.slime
def test_switched_off_the_integration_replaces_nothing(slime_source):
    """With SLIME_FLASHQLA_SLIME=0 doctor lists no replacement, as install() then makes none (issue 35 item 13)."""
    off = cli("doctor", SLIME_SOURCE=str(slime_source), SLIME_FLASHQLA_SLIME="0", COLUMNS="400").stdout
    assert "none (switched off)" in off
    assert "Qwen3NextGatedDeltaNet ->" not in off
    on = cli("doctor", SLIME_SOURCE=str(slime_source), SLIME_FLASHQLA_SLIME="1", COLUMNS="400").stdout
    assert "none (switched off)" not in on and "Qwen3NextGatedDeltaNet ->" in on
    report = json.loads(cli("doctor", "--json", SLIME_SOURCE=str(slime_source), SLIME_FLASHQLA_SLIME="0").stdout)
    assert report["slime"]["would_replace"] == {}


def test_table_output_names_the_auto_choice():
    result = cli("doctor", check=True)
    assert "'auto' runs" in result.stdout
    assert "TileLang kernel cache" in result.stdout


def test_tilelang_cache_dir_follows_the_environment(tmp_path):
    result = cli("doctor", "--json", check=True, TILELANG_CACHE_DIR=str(tmp_path))
    assert json.loads(result.stdout)["tilelang_cache_dir"] == str(tmp_path)


def test_check_json_is_the_doctor_report_and_the_check():
    """`check --json` is the doctor report and the check's result (issue 35 item 28)."""
    result = cli("check", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["doctor"]["torch"] == torch.__version__ and "backends" in report["doctor"]
    check = report["check"]
    assert check["ok"] is True and check["problems"] == [] and check["result"] == "OK"
    assert check["backend"] in ("torch", "fla", "flashqla") and check["forward_ms"] > 0 and check["backward_ms"] > 0
    assert {"reason", "device", "shape", "parity"} <= set(check)


def test_check_runs_a_layer_forward_and_backward():
    """The README's main job: doctor + one GDN layer forward/backward on the best backend."""
    result = cli("check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "slime-flashqla doctor" in result.stdout
    assert "result" in result.stdout and "OK" in result.stdout
    if NO_GPU:
        assert "auto -> torch" in result.stderr
        # Nothing compiles on the CPU: the timings are first calls, not "incl. compile".
        assert "forward (first call)" in result.stdout and "incl. compile" not in result.stdout


@pytest.mark.skipif(not NO_GPU, reason="describes a machine without a GPU")
def test_the_cpu_report_says_what_is_missing_instead_of_n_a(report):
    rows = dict(report_rows(report))
    assert rows["driver"] == "none found: no CUDA device is visible to torch"
    assert "n/a" not in " ".join(rows.values())
    # The fla row agrees with the backend row above it.
    assert not report["backends"]["fla"]["available"]
    assert rows["'fla' runs"] in (
        "nothing here: the fla backend is unusable (see its row)",  # FLA installed, but no GPU
        "none: flash-linear-attention is not installed",
    )


def test_a_note_is_a_note_row_and_a_warning_a_warning_row(report):
    rows = report_rows({**report, "warnings": ["fix this"], "notes": ["know this"]})
    assert ("WARNING", "fix this") in rows and ("NOTE", "know this") in rows


@pytest.mark.parametrize(
    ("release", "line"),
    [
        ("0.1.3", "flash-qla 0.1.3: SM90 fwd+bwd, SM100 fwd+bwd, SM103 fwd+bwd, SM120 import only, SM121 no import"),
        ("0.1.2", "flash-qla 0.1.2: SM90 fwd+bwd, SM100 fwd+bwd, SM103 no import, SM120 fwd, SM121 no import"),
    ],
)
def test_doctor_reports_what_the_installed_flashqla_release_runs(tmp_path, release, line):
    from helpers.flashqla_stand_in import install_stand_in_flashqla

    if importlib.util.find_spec("flash_qla") is not None:
        pytest.skip("flash-qla is installed here: the stand-in would be shadowed")
    install_stand_in_flashqla(tmp_path, release)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    report = json.loads(cli("doctor", "--json", check=True, env=env).stdout)
    assert report["flashqla"]["support"] == line
    table = cli("doctor", env=env, COLUMNS="250").stdout  # the table on one line per row
    assert any("FlashQLA support" in row and line in row for row in table.splitlines()), table


def test_doctor_says_how_slime_s_gdn_layers_split_and_warns_on_a_bad_switch():
    """doctor says how slime's GDN layers are split; a value install() refuses is a WARNING (issue 30)."""
    on = json.loads(cli("doctor", "--json").stdout)["slime"]["gdn_split"]
    assert on.startswith("on ($SLIME_FLASHQLA_GDN_SPLIT unset or 1): heads over TP x CP")
    off = json.loads(cli("doctor", "--json", SLIME_FLASHQLA_GDN_SPLIT="0").stdout)["slime"]["gdn_split"]
    assert off.startswith("off ($SLIME_FLASHQLA_GDN_SPLIT=0): slime's own wrapper")
    bad = cli("doctor", "--json", SLIME_FLASHQLA_GDN_SPLIT="maybe")
    report = json.loads(bad.stdout)
    assert report["slime"]["gdn_split"].startswith("invalid: $SLIME_FLASHQLA_GDN_SPLIT is 'maybe'")
    assert any("$SLIME_FLASHQLA_GDN_SPLIT is 'maybe'" in w for w in report["warnings"])


def test_doctor_shows_the_kernel_preload_setting_and_a_bad_one():
    """doctor shows SLIME_FLASHQLA_PRELOAD, and a bad value as INVALID (issue 34 ND24)."""
    report = json.loads(cli("doctor", "--json", SLIME_FLASHQLA_PRELOAD="maybe").stdout)
    assert report["kernel_preload"].startswith("INVALID: SLIME_FLASHQLA_PRELOAD='maybe'")
    assert ("kernel preload", report["kernel_preload"]) in report_rows(report)
