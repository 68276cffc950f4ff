"""Depthwise causal conv1d + SiLU with autograd (dx, dweight), restarting at every cu_seqlens boundary.

Two entry points on the same kernels, each beside its PyTorch reference:
- `causal_conv1d_silu(x, weight, cu_seqlens)`: x [B, T, D] -> y [B, T, D]
  (`causal_conv1d_silu_reference`).
- `short_conv_silu(proj, weight, cu_seqlens, layout)`: the GDN layers' short convolution read
  straight out of the input projection's output, whatever its column layout (`ProjectionLayout`):
  returns q, k, v as dense tensors (and z as a view of `proj`), and its backward writes one
  gradient for the whole projection output. No gathered copy of q/k/v is made in either pass
  (`short_conv_silu_reference` gathers, convolves and splits). With `qk_head_dim` the forward
  also L2-normalises q and k per head (what the GDN kernels' `use_qk_l2norm_in_kernel` asks
  for) in the same tiles, so q/k are not read and written again by a separate l2norm pass.

Each token's sequence comes from a binary search over cu_seqlens inside the kernels, so
nothing is read back to the host. Rounding follows `causal_conv1d_silu_reference`: the conv
output is rounded to x's dtype, as F.conv1d's output tensor is, before the float32 SiLU.
cu_seqlens is trusted as the caller checked it (the layers run gdn.inputs' checked_cu_seqlens
first): checking its values here would need a host sync.

The backward is one pass for kernel widths up to ONE_PASS_WIDTH (Qwen's 4): each tile of tokens
t reads x at t-(W-1)..t+(W-1) and dy at t..t+W-1, recomputes pre = conv(x) at t..t+W-1 (rounded
through x's dtype as the forward rounds it), and sums dx(t) = sum_j w[W-1-j] dpre(t+j) over the
leads inside t's sequence, dpre = dy * silu'(pre), reading x and dy and writing dx once each.
Wider kernels (or BACKWARD = None) take two passes: the first recomputes the conv, writes dpre
to a [B, T, D] temporary in x's dtype and reduces dweight, the second turns dpre into dx. The
one pass keeps dpre in float32 and so skips that rounding: in bfloat16 its dx is the closer to
a float64 reference (tests/runtime/triton_ops/test_causal_conv1d.py checks it); in float32 the
two agree to float32 rounding. dweight: each program writes a float32 partial [D, W] for its
tokens, summed by torch afterwards: no atomics, deterministic for a token count.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from slime_flashqla.triton_ops._host import cdiv, check_float, next_power_of_2, on_tensor_device
from slime_flashqla.triton_ops.l2norm import EPS as L2NORM_EPS
from slime_flashqla.triton_ops.l2norm import l2norm_bwd, l2norm_fwd, l2norm_reference
from slime_flashqla.triton_ops.word_copy import copy_words

MAX_WIDTH = 8


@dataclass(frozen=True)
class LaunchConfig:
    """One kernel's fixed launch: BT tokens x BD channels a tile, TILES tiles a program, warps."""

    bt: int
    bd: int
    tiles: int
    warps: int


# Fixed launches: no autotuning, so a process compiles each (dtype, layout, W) once.
# Chosen by tools/gpu/conv_tune.py on an H200 (docs/benchmarks.md has the run).
FORWARD = LaunchConfig(bt=32, bd=128, tiles=1, warps=4)
# The forward that also L2-normalises q/k heads holds each row's sum as well: its own launch.
FORWARD_QK_NORM = LaunchConfig(bt=32, bd=128, tiles=1, warps=8)
# The backward in one pass (`short_conv_bwd_kernel`: x and dy in, dx and dweight partials out)
# for widths up to ONE_PASS_WIDTH; wider kernels, or BACKWARD = None, take the two passes
# below (dpre through memory, then dx). Not yet timed on a GPU: picked from its sm_90 compile,
# where 4 float32 elements a thread per tile (BT * BD / (32 * warps)) take 128 registers, 8
# take 252-255 and 16 spill; tools/gpu/conv_tune.py's BWD sweeps it against the two passes.
BACKWARD: LaunchConfig | None = LaunchConfig(bt=8, bd=128, tiles=16, warps=8)
ONE_PASS_WIDTH = 4
BACKWARD_DPRE = LaunchConfig(bt=8, bd=128, tiles=32, warps=4)
BACKWARD_DX = LaunchConfig(bt=32, bd=128, tiles=1, warps=2)
# dpre passes between the backward's two kernels in x's dtype (float32 measured slower, same parity).
DPRE_FLOAT32 = False
# dweight's products summed over a program's tiles before one reduction over tokens; the kernel
# holds one float32 tile of sums per tap, for up to DEFERRED_TAPS taps (Qwen's conv has 4).
DEFER_DWEIGHT = True
DEFERRED_TAPS = 4


