"""Small fixed-configuration Triton kernels for the GDN layers: short conv + SiLU, gates, q/k L2 norm, gated RMSNorm.

They replace FLA's autotuned kernels on the training path: no autotuning and no
specialisation on token counts, so each (dtype, feature dim, width) compiles once and
Triton's disk cache serves every later process, and no `import fla` (whose package
__init__ imports every FLA layer and model). Each op's module holds its PyTorch reference
too (`<op>_reference`: what runs off CUDA, and what its rounding follows); every launch passes
the kernel's arguments by keyword. Importing this package does not import triton: each op
imports its kernels (slime_flashqla.triton_ops.jit) on its first call.
"""

from slime_flashqla.triton_ops.causal_conv1d import (
    ProjectionLayout,
    causal_conv1d_silu,
    causal_conv1d_silu_reference,
    short_conv_silu,
    short_conv_silu_reference,
)
from slime_flashqla.triton_ops.gdn_gates import gdn_gates, gdn_gates_reference
from slime_flashqla.triton_ops.l2norm import l2norm_bwd, l2norm_fwd, l2norm_reference
from slime_flashqla.triton_ops.rms_norm_gated import rms_norm_gated, rms_norm_gated_reference

__all__ = [
    "ProjectionLayout",
    "causal_conv1d_silu",
    "causal_conv1d_silu_reference",
    "gdn_gates",
    "gdn_gates_reference",
    "l2norm_bwd",
    "l2norm_fwd",
    "l2norm_reference",
    "rms_norm_gated",
    "rms_norm_gated_reference",
    "short_conv_silu",
    "short_conv_silu_reference",
]
