"""The GDN layer's gates in one kernel each way: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)."""

import triton
import triton.language as tl

# torch.nn.functional.softplus's default threshold: above it softplus(x) is x itself.
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)


@triton.jit
def _head_offsets(o_h, s_outer, s_inner, INNER: tl.constexpr):
    """Column offsets of heads o_h in a row whose heads come INNER to a group (a fused projection's b/a)."""
    return (o_h // INNER) * s_outer + (o_h % INNER) * s_inner


@triton.jit
def _softplus_input(a_row, o_h, m_h, m, dt_bias):
    b_x = tl.load(a_row, mask=m, other=0.0).to(tl.float32)
    return b_x + tl.load(dt_bias + o_h, mask=m_h, other=0.0).to(tl.float32)[None, :]


@triton.jit(do_not_specialize=["rows"])
def gdn_gates_fwd_kernel(
    a,
    b,
    A_log,
    dt_bias,
    g,
    beta,
    rows,
    sa_r,
    sa_outer,
    sa_inner,
    sb_r,
    sb_outer,
    sb_inner,
    H: tl.constexpr,
    INNER: tl.constexpr,
    BH: tl.constexpr,
    BR: tl.constexpr,
):
    o_r = tl.program_id(0) * BR + tl.arange(0, BR)
    o_h = tl.arange(0, BH)
    m_h = o_h < H
    m = (o_r < rows)[:, None] & m_h[None, :]
    r64 = o_r.to(tl.int64)[:, None]
    b_x = _softplus_input(a + r64 * sa_r + _head_offsets(o_h, sa_outer, sa_inner, INNER)[None, :], o_h, m_h, m, dt_bias)
    b_sp = tl.where(b_x > SOFTPLUS_THRESHOLD, b_x, tl.maximum(b_x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(b_x))))
    b_neg_a = -tl.exp(tl.load(A_log + o_h, mask=m_h, other=0.0).to(tl.float32))
    tl.store(g + r64 * H + o_h[None, :], b_neg_a[None, :] * b_sp, mask=m)
    b_b = tl.load(b + r64 * sb_r + _head_offsets(o_h, sb_outer, sb_inner, INNER)[None, :], mask=m, other=0.0)
    tl.store(beta + r64 * H + o_h[None, :], tl.sigmoid(b_b.to(tl.float32)).to(beta.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["rows"])
def gdn_gates_bwd_kernel(
    a,
    beta,
    A_log,
    dt_bias,
    dg,
    dbeta,
    da,
    db,
    partial,
    rows,
    sa_r,
    sa_outer,
    sa_inner,
    H: tl.constexpr,
    INNER: tl.constexpr,
    BH: tl.constexpr,
    BR: tl.constexpr,
    TILES: tl.constexpr,
):
    """da, db per row; one float32 partial row of dA_log and of ddt_bias per program (summed by torch)."""
    o_h = tl.arange(0, BH)
    m_h = o_h < H
    b_neg_a = -tl.exp(tl.load(A_log + o_h, mask=m_h, other=0.0).to(tl.float32))
    b_dA = tl.zeros((BH,), dtype=tl.float32)
    b_ddt = tl.zeros((BH,), dtype=tl.float32)
    for i in range(TILES):
        o_r = (tl.program_id(0) * TILES + i) * BR + tl.arange(0, BR)
        m = (o_r < rows)[:, None] & m_h[None, :]
        r64 = o_r.to(tl.int64)[:, None]
        dense = r64 * H + o_h[None, :]
        p_a = a + r64 * sa_r + _head_offsets(o_h, sa_outer, sa_inner, INNER)[None, :]
        b_x = _softplus_input(p_a, o_h, m_h, m, dt_bias)
        b_dg = tl.load(dg + dense, mask=m, other=0.0).to(tl.float32)
        b_sig = tl.sigmoid(b_x)
        b_sp = tl.where(b_x > SOFTPLUS_THRESHOLD, b_x, tl.maximum(b_x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(b_x))))
        # d softplus / dx is sigmoid(x), and 1 above the threshold where softplus is x itself.
        b_dx = b_dg * b_neg_a[None, :] * tl.where(b_x > SOFTPLUS_THRESHOLD, 1.0, b_sig)
        tl.store(da + dense, b_dx.to(da.dtype.element_ty), mask=m)
        b_ddt += tl.sum(b_dx, 0)
        b_dA += tl.sum(b_dg * b_neg_a[None, :] * b_sp, 0)
        # sigmoid's backward from its rounded output, as torch's is.
        b_beta = tl.load(beta + dense, mask=m, other=0.0).to(tl.float32)
        b_dbeta = tl.load(dbeta + dense, mask=m, other=0.0).to(tl.float32)
        tl.store(db + dense, (b_dbeta * b_beta * (1.0 - b_beta)).to(db.dtype.element_ty), mask=m)
    p = partial + tl.program_id(0).to(tl.int64) * 2 * H + o_h
    tl.store(p, b_dA, mask=m_h)
    tl.store(p + H, b_ddt, mask=m_h)
