"""The GDN layer's gates, beta = sigmoid(b) and g = -exp(A_log) * softplus(a + dt_bias), as one fused op.

Rounding follows `gdn_gates_reference` (below): beta in b's dtype, g in float32 from
float32 a + dt_bias and float32 A_log. a and b are read where the projection wrote them
(Qwen3-Next's fused b/a projection interleaves them per key head), so nothing is copied.
dA_log and ddt_bias: float32 partials per program, summed by torch (no atomics).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from slime_flashqla.triton_ops._host import cdiv, check_float, next_power_of_2, on_tensor_device

# Forward: 64 rows a program; backward walks 8 such tiles so that its partial sums stay small.
FWD_ROWS, BWD_ROWS, BWD_TILES, NUM_WARPS = 64, 64, 8, 4
MAX_HEADS = 1024


@functools.cache
def _kernels():
    from slime_flashqla.triton_ops.jit import gdn_gates

    return gdn_gates


def _head_layout(t: torch.Tensor) -> tuple[torch.Tensor, int, int, int, int]:
    """(t, row stride, group stride, head stride, heads a group) for [B, T, H] or [B, T, Hk, H/Hk] gates."""
    if t.dim() == 3:
        t = t if t.stride(0) == t.shape[1] * t.stride(1) or t.shape[0] == 1 else t.contiguous()
        return t, t.stride(1), 0, t.stride(2), t.shape[2]
    if t.dim() == 4:
        t = t if t.stride(0) == t.shape[1] * t.stride(1) or t.shape[0] == 1 else t.contiguous()
        return t, t.stride(1), t.stride(2), t.stride(3), t.shape[3]
    raise ValueError(f"gdn_gates: a and b must be [B, T, H] or [B, T, Hk, H/Hk], got {tuple(t.shape)}")


def _check(a, b, A_log, dt_bias):
    op = "gdn_gates"
    for name, t in (("a", a), ("b", b), ("A_log", A_log), ("dt_bias", dt_bias)):
        check_float(name, t, op)
    if a.shape != b.shape:
        raise ValueError(f"{op}: a {tuple(a.shape)} and b {tuple(b.shape)} must have one shape")
    heads = a.shape[2:].numel()
    if A_log.shape != (heads,) or dt_bias.shape != (heads,):
        raise ValueError(f"{op}: A_log and dt_bias must be [{heads}], got {tuple(A_log.shape)}, {tuple(dt_bias.shape)}")
    if not 1 <= heads <= MAX_HEADS:
        raise ValueError(f"{op}: 1..{MAX_HEADS} heads, got {heads}")
    if len({a.device, b.device, A_log.device, dt_bias.device}) != 1:
        raise ValueError(f"{op}: a, b, A_log and dt_bias must be on one device")
    return heads


def _forward(a, b, A_log, dt_bias, heads):
    bt = a.shape[:2]
    rows = bt.numel()
    g = torch.empty((*bt, heads), dtype=torch.float32, device=a.device)
    beta = torch.empty((*bt, heads), dtype=b.dtype, device=b.device)
    if rows:
        a, sa_r, sa_o, sa_i, inner = _head_layout(a)
        b, sb_r, sb_o, sb_i, _ = _head_layout(b)
        _kernels().gdn_gates_fwd_kernel[(cdiv(rows, FWD_ROWS),)](
            a=a,
            b=b,
            A_log=A_log,
            dt_bias=dt_bias,
            g=g,
            beta=beta,
            rows=rows,
            sa_r=sa_r,
            sa_outer=sa_o,
            sa_inner=sa_i,
            sb_r=sb_r,
            sb_outer=sb_o,
            sb_inner=sb_i,
            H=heads,
            INNER=inner,
            BH=next_power_of_2(heads),
            BR=FWD_ROWS,
            num_warps=NUM_WARPS,
        )
    return g, beta


def _backward(a, beta, A_log, dt_bias, dg, dbeta, heads, b_dtype):
    bt = a.shape[:2]
    rows = bt.numel()
    da = torch.empty((*bt, heads), dtype=a.dtype, device=a.device)
    db = torch.empty((*bt, heads), dtype=b_dtype, device=a.device)
    programs = cdiv(rows, BWD_ROWS * BWD_TILES)
    partial = torch.empty((programs, 2, heads), dtype=torch.float32, device=a.device)
    if rows:
        a, sa_r, sa_o, sa_i, inner = _head_layout(a)
        _kernels().gdn_gates_bwd_kernel[(programs,)](
            a=a,
            beta=beta,
            A_log=A_log,
            dt_bias=dt_bias,
            dg=dg.contiguous(),
            dbeta=dbeta.contiguous(),
            da=da,
            db=db,
            partial=partial,
            rows=rows,
            sa_r=sa_r,
            sa_outer=sa_o,
            sa_inner=sa_i,
            H=heads,
            INNER=inner,
            BH=next_power_of_2(heads),
            BR=BWD_ROWS,
            TILES=BWD_TILES,
            num_warps=NUM_WARPS,
        )
    sums = partial.sum(0) if rows else partial.new_zeros((2, heads))
    return da, db, sums[0].to(A_log.dtype), sums[1].to(dt_bias.dtype)


class GDNGates(torch.autograd.Function):
    """(g, beta) of the GDN layer from its b/a projections and per-head A_log, dt_bias."""

    @staticmethod
    def forward(ctx, a, b, A_log, dt_bias, heads):
        g, beta = _forward(a, b, A_log, dt_bias, heads)
        ctx.save_for_backward(a, beta, A_log, dt_bias)
        ctx.heads, ctx.shape, ctx.b_dtype = heads, a.shape, b.dtype
        return g, beta

    @staticmethod
    def backward(ctx, dg, dbeta):
        a, beta, A_log, dt_bias = ctx.saved_tensors
        dg = torch.zeros_like(beta, dtype=torch.float32) if dg is None else dg
        dbeta = torch.zeros_like(beta) if dbeta is None else dbeta
        da, db, dA_log, ddt_bias = _backward(a, beta, A_log, dt_bias, dg, dbeta, ctx.heads, ctx.b_dtype)
        return da.view(ctx.shape), db.view(ctx.shape), dA_log, ddt_bias, None


@on_tensor_device
def gdn_gates(
    a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(g float32 [B, T, H], beta in b's dtype [B, T, H]) from a, b [B, T, H] or [B, T, Hk, H/Hk] views."""
    heads = _check(a, b, A_log, dt_bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (a, b, A_log, dt_bias)):
        return GDNGates.apply(a, b, A_log, dt_bias, heads)
    return _forward(a, b, A_log, dt_bias, heads)


def gdn_gates_reference(a, b, A_log, dt_bias):
    """`gdn_gates` in PyTorch, as slime's and Hugging Face's layers compute it: g in float32, beta in b's dtype."""
    shape = (*a.shape[:2], -1)
    # dt_bias joins in its own dtype, as in slime's layers: float32 from bf16 parameters.
    g = -A_log.float().exp() * F.softplus(a.reshape(shape).float() + dt_bias)
    return g, b.reshape(shape).sigmoid()
