"""How a slime run reaches the integration: `--spec`, the launcher, the off switch, install() itself, the doctor."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from slime_flashqla.integrations import slime as integration
from slime_flashqla.integrations.slime import gdn
from slime_flashqla.integrations.slime.patches import original_attribute
from slime_flashqla.integrations.slime.report import slime_report, slime_rows

from . import slime_models
from .slime_processes import slime_env
from .test_slime_layers import config

pytestmark = pytest.mark.slime


@pytest.fixture(autouse=True)
def _not_installed(monkeypatch):
    monkeypatch.delenv(integration.SWITCH_ENV, raising=False)
    monkeypatch.delenv("SLIME_FLASHQLA_COMM_CHECK", raising=False)
    integration.uninstall()
    yield
    integration.uninstall()


@pytest.fixture
def megatron_spec_builders(slime_source, monkeypatch, tmp_path):
    """slime's model module, Megatron's block-spec builders replaced by ones of the same shape (Megatron is absent)."""

    def prepare(model: str):
        module = integration.import_slime_module(slime_models.MODULES[model], slime_source)
        layers = 4

        def block_spec(config, **kwargs):
            attention = SimpleNamespace(self_attention="Megatron's attention")
            return SimpleNamespace(layer_specs=[SimpleNamespace(submodules=attention) for _ in range(layers)])

        monkeypatch.setattr(module, "get_gpt_decoder_block_spec", block_spec)
        monkeypatch.setattr(module, "get_num_layers_to_build", lambda config, vp_stage=None: layers)
        monkeypatch.setattr(module, "get_transformer_layer_offset", lambda config, vp_stage=None: 0)
        checkpoint = slime_models.write_hf_checkpoint(tmp_path, model, config())
        args = slime_models.slime_args(checkpoint, "torch")
        args.num_experts = None
        megatron_config = SimpleNamespace(num_layers=layers, pipeline_model_parallel_layout=None)
        return module, args, megatron_config

    return prepare


@pytest.mark.parametrize(("model", "spec"), [("qwen3-next", "get_qwen3_next_spec"), ("qwen3.5", "get_qwen3_5_spec")])
def test_spec_installs_and_returns_slime_s_spec_whose_attention_builds_our_layer(megatron_spec_builders, model, spec):
    module, args, megatron_config = megatron_spec_builders(model)
    block = getattr(integration, spec)(args, megatron_config, None)
    assert integration.active() is not None
    gdn_layers = [layer.submodules.self_attention for layer in block.layer_specs]
    assert gdn_layers[3] == "Megatron's attention"  # slime's config: every 4th layer is full attention
    assert all(layer.module is module.Attention and layer.params == {"args": args} for layer in gdn_layers[:3])
    attention = gdn_layers[0].module(**gdn_layers[0].params, config=megatron_config, layer_number=1)
    assert type(attention.linear_attn) is getattr(gdn, type(attention.linear_attn).__name__)
    assert attention.linear_attn.gdn_backend == "torch"


def test_switch_off_builds_slime_s_own_spec_and_refuses_this_package_s_backends(megatron_spec_builders, monkeypatch):
    module, args, megatron_config = megatron_spec_builders("qwen3-next")
    monkeypatch.setenv(integration.SWITCH_ENV, "0")
    for backend in ("auto", "torch"):
        args.qwen_gdn_backend = backend
        with pytest.raises(ValueError, match=rf"^--qwen-gdn-backend {backend} needs the slime-flashqla integration"):
            integration.get_qwen3_next_spec(args, megatron_config, None)
    args.qwen_gdn_backend = "fla"
    integration.get_qwen3_next_spec(args, megatron_config, None)
    assert integration.active() is None and integration.install() is None
    assert module.Qwen3NextGatedDeltaNet is original_attribute(module, "Qwen3NextGatedDeltaNet")
    assert module.Qwen3NextGatedDeltaNet.__module__ == module.__name__


def test_switch_takes_0_or_1_only(monkeypatch):
    monkeypatch.setenv(integration.SWITCH_ENV, "off")
    with pytest.raises(ValueError, match=r"^\$SLIME_FLASHQLA_SLIME is 'off': set 1 \(or leave it unset\)"):
        integration.install()


def test_bad_settings_are_refused_before_anything_is_patched(monkeypatch):
    with pytest.raises(ValueError, match="valid policies"):
        integration.install(policy="sometimes")
    monkeypatch.setenv("SLIME_FLASHQLA_COMM_CHECK", "never")
    with pytest.raises(ValueError, match=r"\$SLIME_FLASHQLA_COMM_CHECK is 'never'"):
        integration.install()
    with pytest.raises(ValueError, match=r"threshold_gb must be a number from 0 to 1048576 \(GiB\), got nan"):
        integration.install(policy="off", threshold_gb=float("nan"))
    assert integration.active() is None


def test_install_is_once_per_process_from_many_threads(slime_source):
    integration.import_slime_module(gdn.QWEN3_NEXT_MODULE, slime_source)
    results, start = [], threading.Barrier(8)

    def race():
        start.wait()
        results.append(integration.install(policy="off"))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(result) for result in results}) == 1 and results[0] is integration.active()
    replaced = results[0].replaced()
    assert len(replaced) == len(set(replaced))
    assert integration.install(policy="whitelist") is results[0]  # first install wins until uninstall()


LAUNCHED_SCRIPT = """
import argparse, json, sys, types
# slime's driver imports sglang, requests and wandb with its arguments; none of them is here.
for name, attrs in {
    "slime.backends.sglang_utils.arguments": ("sglang_parse_args", "validate_args"),
    "slime.backends.sglang_utils.external": ("apply_external_engine_info_to_args",),
    "slime.observability.logging_utils": ("configure_logger",),
}.items():
    sys.modules[name] = types.ModuleType(name)
    for attr in attrs:
        setattr(sys.modules[name], attr, lambda *a, **k: None)
