"""The stack fingerprint: whether a compiled kernel fits this machine, answered in one place.

A fingerprint is the GPU architecture and the versions of what compiled kernels depend on: the
distributions every backend shares (`COMMON_DISTRIBUTIONS`), then those each backend declares
once (`kernel_distributions`, gdn/backends/tooling.py), each named once, then torch's CUDA,
Python (major.minor) and the machine. It has three readers:

- `cache export` records it in an archive's manifest and `cache import` compares it
  (kernel_cache/stack.py: a `Stack`'s compared fields are these);
- `warmup` records it beside what a layer preloads, and the preload compares it (kernels/preload.py);
- `doctor` shows it (diagnostics/report.py).

A new backend's distributions join it through that backend's own declaration; nothing here changes.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping

from slime_flashqla.host.gpus import gpu_archs_and_names
from slime_flashqla.host.packages import distribution_version

# What every backend's kernels stand on: torch, the Triton it ships (under either distribution
# name) that this package's own Triton ops and torch's compiles use, and this package itself
# (which kernels the warm-up compiles and what its records mean).
COMMON_DISTRIBUTIONS = ("torch", "triton", "pytorch-triton", "slime-flashqla")
# Facts beside the versions: the CUDA torch was built with, and what Triton's launcher stubs are
# C extensions for (one CPython, one CPU architecture).
FACTS = ("torch.cuda", "python", "machine")


def fingerprint_distributions() -> tuple[str, ...]:
    """The common distributions, then each backend's declared ones in registry order, each once."""
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    declared = [name for backend in KERNEL_BACKENDS.values() for name in backend.kernel_distributions]
    return tuple(dict.fromkeys([*COMMON_DISTRIBUTIONS, *declared]))


def fingerprint_fields() -> tuple[str, ...]:
    """A fingerprint's fields, in order: `gpu_arch`, the distributions, the facts."""
    return ("gpu_arch", *fingerprint_distributions(), *FACTS)


def fingerprint_versions() -> dict[str, str | None]:
    """Every field but `gpu_arch` here: each distribution's installed version (None: not installed), the facts."""
    import torch

    versions = {name: distribution_version(name) for name in fingerprint_distributions()}
    versions["torch.cuda"] = torch.version.cuda
    versions["python"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    versions["machine"] = platform.machine()
    return versions


def fingerprint() -> dict[str, str | None]:
    """This machine's fingerprint: `gpu_arch` ("sm_90", "none" without a visible GPU), then `fingerprint_versions()`."""
    arch, _ = gpu_archs_and_names()
    return {"gpu_arch": arch, **fingerprint_versions()}


def differences(recorded: Mapping, here: Mapping, *, shared_only: bool = False) -> list[tuple[str, object, object]]:
    """(field, recorded value, value here) for each field that differs, in the recorded order, then here's.

    A field one side lacks counts as None there (nothing of that name was installed); with
    `shared_only`, only the fields both sides hold are compared.
    """
    keys = [key for key in recorded if key in here] if shared_only else list(dict.fromkeys([*recorded, *here]))
    return [(key, recorded.get(key), here.get(key)) for key in keys if recorded.get(key) != here.get(key)]


def describe(fields: Mapping) -> str:
    """A fingerprint in one line, `field value` each, `none` for what is not installed (doctor's row)."""
    return ", ".join(f"{name} {value or 'none'}" for name, value in fields.items())