@dataclass(frozen=True)
class ProjectionLayout:
    """Where the conv's q, k, v channels (and z) sit in a projection's last dim.

    `groups` groups follow each other, each holding q (q_width columns), k (q_width), v
    (v_width) and then z (z_width) columns. The conv's channels are all groups' q, then all
    k, then all v: the order of nn.Conv1d's weight in the checkpoints.
    """

    groups: int
    q_width: int
    v_width: int
    z_width: int = 0

    @classmethod
    def plain(cls, channels: int) -> ProjectionLayout:
        """A [B, T, D] tensor whose D channels are all the conv's (one section, no z)."""
        return cls(groups=1, q_width=0, v_width=channels)

    @property
    def group_width(self) -> int:
        return 2 * self.q_width + self.v_width + self.z_width

    @property
    def width(self) -> int:
        """Columns of the projection this layout describes."""
        return self.groups * self.group_width

    @property
    def channels(self) -> int:
        """The conv's channels: q, k and v of every group."""
        return self.groups * (2 * self.q_width + self.v_width)

    @property
    def section_widths(self) -> tuple[int, ...]:
        """Channels of each dense output: (q, k, v), or (D,) for a plain tensor."""
        if self.q_width == 0:
            return (self.groups * self.v_width,)
        return (self.groups * self.q_width,) * 2 + (self.groups * self.v_width,)

    def block_size(self, preferred: int) -> int:
        """The largest power of two <= preferred that divides every section of every group."""
        if self.q_width == 0 and self.groups == 1:
            return preferred  # one section: a partial last block is masked
        unit = math.gcd(self.q_width, self.v_width)
        return min(preferred, unit & -unit)


@functools.cache
def _kernels():
    from slime_flashqla.triton_ops.jit import causal_conv1d

    return causal_conv1d


def _width_of(weight: torch.Tensor, op: str) -> int:
    if weight.dim() == 3 and weight.shape[1] == 1:
        return weight.shape[2]
    if weight.dim() == 2:
        return weight.shape[1]
    raise ValueError(f"{op}: weight must be [D, 1, W] (nn.Conv1d's) or [D, W], got {tuple(weight.shape)}")


def _check(x, weight, cu_seqlens, layout: ProjectionLayout, op: str) -> int:
    check_float("x", x, op)
    check_float("weight", weight, op)
    if x.dim() != 3:
        raise ValueError(f"{op}: x must be [B, T, D], got shape {tuple(x.shape)}")
    if x.shape[-1] != layout.width:
        raise ValueError(f"{op}: the input has {x.shape[-1]} columns but its layout describes {layout.width}")
    width = _width_of(weight, op)
    if weight.shape[0] != layout.channels:
        raise ValueError(f"{op}: weight has {weight.shape[0]} channels but the input has {layout.channels}")
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"{op}: the kernel width must be 1..{MAX_WIDTH}, got {width}")
    if weight.device != x.device:
        raise ValueError(f"{op}: x and weight must be on one device, got {x.device} and {weight.device}")
    if cu_seqlens is not None:
        if x.shape[0] != 1:
            raise ValueError(f"{op}: with cu_seqlens x must be packed as B == 1, got B={x.shape[0]}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{op}: cu_seqlens must be a 1-D int32/int64 tensor of N+1 offsets, got "
                f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
            )
        if cu_seqlens.device != x.device:
            raise ValueError(f"{op}: cu_seqlens is on {cu_seqlens.device}, x on {x.device}")
    return width


def _batch_stride(t):
    # B == 1 (every packed call) passes 0, so a huge T * D never turns the argument int64
    # and recompiles the kernel.
    return t.stride(0) if t.shape[0] > 1 else 0


def _sequence_args(x, cu_seqlens, t: int, layout: ProjectionLayout) -> dict:
    """The kernels' sequence arguments: cu_seqlens (or a dummy pointer), T, sequence count, search steps, S."""
    n_seqs = 1 if cu_seqlens is None else cu_seqlens.numel() - 1
    return {
        "cu_seqlens": x if cu_seqlens is None else cu_seqlens,
        "T": t,
        "n_seqs": n_seqs,
        "n_iter": 0 if cu_seqlens is None else n_seqs.bit_length(),
        "S": layout.group_width,
    }


