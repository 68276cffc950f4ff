"""Installing slime-flashqla[flashqla] into slime's environment: pip's resolver, with its pins as constraints.

The install guide's command (docs/en/install_flashqla.md, between the ci:slime-install markers) runs
here as a dry run (`--dry-run --report`, `--ignore-installed`: there is no slime environment here)
with the constraints of tests/env/coinstall/ in place of the environment's own list: sglang's exact
pins (its wheel's METADATA) and the exact pins of slime's image (its docker/Dockerfile). With
constraints pip either keeps every pin or refuses, so resolving is the check that none would change.
fast-deps reads each wheel's metadata with HTTP range requests: no torch or CUDA wheel is downloaded.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from helpers.pypi import run_pip

ROOT = Path(__file__).resolve().parents[2]
COINSTALL = Path(__file__).resolve().parent / "coinstall"
GUIDES = [ROOT / "docs" / lang / "install_flashqla.md" for lang in ("en", "zh")]
ENV_LIST = "/tmp/slime-env.txt"  # where the guide's first command writes the environment's pins

pytestmark = [pytest.mark.network, pytest.mark.slow]


def guide_commands(guide: Path) -> list[str]:
    """The command lines of the guide's block between the ci:slime-install markers."""
    block = guide.read_text().split("<!-- ci:slime-install:begin -->")[1].split("<!-- ci:slime-install:end -->")[0]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("python -m pip")]


def pins(*names: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The constraint lines of tests/env/coinstall/<name>.txt, without those of the `leave_out` packages."""
    lines = []
    for name in names:
        for line in (COINSTALL / f"{name}.txt").read_text().splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#") and Requirement(line).name not in leave_out:
                lines.append(line)
    return lines


def dry_run(pip, tmp_path: Path, constraints: list[str]) -> tuple[object, dict | None]:
    """Run the guide's install command as a dry run with `constraints`: (pip's result, its report or None)."""
    install = shlex.split(next(c for c in guide_commands(GUIDES[0]) if " install " in c))
    assert install[:4] == ["python", "-m", "pip", "install"], install
    (tmp_path / "env.txt").write_text("\n".join(constraints) + "\n")
    # The guide runs in a checkout; pip writes the egg-info next to the sources, so a copy of runtime/.
    shutil.copytree(ROOT / "runtime", tmp_path / "runtime", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    paths = {ENV_LIST: str(tmp_path / "env.txt"), "./runtime[flashqla]": f"{tmp_path / 'runtime'}[flashqla]"}
    args = [paths.get(a, a) for a in install[4:]]
    report = tmp_path / "report.json"
    flags = ["--dry-run", "--ignore-installed", "--use-feature=fast-deps", "--report", str(report)]
    done = run_pip(pip, "install", *flags, *args)
    return done, (json.loads(report.read_text()) if done.returncode == 0 else None)


def test_the_guides_give_the_same_command():
    en, zh = (guide_commands(guide) for guide in GUIDES)
    assert en == zh and len(en) == 2, (en, zh)
    assert en[0] == f"python -m pip list --format=freeze --exclude-editable > {ENV_LIST}"
    assert f"-c {ENV_LIST}" in en[1] and '"./runtime[flashqla]"' in en[1]


# The three environments, resolved at once (each dry run mostly waits on PyPI).
ENVIRONMENTS = {
    # slime's image pins FLA 0.4.2, below this package's floor: "slime-fla" shows pip refusing it.
    "sglang-0.5.23": ("sglang-0.5.23", "slime-624b824", ("flash-linear-attention",)),
    "slime-fla": ("sglang-0.5.23", "slime-624b824", ()),
    "slime-image": ("sglang-0.5.15.post1", "slime-624b824", ()),
}


@pytest.fixture(scope="module")
def dry_runs(pypi_pip, tmp_path_factory) -> dict[str, tuple]:
    """Environment name -> (its constraint lines, pip's result, its report or None)."""
    constraints = {name: pins(sglang, slime, leave_out=out) for name, (sglang, slime, out) in ENVIRONMENTS.items()}
    with ThreadPoolExecutor(len(constraints)) as pool:
        runs = {
            name: pool.submit(dry_run, pypi_pip, tmp_path_factory.mktemp(name), lines)
            for name, lines in constraints.items()
        }
        return {name: (constraints[name], *run.result()) for name, run in runs.items()}


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_no_torch_or_cuda_wheel_is_downloaded(dry_runs, name):
    _, done, _ = dry_runs[name]
    downloads = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("Downloading ")]
    assert not [line for line in downloads if line.split()[1].startswith(("torch-", "nvidia", "triton-"))], downloads


def test_sglang_0_5_23_and_slimes_pins_all_stay(dry_runs):
    constraints, done, report = dry_runs["sglang-0.5.23"]
    assert done.returncode == 0, done.stdout + done.stderr
    normal = {
        re.sub(r"[-_.]+", "-", i["metadata"]["name"].lower()): i["metadata"]["version"] for i in report["install"]
    }
    changed = {}
    for line in constraints:
        requirement = Requirement(line)
        name = re.sub(r"[-_.]+", "-", requirement.name.lower())
        if name in normal and not requirement.specifier.contains(normal[name], prereleases=True):
            changed[name] = (str(requirement.specifier), normal[name])
    assert not changed, changed
    # sglang's GPU stack is in what slime-flashqla[flashqla] needs, and stays as sglang pins it.
    for name, version in {"torch": "2.14.1", "tilelang": "0.1.12", "apache-tvm-ffi": "0.1.11"}.items():
        assert normal[name] == version, (name, normal.get(name))
    assert normal["flash-qla"] == "0.1.3"
    assert Version(normal["flash-linear-attention"]) >= Version("0.5.0")


def test_slimes_fla_0_4_2_is_refused_not_replaced(dry_runs):
    _, done, _ = dry_runs["slime-fla"]
    said = done.stdout + done.stderr  # pip prints the conflict on stdout, the error on stderr
    assert done.returncode != 0
    assert "ResolutionImpossible" in said
    assert "The user requested (constraint) flash-linear-attention==0.4.2" in said, said


def test_slimes_image_at_624b824_is_refused_for_its_tilelang(dry_runs):
    # sglang 0.5.15.post1 pins tilelang 0.1.11; flash-qla 0.1.3 and this package need >= 0.1.12.
    _, done, _ = dry_runs["slime-image"]
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "ResolutionImpossible" in said
    assert "The user requested (constraint) tilelang==0.1.11" in said, said
