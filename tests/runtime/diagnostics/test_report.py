"""doctor's rules (diagnostics/report.py): which combinations of GPU, driver and packages warn, and which are notes."""

from __future__ import annotations

import pytest

from slime_flashqla.diagnostics.report import known_problems, report_notes


def _report(**overrides):
    base = {
        "gpus": [{"index": 0, "name": "NVIDIA H200", "capability": "9.0"}],
        "packages": {"fla": "0.6.0", "flash_qla": None, "tilelang": None, "triton": "3.4.0"},
        "driver_cuda": "12.8",
        "torch_cuda": "12.8",
        "fla_forwards_to_flashqla": False,
    }
    return {**base, **overrides}


def test_warns_about_fla_backward_on_hopper_with_triton_34_and_no_tilelang():
    warnings = known_problems(_report())
    assert any("#640" in w and "Triton 3.4.0" in w for w in warnings)


@pytest.mark.parametrize(
    "overrides",
    [
        {"packages": {"fla": "0.6.0", "flash_qla": None, "tilelang": "0.1.15", "triton": "3.4.0"}},
        {"packages": {"fla": "0.6.0", "flash_qla": None, "tilelang": None, "triton": "3.7.1"}},
        {"packages": {"fla": "0.6.0", "flash_qla": None, "tilelang": None, "triton": "3.3.1"}},
        {"gpus": [{"index": 0, "name": "NVIDIA A100", "capability": "8.0"}]},
    ],
)
def test_no_triton_warning_where_fla_is_fine(overrides):
    assert not any("#640" in w for w in known_problems(_report(**overrides)))


def test_warns_about_an_old_driver_and_notes_fla_forwarding():
    report = _report(driver_cuda="12.4", fla_forwards_to_flashqla=True)
    warnings = known_problems(report)
    assert any("upgrade the driver" in w for w in warnings)
    # The README's own install (FLA 0.6 with flash-qla) turns the forwarding on: a fact, nothing to fix.
    assert not any("forwards to FlashQLA" in w for w in warnings)
    assert any("forwards to FlashQLA" in n for n in report_notes(report))