def _section_args(tensors, names: tuple[str, str, str]) -> dict:
    """The three sections under the kernel's `names`, with their (batch, token) strides (a plain tensor fills all)."""
    q, k, v = tensors if len(tensors) == 3 else tensors * 3
    return {
        **dict(zip(names, (q, k, v), strict=True)),
        "sq_b": _batch_stride(q),
        "sq_t": q.stride(1),
        "sk_b": _batch_stride(k),
        "sk_t": k.stride(1),
        "sv_b": _batch_stride(v),
        "sv_t": v.stride(1),
    }


def _weight_args(weight) -> dict:
    return {"w": weight, "sw_d": weight.stride(0), "sw_w": weight.stride(-1)}


def _constants(layout: ProjectionLayout, width: int, bd: int, cfg: LaunchConfig, cu_seqlens) -> dict:
    """A launch's compile-time constants and warps: the layout's, the block's, the launch config's."""
    return {
        "D": layout.channels,
        "W": width,
        "G": layout.groups,
        "QW": layout.q_width,
        "VW": layout.v_width,
        "BD": bd,
        "BT": cfg.bt,
        "TILES": cfg.tiles,
        "VARLEN": cu_seqlens is not None,
        "num_warps": cfg.warps,
    }


def _forward(x, weight, cu_seqlens, layout: ProjectionLayout, width: int, rstd: torch.Tensor | None = None):
    """The sections' dense outputs (q, k, v) or (y,), each [B, T, section channels].

    With `rstd` ([2, B, T, q heads] float32, from `_qk_rstd`) q and k come out L2-normalised per
    head and their factors are written there.
    """
    b, t, _ = x.shape
    outputs = tuple(torch.empty((b, t, n), dtype=x.dtype, device=x.device) for n in layout.section_widths)
    if b * t:
        cfg = FORWARD if rstd is None else FORWARD_QK_NORM
        bd = layout.block_size(cfg.bd)
        grid = (cdiv(layout.channels, bd), cdiv(t, cfg.bt * cfg.tiles), b)
        _kernels().short_conv_fwd_kernel[grid](
            x=x,
            sx_b=_batch_stride(x),
            sx_t=x.stride(1),
            **_weight_args(weight),
            **_section_args(outputs, ("yq", "yk", "yv")),
            rstd=x if rstd is None else rstd,
            eps=L2NORM_EPS,
            NORM_QK=rstd is not None,
            **_sequence_args(x, cu_seqlens, t, layout),
            **_constants(layout, width, bd, cfg, cu_seqlens),
        )
    return outputs


