"""Import the kernel packages a GDN layer will run, up front, and time each import.

The GDN layers and backends import Triton, FlashQLA and FLA lazily, at their first kernel
call, so that `import slime_flashqla` stays cheap. A training process pays those imports
anyway (FLA's package `__init__` imports every FLA layer and model, which is why the layers'
own kernels are this package's rather than FLA's; docs/benchmarks.md has the times), and
left lazy they land inside the first forward. Importing them at start-up puts that cost where a job
expects it, makes a broken install fail before the first step, and lets `first_step` report
the first forward+backward apart from the imports.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.names import AUTO, BACKENDS
from slime_flashqla.host.packages import is_installed

LAYER_OPS = "triton layer ops"


def _triton_layer_ops() -> None:
    from slime_flashqla.triton_ops import jit

    jit.load_all()


def _steps(backend: str) -> list[tuple[str, str, Callable[[], object]]]:
    """(label, package, loader) of each import a GDN layer on CUDA with `backend` runs at its first step.

    This package's Triton kernels for the short convolution, gated norm and q/k l2norm come
    first (triton itself), then each kernel the backend may run (`auto`: every one it tries).
    """
    if backend == AUTO:
        from slime_flashqla.gdn.backends.auto import candidates

        backends = candidates()
    else:
        backends = [KERNEL_BACKENDS[backend]]
    kernels = [step for b in backends for step in b.start_imports()]
    return [(LAYER_OPS, "triton", _triton_layer_ops), *kernels] if kernels else []


def kernel_imports(backend: str, *, resolve_auto: bool = False) -> list[str]:
    """What a GDN layer on CUDA with `backend` imports at its first step, among installed packages.

    With `resolve_auto`, `auto` lists only the backend it would pick for a bf16 training step
    here (explain_auto): a node whose FlashQLA validates never needs FLA's 20 s import.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(BACKENDS)}")
    if backend == AUTO and resolve_auto:
        from slime_flashqla.gdn.backends.auto import explain_auto

        backend = explain_auto().backend
    return [label for label, package, _ in _steps(backend) if is_installed(package)]


def import_kernel_packages(backend: str, *, resolve_auto: bool = True) -> dict[str, float]:
    """Run the imports `kernel_imports(backend)` lists (`auto` resolved here); return seconds for each, in order."""
    loaders = {label: loader for name in KERNEL_BACKENDS for label, _, loader in _steps(name)}
    seconds = {}
    for label in kernel_imports(backend, resolve_auto=resolve_auto):
        start = time.perf_counter()
        loaders[label]()
        seconds[label] = round(time.perf_counter() - start, 3)
    return seconds
