"""docker/images/gb10/install-wheels.sh: the GB10 image's installs take published wheels only and name what has none."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "images" / "gb10" / "install-wheels.sh"


def write_wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel of `name`."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def write_sdist(folder: Path, name: str, version: str) -> None:
    """A source distribution of `name` (pip would build it, were it allowed to)."""
    root = folder / f"{name}-{version}"
    root.mkdir()
    (root / "setup.py").write_text(f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n")
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    with tarfile.open(folder / f"{name}-{version}.tar.gz", "w:gz") as tar:
        tar.add(root, arcname=root.name)


def install(tmp_path: Path, *requirements: str) -> subprocess.CompletedProcess:
    """Run the script against a local index of tmp_path/index only, installing into tmp_path/target."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)  # the script runs `python -m pip`
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "index"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    command = ["bash", str(SCRIPT), "--target", str(tmp_path / "target"), *requirements]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_installs_a_package_that_has_a_wheel(tmp_path):
    (tmp_path / "index").mkdir()
    write_wheel(tmp_path / "index", "haswheel", "1.0")
    done = install(tmp_path, "haswheel==1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "target" / "haswheel" / "__init__.py").is_file()


def test_refuses_to_build_from_source_and_names_what_has_no_wheel(tmp_path):
    (tmp_path / "index").mkdir()
    write_wheel(tmp_path / "index", "haswheel", "1.0")
    write_sdist(tmp_path / "index", "sdistonly", "1.0")
    done = install(tmp_path, "haswheel==1.0", "sdistonly==1.0")
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("install-wheels: no wheel of sdistonly==1.0 for " + platform.machine()), message
    assert "does not build them from source" in message
    assert not (tmp_path / "target").exists()  # nothing half-installed
