"""Random GDN inputs of realistic scale (never zeros: zeros hide indexing bugs), and a call with them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slime_flashqla.workload.lengths import packed_offsets


def make_inputs(
    *,
    batch=1,
    lengths=(37, 91),
    key_heads=2,
    value_heads=4,
    key_dim=16,
    value_dim=8,
    dtype=torch.float32,
    device="cpu",
    varlen=True,
    initial_state=True,
    seed=0,
    requires_grad=False,
    beta_dtype=torch.float32,
):
    """q, k, v, g, beta, initial_state and cu_seqlens as a dict (cu_seqlens None when not varlen)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = sum(lengths) if varlen else lengths[0]
    n = len(lengths) if varlen else batch
    if varlen:
        batch = 1

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    tensors = {
        "q": randn(batch, tokens, key_heads, key_dim).to(dtype),
        "k": randn(batch, tokens, key_heads, key_dim).to(dtype),
        "v": randn(batch, tokens, value_heads, value_dim).to(dtype),
        "g": F.logsigmoid(randn(batch, tokens, value_heads) + 2.0).float(),
        "beta": torch.rand(batch, tokens, value_heads, generator=generator, dtype=torch.float64).to(beta_dtype),
        "initial_state": (randn(n, value_heads, key_dim, value_dim) * 0.1).float() if initial_state else None,
    }
    out = {key: (t.to(device).requires_grad_(requires_grad) if t is not None else None) for key, t in tensors.items()}
    out["cu_seqlens"] = torch.tensor(packed_offsets(lengths), dtype=torch.int32, device=device) if varlen else None
    return out


def call_gdn(fn, inputs: dict, **keywords):
    """`fn(q, k, v, g=, beta=, initial_state=, cu_seqlens=)` with those taken from `inputs` (as make_inputs
    returns them); `keywords` are passed too, and override any of the four named ones."""
    named = {name: inputs[name] for name in ("g", "beta", "initial_state", "cu_seqlens")}
    return fn(inputs["q"], inputs["k"], inputs["v"], **{**named, **keywords})
