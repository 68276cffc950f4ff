"""An independent, token-by-token gated delta rule in float64: the tests' ground truth.

It shares no code with slime_flashqla's chunked `torch` backend: one loop over tokens,
one outer product per step, exactly the recurrence FLA documents.
"""

from __future__ import annotations

import torch


def recurrent_gated_delta_rule(
    q, k, v, g, beta, *, scale=None, initial_state=None, use_qk_l2norm=False, cu_seqlens=None
):
    """Per-token recurrence over [B, T, H, D] inputs; returns (o, final_state) in float64."""
    q, k, v, g, beta = (t.detach().double() for t in (q, k, v, g, beta))
    batch, tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    if scale is None:
        scale = key_dim**-0.5
    if use_qk_l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    group = value_heads // key_heads
    if cu_seqlens is None:
        segments = [(b, 0, tokens) for b in range(batch)]
    else:
        bounds = [int(x) for x in cu_seqlens]
        segments = [(0, bounds[n], bounds[n + 1]) for n in range(len(bounds) - 1)]
    o = torch.zeros(batch, tokens, value_heads, value_dim, dtype=torch.float64)
    finals = []
    for n, (b, start, end) in enumerate(segments):
        if initial_state is None:
            state = torch.zeros(value_heads, key_dim, value_dim, dtype=torch.float64)
        else:
            state = initial_state[n].detach().double().clone()
        for t in range(start, end):
            for h in range(value_heads):
                kh = h // group
                state[h] *= torch.exp(g[b, t, h])
                residual = v[b, t, h] - k[b, t, kh] @ state[h]
                state[h] += torch.outer(k[b, t, kh], beta[b, t, h] * residual)
                o[b, t, h] = (q[b, t, kh] * scale) @ state[h]
        finals.append(state)
    return o, torch.stack(finals)
