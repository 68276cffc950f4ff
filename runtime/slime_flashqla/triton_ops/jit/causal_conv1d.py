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
def _lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, LAG: tl.constexpr):
    """x at tokens o_t - LAG, float32, loaded without waiting for the sequence search.

    Only rows before the tensor are masked here; rows of an earlier sequence are loaded and
    zeroed by `_own` once the search is done, so these loads are in flight while it runs.
    """
    p_x = x_t0 + (o_l - LAG)[:, None] * sx_t + o_c[None, :]
    m_x = m_t & (o_t - LAG >= 0)
    return tl.load(p_x, mask=m_x[:, None] & m_d[None, :], other=0.0).to(tl.float32)


@triton.jit
def _own(b_x, o_t, bos, LAG: tl.constexpr):
    """b_x (tokens o_t - LAG) with the rows before each token's own sequence zeroed."""
    return tl.where((o_t - LAG >= bos)[:, None], b_x, 0.0)


@triton.jit
def _ahead(d_t0, o_l, o_t, m_t, m_d, o_c, D, T, LEAD: tl.constexpr):
    """dpre at tokens o_t + LEAD, float32, masked only at the tensor's end (see `_lagged`)."""
    p = d_t0 + (o_l + LEAD)[:, None] * D + o_c[None, :]
    return tl.load(p, mask=(m_t & (o_t + LEAD < T))[:, None] & m_d[None, :], other=0.0).to(tl.float32)


@triton.jit
def _tap(w, o_d, m_d, sw_d, sw_w, k):
    return tl.load(w + o_d * sw_d + k * sw_w, mask=m_d, other=0.0).to(tl.float32)[None, :]


@triton.jit
def _own_lags(x_t0, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, m_d, o_c, sx_t,
              W: tl.constexpr, VARLEN: tl.constexpr):  # fmt: skip
    """x at lags 0..3 of tokens o_t (W <= 4), each loaded once, before the sequence search, then
    zeroed before each token's own sequence; lags from W on are zero tiles that nothing reads."""
    x0 = _lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, 0)
    x1 = tl.zeros_like(x0)
    x2 = tl.zeros_like(x0)
    x3 = tl.zeros_like(x0)
    if W > 1:
        x1 = _lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, 1)
    if W > 2:
        x2 = _lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, 2)
    if W > 3:
        x3 = _lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, 3)
    bos, _ = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
    if W > 1:
        x1 = _own(x1, o_t, bos, 1)
    if W > 2:
        x2 = _own(x2, o_t, bos, 2)
    if W > 3:
        x3 = _own(x3, o_t, bos, 3)
    return x0, x1, x2, x3


@triton.jit
def _conv_lags(acc, x0, x1, x2, x3, w, o_d, m_d, sw_d, sw_w, W: tl.constexpr):
    """acc + sum over lags L < W of w[W-1-L] x_L, in float32 (the conv of `_own_lags`' tiles)."""
    acc += x0 * _tap(w, o_d, m_d, sw_d, sw_w, W - 1)
    if W > 1:
        acc += x1 * _tap(w, o_d, m_d, sw_d, sw_w, W - 2)
    if W > 2:
        acc += x2 * _tap(w, o_d, m_d, sw_d, sw_w, W - 3)
    if W > 3:
        acc += x3 * _tap(w, o_d, m_d, sw_d, sw_w, W - 4)
    return acc


