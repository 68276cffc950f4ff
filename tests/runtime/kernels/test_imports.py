"""Which kernel packages are imported up front for a backend (kernels/imports.py), and that nothing else is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slime_flashqla.host.packages import is_installed
from slime_flashqla.kernels.imports import import_kernel_packages, kernel_imports


def test_torch_backend_imports_no_kernel_package():
    assert kernel_imports("torch") == []
    assert import_kernel_packages("torch") == {}


def test_unknown_backend_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="valid names are: fla, flashqla, torch, auto"):
        kernel_imports("flash")


@pytest.mark.parametrize("backend", ["flashqla", "fla", "auto"])
def test_only_installed_packages_are_listed_layer_ops_first(backend):
    listed = kernel_imports(backend)
    assert ("triton layer ops" in listed) == is_installed("triton")
    assert ("flash_qla kernel" in listed) == (backend in ("flashqla", "auto") and is_installed("flash_qla"))
    assert ("fla kernel" in listed) == (backend in ("fla", "auto") and is_installed("fla"))
    if listed and is_installed("triton"):
        assert listed[0] == "triton layer ops"  # the order the layer's first forward imports them


@pytest.mark.skipif(is_installed("fla") or is_installed("flash_qla"), reason="kernel packages are installed here")
def test_without_kernel_packages_only_the_layer_ops_are_imported():
    code = (
        "import sys; from slime_flashqla.kernels.imports import import_kernel_packages as f; "
        "print(sorted(f('auto', resolve_auto=False)), "
        "sorted(m for m in ('fla', 'flash_qla', 'tilelang', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    expected = "['triton layer ops'] ['triton']" if is_installed("triton") else "[] []"
    assert out.strip() == expected  # never fla: the layer's own kernels do not come from FLA


def test_auto_imports_only_what_it_picks_here():
    from slime_flashqla.gdn import explain_auto

    picked = explain_auto().backend
    assert kernel_imports("auto", resolve_auto=True) == kernel_imports(picked)
    if picked == "torch":  # no GPU: auto runs the reference, and a layer step imports no kernel package
        assert import_kernel_packages("auto") == {}
