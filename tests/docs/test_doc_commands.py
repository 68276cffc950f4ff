"""Every documented command that runs on a CPU is run, word for word, so a doc that drifts fails CI.

The rule, for README.md, README.zh.md and every page under docs/: a ```bash fence whose line before it
(blank lines skipped) is `<!-- doc-test: cpu -->` holds commands a CPU-only machine runs as
they are written, quickly; this test runs each such fence as one bash script
(`set -euo pipefail`) in an empty folder and fails when it exits non-zero or when an output it
asks for (`--json`, `--markdown`, `--plot` PATH) is not written. Fences without the marker need
something a CPU machine or CI lacks (a GPU, a container engine, conda, a network download) and
are not run, except those marked `<!-- doc-test: cpu-refuses -->`: GPU commands that a CPU machine
must refuse in one line (exit 2, one line on stderr, nothing on stdout, nothing written), each line
run on its own. The lines of a marked fence that only set up the environment this suite already
runs in (creating or activating a venv, `pip install`) are left out: the suite's environment is
what they make.

`slime-flashqla` and `python` resolve to this interpreter running this checkout's runtime, and
the fence's folder links the checkout's top-level folders, so `bash env/conda/create_env.sh`
and `./runtime` mean what they mean in a clone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted(ROOT.glob("README*.md")), *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = "<!-- doc-test: cpu -->"
REFUSES = "<!-- doc-test: cpu-refuses -->"
# Set-up lines of the environment this suite already runs in (see the module docstring).
SETUP = re.compile(r"^(python3? -m venv |\. \S+/bin/activate|source \S+/bin/activate|(python3? -m )?pip install )")
OUTPUT_OPTIONS = ("--json", "--markdown", "--plot")


def marked_fences(path: Path, marker: str = MARKER) -> list[str]:
    """The bodies of the ```bash fences in `path` that carry `marker`."""
    lines = path.read_text().splitlines()
    fences, index = [], 0
    while index < len(lines):
        if lines[index].strip() == "```bash":
            before = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
            end = lines.index("```", index + 1)
            if before == marker:
                fences.append("\n".join(lines[index + 1 : end]))
            index = end
        index += 1
    return fences


def commands(fence: str) -> list[str]:
    """The fence's commands, a `\\`-continued command joined into one line, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", "", fence)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def without_comment(command: str) -> str:
    """The command without its trailing `# comment` (as bash reads it), for comparing en with zh."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    return " ".join(lexer)


FENCES = {f"{path.relative_to(ROOT)}#{n}": fence for path in DOCS for n, fence in enumerate(marked_fences(path))}


def test_the_docs_mark_the_cpu_commands_of_every_guide():
    """A marker that no longer parses, or a guide that lost its CPU examples, is a doc that drifted."""
    marked = {key.split("#")[0] for key in FENCES}
    for doc in ("README.md", "docs/en/bench_gdn.md", "docs/en/bench_stream.md", "docs/en/conda.md",
                "docs/en/install_flashqla.md"):  # fmt: skip
        assert doc in marked, f"{doc} has no {MARKER} fence"
    for path in DOCS:
        for marker in (MARKER, REFUSES):
            assert path.read_text().count(marker) == len(marked_fences(path, marker)), (
                f"{path}: {marker} not before a bash fence"
            )


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "docs" / "en").glob("*.md")))
def test_english_and_chinese_guides_run_the_same_cpu_commands(name):
    """Same facts, same commands: the zh guide's CPU examples are the en guide's, comments aside."""
    for marker in (MARKER, REFUSES):
        en, zh = (marked_fences(ROOT / "docs" / language / name, marker) for language in ("en", "zh"))
        assert [[without_comment(c) for c in commands(f)] for f in en] == [
            [without_comment(c) for c in commands(f)] for f in zh
        ]


def _unique_fences() -> dict[str, str]:
    """One runnable script per distinct set of commands (the zh twins of en fences run once)."""
    seen, unique = set(), {}
    for key, fence in FENCES.items():
        script = tuple(without_comment(c) for c in commands(fence) if not SETUP.match(c))
        if script not in seen:
            seen.add(script)
            unique[key] = fence
    return unique


def _shims(folder: Path) -> None:
    """`slime-flashqla`, `python` and `python3` in `folder`: this interpreter and this checkout's runtime."""
    folder.mkdir()
    python = shlex.quote(sys.executable)
    # Scripts, not symlinks: a venv's python linked from elsewhere would not find its pyvenv.cfg.
    for name, line in (("slime-flashqla", f"{python} -m slime_flashqla"), ("python", python), ("python3", python)):
        (folder / name).write_text(f'#!/bin/sh\nexec {line} "$@"\n')
        (folder / name).chmod(0o755)


def _outputs(script: list[str]) -> list[str]:
    """The output paths the commands ask for."""
    paths = []
    for command in script:
        words = shlex.split(command, comments=True)
        paths += [words[i + 1] for i, word in enumerate(words[:-1]) if word in OUTPUT_OPTIONS]
    return paths


def _work_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty folder of a clone (the checkout's top-level folders linked in) and the environment to run in."""
    work = tmp_path / "work"
    work.mkdir()
    for top in ("runtime", "env", "docs", "tests", "tools", "docker", "conda-recipe", "README.md"):
        (work / top).symlink_to(ROOT / top)
    _shims(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT / "runtime"), os.environ.get("PYTHONPATH")))),
        # The kernel caches a command might touch: this test's own.
        "TILELANG_CACHE_DIR": str(tmp_path / "tilelang"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }
    return work, env


@pytest.mark.parametrize("key", sorted(_unique_fences()))
def test_the_documented_cpu_commands_run(key, tmp_path):
    fence = FENCES[key]
    script = [c for c in commands(fence) if not SETUP.match(c)]
    if any("--plot" in c for c in script) and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("a --plot example needs the `plot` extra (matplotlib), which this environment lacks")
    work, env = _work_folder(tmp_path)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(script)],
        cwd=work, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, f"{key}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for output in _outputs(script):
        assert (work / output).is_file(), f"{key}: asked for {output}, which was not written"


REFUSED = sorted(
    {
        command
        for path in DOCS
        for fence in marked_fences(path, REFUSES)
        for command in map(without_comment, commands(fence))
    }
)


def test_some_gpu_commands_are_marked_as_refused_on_a_cpu():
    assert REFUSED


@pytest.mark.skipif(torch.cuda.is_available(), reason="these commands refuse only where no GPU is visible")
@pytest.mark.parametrize("command", REFUSED)
def test_the_documented_gpu_commands_refuse_a_cpu_in_one_line(command, tmp_path):
    work, env = _work_folder(tmp_path)
    before = sorted(p.name for p in work.iterdir())
    done = subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    report = f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 2 and done.stdout == "", report
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, report
    assert sorted(p.name for p in work.iterdir()) == before, report
