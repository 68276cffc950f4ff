"""The CUDA toolchain in the archive's manifest (issue 21 item 5): recorded, and compared where TileLang would mis-load.

TileLang's cache key holds neither its CUDA compiler nor the CUDA version, so kernels built with
another nvcc release would be loaded as they are: `import` compares it. The driver and the GPU's
name are recorded, never compared. The compilers here are real executables in a made-up CUDA
home that print what nvcc prints, and TileLang is "installed" by its distribution metadata, which
is all the lookup reads: tilelang itself is never imported.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.kernel_cache_files import make_caches, rewrite
from slime_flashqla.host import cuda_toolchain
from slime_flashqla.kernel_cache.archive import export_archive, import_archive
from slime_flashqla.kernel_cache.manifest import read_manifest
from slime_flashqla.kernel_cache.stack import StackMismatch, current_stack, stack_mismatches

NVCC_OUTPUT = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Fri_Feb_21_20:23:50_PST_2025
Cuda compilation tools, release {release}, V{version}
Build cuda_{release}.r{release}/compiler.35583870_0
"""


def cuda_home(root: Path, version: str) -> Path:
    """A CUDA home whose bin/nvcc prints `version` the way nvcc --version does."""
    release = ".".join(version.split(".")[:2])
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat <<'EOF'\n{NVCC_OUTPUT.format(release=release, version=version)}EOF\n")
    nvcc.chmod(0o755)
    return root


def tilelang_installed(root: Path) -> Path:
    """A site directory holding tilelang's distribution metadata (and no tilelang): what the lookup reads."""
    info = root / "tilelang-0.1.15.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tilelang\nVersion: 0.1.15\n")
    return root


def test_tilelang_s_rule_for_its_cuda_home(tmp_path, monkeypatch):
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    toolkit = cuda_home(tmp_path / "cuda-12.8", "12.8.93")
    hpc = cuda_home(tmp_path / "hpc_sdk" / "Linux_x86_64" / "25.1" / "compilers", "12.6.85")
    monkeypatch.setenv("PATH", f"{toolkit / 'bin'}{os.pathsep}/usr/bin")
    assert cuda_toolchain.tilelang_cuda_home() == str(toolkit)  # the nvcc on PATH, two levels up
    monkeypatch.setenv("PATH", f"{hpc / 'bin'}{os.pathsep}/usr/bin")
    assert cuda_toolchain.tilelang_cuda_home() == str(hpc.parent)  # the HPC SDK: one more level
    monkeypatch.setenv("CUDA_PATH", str(toolkit))
    assert cuda_toolchain.tilelang_cuda_home() == str(toolkit)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "missing"))
    assert cuda_toolchain.tilelang_cuda_home() is None  # CUDA_HOME wins, and TileLang drops what does not exist
    assert cuda_toolchain.nvcc_version(str(toolkit)) == "12.8.93"
    assert cuda_toolchain.nvcc_version(str(tmp_path)) is None  # no bin/nvcc there


def test_without_tilelang_there_is_no_compiler_of_its_to_record(tmp_path, monkeypatch):
    if importlib.util.find_spec("tilelang") is not None:
        pytest.skip("tilelang is installed here")
    monkeypatch.setenv("CUDA_HOME", str(cuda_home(tmp_path / "cuda", "12.8.93")))
    assert cuda_toolchain.tilelang_nvcc_version() is None and current_stack().nvcc is None


def cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "cache", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def environment(site: Path, home: Path) -> dict:
    path = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, "CUDA_HOME": str(home)}


def test_the_manifest_records_tilelang_s_nvcc_and_import_refuses_another_release(tmp_path):
    site = tilelang_installed(tmp_path / "site")
    built_with = environment(site, cuda_home(tmp_path / "cuda-12.8", "12.8.93"))
    tilelang, triton = make_caches(tmp_path / "src")
    done = cli("export", tmp_path / "k.tar", "--tilelang-dir", tilelang, "--triton-dir", triton, env=built_with)
    assert done.returncode == 0, done.stderr
    stack = read_manifest(tmp_path / "k.tar")["stack"]
    assert stack["nvcc"] == "12.8.93" and {"driver", "driver_cuda"} <= set(stack)

    other = environment(site, cuda_home(tmp_path / "cuda-12.4", "12.4.131"))
    into = ("--tilelang-dir", tmp_path / "t" / "tl", "--triton-dir", tmp_path / "t" / "tr")
    refused = cli("import", tmp_path / "k.tar", *into, env=other)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "nvcc 12.8.93 (archive) vs 12.4.131 (here)" in refused.stderr
    assert not (tmp_path / "t").exists()
    info = cli("info", tmp_path / "k.tar", env={**other, "COLUMNS": "300"})
    assert "no: nvcc 12.8.93 (archive) vs 12.4.131 (here)" in info.stdout

    patch_release = environment(site, cuda_home(tmp_path / "cuda-12.8.1", "12.8.61"))
    same = cli("import", tmp_path / "k.tar", *into, env=patch_release)
    assert same.returncode == 0 and same.stderr == "", same.stderr  # one CUDA release: the same kernels


def test_nvcc_is_compared_for_tilelang_kernels_only_and_the_driver_never(tmp_path):
    here = current_stack()
    archived = replace(here, nvcc="12.8.93", driver="570.86.15", driver_cuda="12.8", gpu_name="NVIDIA H100")
    local = replace(here, nvcc="12.4.131", driver="550.54.15", driver_cuda="12.4", gpu_name="NVIDIA H200")
    assert stack_mismatches(archived, local, ["tilelang"]) == ["nvcc 12.8.93 (archive) vs 12.4.131 (here)"]
    assert stack_mismatches(archived, local, ["triton"]) == []  # Triton's cache key holds its own compiler
    assert stack_mismatches(archived, replace(local, nvcc=None), ["tilelang"]) == []  # nothing here to compare
    assert stack_mismatches(archived, replace(local, nvcc="12.8.61"), ["tilelang", "triton"]) == []


def test_an_archive_written_before_the_toolchain_fields_is_imported_with_a_note(tmp_path):
    tilelang, triton = make_caches(tmp_path / "src")
    here = replace(current_stack(), nvcc="12.8.93")
    export_archive(tmp_path / "new.tar", {"tilelang": tilelang, "triton": triton}, stack=here)

    def as_older_versions_wrote_it(manifest, members):
        for name in ("nvcc", "driver", "driver_cuda"):
            del manifest["stack"][name]

    old = rewrite(tmp_path / "new.tar", tmp_path / "old.tar", as_older_versions_wrote_it)
    notes = []
    result = import_archive(
        old, {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"}, stack=here, warn=notes.append
    )
    assert result.published > 0
    assert notes == [
        f"note: {old}: the archive predates the nvcc and driver fields (an older slime-flashqla wrote it): "
        "the CUDA compiler its TileLang kernels were built with was not compared"
    ]
    with pytest.raises(StackMismatch, match=r"nvcc 12\.8\.93 \(archive\) vs 12\.6\.20 \(here\)"):
        import_archive(tmp_path / "new.tar", {"tilelang": tmp_path / "x"}, stack=replace(here, nvcc="12.6.20"))
