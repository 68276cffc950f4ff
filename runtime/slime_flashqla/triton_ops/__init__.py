"""Small fixed-configuration Triton kernels for the GDN layers: short conv + SiLU, gates, q/k L2 norm, gated RMSNorm.

They replace FLA's autotuned kernels on the training path: no autotuning and no
specialisation on token counts, so each (dtype, feature dim, width) compiles once and
Triton's disk cache serves every later process, and no `import fla` (whose package
__init__ imports every FLA layer and model). Importing this package does not import
triton: each op imports its kernels (slime_flashqla.triton_ops.jit) on its first call.
"""

from slime_flashqla.triton_ops.causal_conv1d import ProjectionLayout, causal_conv1d_silu, short_conv_silu
from slime_flashqla.triton_ops.gdn_gates import gdn_gates
from slime_flashqla.triton_ops.l2norm import l2norm_bwd, l2norm_fwd
from slime_flashqla.triton_ops.rms_norm_gated import rms_norm_gated

__all__ = [
    "ProjectionLayout",
    "causal_conv1d_silu",
    "gdn_gates",
    "l2norm_bwd",
    "l2norm_fwd",
    "rms_norm_gated",
    "short_conv_silu",
]
