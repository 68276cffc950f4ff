"""Which kernel packages are imported up front for a backend (kernels/imports.py), and that nothing else is."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from helpers.site_packages import site_package
from slime_flashqla.host.packages import is_installed
from slime_flashqla.kernels.imports import import_kernel_packages, kernel_imports

# import name -> (distribution, version) of the stand-ins a test installs
STAND_INS = {"triton": ("triton", "3.4.0"), "fla": ("fla-core", "0.5.0"), "flash_qla": ("flash-qla", "0.1.3")}
NEVER_IMPORTED = "raise ImportError('a stand-in distribution: listed, never imported')\n"
ALL = tuple(STAND_INS)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """`node(*modules)`: exactly these kernel packages are installed, as tiny distributions; the others cannot be found.

    A missing one is a `None` entry in sys.modules, which the import system (and so `find_spec`)
    reads as "not importable", whatever this machine has installed.
    """
    monkeypatch.syspath_prepend(str(tmp_path))

    def have(*present: str) -> None:
        for module, (distribution, version) in STAND_INS.items():
            if module in present:
                monkeypatch.delitem(sys.modules, module, raising=False)
                site_package(tmp_path, module, distribution, version, init=NEVER_IMPORTED)
            else:
                monkeypatch.setitem(sys.modules, module, None)

    return have


def test_torch_backend_imports_no_kernel_package():
    assert kernel_imports("torch") == []
    assert import_kernel_packages("torch") == {}


def test_unknown_backend_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="valid names are: fla, flashqla, torch, auto"):
        kernel_imports("flash")


@pytest.mark.parametrize(
    ("installed", "backend", "listed"),
    [
        (ALL, "flashqla", ["triton layer ops", "flash_qla kernel"]),
        (ALL, "fla", ["triton layer ops", "fla kernel"]),
        (ALL, "auto", ["triton layer ops", "flash_qla kernel", "fla kernel"]),  # in the order auto tries them
        (ALL, "torch", []),
        ((), "flashqla", []),
        ((), "fla", []),
        ((), "auto", []),
        (("triton",), "flashqla", ["triton layer ops"]),
        (("triton",), "auto", ["triton layer ops"]),
        (("triton", "fla"), "flashqla", ["triton layer ops"]),
        (("triton", "fla"), "auto", ["triton layer ops", "fla kernel"]),
        (("flash_qla",), "flashqla", ["flash_qla kernel"]),
        (("fla", "flash_qla"), "auto", ["flash_qla kernel", "fla kernel"]),
    ],
)
def test_only_installed_packages_are_listed_layer_ops_first(node, installed, backend, listed):
    """Each listed import's package is installed, and the layer ops come before the backend's kernels.

    The layer ops are listed only for a backend with a kernel package (the torch reference runs none).
    The stand-ins raise when imported: listing imports nothing.
    """
    node(*installed)
    assert kernel_imports(backend) == listed


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")
def test_resolved_auto_lists_only_the_backend_it_picks(node):
    """Without a GPU auto picks the torch reference, so a layer step imports nothing even with every package here."""
    node(*ALL)
    assert kernel_imports("auto", resolve_auto=True) == []
    assert import_kernel_packages("auto") == {}
    assert kernel_imports("auto", resolve_auto=False) == ["triton layer ops", "flash_qla kernel", "fla kernel"]


@pytest.mark.parametrize("triton", ["hidden", "installed"])
def test_without_kernel_packages_only_the_layer_ops_are_imported(triton):
    """auto, unresolved, without FLA or FlashQLA: at most triton is imported, never fla (the layer's own kernels)."""
    if triton == "installed" and not is_installed("triton"):
        pytest.skip("triton is not installed here, and this test really imports it")
    hidden = ["fla", "flash_qla"] + (["triton"] if triton == "hidden" else [])
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({hidden!r})); "
        "from slime_flashqla.kernels.imports import import_kernel_packages as f; "
        "print(sorted(f('auto', resolve_auto=False)), "
        "sorted(m for m in ('fla', 'flash_qla', 'tilelang', 'triton') if sys.modules.get(m) is not None))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == ("[] []" if triton == "hidden" else "['triton layer ops'] ['triton']")


def test_auto_imports_only_what_it_picks_here():
    from slime_flashqla.gdn import explain_auto

    picked = explain_auto().backend
    assert kernel_imports("auto", resolve_auto=True) == kernel_imports(picked)
    if picked == "torch":  # no GPU: auto runs the reference, and a layer step imports no kernel package
        assert import_kernel_packages("auto") == {}
