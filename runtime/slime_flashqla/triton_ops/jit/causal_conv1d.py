"""Depthwise causal conv1d + SiLU kernels over [B, T, D], restarting at packed-sequence boundaries."""

import triton
import triton.language as tl


@triton.jit
def _sequence_bounds(cu_seqlens, o_t, n_seqs, n_iter):
    """[bos, eos) of the packed sequence holding each token: a binary search over cu_seqlens on the device."""
    lo = tl.zeros_like(o_t)
    hi = lo + n_seqs
    # n_iter = n_seqs.bit_length() halvings always close the interval; once hi == lo + 1,
    # mid == lo and nothing moves, so the loop needs no per-lane exit.
    for _ in range(n_iter):
        mid = (lo + hi) // 2
        right = tl.load(cu_seqlens + mid).to(tl.int32) <= o_t
        lo = tl.where(right, mid, lo)
        hi = tl.where(right, hi, mid)
    return tl.load(cu_seqlens + lo).to(tl.int32), tl.load(cu_seqlens + lo + 1).to(tl.int32)


@triton.jit
def _silu_input(x_b, w, o_u, m_u, bos, o_d, m_d, T, sx_t, sw_d, sw_w, W: tl.constexpr, dtype: tl.constexpr):
    """The conv output at tokens o_u in float32, rounded through x's dtype as F.conv1d's output is."""
    acc = tl.zeros((o_u.shape[0], o_d.shape[0]), dtype=tl.float32)
    for k in tl.static_range(W):
        o_s = o_u - (W - 1) + k
        m_s = m_u & (o_s >= bos) & (o_s >= 0) & (o_s < T)
        b_w = tl.load(w + o_d * sw_d + k * sw_w, mask=m_d, other=0.0).to(tl.float32)
        p_x = x_b + o_s.to(tl.int64)[:, None] * sx_t + o_d[None, :]
        b_x = tl.load(p_x, mask=m_s[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        acc += b_x * b_w[None, :]
    return acc.to(dtype).to(tl.float32)


# Token counts, sequence counts and the search length are not specialised: one compile per
# (dtype, D, W, varlen or not) serves every pack.
@triton.jit(do_not_specialize=["T", "n_seqs", "n_iter"])
def causal_conv1d_silu_fwd_kernel(
    x,
    w,
    y,
    cu_seqlens,
    T,
    n_seqs,
    n_iter,
    sx_b,
    sx_t,
    sw_d,
    sw_w,
    D: tl.constexpr,
    W: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    VARLEN: tl.constexpr,
):
    i_d, i_t, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    if VARLEN:
        bos, _ = _sequence_bounds(cu_seqlens, o_t, n_seqs, n_iter)
    else:
        bos = tl.zeros_like(o_t)
    x_b = x + i_b.to(tl.int64) * sx_b
    b_pre = _silu_input(x_b, w, o_t, m_t, bos, o_d, m_d, T, sx_t, sw_d, sw_w, W, y.dtype.element_ty)
    b_y = b_pre * tl.sigmoid(b_pre)
    p_y = y + (i_b.to(tl.int64) * T + o_t)[:, None] * D + o_d[None, :]
    tl.store(p_y, b_y.to(y.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])


@triton.jit(do_not_specialize=["T", "n_seqs", "n_iter"])
def causal_conv1d_silu_bwd_kernel(
    x,
    w,
    dy,
    dx,
    dw_partial,
    cu_seqlens,
    T,
    n_seqs,
    n_iter,
    sx_b,
    sx_t,
    sdy_b,
    sdy_t,
    sw_d,
    sw_w,
    D: tl.constexpr,
    W: tl.constexpr,
    BW: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    TILES: tl.constexpr,
    VARLEN: tl.constexpr,
):
    """dx for TILES tiles of BT tokens, and one float32 partial dweight [BD, W] per program.

    Token t feeds outputs u = t + j (j < W) of its own sequence through tap W-1-j, so
    dx[t] = sum_j dpre[t + j] * w[W-1-j] and dw[W-1-j] = sum_t dpre[t + j] * x[t]. dpre
    (SiLU's backward) needs the conv output at u, recomputed here from x rather than
    stored by the forward.
    """
    i_d, i_tb, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    o_w = tl.arange(0, BW)
    x_b = x + i_b.to(tl.int64) * sx_b
    dy_b = dy + i_b.to(tl.int64) * sdy_b
    b_dw = tl.zeros((BD, BW), dtype=tl.float32)
    for i_tile in range(TILES):
        o_t = (i_tb * TILES + i_tile) * BT + tl.arange(0, BT)
        m_t = o_t < T
        if VARLEN:
            bos, eos = _sequence_bounds(cu_seqlens, o_t, n_seqs, n_iter)
        else:
            bos, eos = tl.zeros_like(o_t), tl.zeros_like(o_t) + T
        p_x = x_b + o_t.to(tl.int64)[:, None] * sx_t + o_d[None, :]
        b_x = tl.load(p_x, mask=m_t[:, None] & m_d[None, :], other=0.0).to(tl.float32)
        b_dx = tl.zeros((BT, BD), dtype=tl.float32)
        # A loop, not unrolled: unrolled, ptxas took 3 s more to compile it for the same registers.
        for j in range(W):
            o_u = o_t + j
            m_u = m_t & (o_u < eos) & (o_u < T)
            b_pre = _silu_input(x_b, w, o_u, m_u, bos, o_d, m_d, T, sx_t, sw_d, sw_w, W, dx.dtype.element_ty)
            p_dy = dy_b + o_u.to(tl.int64)[:, None] * sdy_t + o_d[None, :]
            b_dy = tl.load(p_dy, mask=m_u[:, None] & m_d[None, :], other=0.0).to(tl.float32)
            b_sig = tl.sigmoid(b_pre)
            b_dpre = b_dy * b_sig * (1.0 + b_pre * (1.0 - b_sig))
            b_w = tl.load(w + o_d * sw_d + (W - 1 - j) * sw_w, mask=m_d, other=0.0).to(tl.float32)
            b_dx += b_dpre * b_w[None, :]
            b_dw += tl.where(o_w[None, :] == W - 1 - j, tl.sum(b_dpre * b_x, 0)[:, None], 0.0)
        p_dx = dx + (i_b.to(tl.int64) * T + o_t)[:, None] * D + o_d[None, :]
        tl.store(p_dx, b_dx.to(dx.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])
    i_p = (i_b * tl.num_programs(1) + i_tb).to(tl.int64)
    p_dw = dw_partial + (i_p * D + o_d)[:, None] * W + o_w[None, :]
    tl.store(p_dw, b_dw, mask=m_d[:, None] & (o_w < W)[None, :])
