"""Depthwise causal conv1d + SiLU with autograd (dx, dweight), restarting at every cu_seqlens boundary.

Two entry points on the same kernels, each beside its PyTorch reference:
- `causal_conv1d_silu(x, weight, cu_seqlens)`: x [B, T, D] -> y [B, T, D]
  (`causal_conv1d_silu_reference`).
- `short_conv_silu(proj, weight, cu_seqlens, layout)`: the GDN layers' short convolution read
  straight out of the input projection's output, whatever its column layout (`ProjectionLayout`):
  returns q, k, v as dense tensors (and z as a view of `proj`), and its backward writes one
  gradient for the whole projection output. No gathered copy of q/k/v is made in either pass
  (`short_conv_silu_reference` gathers, convolves and splits).

Each token's sequence comes from a binary search over cu_seqlens inside the kernels, so
nothing is read back to the host. Rounding follows `causal_conv1d_silu_reference`: the conv
output is rounded to x's dtype, as F.conv1d's output tensor is, before the float32 SiLU.
cu_seqlens is trusted as the caller checked it (the layers run gdn.inputs' checked_cu_seqlens
first): checking its values here would need a host sync.

The backward is two passes: the first recomputes the conv, writes dpre = dy * silu'(pre) and
reduces dweight, the second turns dpre into dx. dweight: each program writes a float32 partial
[D, W] for its tokens, summed by torch afterwards: no atomics, deterministic for a token count.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from slime_flashqla.triton_ops._host import cdiv, check_float, next_power_of_2, on_tensor_device
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


def _forward(x, weight, cu_seqlens, layout: ProjectionLayout, width: int):
    """The sections' dense outputs (q, k, v) or (y,), each [B, T, section channels]."""
    b, t, _ = x.shape
    outputs = tuple(torch.empty((b, t, n), dtype=x.dtype, device=x.device) for n in layout.section_widths)
    if b * t:
        cfg = FORWARD
        bd = layout.block_size(cfg.bd)
        grid = (cdiv(layout.channels, bd), cdiv(t, cfg.bt * cfg.tiles), b)
        _kernels().short_conv_fwd_kernel[grid](
            x=x,
            sx_b=_batch_stride(x),
            sx_t=x.stride(1),
            **_weight_args(weight),
            **_section_args(outputs, ("yq", "yk", "yv")),
            **_sequence_args(x, cu_seqlens, t, layout),
            **_constants(layout, width, bd, cfg, cu_seqlens),
        )
    return outputs


