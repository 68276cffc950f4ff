"""Input checks for chunk_gated_delta_rule, run before any kernel launch.

A kernel fed inconsistent shapes or a malformed `cu_seqlens` reads out of bounds and
takes the CUDA context down with it; these checks turn that into a ValueError.
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass

import torch

from slime_flashqla.gdn.errors import GDNInputError

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


def _fail(message: str) -> None:
    raise GDNInputError(f"chunk_gated_delta_rule: {message}")


class _CuSeqlensCache:
    """Remembers the last cu_seqlens tensor that passed, so 48 GDN layers sync once per step.

    Holding a weak reference (not an id or pointer) makes the identity test exact, and the
    tensor's version counter catches in-place edits.
    """

    def __init__(self) -> None:
        self._ref = None
        self._version = -1
        self._tokens = -1

    def hit(self, cu_seqlens: torch.Tensor, tokens: int) -> bool:
        return (
            self._ref is not None
            and self._ref() is cu_seqlens
            and cu_seqlens._version == self._version
            and tokens == self._tokens
        )

    def store(self, cu_seqlens: torch.Tensor, tokens: int) -> None:
        self._ref = weakref.ref(cu_seqlens)
        self._version = cu_seqlens._version
        self._tokens = tokens


_cu_seqlens_cache = _CuSeqlensCache()


def check_cu_seqlens(cu_seqlens: torch.Tensor, tokens: int) -> int:
    """Validate `cu_seqlens` against T tokens and return the number of sequences."""
    if not isinstance(cu_seqlens, torch.Tensor):
        _fail(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dim() != 1:
        _fail(f"cu_seqlens must be 1-D, got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        _fail(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.numel() < 2:
        _fail(f"cu_seqlens needs at least 2 entries ([0, T]), got {cu_seqlens.numel()}")
    if _cu_seqlens_cache.hit(cu_seqlens, tokens):
        return cu_seqlens.numel() - 1
    # One device-to-host copy; the cache above makes it once per step, not once per layer.
    values = cu_seqlens.tolist()
    if values[0] != 0:
        _fail(f"cu_seqlens must start at 0, got {values[0]}")
    if values[-1] != tokens:
        _fail(f"cu_seqlens must end at T={tokens} (the number of tokens), got {values[-1]}")
    steps = [b - a for a, b in itertools.pairwise(values)]
    if min(steps) < 0:
        bad = steps.index(min(steps))
        _fail(f"cu_seqlens must be non-decreasing, but {values[bad]} is followed by {values[bad + 1]}")
    _cu_seqlens_cache.store(cu_seqlens, tokens)
    return len(values) - 1


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
    # bool is an int to Python, and inf or nan makes every output nan: neither is a scale.
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < scale < math.inf)
    ):
        _fail(f"scale must be a finite positive number or None (default K**-0.5), got {scale!r}")

    if cu_seqlens is not None:
        if batch != 1:
            _fail(f"with cu_seqlens the batch must be 1 (packed sequences), got B={batch}")
        num_sequences = check_cu_seqlens(cu_seqlens, tokens)
    else:
        num_sequences = batch
    if initial_state is not None:
        expected = (num_sequences, value_heads, key_dim, value_dim)
        if tuple(initial_state.shape) != expected:
            _fail(f"initial_state must be [N, Hv, K, V] = {expected}, got {tuple(initial_state.shape)}")
        if initial_state.dtype not in FLOAT_DTYPES:
            _fail(f"initial_state must be floating, got {initial_state.dtype}")
    return GDNShape(batch, tokens, key_heads, value_heads, key_dim, value_dim, num_sequences, cu_seqlens is not None)
