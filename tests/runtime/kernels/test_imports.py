"""Which kernel packages `first_step` imports up front, and that it imports nothing else."""

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


def test_import_seconds_are_itemised_by_package_from_a_real_importtime_run():
    from slime_flashqla.bench.first_step import OTHER, imports_by_package

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import json, email.mime.text, slime_flashqla.gdn.api"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stderr.splitlines()
    seconds = imports_by_package(lines)
    assert "torch" in seconds and OTHER in seconds  # json and email are a few ms: summed
    shown = [value for name, value in seconds.items() if name != OTHER]
    assert shown == sorted(shown, reverse=True) and min(shown) >= 0.01
    # each module's own time once: the packages add up to the sum of every module's self time
    total = sum(int(line.split("|")[0].split(":")[1]) for line in lines[1:] if line.startswith("import time:"))
    assert sum(seconds.values()) == pytest.approx(total / 1e6, abs=1e-3 * len(seconds))
