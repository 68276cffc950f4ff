"""Import the kernel packages a GDN layer will run, up front, and time each import.

The GDN layers and backends import Triton, FlashQLA and FLA lazily, at their first kernel
call, so that `import slime_flashqla` stays cheap. A training process pays those imports
anyway (on an H200 host `import fla` alone took 22 s: its package `__init__` imports every
FLA layer and model, which is why the layers' own kernels no longer come from FLA), and
they then showed up inside the first forward. Importing them at start-up puts that cost where a job
expects it, makes a broken install fail before the first step, and lets `first_step` report
the first forward+backward apart from the imports.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from slime_flashqla.gdn.packages import is_installed


def _triton_layer_ops() -> None:
    from slime_flashqla.triton_ops import jit

    jit.load_all()


def _backend_kernel(name: str) -> None:
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    KERNEL_BACKENDS[name].kernel()


# What a GDN layer on CUDA imports at its first step: this package's Triton kernels for the
# short convolution, gated norm and q/k l2norm (triton_ops: triton itself), then the chosen
# backend's kernel.
_LOADERS: dict[str, tuple[str, Callable[[], None]]] = {
    "triton layer ops": ("triton", _triton_layer_ops),
    "flash_qla kernel": ("flash_qla", functools.partial(_backend_kernel, "flashqla")),
    "fla kernel": ("fla", functools.partial(_backend_kernel, "fla")),
}
_BACKEND_LOADERS = {
    "flashqla": ("triton layer ops", "flash_qla kernel"),
    "fla": ("triton layer ops", "fla kernel"),
    "auto": ("triton layer ops", "flash_qla kernel", "fla kernel"),
    "torch": (),
}


def kernel_imports(backend: str, *, resolve_auto: bool = False) -> list[str]:
    """What a GDN layer on CUDA with `backend` imports at its first step, among installed packages.

    With `resolve_auto`, `auto` lists only the backend it would pick for a bf16 training step
    here (explain_auto): a node whose FlashQLA validates never needs FLA's 20 s import.
    """
    if backend not in _BACKEND_LOADERS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(_BACKEND_LOADERS)}")
    if backend == "auto" and resolve_auto:
        from slime_flashqla.gdn import explain_auto

        backend = explain_auto().backend
    return [label for label in _BACKEND_LOADERS[backend] if is_installed(_LOADERS[label][0])]


def import_kernel_packages(backend: str, *, resolve_auto: bool = True) -> dict[str, float]:
    """Run the imports `kernel_imports(backend)` lists (`auto` resolved here); return seconds for each, in order."""
    seconds = {}
    for label in kernel_imports(backend, resolve_auto=resolve_auto):
        start = time.perf_counter()
        _LOADERS[label][1]()
        seconds[label] = round(time.perf_counter() - start, 3)
    return seconds