from slime.utils.arguments import get_slime_extra_args_provider

parser = argparse.ArgumentParser()
get_slime_extra_args_provider()(parser)
args, _ = parser.parse_known_args()
print(json.dumps({"backend": args.qwen_gdn_backend, "argv0": sys.argv[0], "path0": sys.path[0]}))
"""


@pytest.fixture
def launch(slime_source, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LAUNCHED_SCRIPT)

    def run(*argv, launcher=True, **env):
        prefix = [sys.executable, "-m", "slime_flashqla.integrations.slime"] if launcher else [sys.executable]
        return subprocess.run(
            [*prefix, *[str(script) if a == "SCRIPT" else a for a in argv]],
            env=slime_env(slime_source, **env),
            capture_output=True,
            text=True,
            timeout=180,
        )

    return run, script


@pytest.mark.parametrize("backend", ["auto", "torch", "flashqla", "fla"])
def test_launcher_lets_slime_s_parser_take_every_backend(launch, backend):
    run, script = launch
    done = run("SCRIPT", "--rollout-batch-size", "1", "--qwen-gdn-backend", backend)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "backend": backend,
        "argv0": str(script),
        "path0": str(script.parent),
    }


def test_without_the_launcher_or_with_the_switch_off_slime_s_parser_refuses_auto(launch):
    run, _ = launch
    for done in (
        run("SCRIPT", "--rollout-batch-size", "1", "--qwen-gdn-backend", "auto", launcher=False),
        run("SCRIPT", "--rollout-batch-size", "1", "--qwen-gdn-backend", "auto", SLIME_FLASHQLA_SLIME="0"),
    ):
        assert done.returncode == 2
        assert "argument --qwen-gdn-backend: invalid choice: 'auto'" in done.stderr


def test_launcher_refuses_a_bad_command_in_one_line(launch):
    run, _ = launch
    for argv, message in (
        ((), "usage: python -m slime_flashqla.integrations.slime SCRIPT"),
        (("missing.py",), "slime-flashqla: no such script: missing.py"),
    ):
        done = run(*argv)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().startswith(message) and len(done.stderr.strip().splitlines()) == 1
    done = run("SCRIPT", SLIME_FLASHQLA_SLIME="yes")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "slime-flashqla: $SLIME_FLASHQLA_SLIME is 'yes': set 1 (or leave it unset) to use slime-flashqla in slime, "
        "0 to not"
    ]


def test_launcher_help_exits_0_and_names_its_switches(launch):
    """The launcher's `--help` exits 0 and names its two switches (issue 35 item 15)."""
    run, _ = launch
    for flag in ("--help", "-h"):
        done = run(flag)
        assert done.returncode == 0 and done.stderr == ""
        assert done.stdout.startswith("usage: python -m slime_flashqla.integrations.slime SCRIPT")
        assert "$SLIME_FLASHQLA_SLIME=0" in done.stdout and "$SLIME_FLASHQLA_GDN_SPLIT=0" in done.stdout


