"""The `cu_seqlens` check, and the verdict cache that lets 48 GDN layers read its values once per step.

Reading a CUDA tensor's values is a device-to-host copy that waits for the GPU, so a
verdict is reused while the caller's tensor is the same object with the same version,
storage and size. An edit those cannot see (through `.data`, or a kernel writing through a
raw pointer) changes only the values, and nothing but reading them shows it. So the
kernels never read the caller's tensor: they read a private copy holding exactly the
values that passed. A stale verdict then means the kernels run on the checked values
(make a new tensor, or edit in place the ordinary way, to pass new ones), never out of bounds.
The copy is handed out too (check_inputs(...).cu_seqlens, each kernel's argument): an
in-place edit of it bumps its version, and a copy whose version moved is dropped with its
verdict, so whatever is passed next is read and checked again. A CPU copy is read on every
call; a CUDA copy edited past its version counter (through `.data`) is the one case not seen.
"""

from __future__ import annotations

import itertools
import weakref
from typing import NamedTuple

import torch

from slime_flashqla.gdn.errors import GDNInputError


def _fail(message: str) -> None:
    raise GDNInputError(f"chunk_gated_delta_rule: {message}")


def _check_form(cu_seqlens) -> None:
    if not isinstance(cu_seqlens, torch.Tensor):
        _fail(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dim() != 1:
        _fail(f"cu_seqlens must be 1-D, got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        _fail(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.numel() < 2:
        _fail(f"cu_seqlens needs at least 2 entries ([0, T]), got {cu_seqlens.numel()}")
    if cu_seqlens.is_meta:
        _fail("cu_seqlens on the meta device cannot be checked: a meta tensor has a shape but no values")


def _check_values(values: list[int], tokens: int) -> None:
    if values[0] != 0:
        _fail(f"cu_seqlens must start at 0, got {values[0]}")
    if values[-1] != tokens:
        _fail(f"cu_seqlens must end at T={tokens} (the number of tokens), got {values[-1]}")
    steps = [b - a for a, b in itertools.pairwise(values)]
    if min(steps) < 0:
        bad = steps.index(min(steps))
        _fail(f"cu_seqlens must be non-decreasing, but {values[bad]} is followed by {values[bad + 1]}")


class _Verdict(NamedTuple):
    caller: weakref.ref  # the caller's tensor the verdict was last given for
    key: tuple | None  # (version, data_ptr, numel) of that tensor then; None: it cannot be tracked
    tokens: int
    values: list[int]
    checked: torch.Tensor  # a private copy of `values`: what the kernels read
    checked_version: int  # the copy's version when made: an in-place edit of it (it is public) bumps it


class CuSeqlensVerdicts:
    """The last `cu_seqlens` that passed, and a private copy of its values for the kernels."""

    def __init__(self, *, reuse_on_cpu: bool = False) -> None:
        # A CPU tensor is read without a device sync, so by default it is read on every call and
        # every edit is seen; reuse_on_cpu lets a machine without a GPU exercise the reuse.
        self._reuse_on_cpu = reuse_on_cpu
        self._last: _Verdict | None = None
        # id(caller's tensor) -> its latest copy, dropped when that tensor dies: a CUDA graph
        # captured with a copy keeps reading live memory after the cache has moved on.
        self._held: dict[int, torch.Tensor] = {}

    def checked(self, cu_seqlens: torch.Tensor, tokens: int) -> torch.Tensor:
        """Validate well-formed `cu_seqlens` against T tokens; return the tensor the kernels must read."""
        last = self._last
        if last is not None and last.checked._version != last.checked_version:
            # Someone wrote into the copy (check_inputs(...).cu_seqlens, or what a kernel got):
            # it no longer holds the values that passed, so neither it nor its verdict is used again.
            last = self._last = None
        key = self._track_key(cu_seqlens)
        if last is not None and tokens == last.tokens:
            # A layer passing on what it got from this cache. Only where reading costs a sync: a
            # CPU copy is read again, so an edit no version counter sees (`.data`, numpy) is caught.
            if cu_seqlens is last.checked and key is not None:
                return cu_seqlens
            if key is not None and key == last.key and last.caller() is cu_seqlens:
                return last.checked
        # The one device-to-host copy: once per step for a step's cu_seqlens, not once per layer.
        values = cu_seqlens.tolist()
        if last is not None and (tokens, values) == (last.tokens, last.values) and _same_kind(cu_seqlens, last.checked):
            if key == last.key and last.caller() is cu_seqlens:  # read again: nothing changed
                return last.checked
            # The same values (in a new tensor, or edited back): reusing the copy keeps the
            # kernels' own identity-keyed caches (FLA's chunk indices) hitting.
            checked = last.checked
        else:
            _check_values(values, tokens)
            # Outside inference mode, so a kernel may save it for backward; a blocking copy, so
            # it is complete before a kernel on any stream reads it.
            with torch.inference_mode(False):
                checked = torch.tensor(values, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
        self._hold(cu_seqlens, checked)
        self._last = _Verdict(weakref.ref(cu_seqlens), key, tokens, values, checked, checked._version)
        return checked

    def checked_offsets(self, cu_seqlens: torch.Tensor, tokens: int) -> tuple[torch.Tensor, list[int]]:
        """`checked(...)` and the values that passed, as read once (callers must not edit the list)."""
        checked = self.checked(cu_seqlens, tokens)
        return checked, self._last.values

    def _hold(self, caller: torch.Tensor, checked: torch.Tensor) -> None:
        ident = id(caller)
        if ident not in self._held:
            weakref.finalize(caller, self._held.pop, ident, None).atexit = False
        self._held[ident] = checked

    def _track_key(self, cu_seqlens: torch.Tensor) -> tuple | None:
        # An inference tensor has no version counter, so its in-place edits cannot be seen.
        if (cu_seqlens.is_cpu and not self._reuse_on_cpu) or cu_seqlens.is_inference():
            return None
        # `.data = other` swaps storage and size without a version bump; data_ptr and numel see that.
        return (cu_seqlens._version, cu_seqlens.data_ptr(), cu_seqlens.numel())

    def clear(self) -> None:
        """Forget the last verdict (the copies still held live as long as their callers' tensors)."""
        self._last = None


def _same_kind(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.device == b.device


verdicts = CuSeqlensVerdicts()


def checked_cu_seqlens(cu_seqlens, tokens: int) -> torch.Tensor:
    """Validate `cu_seqlens` against T tokens; return the tensor holding the checked values for the kernels."""
    _check_form(cu_seqlens)
    return verdicts.checked(cu_seqlens, tokens)


def checked_cu_seqlens_offsets(cu_seqlens, tokens: int) -> tuple[torch.Tensor, list[int]]:
    """Validate `cu_seqlens` against T tokens; return the kernels' tensor and its values on the host."""
    _check_form(cu_seqlens)
    return verdicts.checked_offsets(cu_seqlens, tokens)