def _qk_rstd(x, layout: ProjectionLayout, head_dim: int) -> torch.Tensor | None:
    """rstd's buffer where the forward can normalise q/k heads of `head_dim` in its tiles (one head a tile), or None."""
    if layout.q_width == 0 or layout.q_width % head_dim or layout.block_size(FORWARD_QK_NORM.bd) != head_dim:
        return None
    b, t, _ = x.shape
    return torch.empty((2, b, t, layout.groups * layout.q_width // head_dim), dtype=torch.float32, device=x.device)


def _normalised(outputs, layout: ProjectionLayout, head_dim: int, rstd: torch.Tensor | None):
    """(q, k, v, rstd_q, rstd_k): q/k L2-normalised per head, by the forward (rstd given) or by l2norm_fwd after it."""
    q, k, v = outputs
    b, t, _ = q.shape
    heads = layout.groups * layout.q_width // head_dim
    if rstd is not None:
        return q, k, v, rstd[0], rstd[1]
    (q, rstd_q), (k, rstd_k) = (l2norm_fwd(y.view(b, t, heads, head_dim)) for y in (q, k))
    return q.view(b, t, -1), k.view(b, t, -1), v, rstd_q, rstd_k


def _backward(x, weight, cu_seqlens, layout: ProjectionLayout, width: int, grads):
    """(dx shaped like x, dense; dweight in weight's dtype and shape) from the sections' gradients."""
    b, t, _ = x.shape
    d = layout.channels
    dx = torch.empty((b, t, layout.width), dtype=x.dtype, device=x.device)
    one_pass = BACKWARD is not None and width <= ONE_PASS_WIDTH
    first = BACKWARD if one_pass else BACKWARD_DPRE
    token_blocks = cdiv(t, first.bt * first.tiles)
    dw_partial = torch.empty((b * token_blocks, d, width), dtype=torch.float32, device=x.device)
    if b * t:
        grads = tuple(g if g.stride(-1) == 1 else g.contiguous() for g in grads)
        sequences = _sequence_args(x, cu_seqlens, t, layout)
        bd1 = layout.block_size(first.bd)
        common = {
            "x": x,
            "sx_b": _batch_stride(x),
            "sx_t": x.stride(1),
            "dw_partial": dw_partial,
            **_weight_args(weight),
            **_section_args(grads, ("dq", "dk", "dv")),
            **sequences,
            **_constants(layout, width, bd1, first, cu_seqlens),
            "BW": next_power_of_2(width),
        }
        grid = (cdiv(d, bd1), token_blocks, b)
        if one_pass:
            _kernels().short_conv_bwd_kernel[grid](dx=dx, sdx_b=_batch_stride(dx), sdx_t=dx.stride(1), **common)
        else:
            _backward_two_pass(dx, sequences, layout, width, grid, common, cu_seqlens)
    dweight = dw_partial.sum(0) if b * t else dw_partial.new_zeros((d, width))
    return dx, dweight.view(weight.shape).to(weight.dtype)


def _backward_two_pass(dx, sequences, layout: ProjectionLayout, width: int, grid, common: dict, cu_seqlens):
    """dpre (and dweight's partials) by the first kernel, into a [B, T, D] temporary; dx from it by the second."""
    x, w = common["x"], common["w"]
    b, t, _ = x.shape
    dpre = torch.empty((b, t, layout.channels), dtype=torch.float32 if DPRE_FLOAT32 else x.dtype, device=x.device)
    _kernels().short_conv_bwd_dpre_kernel[grid](dpre=dpre, DEFER=DEFER_DWEIGHT and width <= DEFERRED_TAPS, **common)
    p2 = BACKWARD_DX
    bd2 = layout.block_size(p2.bd)
    _kernels().short_conv_bwd_dx_kernel[(cdiv(layout.channels, bd2), cdiv(t, p2.bt * p2.tiles), b)](
        dpre=dpre,
        dx=dx,
        sdx_b=_batch_stride(dx),
        sdx_t=dx.stride(1),
        **_weight_args(w),
        **sequences,
        **_constants(layout, width, bd2, p2, cu_seqlens),
    )


def _z_view(proj: torch.Tensor, layout: ProjectionLayout) -> torch.Tensor:
    """z's columns of every group, as a [B, T, groups, z_width] view of the projection."""
    b, t, _ = proj.shape
    return proj.view(b, t, layout.groups, layout.group_width)[..., layout.group_width - layout.z_width :]


class ShortConvSilu(torch.autograd.Function):
    """silu(causal depthwise conv1d) of the q/k/v columns of a projection, with z passed through as a view.

    With `qk_head_dim`, q and k are L2-normalised per head as well; their backward runs
    l2norm_bwd from the saved normalised q/k (the tensors the GDN kernel saves too) and rstd.
    """

    @staticmethod
    def forward(ctx, proj, weight, cu_seqlens, layout, width, qk_head_dim):
        ctx.layout, ctx.width, ctx.qk_head_dim = layout, width, qk_head_dim
        rstd = None if qk_head_dim is None else _qk_rstd(proj, layout, qk_head_dim)
        outputs = _forward(proj, weight, cu_seqlens, layout, width, rstd)
        if qk_head_dim is None:
            ctx.save_for_backward(proj, weight, cu_seqlens)
        else:
            q, k, v, rstd_q, rstd_k = _normalised(outputs, layout, qk_head_dim, rstd)
            outputs = (q, k, v)
            ctx.save_for_backward(proj, weight, cu_seqlens, q, k, rstd_q, rstd_k)
        if layout.z_width:
            outputs = (*outputs, _z_view(proj, layout))
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        proj, weight, cu_seqlens, *normed = ctx.saved_tensors
        layout = ctx.layout
        sections = len(layout.section_widths)
        conv_grads = tuple(
            g if g is not None else torch.zeros((*proj.shape[:2], n), dtype=proj.dtype, device=proj.device)
            for g, n in zip(grads[:sections], layout.section_widths, strict=True)
        )
        if normed:
            q, k, rstd_q, rstd_k = normed
            shape = (*rstd_q.shape, ctx.qk_head_dim)
            dq, dk = (
                l2norm_bwd(y.view(shape), rstd, dy.reshape(shape)).view(dy.shape)
                for y, rstd, dy in ((q, rstd_q, conv_grads[0]), (k, rstd_k, conv_grads[1]))
            )
            conv_grads = (dq, dk, *conv_grads[2:])
        dproj, dweight = _backward(proj, weight, cu_seqlens, layout, ctx.width, conv_grads)
        if layout.z_width:
            dz = grads[sections]
            target = _z_view(dproj, layout)
            if dz is None:
                target.zero_()
            else:
                copy_words(target, dz)
        return dproj, dweight, None, None, None, None


def _apply(x, weight, cu_seqlens, layout, op, qk_head_dim=None):
    width = _check(x, weight, cu_seqlens, layout, op)
    if x.stride(-1) != 1:
        x = x.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return ShortConvSilu.apply(x, weight, cu_seqlens, layout, width, qk_head_dim)
    rstd = None if qk_head_dim is None else _qk_rstd(x, layout, qk_head_dim)
    outputs = _forward(x, weight, cu_seqlens, layout, width, rstd)
    if qk_head_dim is not None:
        outputs = _normalised(outputs, layout, qk_head_dim, rstd)[:3]
    return (*outputs, _z_view(x, layout)) if layout.z_width else outputs


@on_tensor_device
def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """silu(depthwise causal conv1d) of x [B, T, D] with weight [D, 1, W], restarting at cu_seqlens (B == 1)."""
    if x.dim() != 3:
        raise ValueError(f"causal_conv1d_silu: x must be [B, T, D], got shape {tuple(x.shape)}")
    (y,) = _apply(x, weight, cu_seqlens, ProjectionLayout.plain(x.shape[-1]), "causal_conv1d_silu")
    return y


@on_tensor_device
def short_conv_silu(
    proj: torch.Tensor,
    weight: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    layout: ProjectionLayout,
    qk_head_dim: int | None = None,
) -> tuple[torch.Tensor, ...]:
    """(q, k, v[, z]) of a GDN layer's projection [B, T, layout.width]: q/k/v conv'd and dense, z a view.

    With `qk_head_dim`, q and k come out L2-normalised over each head of that many channels
    (FLA's `use_qk_l2norm_in_kernel`, eps 1e-6), in the conv's own pass where a tile is one head.
    """
    if layout.q_width == 0:
        raise ValueError("short_conv_silu: the layout has no q/k columns (use causal_conv1d_silu)")
    _check_head_dim(layout, qk_head_dim)
    return _apply(proj, weight, cu_seqlens, layout, "short_conv_silu", qk_head_dim)


def _check_head_dim(layout: ProjectionLayout, qk_head_dim: int | None) -> None:
    if qk_head_dim is not None and (qk_head_dim < 1 or layout.q_width % qk_head_dim):
        raise ValueError(
            f"short_conv_silu: qk_head_dim {qk_head_dim} must divide the layout's q width {layout.q_width}"
        )


def causal_conv1d_silu_reference(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """`causal_conv1d_silu` in PyTorch: F.conv1d per sequence then SiLU, over [B, T, D] with weight [D, 1, W]."""
    width = weight.shape[-1]

    def conv(segment):  # [B, t, D]
        y = F.conv1d(F.pad(segment.transpose(1, 2), (width - 1, 0)), weight, groups=weight.shape[0])
        return F.silu(y).transpose(1, 2)

    if cu_seqlens is None:
        return conv(x)
    offsets = cu_seqlens.tolist()
    # An empty sequence (a repeated offset, as padded packs have) has nothing to convolve.
    return torch.cat([x[:, :0], *(conv(x[:, a:b]) for a, b in itertools.pairwise(offsets) if b > a)], dim=1)


def short_conv_silu_reference(
    proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout, qk_head_dim: int | None = None
):
    """`short_conv_silu` in PyTorch: q/k/v gathered from `layout`, conv'd, split, q/k normalised per head; z a view."""
    _check_head_dim(layout, qk_head_dim)
    b, t, _ = proj.shape
    groups = proj.view(b, t, layout.groups, layout.group_width)
    qw, vw = layout.q_width, layout.v_width
    starts = (0, qw, 2 * qw)
    parts = [groups[..., s : s + w].reshape(b, t, -1) for s, w in zip(starts, (qw, qw, vw), strict=True)]
    y = causal_conv1d_silu_reference(torch.cat(parts, dim=-1), weight, cu_seqlens)
    q, k, v = torch.split(y, layout.section_widths, dim=-1)
    if qk_head_dim is not None:
        # In float32 (float64 stays), as the torch backend's use_qk_l2norm_in_kernel normalises.
        compute = torch.promote_types(q.dtype, torch.float32)
        q, k = (l2norm_reference(u.view(b, t, -1, qk_head_dim).to(compute)).to(u.dtype).view(b, t, -1) for u in (q, k))
    if not layout.z_width:
        return q, k, v
    return q, k, v, groups[..., layout.group_width - layout.z_width :]
