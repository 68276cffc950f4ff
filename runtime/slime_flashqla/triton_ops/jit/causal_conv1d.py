"""Depthwise causal conv1d + SiLU kernels over packed tokens, reading q/k/v where the projection wrote them.

Channels come in three sections, q, k and v (the conv weight's order). The input holds them
in G groups S columns apart, each group's q, k and v widths QW, QW and VW (Qwen3-Next's fused
projection lays them out per key head; Qwen3.5's and a plain [B, T, D] tensor are one group):
`_block_column` finds where a BD-channel block starts, so no gathered copy is ever made. The
forward writes each section to its own dense tensor, the tensors the GDN kernel takes.
"""

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
def _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN: tl.constexpr):
    if VARLEN:
        bos, eos = _sequence_bounds(cu_seqlens, o_t, n_seqs, n_iter)
    else:
        bos, eos = tl.zeros_like(o_t), tl.zeros_like(o_t) + T
    return bos, eos


@triton.jit
def _block_column(i_d, S, G: tl.constexpr, QW: tl.constexpr, VW: tl.constexpr, BD: tl.constexpr):
    """The input column where channel block i_d starts (blocks never straddle a group's section)."""
    c = i_d * BD
    if QW > 0:
        if c < 2 * G * QW:
            section = c // (G * QW)
            r = c - section * (G * QW)
            group = r // QW
            col = group * S + section * QW + (r - group * QW)
        else:
            r = c - 2 * G * QW
            group = r // VW
            col = group * S + 2 * QW + (r - group * VW)
    else:
        group = c // VW
        col = group * S + (c - group * VW)
    return col


@triton.jit
def _section(i_d, q, k, v, sq_b, sq_t, sk_b, sk_t, sv_b, sv_t, NQ: tl.constexpr, BD: tl.constexpr):
    """(pointer to block i_d's first channel, batch stride, token stride) in its own section's tensor."""
    c = i_d * BD
    if c < NQ:
        p, s_b, s_t = q + c, sq_b, sq_t
    elif c < 2 * NQ:
        p, s_b, s_t = k + (c - NQ), sk_b, sk_t
    else:
        p, s_b, s_t = v + (c - 2 * NQ), sv_b, sv_t
    return p, s_b, s_t


@triton.jit
def _conv(x_t0, w, o_l, o_t, m_t, bos, o_d, m_d, o_c, sx_t, sw_d, sw_w, W: tl.constexpr):
    """sum_k w[k] x[t - (W-1) + k] over the token's own sequence, in float32, for tokens o_t.

    x_t0 points at the tile's first token; rows are addressed by int32 offsets from it (o_l
    local rows), which keeps per-element addresses out of the registers.
    """
    acc = tl.zeros((o_t.shape[0], o_c.shape[0]), dtype=tl.float32)
    for k in tl.static_range(W):
        m_s = m_t & (o_t - (W - 1) + k >= bos)
        b_w = tl.load(w + o_d * sw_d + k * sw_w, mask=m_d, other=0.0).to(tl.float32)
        p_x = x_t0 + (o_l - (W - 1) + k)[:, None] * sx_t + o_c[None, :]
        acc += tl.load(p_x, mask=m_s[:, None] & m_d[None, :], other=0.0).to(tl.float32) * b_w[None, :]
    return acc


