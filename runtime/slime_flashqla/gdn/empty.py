"""The outputs of a chunk_gated_delta_rule call with no tokens (T = 0 or B = 0), made without a kernel.

FLA's and FlashQLA's kernels are not written for an empty grid, and a packed micro-batch
can be empty; every backend returns these instead of launching.
"""

from __future__ import annotations

import torch

from slime_flashqla.gdn.inputs import GDNShape


def empty_outputs(
    shape: GDNShape,
    q: torch.Tensor,
    v: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(o [B, T, Hv, V] with no elements, the unchanged state [N, Hv, K, V] or None)."""
    # v already has o's shape and no elements; a clone keeps autograd's graph connected, so
    # backward through an empty micro-batch runs.
    o = v.clone()
    if not output_final_state:
        return o, None
    # The state of every backend's kernels: float32, float64 for float64 inputs.
    state_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if initial_state is None:
        size = (shape.num_sequences, shape.value_heads, shape.key_dim, shape.value_dim)
        return o, torch.zeros(size, dtype=state_dtype, device=q.device)
    # No token decays or updates the state; a copy, so the caller's initial_state is not aliased.
    return o, initial_state.to(state_dtype, copy=True)