def test_doctor_section_says_where_slime_is_and_what_install_would_replace(slime_source, monkeypatch):
    monkeypatch.setenv("SLIME_SOURCE", str(slime_source))
    monkeypatch.setenv("SLIME_FLASHQLA_COMM_CHECK", "whitelist")
    section = slime_report()
    assert section["source"] == str(slime_source.resolve()) and section["source_from"] == "$SLIME_SOURCE"
    assert section["switch"].startswith("on") and section["policy"] == "whitelist"
    assert set(section["would_replace"]) == {
        gdn.BACKEND_MODULE,
        gdn.QWEN3_NEXT_MODULE,
        gdn.QWEN3_5_MODULE,
        "slime.utils.reloadable_process_group",
    }
    assert all(plan["found"] for plan in section["would_replace"].values())
    assert section["active_here"] is None and "__slime_flashqla_replaced__" in section["live_check"]
    with slime_models.integration():
        assert "installed in pid" in slime_report()["active_here"]
    monkeypatch.setenv(integration.SWITCH_ENV, "0")
    rows = dict(slime_rows(slime_report()))
    assert rows["slime integration"] == "off ($SLIME_FLASHQLA_SLIME=0)"
    assert rows["slime source"] == f"{slime_source.resolve()} (from $SLIME_SOURCE)"


def test_doctor_says_when_slime_is_not_there(tmp_path, monkeypatch):
    monkeypatch.setenv("SLIME_SOURCE", str(tmp_path))
    rows = dict(slime_rows(slime_report()))
    assert rows["slime source"] == f"{tmp_path.resolve()} is not a slime checkout (no slime_plugins/models in it)"
    assert not any(key.startswith("slime slime_plugins") for key in rows)


def test_doctor_cli_shows_the_slime_section(slime_source):
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "doctor", "--json"],
        env=slime_env(slime_source),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["slime"]["source"] == str(slime_source.resolve())


def test_an_installation_reads_as_one_line():
    found = integration.install(policy="off")
    assert re.fullmatch(
        r"<slime-flashqla slime integration in pid \d+: policy off, threshold 3 GiB, \d+ slime names replaced>",
        repr(found),
    )


@pytest.mark.parametrize("on_path", [False, True])
def test_doctor_says_whether_this_process_imports_slime_which_install_alone_needs(slime_source, on_path):
    """$SLIME_SOURCE is where the spec functions import slime from; install() patches slime where it is imported."""
    env = slime_env(slime_source)
    if not on_path:
        env["PYTHONPATH"] = env["PYTHONPATH"].replace(f"{slime_source}{os.pathsep}", "")
    rows_of = "import json; from slime_flashqla.integrations.slime.report import slime_report, slime_rows as r; "
    rows_of += "print(json.dumps(dict(r(slime_report()))))"
    done = subprocess.run([sys.executable, "-c", rows_of], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert rows["slime source"] == f"{slime_source.resolve()} (from $SLIME_SOURCE)"
    if on_path:
        assert rows["slime importable here"] == f"yes, from {slime_source.resolve()}"
    else:
        assert rows["slime importable here"] == (
            "no: install() alone patches slime where this process imports it from, so put slime on PYTHONPATH "
            "(the --spec functions import it from $SLIME_SOURCE)"
        )


def test_launcher_runs_a_script_with_the_sys_path_python_gives_it(slime_source, tmp_path):
    """The script's folder replaces the launcher's sys.path[0] (the working directory), as `python SCRIPT` sets it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "only_in_the_working_directory.py").write_text("")
    script = tmp_path / "sub" / "train.py"
    script.write_text(
        "import importlib.util, json, sys\n"
        "print(json.dumps([sys.path, importlib.util.find_spec('only_in_the_working_directory') is not None]))\n"
    )
    seen = []
    for prefix in ([sys.executable], [sys.executable, "-m", "slime_flashqla.integrations.slime"]):
        done = subprocess.run(
            [*prefix, "sub/train.py"], cwd=tmp_path, env=slime_env(slime_source), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen.append(json.loads(done.stdout.splitlines()[-1]))
    assert seen[1] == seen[0]
    assert seen[0][0][0] == str(script.parent) and seen[0][1] is False