# Token counts, sequence counts and the search length are not specialised: one compile per
# (dtype, layout, W, varlen or not) serves every pack.
@triton.jit(do_not_specialize=["T", "n_seqs", "n_iter"])
def short_conv_fwd_kernel(
    x,
    w,
    yq,
    yk,
    yv,
    cu_seqlens,
    T,
    n_seqs,
    n_iter,
    S,
    sx_b,
    sx_t,
    sq_b,
    sq_t,
    sk_b,
    sk_t,
    sv_b,
    sv_t,
    sw_d,
    sw_w,
    D: tl.constexpr,
    W: tl.constexpr,
    G: tl.constexpr,
    QW: tl.constexpr,
    VW: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    TILES: tl.constexpr,
    VARLEN: tl.constexpr,
):
    """y = silu(conv(x)) for TILES tiles of BT tokens x BD channels; y rounded through x's dtype first."""
    i_d, i_tb, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_c = tl.arange(0, BD)
    o_d = i_d * BD + o_c
    m_d = o_d < D
    x_b = x + i_b.to(tl.int64) * sx_b + _block_column(i_d, S, G, QW, VW, BD)
    p_y, sy_b, sy_t = _section(i_d, yq, yk, yv, sq_b, sq_t, sk_b, sk_t, sv_b, sv_t, G * QW, BD)
    y_b = p_y + i_b.to(tl.int64) * sy_b
    o_l = tl.arange(0, BT)
    for i_tile in range(TILES):
        t0 = (i_tb * TILES + i_tile) * BT
        o_t = t0 + o_l
        m_t = o_t < T
        bos, _ = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
        acc = _conv(x_b + t0.to(tl.int64) * sx_t, w, o_l, o_t, m_t, bos, o_d, m_d, o_c, sx_t, sw_d, sw_w, W)
        # F.conv1d's output tensor is in x's dtype: the SiLU reads the rounded value.
        b_pre = acc.to(yq.dtype.element_ty).to(tl.float32)
        b_y = b_pre * tl.sigmoid(b_pre)
        p = y_b + t0.to(tl.int64) * sy_t + o_l[:, None] * sy_t + o_c[None, :]
        tl.store(p, b_y.to(yq.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])


