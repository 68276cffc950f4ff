"""Import the kernel packages a GDN layer will run, up front, and time each import.

The GDN layers and backends import FLA and FlashQLA lazily, at their first kernel call, so
that `import slime_flashqla` stays cheap. A training process pays those imports anyway; on
an H200 host `import fla` alone took 22 s (its package `__init__` imports every FLA layer
and model, and through them transformers, TorchDynamo, Inductor and TileLang), which then
showed up inside the first forward. Importing them at start-up puts that cost where a job
expects it, makes a broken install fail before the first step, and lets `first_step` report
the first forward+backward apart from the imports.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from slime_flashqla.gdn.packages import is_installed


def _fla_layer_ops() -> None:
    from slime_flashqla.gdn.qk_l2norm import _fla_l2norm
    from slime_flashqla.layers.ops import _fla_causal_conv1d, _fla_rms_norm_gated

    _fla_causal_conv1d(), _fla_rms_norm_gated(), _fla_l2norm()


def _backend_kernel(name: str) -> None:
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    KERNEL_BACKENDS[name].kernel()


# What a GDN layer on CUDA imports at its first step, through the very functions it calls:
# FLA's short convolution, gated norm and q/k l2norm (layers/ops.py, gdn/qk_l2norm.py), then
# the chosen backend's kernel.
_LOADERS: dict[str, tuple[str, Callable[[], None]]] = {
    "fla layer ops": ("fla", _fla_layer_ops),
    "flash_qla kernel": ("flash_qla", functools.partial(_backend_kernel, "flashqla")),
    "fla kernel": ("fla", functools.partial(_backend_kernel, "fla")),
}
_BACKEND_LOADERS = {
    "flashqla": ("fla layer ops", "flash_qla kernel"),
    "fla": ("fla layer ops", "fla kernel"),
    "auto": ("fla layer ops", "flash_qla kernel", "fla kernel"),
    "torch": (),
}


def kernel_imports(backend: str) -> list[str]:
    """What a GDN layer on CUDA with `backend` imports at its first step, among installed packages."""
    if backend not in _BACKEND_LOADERS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(_BACKEND_LOADERS)}")
    return [label for label in _BACKEND_LOADERS[backend] if is_installed(_LOADERS[label][0])]


def import_kernel_packages(backend: str) -> dict[str, float]:
    """Run the imports `kernel_imports(backend)` lists; return seconds for each, in order."""
    seconds = {}
    for label in kernel_imports(backend):
        start = time.perf_counter()
        _LOADERS[label][1]()
        seconds[label] = round(time.perf_counter() - start, 3)
    return seconds
