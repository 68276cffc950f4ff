"""L2 normalisation kernels over rows of the last dim (row layout: see triton_ops/_host.row_layout)."""

import triton
import triton.language as tl


# Row counts and the rows-per-outer-index H are not specialised: one compile per (dtype, D)
# serves every pack size, and Triton's disk cache serves every later process.
@triton.jit(do_not_specialize=["rows", "inner"])
def l2norm_fwd_kernel(
    x, y, rstd, rows, inner, sx_outer, sx_inner, eps, D: tl.constexpr, BD: tl.constexpr, BT: tl.constexpr
):
    o_t = tl.program_id(0) * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m_t = o_t < rows
    m_x = m_t[:, None] & (o_d < D)[None, :]
    src = (o_t // inner).to(tl.int64) * sx_outer + (o_t % inner).to(tl.int64) * sx_inner
    b_x = tl.load(x + src[:, None] + o_d[None, :], mask=m_x, other=0.0).to(tl.float32)
    b_rstd = 1.0 / tl.sqrt(tl.sum(b_x * b_x, 1) + eps)
    dst = o_t.to(tl.int64) * D
    tl.store(y + dst[:, None] + o_d[None, :], (b_x * b_rstd[:, None]).to(y.dtype.element_ty), mask=m_x)
    tl.store(rstd + o_t, b_rstd, mask=m_t)


@triton.jit(do_not_specialize=["rows", "inner"])
def l2norm_bwd_kernel(
    y,
    rstd,
    dy,
    dx,
    rows,
    inner,
    sy_outer,
    sy_inner,
    sdy_outer,
    sdy_inner,
    D: tl.constexpr,
    BD: tl.constexpr,
    BT: tl.constexpr,
):
    o_t = tl.program_id(0) * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m_t = o_t < rows
    m_x = m_t[:, None] & (o_d < D)[None, :]
    outer, within = (o_t // inner).to(tl.int64), (o_t % inner).to(tl.int64)
    p_y = y + (outer * sy_outer + within * sy_inner)[:, None] + o_d[None, :]
    p_dy = dy + (outer * sdy_outer + within * sdy_inner)[:, None] + o_d[None, :]
    b_y = tl.load(p_y, mask=m_x, other=0.0).to(tl.float32)
    b_dy = tl.load(p_dy, mask=m_x, other=0.0).to(tl.float32)
    b_rstd = tl.load(rstd + o_t, mask=m_t, other=0.0)
    # y = x * r with r = (|x|^2 + eps)^-1/2:  dx = r * (dy - (dy . y) y)
    b_dx = (b_dy - tl.sum(b_dy * b_y, 1)[:, None] * b_y) * b_rstd[:, None]
    dst = o_t.to(tl.int64) * D
    tl.store(dx + dst[:, None] + o_d[None, :], b_dx.to(dx.dtype.element_ty), mask=m_x)