@triton.jit(do_not_specialize=["T", "n_seqs", "n_iter"])
def short_conv_bwd_dpre_kernel(
    x,
    w,
    dq,
    dk,
    dv,
    dpre,
    dw_partial,
    cu_seqlens,
    T,
    n_seqs,
    n_iter,
    S,
    sx_b,
    sx_t,
    sq_b,
    sq_t,
    sk_b,
    sk_t,
    sv_b,
    sv_t,
    sw_d,
    sw_w,
    D: tl.constexpr,
    W: tl.constexpr,
    BW: tl.constexpr,
    G: tl.constexpr,
    QW: tl.constexpr,
    VW: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    TILES: tl.constexpr,
    VARLEN: tl.constexpr,
    DEFER: tl.constexpr,
):
    """dpre = dy * silu'(pre) at every token, and one float32 partial dweight [BD, W] per program.

    dw[k] = sum_u dpre[u] * x[u - (W-1) + k] over u in this program's tokens: the same shifted
    x tiles the conv reads, so each pair (u, tap) is counted by exactly one program. With DEFER
    (W <= 4) the products are summed elementwise over the program's tiles and reduced over
    tokens once at the end: a reduction across warps per tile and tap is what bounds this pass.
    """
    i_d, i_tb, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_c = tl.arange(0, BD)
    o_d = i_d * BD + o_c
    m_d = o_d < D
    o_w = tl.arange(0, BW)
    x_b = x + i_b.to(tl.int64) * sx_b + _block_column(i_d, S, G, QW, VW, BD)
    dy_d, sdy_b, sdy_t = _section(i_d, dq, dk, dv, sq_b, sq_t, sk_b, sk_t, sv_b, sv_t, G * QW, BD)
    dy_b = dy_d + i_b.to(tl.int64) * sdy_b
    dpre_b = dpre + i_b.to(tl.int64) * T * D + i_d * BD
    b_dw = tl.zeros((BD, BW), dtype=tl.float32)
    # Per-tap elementwise sums for DEFER (taps beyond W stay zero and are never read).
    s0 = tl.zeros((BT, BD), dtype=tl.float32)
    s1 = tl.zeros((BT, BD), dtype=tl.float32)
    s2 = tl.zeros((BT, BD), dtype=tl.float32)
    s3 = tl.zeros((BT, BD), dtype=tl.float32)
    o_l = tl.arange(0, BT)
    for i_tile in range(TILES):
        t0 = (i_tb * TILES + i_tile) * BT
        o_t = t0 + o_l
        m_t = o_t < T
        m = m_t[:, None] & m_d[None, :]
        bos, _ = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
        x_t0 = x_b + t0.to(tl.int64) * sx_t
        acc = _conv(x_t0, w, o_l, o_t, m_t, bos, o_d, m_d, o_c, sx_t, sw_d, sw_w, W)
        b_pre = acc.to(dq.dtype.element_ty).to(tl.float32)
        p_dy = dy_b + t0.to(tl.int64) * sdy_t + o_l[:, None] * sdy_t + o_c[None, :]
        b_dy = tl.load(p_dy, mask=m, other=0.0).to(tl.float32)
        b_sig = tl.sigmoid(b_pre)
        b_dpre = b_dy * b_sig * (1.0 + b_pre * (1.0 - b_sig))
        p_dpre = dpre_b + t0.to(tl.int64) * D + o_l[:, None] * D + o_c[None, :]
        tl.store(p_dpre, b_dpre.to(dpre.dtype.element_ty), mask=m)
        for k in tl.static_range(W):
            m_s = m_t & (o_t - (W - 1) + k >= bos)
            p_x = x_t0 + (o_l - (W - 1) + k)[:, None] * sx_t + o_c[None, :]
            b_x = tl.load(p_x, mask=m_s[:, None] & m_d[None, :], other=0.0).to(tl.float32)
            if DEFER:
                if k == 0:
                    s0 += b_dpre * b_x
                elif k == 1:
                    s1 += b_dpre * b_x
                elif k == 2:
                    s2 += b_dpre * b_x
                else:
                    s3 += b_dpre * b_x
            else:
                b_dw += tl.where(o_w[None, :] == k, tl.sum(b_dpre * b_x, 0)[:, None], 0.0)
    if DEFER:
        b_dw += tl.where(o_w[None, :] == 0, tl.sum(s0, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == 1, tl.sum(s1, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == 2, tl.sum(s2, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == 3, tl.sum(s3, 0)[:, None], 0.0)
    i_p = (i_b * tl.num_programs(1) + i_tb).to(tl.int64)
    p_dw = dw_partial + (i_p * D + o_d)[:, None] * W + o_w[None, :]
    tl.store(p_dw, b_dw, mask=m_d[:, None] & (o_w < W)[None, :])


@triton.jit(do_not_specialize=["T", "n_seqs", "n_iter"])
def short_conv_bwd_dx_kernel(
    dpre,
    w,
    dx,
    cu_seqlens,
    T,
    n_seqs,
    n_iter,
    S,
    sdx_b,
    sdx_t,
    sw_d,
    sw_w,
    D: tl.constexpr,
    W: tl.constexpr,
    G: tl.constexpr,
    QW: tl.constexpr,
    VW: tl.constexpr,
    BT: tl.constexpr,
    BD: tl.constexpr,
    TILES: tl.constexpr,
    VARLEN: tl.constexpr,
):
    """dx[t] = sum_j w[W-1-j] dpre[t+j] over t's own sequence, written where the input's channels live."""
    i_d, i_tb, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_c = tl.arange(0, BD)
    o_d = i_d * BD + o_c
    m_d = o_d < D
    dpre_b = dpre + i_b.to(tl.int64) * T * D + i_d * BD
    dx_b = dx + i_b.to(tl.int64) * sdx_b + _block_column(i_d, S, G, QW, VW, BD)
    o_l = tl.arange(0, BT)
    for i_tile in range(TILES):
        t0 = (i_tb * TILES + i_tile) * BT
        o_t = t0 + o_l
        m_t = o_t < T
        _, eos = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
        dpre_t0 = dpre_b + t0.to(tl.int64) * D
        acc = tl.zeros((BT, BD), dtype=tl.float32)
        for j in tl.static_range(W):
            m_u = m_t & (o_t + j < eos)
            b_w = tl.load(w + o_d * sw_d + (W - 1 - j) * sw_w, mask=m_d, other=0.0).to(tl.float32)
            p = dpre_t0 + (o_l + j)[:, None] * D + o_c[None, :]
            acc += tl.load(p, mask=m_u[:, None] & m_d[None, :], other=0.0).to(tl.float32) * b_w[None, :]
        p_dx = dx_b + t0.to(tl.int64) * sdx_t + o_l[:, None] * sdx_t + o_c[None, :]
        tl.store(p_dx, acc.to(dx.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])
