"""The stack a compiled kernel was built for (GPU architecture, versions, TileLang's nvcc), and whether it fits here.

The GPU architecture and the versions are the stack fingerprint, kernels/fingerprint.py's: the
preload's records and `doctor` read the same one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from slime_flashqla.host.cuda_toolchain import same_release, tilelang_nvcc_version
from slime_flashqla.kernel_cache.format import CACHE_NAMES, ArchiveError, shown
from slime_flashqla.kernels.fingerprint import differences, fingerprint_versions

GPU_ARCH_PATTERN = re.compile(r"^sm_\d+[a-z]?$")
# Stack fields an archive written before they were recorded lacks (see Stack.missing).
TOOLCHAIN_FIELDS = ("nvcc", "driver", "driver_cuda")


class StackMismatch(ArchiveError):
    """The archive was built on another GPU architecture or software stack."""


@dataclass(frozen=True)
class Stack:
    """What decides whether a compiled kernel fits: GPU architecture, versions, TileLang's nvcc.

    The GPU's name and the driver are recorded but never compared: an H100 and an H200 run the
    same sm_90 kernels, and a compiled kernel loads under any driver that runs this stack's CUDA.
    """

    gpu_arch: str
    gpu_name: str
    versions: dict = field(default_factory=dict)
    nvcc: str | None = None  # the CUDA compiler TileLang compiles with (host/cuda_toolchain.py)
    driver: str | None = None  # NVIDIA driver version (nvidia-smi)
    driver_cuda: str | None = None  # the newest CUDA that driver runs
    missing: tuple = ()  # TOOLCHAIN_FIELDS the manifest does not record (an older slime-flashqla wrote it)

    def compared_fields(self) -> dict:
        """The fields an import compares exactly, in report order: the stack fingerprint (nvcc is compared apart)."""
        return {"gpu_arch": self.gpu_arch, **self.versions}

    def as_dict(self) -> dict:
        """The stack as manifest JSON."""
        return {
            "gpu_arch": self.gpu_arch,
            "gpu_name": self.gpu_name,
            "versions": dict(self.versions),
            "nvcc": self.nvcc,
            "driver": self.driver,
            "driver_cuda": self.driver_cuda,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Stack:
        """The stack a manifest describes (checked by manifest.manifest_of)."""
        toolchain = {name: data.get(name) for name in TOOLCHAIN_FIELDS}
        missing = tuple(name for name in TOOLCHAIN_FIELDS if name not in data)
        return cls(data["gpu_arch"], data.get("gpu_name") or "unknown", dict(data["versions"]), **toolchain,
                   missing=missing)  # fmt: skip


def current_stack() -> Stack:
    """This machine's stack: its fingerprint (kernels/fingerprint.py), GPU name and driver, TileLang's nvcc."""
    from slime_flashqla.host.gpus import driver_cuda, gpu_archs_and_names, nvidia_smi_driver

    arch, name = gpu_archs_and_names()
    cuda = arch != "none"
    driver = (nvidia_smi_driver(), driver_cuda()) if cuda else (None, None)
    versions = fingerprint_versions()
    return Stack(arch, name, versions, nvcc=tilelang_nvcc_version(), driver=driver[0], driver_cuda=driver[1])


def with_gpu_arch(stack: Stack, gpu_arch: str) -> Stack:
    """`stack` for a GPU named on the command line (an image build sees none); refuses to contradict a visible GPU."""
    if not GPU_ARCH_PATTERN.match(gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch!r}: expected a compute capability like sm_90 or sm_121")
    if stack.gpu_arch not in ("none", gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch} contradicts this machine's GPU ({stack.gpu_arch}, {stack.gpu_name})")
    return replace(stack, gpu_arch=gpu_arch, gpu_name=f"{stack.gpu_name} (--gpu-arch {gpu_arch})")


def stack_mismatches(archived: Stack, here: Stack, caches=CACHE_NAMES) -> list[str]:
    """One 'field archive-value (archive) vs here-value (here)' entry per compared field that differs.

    `caches` are the caches the archive holds: TileLang's nvcc is compared (by CUDA release,
    major.minor) only for a TileLang cache, and only where both sides know it. TileLang's own
    cache key holds neither the compiler nor the CUDA version, so it would load such kernels.
    """
    # A field one side lacks (an archive written before a backend declared it) counts as not installed there.
    found = [
        f"{shown(key)} {shown(theirs or 'none')} (archive) vs {shown(ours or 'none')} (here)"
        for key, theirs, ours in differences(archived.compared_fields(), here.compared_fields())
    ]
    if "tilelang" in caches and archived.nvcc and here.nvcc and not same_release(archived.nvcc, here.nvcc):
        found.append(f"nvcc {shown(archived.nvcc)} (archive) vs {shown(here.nvcc)} (here)")
    return found


def stack_notes(archived: Stack, caches=CACHE_NAMES) -> list[str]:
    """What could not be compared: toolchain fields an older archive lacks (it is accepted; these say so)."""
    if "nvcc" in archived.missing and "tilelang" in caches:
        return ["the archive predates the nvcc and driver fields (an older slime-flashqla wrote it): "
                "the CUDA compiler its TileLang kernels were built with was not compared"]  # fmt: skip
    return []
