"""The FlashQLA support table against the releases' own code: every wheel on PyPI, and the installed one.

helpers.flashqla_dispatch reads what a release dispatches from its source (nothing is imported);
a row that disagrees, or a release on PyPI that no row was read from, fails here: that is how a
fixed upstream (flash-qla importing on SM121, say) shows up, and the table gets a new row.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest

from helpers.flashqla_dispatch import read_dispatch
from helpers.pypi import run_pip
from slime_flashqla.gdn.backends.flashqla.releases import CAPABILITIES, RELEASES, kernels_on, sm
from slime_flashqla.host.packages import installed_version

# An A100 besides the table's own capabilities: no release dispatches it.
CHECKED = (*CAPABILITIES, (8, 0))


def disagreements(version: str, package: Path) -> list[str]:
    """Where the table's row for `version` differs from what the release in `package` dispatches."""
    dispatch = read_dispatch(package)
    found = []
    for capability in CHECKED:
        code = dispatch.get(f"{capability[0]}.{capability[1]}")
        said = kernels_on(version, capability)
        derived = (code.importable, code.forward, code.backward) if code else (False, False, False)
        if (said.importable, said.forward, said.backward) != derived:
            found.append(
                f"flash-qla {version} on {sm(capability)}: the table says (importable, forward, backward) = "
                f"{(said.importable, said.forward, said.backward)}, its code {derived}"
            )
    return found


@pytest.fixture(scope="module")
def released(pypi_pip, tmp_path_factory) -> dict[str, Path]:
    """Every flash-qla release on PyPI -> the folder its wheel was unpacked into."""
    done = run_pip(pypi_pip, "index", "versions", "flash-qla", "--json")
    assert done.returncode == 0, done.stderr
    folders = {}
    for version in json.loads(done.stdout)["versions"]:
        where = tmp_path_factory.mktemp(f"flash-qla-{version}")
        got = run_pip(
            pypi_pip, "download", "--no-deps", "--only-binary", ":all:", f"flash-qla=={version}", "-d", str(where)
        )
        assert got.returncode == 0, got.stderr
        (wheel,) = where.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(where / "unpacked")
        folders[version] = where / "unpacked"
    return folders


@pytest.mark.network
def test_every_release_on_pypi_has_a_row_read_from_it(released):
    read = {release.read_from for release in RELEASES}
    unread = sorted(set(released) - read)
    assert not unread, (
        f"flash-qla {', '.join(unread)} is on PyPI, but no row of the support table "
        "(runtime/slime_flashqla/gdn/backends/flashqla/releases.py) was read from it: read its dispatch and add one"
    )


@pytest.mark.network
def test_each_row_is_what_its_wheel_dispatches(released):
    found = [line for version, package in released.items() for line in disagreements(version, package)]
    assert not found, "; ".join(found)


def test_the_installed_release_is_what_its_row_says():
    spec = importlib.util.find_spec("flash_qla")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("flash-qla is not installed here (the default image and gpu nodes have it)")
    package = Path(next(iter(spec.submodule_search_locations))).parent
    version = installed_version("flash_qla")
    found = disagreements(version, package)
    assert not found, "; ".join(found)
