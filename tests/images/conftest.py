"""In-image tests: they run inside a built image (`nox -s image_tests`) and skip anywhere else.

tests/images/shared/ runs in every image, tests/images/<name>/ in the image of
docker/images/<name>/ and in the images below it in tests/images/hierarchy.py (gb10-flashqla:
its own, gb10's and shared). `nox -s image_tests` passes an image exactly its folders; here, a
folder meant for another line of images skips (the Dockerfiles set SLIME_FLASHQLA_IMAGE to
their variant, and gb10-flashqla is built from gb10's, so its tests also guard on
SLIME_FLASHQLA_INSTALL_FLASHQLA).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from images.hierarchy import lineage
from images.support import ROOT

HERE = Path(__file__).resolve().parent
IMAGE = os.environ.get("SLIME_FLASHQLA_IMAGE")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE not in path.parents:
            continue
        wanted = path.relative_to(HERE).parts[0]
        if IMAGE is None:
            item.add_marker(pytest.mark.skip(reason="runs inside a slime-flashqla image: nox -s image_tests"))
        elif wanted not in lineage(IMAGE) and IMAGE not in lineage(wanted):
            item.add_marker(pytest.mark.skip(reason=f"for the {wanted} image; this is the {IMAGE} image"))


@pytest.fixture(scope="session")
def pins() -> dict:
    """env/versions.toml as copied into the image."""
    return tomllib.loads((ROOT / "env" / "versions.toml").read_text())


@pytest.fixture(scope="session")
def doctor_report() -> dict:
    """`slime-flashqla doctor --json`, run through the installed CLI."""
    done = subprocess.run(["slime-flashqla", "doctor", "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def flashqla_opted_in() -> bool:
    """Whether the image was built with INSTALL_FLASHQLA=1 (the Dockerfiles keep it in the env)."""
    return os.environ["SLIME_FLASHQLA_INSTALL_FLASHQLA"] == "1"
