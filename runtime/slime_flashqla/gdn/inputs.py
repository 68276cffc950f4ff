"""Input checks for chunk_gated_delta_rule, run before any kernel launch.

A kernel fed inconsistent shapes or a malformed `cu_seqlens` reads out of bounds and
takes the CUDA context down with it; these checks turn that into a ValueError.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch

from slime_flashqla.gdn.cu_seqlens import checked_cu_seqlens
from slime_flashqla.gdn.errors import GDNInputError

__all__ = ["FLOAT_DTYPES", "GDNShape", "check_inputs", "checked_cu_seqlens"]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class GDNShape:
    """The sizes of one chunk_gated_delta_rule call."""

    batch: int
    tokens: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    num_sequences: int
    varlen: bool
    # The tensor the kernels read for cu_seqlens: a private copy of the values that passed.
    cu_seqlens: torch.Tensor | None = field(default=None, compare=False, repr=False)
    # The scale as a Python float (None: K**-0.5), whatever real number type the caller passed.
    scale: float | None = field(default=None, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        """No tokens to run: T = 0 or B = 0."""
        return self.tokens == 0 or self.batch == 0


def _fail(message: str) -> None:
    raise GDNInputError(f"chunk_gated_delta_rule: {message}")


def check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> GDNShape:
    """Check shapes, dtypes, devices, scale and cu_seqlens; raise GDNInputError (a ValueError) naming the problem."""
    named = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype not in FLOAT_DTYPES:
            _fail(f"{name} must be a floating tensor (float16/bfloat16/float32/float64), got {tensor.dtype}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        _fail(
            "q, k must be [B, T, Hk, K] and v [B, T, Hv, V]; got shapes "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape != k.shape:
        _fail(f"q and k must have the same shape [B, T, Hk, K], got {tuple(q.shape)} and {tuple(k.shape)}")
    batch, tokens, key_heads, key_dim = q.shape
    if v.shape[:2] != (batch, tokens):
        _fail(f"v must be [B={batch}, T={tokens}, Hv, V] like q, got {tuple(v.shape)}")
    value_heads, value_dim = v.shape[2], v.shape[3]
    if key_heads == 0 or value_heads == 0 or value_heads % key_heads != 0:
        _fail(
            f"the value head count Hv={value_heads} must be a positive multiple of the key head count "
            f"Hk={key_heads} (grouped value heads: value head j uses key head j // (Hv/Hk))"
        )
    if key_dim == 0 or value_dim == 0:
        _fail(f"the head sizes must be positive, got K={key_dim}, V={value_dim}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        _fail(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    for name in ("g", "beta"):
        if tuple(named[name].shape) != (batch, tokens, value_heads):
            _fail(f"{name} must be [B, T, Hv] = {(batch, tokens, value_heads)}, got {tuple(named[name].shape)}")
    if initial_state is not None and not isinstance(initial_state, torch.Tensor):
        _fail(f"initial_state must be a torch.Tensor or None, got {type(initial_state).__name__}")
    devices = {t.device for t in named.values()}
    if initial_state is not None:
        devices.add(initial_state.device)
    if cu_seqlens is not None and isinstance(cu_seqlens, torch.Tensor):
        devices.add(cu_seqlens.device)
    if len(devices) != 1:
        _fail(f"all tensors must be on one device, got {sorted(str(d) for d in devices)}")
    # bool is an int to Python, and inf or nan makes every output nan: neither is a scale. Any real
    # number type is (numpy's float32 too, which is no float subclass); the kernels get a float.
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (0 < scale < math.inf)
    ):
        _fail(f"scale must be a finite positive number or None (default K**-0.5), got {scale!r}")

    checked = None
    if cu_seqlens is not None:
        if batch != 1:
            _fail(f"with cu_seqlens the batch must be 1 (packed sequences), got B={batch}")
        checked = checked_cu_seqlens(cu_seqlens, tokens)
        num_sequences = checked.numel() - 1
    else:
        num_sequences = batch
    if initial_state is not None:
        expected = (num_sequences, value_heads, key_dim, value_dim)
        if tuple(initial_state.shape) != expected:
            _fail(f"initial_state must be [N, Hv, K, V] = {expected}, got {tuple(initial_state.shape)}")
        if initial_state.dtype not in FLOAT_DTYPES:
            _fail(f"initial_state must be floating, got {initial_state.dtype}")
    return GDNShape(
        batch,
        tokens,
        key_heads,
        value_heads,
        key_dim,
        value_dim,
        num_sequences,
        checked is not None,
        checked,
        None if scale is None else float(scale),
    )
