"""`auto`: which kernel backend runs a kind of input, and why, from the backends' own facts.

`auto` tries the backends that have an `auto_priority`, lowest first, and runs the first whose
checks pass; where none does, it runs the reference, and the reason names every backend it
passed over and why. Unlike FLA's dispatch it never falls back silently: the choice comes
with its reason, which the callable logs once and doctor shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slime_flashqla.gdn.backends import KERNEL_BACKENDS, REFERENCE, GDNBackend

if TYPE_CHECKING:
    import torch

    from slime_flashqla.gdn.inputs import GDNShape


@dataclass(frozen=True)
class BackendChoice:
    """The backend that runs a kind of input, and why."""

    backend: str
    reason: str


def candidates() -> list[GDNBackend]:
    """The backends `auto` tries, in the order it tries them."""
    return sorted((b for b in KERNEL_BACKENDS.values() if b.auto_priority is not None), key=lambda b: b.auto_priority)


def in_auto_order() -> list[GDNBackend]:
    """Every kernel backend: those `auto` tries, in its order, then the others, the reference last."""
    tried = candidates()
    others = [b for b in KERNEL_BACKENDS.values() if b not in tried and b.name != REFERENCE]
    return [*tried, *others, KERNEL_BACKENDS[REFERENCE]]


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def choose_backend(shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool) -> BackendChoice:
    """The backend `auto` runs for these inputs, with the reason (runs no kernel)."""
    tried = candidates()
    elsewhere = [b for b in tried if not b.runs_on(device.type)]
    passed_over = []
    if elsewhere:
        labels = [b.label for b in KERNEL_BACKENDS.values() if b in elsewhere]  # the registry's order
        devices = sorted({t.upper() for b in elsewhere for t in b.device_types})
        passed_over.append(f"inputs are on {device.type}; {_and(labels)} run on {'/'.join(devices)} only")
    for backend in tried:
        if backend in elsewhere:
            continue
        ok, why = backend.supports(shape, dtype, device, backward)
        if ok:
            return BackendChoice(backend.name, "; ".join([*passed_over, why]))
        passed_over.append(f"{backend.label} not used: {why}")
    return BackendChoice(REFERENCE, "; ".join(passed_over))


def explain_auto(
    device=None,
    *,
    dtype=None,
    key_heads: int = 16,
    value_heads: int = 32,
    key_dim: int = 128,
    value_dim: int = 128,
    tokens: int = 32768,
    varlen: bool = True,
    backward: bool = True,
) -> BackendChoice:
    """What `auto` would run for inputs of this description (default: bfloat16), without a kernel launch."""
    import torch

    from slime_flashqla.gdn.inputs import GDNShape

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    shape = GDNShape(1, tokens, key_heads, value_heads, key_dim, value_dim, 1, varlen)
    return choose_backend(shape, torch.bfloat16 if dtype is None else dtype, device, backward)
