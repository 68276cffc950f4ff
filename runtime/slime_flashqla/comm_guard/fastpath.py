"""The steady `first-use` path of a collective, compiled with the original's exact signature.

A `(*args, **kwargs)` wrapper packs a tuple and a dict on every call and forwards them with
an unspecialised call; around a 4 KiB NCCL all_reduce that frame is most of what the guard
costs (docs/en/comm_guard.md, "What the wrapper costs"). A wrapper whose parameters are the
original's own reads the group (and, for point-to-point ops, the peer) by name and
forwards plain arguments: on one all_reduce, 1,657 machine instructions above the unwrapped
call against 2,791 for the generic wrapper (callgrind). Anything else than the steady state
goes to the generic wrapper, which keeps the full policy logic.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable

from slime_flashqla.comm_guard.policy import BY_NAME, FIRST_USE

_P = inspect.Parameter
# Names the generated code uses itself; a parameter with one of them keeps the generic wrapper.
_RESERVED = {"call", "slow", "seen", "code_cell", "annotate", "op_name", "skipped", "exc", "read", "reset"}
_FIRST_USE = BY_NAME[FIRST_USE].code

_TEMPLATE = """
def factory(call, slow, seen, code_cell, annotate, op_name, {defaults}):
    skipped = 0

    def {name}({params}):
        nonlocal skipped
        if code_cell[0] == {first_use} and {key} in seen:
            skipped += 1
            try:
                return call({args})
            except Exception as exc:
                annotate(exc, op_name)
                raise
        return slow({args})

    def read():
        return skipped

    def reset():
        nonlocal skipped
        skipped = 0

    return {name}, read, reset
"""


def _source(name: str, params: list[inspect.Parameter], key: str) -> tuple[str, list[object]] | None:
    """The factory's source and the default values it binds, or None for a signature it cannot copy."""
    defaults: list[object] = []
    declared, forwarded = [], []
    slash_after = None
    star_written = False
    for p in params:
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name in _RESERVED:
            return None
        text = p.name
        if p.default is not _P.empty:
            text += f"=_d{len(defaults)}"
            defaults.append(p.default)
        if p.kind is _P.POSITIONAL_ONLY:
            slash_after = len(declared)
            declared.append(text)
            forwarded.append(p.name)
        elif p.kind is _P.POSITIONAL_OR_KEYWORD:
            declared.append(text)
            forwarded.append(p.name)
        elif p.kind is _P.VAR_POSITIONAL:
            declared.append("*" + p.name)
            forwarded.append("*" + p.name)
            star_written = True
        elif p.kind is _P.KEYWORD_ONLY:
            if not star_written:
                declared.append("*")
                star_written = True
            declared.append(text)
            forwarded.append(f"{p.name}={p.name}")
        else:  # VAR_KEYWORD
            declared.append("**" + p.name)
            forwarded.append("**" + p.name)
    if slash_after is not None:
        declared.insert(slash_after + 1, "/")
    source = _TEMPLATE.format(
        name=name,
        params=", ".join(declared),
        args=", ".join(forwarded),
        key=key,
        first_use=_FIRST_USE,
        defaults=", ".join(f"_d{i}" for i in range(len(defaults))) or "_unused=None",
    )
    return source, defaults


def exact_signature_wrapper(
    original: Callable,
    slow: Callable,
    call: Callable,
    seen: set,
    code_cell: list,
    annotate: Callable,
    op_name: str,
    peer: str | None = None,
) -> tuple[Callable, Callable[[], int], Callable[[], None]] | None:
    """(wrapper, read skips, reset skips) with `original`'s parameters, or None where they cannot be copied.

    The steady-state key is the `group` argument, or `(group, <peer>)` for point-to-point ops:
    what the generic wrapper computes from the same arguments passed by position.
    """
    try:
        params = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError):
        return None
    named = {p.name: p for p in params if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)}
    if "group" not in named or (peer is not None and peer not in named):
        return None
    name = getattr(original, "__name__", "")
    if not name.isidentifier() or keyword.iskeyword(name) or name in _RESERVED:
        name = "guarded"
    built = _source(name, params, f"(group, {peer})" if peer else "group")
    if built is None:
        return None
    source, defaults = built
    namespace: dict[str, object] = {}
    exec(compile(source, f"<slime_flashqla.comm_guard {op_name}>", "exec"), namespace)
    return namespace["factory"](call, slow, seen, code_cell, annotate, op_name, *defaults)
