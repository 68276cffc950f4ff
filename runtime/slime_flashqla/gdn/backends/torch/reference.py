"""The `torch` backend: a chunked, pure-PyTorch gated delta rule with autograd.

Within a chunk of C tokens, with G the cumulative log-decay and S0 the state at its
start, the delta-rule corrections U solve a unit lower-triangular system

    (I + A) U = beta * (V - exp(G) * (K @ S0)),  A[i, j] = beta_i exp(G_i - G_j) k_i.k_j (j < i)

after which outputs and the next state are plain matrix products.  Everything runs in
float32 (float64 for float64 inputs), so the result equals the token-by-token recurrence
up to rounding of that precision.

A fully closed gate, g = -inf, resets the state, as in the recurrence. The cumulative sum
would make exp(G_i - G_j) of -inf - -inf, NaN; so closed gates are counted apart, G sums the
open ones, and every decay across a closed gate is exactly 0.
"""

from __future__ import annotations

import itertools

import torch

from slime_flashqla.triton_ops.l2norm import l2norm_reference

CHUNK_SIZE = 64


def _chunked_gdr(q, k, v, g, beta, state, chunk_size):
    """Gated delta rule over [B, H, T, *] tensors from `state` [B, H, K, V]; returns (o, state)."""
    tokens = q.shape[2]
    outputs = []
    for start in range(0, tokens, chunk_size):
        end = min(start + chunk_size, tokens)
        qc, kc, vc = q[:, :, start:end], k[:, :, start:end], v[:, :, start:end]
        bc = beta[:, :, start:end]
        closed = torch.isneginf(g[:, :, start:end])
        gc = g[:, :, start:end].masked_fill(closed, 0.0).cumsum(-1)  # G_i = sum_{j<=i} g_j over open gates
        shut = closed.cumsum(-1)  # closed gates up to i: a decay from j to i is 0 where they differ
        never = float("-inf")
        size = end - start
        causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
        # exp(G_i - G_j) for j <= i; the mask goes in before exp so no term can overflow.
        across = shut.unsqueeze(-1) != shut.unsqueeze(-2)
        decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(~causal | across, never).exp()
        strictly_lower = decay.masked_fill(torch.eye(size, dtype=torch.bool, device=q.device), 0.0)
        a = bc.unsqueeze(-1) * strictly_lower * (kc @ kc.transpose(-1, -2))
        eye = torch.eye(size, dtype=q.dtype, device=q.device)
        from_start = gc.masked_fill(shut > 0, never).exp()  # exp(G_i): the chunk's start state decayed to i
        rhs = bc.unsqueeze(-1) * (vc - from_start.unsqueeze(-1) * (kc @ state))
        u = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
        scores = (qc @ kc.transpose(-1, -2)) * decay
        outputs.append(from_start.unsqueeze(-1) * (qc @ state) + scores @ u)
        last, shut_last = gc[..., -1:], shut[..., -1:]
        to_end = (last - gc).masked_fill(shut != shut_last, never).exp()
        state = (
            last.masked_fill(shut_last > 0, never).exp().unsqueeze(-1) * state
            + (kc * to_end.unsqueeze(-1)).transpose(-1, -2) @ u
        )
    # No tokens (T = 0): no output, the state unchanged.
    return (torch.cat(outputs, dim=2) if outputs else v.new_zeros(v.shape)), state


def chunk_gated_delta_rule_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pure-PyTorch chunk_gated_delta_rule (inputs assumed checked); returns (o, final_state)."""
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    batch, _tokens, key_heads, key_dim = q.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    if scale is None:
        scale = key_dim**-0.5
    q, k = q.to(compute), k.to(compute)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm_reference(q), l2norm_reference(k)  # as FLA's kernels normalise
    group = value_heads // key_heads
    if group > 1:  # value head j reads key head j // group
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    # [B, T, H, D] -> [B, H, T, D]
    q = (q * scale).transpose(1, 2)
    k = k.transpose(1, 2)
    vt = v.to(compute).transpose(1, 2)
    gt = g.to(compute).transpose(1, 2)
    bt = beta.to(compute).transpose(1, 2)

    if cu_seqlens is None:
        if initial_state is None:
            state = q.new_zeros(batch, value_heads, key_dim, value_dim)
        else:
            state = initial_state.to(compute)
        out, final = _chunked_gdr(q, k, vt, gt, bt, state, chunk_size)
    else:
        offsets = cu_seqlens.tolist()
        bounds = list(itertools.pairwise(offsets))
        outs, finals = [], []
        for n, (start, end) in enumerate(bounds):
            if initial_state is None:
                state = q.new_zeros(1, value_heads, key_dim, value_dim)
            else:
                state = initial_state[n : n + 1].to(compute)
            if end == start:  # an empty sequence keeps its state and emits nothing
                finals.append(state)
                continue
            sl = slice(start, end)
            o_n, s_n = _chunked_gdr(
                q[:, :, sl], k[:, :, sl], vt[:, :, sl], gt[:, :, sl], bt[:, :, sl], state, chunk_size
            )
            outs.append(o_n)
            finals.append(s_n)
        out = torch.cat(outs, dim=2) if outs else vt.new_zeros(1, value_heads, 0, value_dim)
        final = torch.cat(finals, dim=0)
    o = out.transpose(1, 2).to(v.dtype)
    return o, (final if output_final_state else None)