@triton.jit
def _conv(x_t0, w, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, o_d, m_d, o_c, sx_t, sw_d, sw_w,
          W: tl.constexpr, VARLEN: tl.constexpr):  # fmt: skip
    """sum_k w[k] x[t - (W-1) + k] over the token's own sequence, in float32, for tokens o_t.

    x_t0 points at the tile's first token; rows are addressed by int32 offsets from it (o_l
    local rows), which keeps per-element addresses out of the registers. The taps are loaded
    first and the sequence search runs while they are in flight.
    """
    acc = tl.zeros((o_t.shape[0], o_c.shape[0]), dtype=tl.float32)
    if W <= 4:
        x0, x1, x2, x3 = _own_lags(x_t0, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, m_d, o_c, sx_t, W, VARLEN)
        acc = _conv_lags(acc, x0, x1, x2, x3, w, o_d, m_d, sw_d, sw_w, W)
    else:
        bos, _ = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
        for k in tl.static_range(W):
            b_x = _own(_lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, W - 1 - k), o_t, bos, W - 1 - k)
            acc += b_x * _tap(w, o_d, m_d, sw_d, sw_w, k)
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
        x_t0 = x_b + t0.to(tl.int64) * sx_t
        acc = _conv(x_t0, w, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, o_d, m_d, o_c, sx_t, sw_d, sw_w,
                    W, VARLEN)  # fmt: skip
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
    # Per-lag elementwise sums for DEFER (lags beyond W - 1 stay zero and are never read).
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
        x_t0 = x_b + t0.to(tl.int64) * sx_t
        p_dy = dy_b + t0.to(tl.int64) * sdy_t + o_l[:, None] * sdy_t + o_c[None, :]
        b_dy = tl.load(p_dy, mask=m, other=0.0).to(tl.float32)
        if DEFER:
            # Each lag's x tile is loaded once and serves the conv and dweight.
            x0, x1, x2, x3 = _own_lags(x_t0, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, m_d, o_c, sx_t, W, VARLEN)
            acc = _conv_lags(tl.zeros_like(x0), x0, x1, x2, x3, w, o_d, m_d, sw_d, sw_w, W)
        else:
            acc = _conv(x_t0, w, o_l, o_t, m_t, cu_seqlens, n_seqs, n_iter, T, o_d, m_d, o_c, sx_t, sw_d, sw_w,
                        W, VARLEN)  # fmt: skip
        b_pre = acc.to(dq.dtype.element_ty).to(tl.float32)
        b_sig = tl.sigmoid(b_pre)
        b_dpre = b_dy * b_sig * (1.0 + b_pre * (1.0 - b_sig))
        p_dpre = dpre_b + t0.to(tl.int64) * D + o_l[:, None] * D + o_c[None, :]
        tl.store(p_dpre, b_dpre.to(dpre.dtype.element_ty), mask=m)
        if DEFER:
            s0 += b_dpre * x0
            if W > 1:
                s1 += b_dpre * x1
            if W > 2:
                s2 += b_dpre * x2
            if W > 3:
                s3 += b_dpre * x3
        else:
            bos, _ = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
            for k in tl.static_range(W):
                b_x = _own(_lagged(x_t0, o_l, o_t, m_t, m_d, o_c, sx_t, W - 1 - k), o_t, bos, W - 1 - k)
                b_dw += tl.where(o_w[None, :] == k, tl.sum(b_dpre * b_x, 0)[:, None], 0.0)
    if DEFER:
        # dweight's tap k is lag W - 1 - k.
        b_dw += tl.where(o_w[None, :] == W - 1, tl.sum(s0, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == W - 2, tl.sum(s1, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == W - 3, tl.sum(s2, 0)[:, None], 0.0)
        b_dw += tl.where(o_w[None, :] == W - 4, tl.sum(s3, 0)[:, None], 0.0)
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
        dpre_t0 = dpre_b + t0.to(tl.int64) * D
        acc = tl.zeros((BT, BD), dtype=tl.float32)
        # Loaded up to the tensor's end first; the search for each token's end runs meanwhile.
        b_d0 = _ahead(dpre_t0, o_l, o_t, m_t, m_d, o_c, D, T, 0)
        if W > 1:
            b_d1 = _ahead(dpre_t0, o_l, o_t, m_t, m_d, o_c, D, T, 1)
        if W > 2:
            b_d2 = _ahead(dpre_t0, o_l, o_t, m_t, m_d, o_c, D, T, 2)
        if W > 3:
            b_d3 = _ahead(dpre_t0, o_l, o_t, m_t, m_d, o_c, D, T, 3)
        _, eos = _bounds(cu_seqlens, o_t, n_seqs, n_iter, T, VARLEN)
        acc += b_d0 * _tap(w, o_d, m_d, sw_d, sw_w, W - 1)
        if W > 1:
            acc += tl.where((o_t + 1 < eos)[:, None], b_d1, 0.0) * _tap(w, o_d, m_d, sw_d, sw_w, W - 2)
        if W > 2:
            acc += tl.where((o_t + 2 < eos)[:, None], b_d2, 0.0) * _tap(w, o_d, m_d, sw_d, sw_w, W - 3)
        if W > 3:
            acc += tl.where((o_t + 3 < eos)[:, None], b_d3, 0.0) * _tap(w, o_d, m_d, sw_d, sw_w, W - 4)
        for j in tl.static_range(4, W):
            b_dj = _ahead(dpre_t0, o_l, o_t, m_t, m_d, o_c, D, T, j)
            acc += tl.where((o_t + j < eos)[:, None], b_dj, 0.0) * _tap(w, o_d, m_d, sw_d, sw_w, W - 1 - j)
        p_dx = dx_b + t0.to(tl.int64) * sdx_t + o_l[:, None] * sdx_t + o_c[None, :]
        tl.store(p_dx, acc.to(dx.dtype.element_ty), mask=m_t[:, None] & m_d[None, :])
