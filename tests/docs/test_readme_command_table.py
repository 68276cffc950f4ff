"""The README's command table on a CPU machine: each command refuses in one line before any work, or does its
job; none half-runs (issue 35). Run word for word, as a user copies them, in an empty folder of a clone."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from docs.test_doc_commands import _shims

ROOT = Path(__file__).resolve().parents[2]
# What each command of the table does where no GPU is visible: "refuses" (exit 2, one line on stderr,
# nothing on stdout, nothing written), an exit status it does its job with, or why it is tested elsewhere.
ON_A_CPU = {
    "slime-flashqla doctor": 0,
    "slime-flashqla doctor --json": 0,
    "slime-flashqla doctor --require flashqla": 1,  # the report, then the unmet requirement: its job
    "slime-flashqla check": 0,
    "slime-flashqla warmup --model qwen3-next-80b-a3b --tp 1,2,4,8": "refuses",
    "slime-flashqla cache export kernels.tar": "refuses",  # nothing warmed here to export
    "slime-flashqla cache import kernels.tar": "refuses",
    "slime-flashqla cache info kernels.tar": "refuses",
    "slime-flashqla bench gdn": "refuses",
    "slime-flashqla bench stream": "refuses",
    "slime-flashqla bench comm": 0,  # gloo on a CPU
    "nox -s gpu_tests": "tests/sessions/test_sessions.py runs it where nox is installed",
    "bash tools/gpu/validate_node.sh": "refuses",
    "bash tools/gpu/stream_targets.sh": "refuses",
}
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="what the table says of a CPU machine")


def table_commands() -> list[str]:
    """The commands of the README's `## Commands` table, optional `[...]` parts one at a time, PATH as `kernels`."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Commands") :]
    commands = []
    for row in re.findall(r"^\| (`[^|]*`[^|]*) \|", section, re.MULTILINE):
        for code in re.findall(r"`([^`]+)`", row):
            code = re.sub(r"^cache ", "slime-flashqla cache ", code).replace("PATH.tar", "kernels.tar")
            base = re.sub(r"\s*\[[^\]]*\]", "", code)
            options = re.findall(r"\[([^\]]*)\]", code)
            commands += [base] + [f"{base} {option}" for option in options]
    return commands


def test_every_command_of_the_table_says_what_it_does_on_a_cpu():
    assert table_commands() and set(table_commands()) == set(ON_A_CPU)


def work_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty folder of a clone (the checkout's folders linked in), and the environment of a fresh shell."""
    work = tmp_path / "work"
    work.mkdir()
    for top in ("runtime", "env", "docs", "tests", "tools", "docker", "conda-recipe", "README.md", "noxfile.py"):
        (work / top).symlink_to(ROOT / top)
    _shims(tmp_path / "bin")
    caches = {name: tmp_path / name for name in ("tilelang", "triton", "tmp")}
    for folder in caches.values():
        folder.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("OUT_DIR", "DRY")},
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT / "runtime"), os.environ.get("PYTHONPATH")))),
        "TILELANG_CACHE_DIR": str(caches["tilelang"]),
        "TRITON_CACHE_DIR": str(caches["triton"]),
        "TMPDIR": str(caches["tmp"]),
    }
    return work, env


def written(tmp_path: Path) -> list[str]:
    """Every file and folder under the test's folder that the command made (the links and shims are the test's)."""
    ours = {"work", "bin", "tilelang", "triton", "tmp"}
    made = [p for p in tmp_path.rglob("*") if p.relative_to(tmp_path).parts[0] in ours]
    made = [p for p in made if not (p.parent == tmp_path / "work" and p.is_symlink()) and p.parent != tmp_path / "bin"]
    return sorted(str(p.relative_to(tmp_path)) for p in made if p not in {tmp_path / name for name in ours})


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if "comm" in c else c for c in ON_A_CPU],
)
def test_the_command_refuses_in_one_line_or_does_its_job(command, tmp_path):
    expected = ON_A_CPU[command]
    if isinstance(expected, str) and expected != "refuses":
        pytest.skip(expected)
    work, env = work_folder(tmp_path)
    done = subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=420,
        start_new_session=True,
    )  # fmt: skip
    report = f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, report
    if expected == "refuses":
        assert done.returncode == 2, report
        assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, report
        assert written(tmp_path) == [], report
    else:
        assert done.returncode == expected, report
        if "--json" in command.split():
            json.loads(done.stdout)


def test_the_optional_parts_expand_as_a_user_types_them():
    """`[--json] [--require flashqla]` stands for the command with each, not with none of its brackets kept."""
    assert all("[" not in c and "PATH" not in c for c in itertools.chain(table_commands()))
