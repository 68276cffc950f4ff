"""What TorchDynamo sees of the guard: exactly what it sees of torch.distributed without it.

Dynamo treats a torch.distributed function one of two ways. Most it traces (or refuses to) as
they are: for those, the wrapper names the original in `_torchdynamo_inline`, which Dynamo reads
while it traces (and nothing else reads), so it traces torch's own function in the wrapper's place.
The others it rewrites into functional collectives, by torch's table
`torch.distributed._functional_collectives.traceable_collective_remaps`, and then it compares the
function it rewrites with the names `torch.distributed` holds (`dist.all_reduce`, `dist.isend`, ...)
to decide how: a `ReduceOp` becomes a string for `all_reduce` and `reduce_scatter_tensor`,
point-to-point calls obey `enable_p2p_compilation`. While the guard is installed those names hold
its wrappers, so for these functions the comparison must see the wrapper where it would have seen
torch's function: the wrapper gets the table entry of the function it wraps, and the function
names the wrapper in `_torchdynamo_inline` (Dynamo reaches torch's function itself from torch's
own code, e.g. `send` calling `isend`, and from names bound before install). uninstall() undoes both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

INLINE = "_torchdynamo_inline"
_REMAPS_MODULE = "torch.distributed._functional_collectives"
_SHOWN: list[tuple[Callable, Callable, dict]] = []  # (wrapper, original, the table) shown to Dynamo as rewritten


def stand_in(wrapper: Callable, original: Callable) -> None:
    """Have Dynamo trace `original` wherever it meets `wrapper`."""
    setattr(wrapper, INLINE, original)


def _remaps() -> dict | None:
    """torch's table of the collectives Dynamo rewrites, or None where this torch has none."""
    try:
        __import__(_REMAPS_MODULE)
    except ImportError:
        return None
    table = getattr(sys.modules[_REMAPS_MODULE], "traceable_collective_remaps", None)
    return table if isinstance(table, dict) else None


def show(pairs: list[tuple[Callable, Callable]]) -> None:
    """For each (wrapper, original) Dynamo rewrites, let it rewrite the wrapper as it rewrites the original."""
    table = _remaps()
    if table is None:
        return
    for wrapper, original in pairs:
        replacement = table.get(original) if callable(original) else None
        if replacement is None or wrapper in table:
            continue
        table[wrapper] = replacement
        vars(wrapper).pop(INLINE, None)  # Dynamo would otherwise trace `original` and compare it
        setattr(original, INLINE, wrapper)
        _SHOWN.append((wrapper, original, table))


def hide() -> None:
    """Undo show(): the table and torch's functions as they were, the wrappers standing in for their originals."""
    while _SHOWN:
        wrapper, original, table = _SHOWN.pop()
        table.pop(wrapper, None)
        if vars(original).get(INLINE) is wrapper:
            delattr(original, INLINE)
        stand_in(wrapper, original)
