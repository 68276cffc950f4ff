"""env/conda/create_env.sh: valid bash, shellcheck-clean, and the plan it prints
(--dry-run) creates, updates, layers FlashQLA and checks as documented."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "env" / "conda" / "create_env.sh"
STRICT = os.environ.get("SLIME_FLASHQLA_CONDA_CHECK") == "1"


def run_script(*args: str, gpu: bool, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run the script with a stand-in nvidia-smi that reports a GPU or no driver."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    probe = fake_bin / "nvidia-smi"
    probe.write_text(f"#!/bin/sh\nexit {0 if gpu else 9}\n")
    probe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CONDA_OVERRIDE_CUDA"}
    env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def planned(result: subprocess.CompletedProcess) -> list[str]:
    """The commands a --dry-run printed, in order."""
    assert result.returncode == 0, result.stderr
    return [line[2:] for line in result.stdout.splitlines() if line.startswith("+ ")]


def test_bash_syntax():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        if STRICT:
            pytest.fail("shellcheck missing: install env/conda/check-tools.txt")
        pytest.skip("shellcheck not installed; `nox -s conda_check` installs it")
    result = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_help_names_the_opt_out(tmp_path):
    result = run_script("--help", gpu=False, tmp_path=tmp_path)
    assert result.returncode == 0
    assert "--no-flashqla" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--prefix DIR is required"),
        (("--prefix", "x", "--bogus"), "unknown option '--bogus'"),
        (("--prefix", "x", "--tool", "pip"), "--tool must be conda, mamba or micromamba"),
    ],
)
def test_bad_arguments_fail_clearly(tmp_path, args, message):
    result = run_script(*args, "--dry-run", gpu=False, tmp_path=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr


def test_fresh_prefix_with_gpu(tmp_path):
    prefix = tmp_path / "env"
    steps = planned(run_script("--prefix", str(prefix), "--tool", "conda", "--dry-run", gpu=True, tmp_path=tmp_path))
    env_dir = ROOT / "env" / "conda"
    assert steps == [
        f"conda env create --prefix {prefix} --file {env_dir / 'environment.yml'}",
        f"conda env update --prefix {prefix} --file {env_dir / 'flashqla.yml'}",
        f"{prefix}/bin/python -m pip install --no-deps {ROOT / 'runtime'}",
        f"{prefix}/bin/python -m pip check",
        f"{prefix}/bin/slime-flashqla doctor --require fla --require flashqla",
    ]


def test_login_node_overrides_cuda_and_defers_flashqla_check(tmp_path, pins):
    result = run_script("--prefix", str(tmp_path / "env"), "--tool", "conda", "--dry-run", gpu=False, tmp_path=tmp_path)
    assert f"CONDA_OVERRIDE_CUDA={pins['torch']['cuda']}" in result.stdout
    assert planned(result)[-1] == f"{tmp_path / 'env'}/bin/slime-flashqla doctor"
    assert "doctor --require fla --require flashqla" in result.stdout  # how to confirm on a GPU node


def test_opt_out_leaves_flashqla_out(tmp_path):
    steps = planned(
        run_script(
            "--prefix",
            str(tmp_path / "env"),
            "--no-flashqla",
            "--tool",
            "conda",
            "--dry-run",
            gpu=True,
            tmp_path=tmp_path,
        )
    )
    assert not any("flashqla.yml" in step or "uninstall" in step for step in steps)
    assert steps[-1].endswith("slime-flashqla doctor --require fla")


def test_rerun_updates_in_place(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    steps = planned(run_script("--prefix", str(prefix), "--tool", "mamba", "--dry-run", gpu=True, tmp_path=tmp_path))
    assert steps[0].startswith(f"mamba env update --prefix {prefix} ")
    assert not any(" create " in step or step.startswith("rm ") for step in steps)


def test_rerun_with_opt_out_removes_flashqla(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    steps = planned(
        run_script(
            "--prefix", str(prefix), "--no-flashqla", "--tool", "conda", "--dry-run", gpu=True, tmp_path=tmp_path
        )
    )
    assert f"{prefix}/bin/python -m pip uninstall --yes flash-qla" in steps
    assert not any("flashqla.yml" in step for step in steps)


def test_recreate_removes_then_creates(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "conda-meta").mkdir(parents=True)
    steps = planned(
        run_script(
            "--prefix",
            str(prefix),
            "--recreate",
            "--tool",
            "micromamba",
            "--dry-run",
            gpu=True,
            tmp_path=tmp_path,
        )
    )
    assert steps[0] == f"rm -rf -- {prefix}"
    assert steps[1].startswith(f"micromamba create --yes --prefix {prefix} ")
    assert steps[2].startswith(f"micromamba install --yes --prefix {prefix} ")


def test_refuses_a_directory_that_is_not_an_environment(tmp_path):
    prefix = tmp_path / "data"
    prefix.mkdir()
    (prefix / "keep.txt").write_text("not a conda environment")
    result = run_script(
        "--prefix", str(prefix), "--recreate", "--tool", "conda", "--dry-run", gpu=True, tmp_path=tmp_path
    )
    assert result.returncode == 2
    assert "not a conda environment" in result.stderr
    assert (prefix / "keep.txt").exists()


def test_dry_run_plans_without_any_conda_installed(tmp_path):
    """docs/en/conda.md offers --dry-run to review the plan first: it must not need conda to print it."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "sed", "ls", "dirname"):  # what the script runs besides builtins: no conda, mamba, micromamba
        (tools / tool).symlink_to(shutil.which(tool))
    (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (tools / "nvidia-smi").chmod(0o755)
    prefix = tmp_path / "env"
    done = subprocess.run(
        [str(tools / "bash"), str(SCRIPT), "--prefix", str(prefix), "--dry-run"],
        capture_output=True, text=True, timeout=60, env={"PATH": str(tools)},
    )  # fmt: skip
    steps = planned(done)
    assert steps[0] == f"conda env create --prefix {prefix} --file {ROOT / 'env' / 'conda' / 'environment.yml'}"
    assert "none of mamba, micromamba, conda is on PATH" in done.stderr and "Miniforge" in done.stderr
    without_dry_run = subprocess.run(
        [str(tools / "bash"), str(SCRIPT), "--prefix", str(prefix)],
        capture_output=True, text=True, timeout=60, env={"PATH": str(tools)},
    )  # fmt: skip
    assert without_dry_run.returncode == 2 and "install Miniforge first" in without_dry_run.stderr
    assert not prefix.exists()
