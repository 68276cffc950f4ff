"""The FlashQLA support table, row by row, through validation on described machines.

Each case installs a stand-in flash-qla of one release (fake_gpu.install_stand_in_flashqla: its
import raises) and patches torch's compute capability; what validation then allows is what the
release's own dispatch code does on that GPU (tests/env/test_flashqla_wheels.py re-reads the wheels).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from slime_flashqla.gdn import FlashQLAUnavailableError, flashqla_runtime_status, validate_flashqla_runtime
from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.backends.flashqla.releases import (
    CAPABILITIES,
    RELEASES,
    kernels_on,
    release_for,
    support_label,
    support_line,
)
from slime_flashqla.host.packages import is_installed

from ...fake_gpu import machine  # noqa: F401  (fixture)

TRAIN, FORWARD, IMPORT_ONLY, NO_IMPORT = "fwd+bwd", "fwd", "import only", "no import"

# (flash-qla release, compute capability) -> what it does there, read from the release's wheel:
# chunk/__init__.py's dispatch on TileLang's compute version, 0.1.3's current_arch() in
# chunk/cp/autocp/launch.py, and the names its SM12x branch binds (see docs/en/gdn_backends.md).
EXPECTED = {
    ("0.1.1", (9, 0)): TRAIN,
    ("0.1.1", (10, 0)): TRAIN,
    ("0.1.1", (10, 3)): NO_IMPORT,
    ("0.1.1", (12, 0)): NO_IMPORT,
    ("0.1.1", (12, 1)): NO_IMPORT,
    ("0.1.2", (9, 0)): TRAIN,
    ("0.1.2", (10, 0)): TRAIN,
    ("0.1.2", (10, 3)): NO_IMPORT,
    ("0.1.2", (12, 0)): FORWARD,
    ("0.1.2", (12, 1)): NO_IMPORT,
    ("0.1.3", (9, 0)): TRAIN,
    ("0.1.3", (10, 0)): TRAIN,
    ("0.1.3", (10, 3)): TRAIN,
    ("0.1.3", (12, 0)): IMPORT_ONLY,
    ("0.1.3", (12, 1)): NO_IMPORT,
}
CASES = sorted(EXPECTED.items())


def case_id(case) -> str:
    (version, (major, minor)), _ = case
    return f"{version}-SM{major}{minor}"


@pytest.fixture(autouse=True)
def _no_real_flashqla():
    if is_installed("flash_qla"):
        pytest.skip("flash-qla is installed here: the stand-ins would be shadowed by it")


def refusal(backward: bool) -> str:
    with pytest.raises(FlashQLAUnavailableError) as refused:
        validate_flashqla_runtime(backward=backward)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_the_table_has_a_row_for_every_release_read():
    assert [release.read_from for release in RELEASES] == ["0.1.1", "0.1.2", "0.1.3"]
    assert {version for version, _ in EXPECTED} == {release.read_from for release in RELEASES}
    assert {capability for _, capability in EXPECTED} == set(CAPABILITIES)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_each_cell_is_what_the_release_does(case):
    (version, capability), expected = case
    assert kernels_on(version, capability).cell == expected


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_validation_follows_the_row(machine, case):  # noqa: F811
    (version, capability), expected = case
    machine(capability=capability, flashqla=version)
    sm = f"SM{capability[0]}{capability[1]}"
    if expected == TRAIN:
        validate_flashqla_runtime(backward=True)
        assert not flashqla_runtime_status(backward=True).forward_only
    elif expected == FORWARD:
        validate_flashqla_runtime(backward=False)
        assert flashqla_runtime_status(backward=True).forward_only
        message = refusal(backward=True)
        assert f"cannot train on {sm}: flash-qla {version} has {sm} forward kernels only" in message
        assert "train with the 'fla' backend, or use FlashQLA for inference (backward=False)" in message
    else:
        for backward in (False, True):
            message = refusal(backward)
            assert f"flash-qla {version}" in message and sm in message
            if expected == IMPORT_ONLY:
                assert "ImportError" in message and "aggregate_card_state" in message
            elif capability in release_for(version).kernels:  # dispatched by chunk/__init__.py, refused later
                assert "ValueError at `import flash_qla`" in message
            else:
                assert f"found {sm}" in message
    assert "flash_qla" not in sys.modules


def test_a_capability_no_release_dispatches_is_refused(machine):  # noqa: F811
    machine(capability=(8, 0), flashqla="0.1.3")
    assert "needs compute capability SM90, SM100, SM103 (flash-qla 0.1.3); found SM80" in refusal(backward=False)


def test_forward_only_release_lists_its_forward_only_capability(machine):  # noqa: F811
    machine(capability=(8, 9), flashqla="0.1.2")
    assert "needs compute capability SM90, SM100 (SM120: forward only) (flash-qla 0.1.2); found SM89" in refusal(
        backward=False
    )


def test_a_release_newer_than_the_table_is_taken_as_the_newest_read(machine):  # noqa: F811
    machine(capability=(12, 1), flashqla="0.1.4")
    message = refusal(backward=False)
    assert "flash-qla 0.1.4 (as 0.1.3, the newest release the support table was read from)" in message
    assert release_for("0.1.4").read_from == "0.1.3"


def test_without_flashqla_the_newest_release_read_decides(machine):  # noqa: F811
    machine(capability=(12, 1))
    ok, reason = KERNEL_BACKENDS["flashqla"].available(None, backward=False)
    assert not ok
    # installing flash-qla would not help on a GB10: the refusal says both
    assert "flash-qla 0.1.3 raises ValueError at `import flash_qla` on SM121" in reason
    assert "pip install flash-qla" in reason


def test_the_kernel_is_refused_before_flashqla_is_imported_on_gb10(machine):  # noqa: F811
    machine(capability=(12, 1), flashqla="0.1.3")
    with pytest.raises(FlashQLAUnavailableError, match=r"ValueError at `import flash_qla` on SM121"):
        KERNEL_BACKENDS["flashqla"].kernel()
    assert "flash_qla" not in sys.modules


def test_sm120_forward_of_0_1_2_runs_bfloat16_only(machine):  # noqa: F811
    machine(capability=(12, 0), flashqla="0.1.2")
    backend = KERNEL_BACKENDS["flashqla"]
    device = torch.device("cuda", 0)
    assert backend.runtime_problem(device, False, torch.bfloat16) is None
    assert "bfloat16 only" in backend.runtime_problem(device, False, torch.float16)


def test_support_line_names_every_capability():
    assert support_line("0.1.3") == (
        "flash-qla 0.1.3: SM90 fwd+bwd, SM100 fwd+bwd, SM103 fwd+bwd, SM120 import only, SM121 no import"
    )
    assert support_line("0.1.2") == (
        "flash-qla 0.1.2: SM90 fwd+bwd, SM100 fwd+bwd, SM103 no import, SM120 fwd, SM121 no import"
    )
    assert support_label("0.1.3") == "SM90=fwd+bwd,SM100=fwd+bwd,SM103=fwd+bwd,SM120=import-only,SM121=no-import"


DOCS = [
    Path(__file__).resolve().parents[5] / "docs" / lang / name
    for lang in ("en", "zh")
    for name in ("gdn_backends.md", "install_flashqla.md")
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_docs_tables_are_the_support_table(doc):
    block = doc.read_text().split("<!-- flashqla-support:begin -->")[1].split("<!-- flashqla-support:end -->")[0]
    rows = [[cell.strip().strip("`") for cell in line.strip().strip("|").split("|")] for line in block.split("\n")]
    rows = [row for row in rows if row != [""] and not set(row[0]) <= {"-"}]
    assert rows[0] == ["flash-qla", *(f"SM{c[0]}{c[1]}" for c in CAPABILITIES)]
    assert [row[0] for row in rows[1:]] == [release.read_from for release in RELEASES]
    for version, *cells in rows[1:]:
        assert cells == [kernels_on(version, c).cell for c in CAPABILITIES], (doc.name, version)
