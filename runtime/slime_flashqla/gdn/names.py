"""The GDN backends' names, importing no torch: what a parser offers before any kernel or torch import.

The registry (gdn/backends/__init__.py) is their one source; `auto` picks among the kernel
backends per call.
"""

from slime_flashqla.gdn.backends import AUTO, DEFAULT_BACKEND, KERNEL_BACKENDS

KERNEL_BACKEND_NAMES = tuple(KERNEL_BACKENDS)
BACKENDS = (*KERNEL_BACKEND_NAMES, AUTO)

__all__ = ["AUTO", "BACKENDS", "DEFAULT_BACKEND", "KERNEL_BACKEND_NAMES"]