def _grad_buffer(x, layout: ProjectionLayout, spare: int) -> torch.Tensor:
    """dx [B, T, layout.width]: dense, or the first columns of rows with at least `spare` more (16-byte rows)."""
    b, t, _ = x.shape
    row = layout.width
    if spare:
        row += spare
        row += -row % max(1, 16 // x.element_size())
    return torch.empty((b, t, row), dtype=x.dtype, device=x.device)[..., : layout.width]


def _backward(x, weight, cu_seqlens, layout: ProjectionLayout, width: int, grads, spare: int = 0):
    """(dx shaped like x, its rows `spare` columns wider in memory; dweight in weight's dtype and shape)."""
    b, t, _ = x.shape
    d = layout.channels
    dx = _grad_buffer(x, layout, spare)
    p1, p2 = BACKWARD_DPRE, BACKWARD_DX
    token_blocks = cdiv(t, p1.bt * p1.tiles)
    dw_partial = torch.empty((b * token_blocks, d, width), dtype=torch.float32, device=x.device)
    if b * t:
        grads = tuple(g if g.stride(-1) == 1 else g.contiguous() for g in grads)
        dpre = torch.empty((b, t, d), dtype=torch.float32 if DPRE_FLOAT32 else x.dtype, device=x.device)
        sequences = _sequence_args(x, cu_seqlens, t, layout)
        bd1 = layout.block_size(p1.bd)
        _kernels().short_conv_bwd_dpre_kernel[(cdiv(d, bd1), token_blocks, b)](
            x=x,
            sx_b=_batch_stride(x),
            sx_t=x.stride(1),
            dpre=dpre,
            dw_partial=dw_partial,
            **_weight_args(weight),
            **_section_args(grads, ("dq", "dk", "dv")),
            **sequences,
            **_constants(layout, width, bd1, p1, cu_seqlens),
            BW=next_power_of_2(width),
            DEFER=DEFER_DWEIGHT and width <= DEFERRED_TAPS,
        )
        bd2 = layout.block_size(p2.bd)
        _kernels().short_conv_bwd_dx_kernel[(cdiv(d, bd2), cdiv(t, p2.bt * p2.tiles), b)](
            dpre=dpre,
            dx=dx,
            sdx_b=_batch_stride(dx),
            sdx_t=dx.stride(1),
            **_weight_args(weight),
            **sequences,
            **_constants(layout, width, bd2, p2, cu_seqlens),
        )
    dweight = dw_partial.sum(0) if b * t else dw_partial.new_zeros((d, width))
    return dx, dweight.view(weight.shape).to(weight.dtype)


def _z_view(proj: torch.Tensor, layout: ProjectionLayout) -> torch.Tensor:
    """z's columns of every group, as a [B, T, groups, z_width] view of the projection."""
    b, t, _ = proj.shape
    return proj.view(b, t, layout.groups, layout.group_width)[..., layout.group_width - layout.z_width :]


class ShortConvSilu(torch.autograd.Function):
    """silu(causal depthwise conv1d) of the q/k/v columns of a projection, with z passed through as a view."""

    @staticmethod
    def forward(ctx, proj, weight, cu_seqlens, layout, width, spare):
        ctx.save_for_backward(proj, weight, cu_seqlens)
        ctx.layout, ctx.width, ctx.spare = layout, width, spare
        outputs = _forward(proj, weight, cu_seqlens, layout, width)
        if layout.z_width:
            outputs = (*outputs, _z_view(proj, layout))
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        proj, weight, cu_seqlens = ctx.saved_tensors
        layout = ctx.layout
        sections = len(layout.section_widths)
        conv_grads = tuple(
            g if g is not None else torch.zeros((*proj.shape[:2], n), dtype=proj.dtype, device=proj.device)
            for g, n in zip(grads[:sections], layout.section_widths, strict=True)
        )
        dproj, dweight = _backward(proj, weight, cu_seqlens, layout, ctx.width, conv_grads, ctx.spare)
        if layout.z_width:
            dz = grads[sections]
            target = _z_view(dproj, layout)
            if dz is None:
                target.zero_()
            else:
                copy_words(target, dz)
        return dproj, dweight, None, None, None, None


def _apply(x, weight, cu_seqlens, layout, op, spare: int = 0):
    width = _check(x, weight, cu_seqlens, layout, op)
    if spare < 0:
        raise ValueError(f"{op}: grad_spare_columns must be >= 0, got {spare}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return ShortConvSilu.apply(x, weight, cu_seqlens, layout, width, spare)
    outputs = _forward(x, weight, cu_seqlens, layout, width)
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
    *,
    grad_spare_columns: int = 0,
) -> tuple[torch.Tensor, ...]:
    """(q, k, v[, z]) of a GDN layer's projection [B, T, layout.width]: q/k/v conv'd and dense, z a view.

    With `grad_spare_columns`, proj's gradient leaves at least that many unused columns after
    each of its rows in memory, for the projection to write narrower gradients into and take the
    input's gradient in one GEMM (layers/ops.shared_input_linears).
    """
    if layout.q_width == 0:
        raise ValueError("short_conv_silu: the layout has no q/k columns (use causal_conv1d_silu)")
    return _apply(proj, weight, cu_seqlens, layout, "short_conv_silu", grad_spare_columns)


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


def short_conv_silu_reference(proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout):
    """`short_conv_silu` in PyTorch: q/k/v gathered from `layout`, conv'd and split; z a view."""
    b, t, _ = proj.shape
    groups = proj.view(b, t, layout.groups, layout.group_width)
    qw, vw = layout.q_width, layout.v_width
    starts = (0, qw, 2 * qw)
    parts = [groups[..., s : s + w].reshape(b, t, -1) for s, w in zip(starts, (qw, qw, vw), strict=True)]
    y = causal_conv1d_silu_reference(torch.cat(parts, dim=-1), weight, cu_seqlens)
    q, k, v = torch.split(y, layout.section_widths, dim=-1)
    if not layout.z_width:
        return q, k, v
    return q, k, v, groups[..., layout.group_width - layout.z_width :]
