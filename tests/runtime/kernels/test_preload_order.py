"""A preload loads a backend's kernels in the order a training step first calls them, as the backend declares it."""

from __future__ import annotations

import importlib.metadata

import pytest

from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.backends.tooling import TileLangSource
from slime_flashqla.kernels.tilelang_specs import TileLangPackage


def test_specs_come_in_the_declared_first_use_order_unlisted_last_ties_kept(tmp_path):
    imported = []
    declared = TileLangSource("pkg", lambda: imported.append("pkg"), ("cumsum", "fused_fwd", "fused_bwd"))
    modules = ["fused_bwd", "other", "fused_fwd", "cumsum", "fused_bwd"]
    specs = [{"factory": f"pkg.ops.{module}:kernel_{index}"} for index, module in enumerate(modules)]
    items = TileLangPackage(declared).specialisations(specs, tmp_path, tmp_path, True)
    assert [item.spec["factory"] for item in items] == [
        "pkg.ops.cumsum:kernel_3", "pkg.ops.fused_fwd:kernel_2", "pkg.ops.fused_bwd:kernel_0",
        "pkg.ops.fused_bwd:kernel_4", "pkg.ops.other:kernel_1",
    ]  # fmt: skip
    assert imported == ["pkg"]  # the package is imported before its specs are handed out


def test_flashqla_declares_its_forward_kernels_before_its_backward_ones():
    order = KERNEL_BACKENDS["flashqla"].tilelang.first_use
    assert order.index("fused_fwd") < order.index("fused_bwd") and order.index("kkt_solve") < order.index("fused_fwd")


def test_every_module_flashqla_declares_is_in_the_installed_flash_qla():
    """Read from the distribution's file list: importing flash_qla needs a GPU it supports."""
    try:
        files = importlib.metadata.files("flash-qla") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flash-qla is not installed")
    modules = {file.stem for file in files if file.suffix == ".py"}
    missing = [name for name in KERNEL_BACKENDS["flashqla"].tilelang.first_use if name not in modules]
    assert not missing, f"flash-qla has no module named {missing}: update first_use in its backend"
