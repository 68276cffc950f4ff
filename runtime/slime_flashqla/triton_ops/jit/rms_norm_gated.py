"""Gated RMSNorm kernels (Qwen3-Next's RMSNormGated) over rows of the last dim."""

import triton
import triton.language as tl


@triton.jit
def _normed_times_weight(b_x, b_rstd, b_w, dtype: tl.constexpr, ROUND_PRODUCT: tl.constexpr):
    """The reference's rounding points: normed cast to x's dtype, weight * normed in torch's promoted dtype."""
    b_n32 = b_x * b_rstd[:, None]
    b_n = b_n32.to(dtype).to(tl.float32)
    b_a = b_w[None, :] * b_n
    if ROUND_PRODUCT:
        b_a = b_a.to(dtype).to(tl.float32)
    return b_n32, b_n, b_a


@triton.jit(do_not_specialize=["rows", "inner"])
def rms_norm_gated_fwd_kernel(
    x,
    g,
    w,
    y,
    rstd,
    rows,
    inner,
    sx_outer,
    sx_inner,
    sg_outer,
    sg_inner,
    eps,
    D: tl.constexpr,
    BD: tl.constexpr,
    BT: tl.constexpr,
    ROUND_PRODUCT: tl.constexpr,
):
    o_t = tl.program_id(0) * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m_t = o_t < rows
    m_d = o_d < D
    m_x = m_t[:, None] & m_d[None, :]
    outer, within = (o_t // inner).to(tl.int64), (o_t % inner).to(tl.int64)
    b_x = tl.load(x + (outer * sx_outer + within * sx_inner)[:, None] + o_d[None, :], mask=m_x, other=0.0)
    b_x = b_x.to(tl.float32)
    b_g = tl.load(g + (outer * sg_outer + within * sg_inner)[:, None] + o_d[None, :], mask=m_x, other=0.0)
    b_g = b_g.to(tl.float32)
    b_w = tl.load(w + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_rstd = 1.0 / tl.sqrt(tl.sum(b_x * b_x, 1) / D + eps)
    _, _, b_a = _normed_times_weight(b_x, b_rstd, b_w, y.dtype.element_ty, ROUND_PRODUCT)
    b_y = b_a * (b_g * tl.sigmoid(b_g))
    dst = o_t.to(tl.int64) * D
    tl.store(y + dst[:, None] + o_d[None, :], b_y.to(y.dtype.element_ty), mask=m_x)
    tl.store(rstd + o_t, b_rstd, mask=m_t)


@triton.jit(do_not_specialize=["rows", "inner"])
def rms_norm_gated_bwd_kernel(
    x,
    g,
    w,
    rstd,
    dy,
    dx,
    dg,
    dw_partial,
    rows,
    inner,
    sx_outer,
    sx_inner,
    sg_outer,
    sg_inner,
    sdy_outer,
    sdy_inner,
    D: tl.constexpr,
    BD: tl.constexpr,
    BT: tl.constexpr,
    TILES: tl.constexpr,
    ROUND_PRODUCT: tl.constexpr,
):
    """Each program takes TILES consecutive tiles of BT rows and writes one partial dweight row."""
    i_p = tl.program_id(0)
    o_d = tl.arange(0, BD)
    m_d = o_d < D
    b_w = tl.load(w + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_dw = tl.zeros((BT, BD), dtype=tl.float32)
    for i_tile in range(TILES):
        o_t = (i_p * TILES + i_tile) * BT + tl.arange(0, BT)
        m_t = o_t < rows
        m_x = m_t[:, None] & m_d[None, :]
        outer, within = (o_t // inner).to(tl.int64), (o_t % inner).to(tl.int64)
        p_x = x + (outer * sx_outer + within * sx_inner)[:, None] + o_d[None, :]
        p_g = g + (outer * sg_outer + within * sg_inner)[:, None] + o_d[None, :]
        p_dy = dy + (outer * sdy_outer + within * sdy_inner)[:, None] + o_d[None, :]
        b_x = tl.load(p_x, mask=m_x, other=0.0).to(tl.float32)
        b_g = tl.load(p_g, mask=m_x, other=0.0).to(tl.float32)
        b_dy = tl.load(p_dy, mask=m_x, other=0.0).to(tl.float32)
        b_rstd = tl.load(rstd + o_t, mask=m_t, other=0.0)
        b_n32, b_n, b_a = _normed_times_weight(b_x, b_rstd, b_w, dx.dtype.element_ty, ROUND_PRODUCT)
        b_sig = tl.sigmoid(b_g)
        # y = a * silu(g), silu'(g) = sig(g) * (1 + g * (1 - sig(g)))
        b_dg = b_dy * b_a * b_sig * (1.0 + b_g * (1.0 - b_sig))
        b_da = b_dy * (b_g * b_sig)
        b_dw += b_da * b_n
        b_dn = b_da * b_w[None, :]
        # n = x * r with r = (mean(x^2) + eps)^-1/2:  dx = r * (dn - n * mean(dn * n))
        b_c = tl.sum(b_dn * b_n32, 1) / D
        b_dx = (b_dn - b_n32 * b_c[:, None]) * b_rstd[:, None]
        dst = (o_t.to(tl.int64) * D)[:, None] + o_d[None, :]
        tl.store(dx + dst, b_dx.to(dx.dtype.element_ty), mask=m_x)
        tl.store(dg + dst, b_dg.to(dg.dtype.element_ty), mask=m_x)
    tl.store(dw_partial + i_p * D + o_d, tl.sum(b_dw, 0), mask=m_d)
