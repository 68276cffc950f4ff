"""The @triton.jit kernels; importing a module here imports triton and decorates its kernels.

The host modules one level up import these only on their first call, so TRITON_INTERPRET
must be set before that first call to take effect.
"""

import importlib

MODULES = ("causal_conv1d", "gdn_gates", "l2norm", "rms_norm_gated")


def load_all() -> None:
    """Import every kernel module (triton and the decorated kernels; nothing is compiled yet)."""
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
