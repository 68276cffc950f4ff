"""Installing and removing the wrappers, the per-call policy decision, and the counters."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Callable

from slime_flashqla.comm_guard import dynamo, fastpath, memory, ops
from slime_flashqla.comm_guard.policy import BY_CODE, BY_NAME, FIRST_USE, Policy
from slime_flashqla.comm_guard.settings import DEFAULT_THRESHOLD_GB, Settings

_FIRST_USE_CODE = BY_NAME[FIRST_USE].code


class _State:
    """Process-wide configuration: the policy in force and the memory check (install sets its threshold and probe)."""

    __slots__ = ("check", "policy", "settings")

    def __init__(self) -> None:
        self.policy: Policy | None = None
        self.check = memory.MemoryCheck()
        self.settings: Settings | None = None  # what the install in force was given


_STATE = _State()
# The policy's code, or None when not installed (wrappers then pass straight through). A
# list item, not an attribute of _STATE: the wrappers read it on every call, and that is cheaper.
_CODE: list[int | None] = [None]
_LOCK = threading.Lock()
_COUNTS: dict[str, list[int]] = {}  # op name -> [checked, cleared]; skips are counted in _SKIPPED
# Per wrapper: (op name, read, reset) of the skip count it keeps in its own closure; a
# closure variable is the cheapest counter on the steady-state path (docs/en/comm_guard.md).
_SKIPPED: list[tuple[str, Callable[[], int], Callable[[], None]]] = []
# op name -> `first-use` keys probed since the last re-arm: the group object itself (a set
# lookup needs no id() call), with the peer for point-to-point ops. Holding the group until
# the next re-arm also means its id() cannot be reused by a new group meanwhile.
_SEEN: dict[str, set] = {}
_PATCHES: list[tuple[object, str, object, object]] = []  # (owner, name, original, wrapper)
_METHOD_PATCHES: list[tuple[object, str, object, object]] = []  # the same, for ProcessGroup methods
_WRAPPERS: dict[tuple[int, str], tuple[Callable, Callable]] = {}  # (id(owner), name) -> (original, wrapper)
_ORIGINAL_ATTR = "__slime_flashqla_original__"
_MODULE = "torch.distributed"  # where the module-level wrappers are installed, and found by pickle


def _counts(op_name: str) -> list[int]:
    """Return the mutable counter list of one op, creating it at zero."""
    return _COUNTS.setdefault(op_name, [0, 0])


def first_time(name: str, key: object) -> bool:
    """Whether `key` is new under `name` since the last re-arm (and remember it): `first-use` outside the wrappers."""
    seen = _SEEN.setdefault(name, set())
    if key in seen:
        return False
    seen.add(key)
    return True


def _annotate(exc: BaseException, op_name: str) -> None:
    """Attach the memory-state note to an exception; never raise from here."""
    try:
        policy = _STATE.policy
        note = memory.memory_note(op_name, policy and policy.name, _STATE.check.threshold_bytes)
    except Exception as err:
        note = f"slime_flashqla.comm_guard: torch.distributed {op_name} raised; memory unknown ({err!r})"
    exc.add_note(note)


def _param_index(func: Callable, names: tuple[str, ...]) -> tuple[int, str] | None:
    """Return (position, name) of the first parameter of func named in names, or None."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    for name in names:
        for i, p in enumerate(params):
            if p.name == name:
                return (i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else 1 << 30), name
    return None


def _module_key(func: Callable, op_name: str) -> tuple[int, str] | Callable[[tuple, dict], object]:
    """How `first-use` keys an op's calls: (group position, group name) or a key function."""
    if op_name == "batch_isend_irecv":

        def batch_key(args: tuple, kwargs: dict) -> object:
            p2p_ops = args[0] if args else kwargs.get("p2p_op_list", ())
            return tuple((op.group, op.peer) for op in p2p_ops)

        return batch_key
    gi, gname = _param_index(func, ("group",)) or (1 << 30, "group")
    peer = _param_index(func, ops.PEER_PARAMS) if op_name in ops.P2P_OPS else None
    if peer is None:
        return gi, gname
    pi, pname = peer

    def p2p_key(args: tuple, kwargs: dict) -> object:
        group = args[gi] if len(args) > gi else kwargs.get(gname)
        # torch accepts the peer under its global or group-rank name: key on whichever was given
        peer_val = args[pi] if len(args) > pi else kwargs.get(pname, kwargs.get("group_" + pname))
        return (group, peer_val)

    return p2p_key


def _method_key(op_name: str) -> tuple[int, str] | Callable[[tuple, dict], object]:
    """How `first-use` keys calls of a ProcessGroup method: by self, and the peer for send/recv."""
    if op_name in ("send", "recv"):  # (self, tensors, peer, tag)
        return lambda args, kwargs: (args[0], args[2] if len(args) > 2 else None)
    return 0, "self"


def _guarded(original: Callable, op_name: str, key, call: Callable, is_method: bool) -> Callable:
    """Wrap one torch.distributed callable so each call runs the policy's check first."""
    counts = _counts(op_name)
    check = _STATE.check
    skippable = op_name in ops.SKIP_OPS
    # What each policy decides for this op, by code: (on a key's first use, on any other call).
    decisions = tuple((p.checks(skippable, True), p.checks(skippable, False)) for p in BY_CODE)
    code_cell, first_use_code = _CODE, _FIRST_USE_CODE
    seen = _SEEN.setdefault(op_name, set())  # keys of this op probed since the last re-arm
    # The steady state of `first-use` with a key that is just the group argument is inlined
    # below with as few bytecodes as possible: around a real collective each one costs tens
    # of machine instructions (docs/en/comm_guard.md, "What the wrapper costs").
    key_fn, gi, gname = (key, -1, "") if callable(key) else (None, *key)
    getframe, c10d_globals = sys._getframe, sys.modules["torch.distributed.distributed_c10d"].__dict__
    skipped = 0

    def decide(code: int, args: tuple, kwargs: dict) -> None:
        nonlocal skipped
        probes, later = decisions[code]
        if probes != later:  # the policy asks whether this call's key is new since the last re-arm
            k = key_fn(args, kwargs) if key_fn is not None else (args[gi] if len(args) > gi else kwargs.get(gname))
            if k in seen:
                probes = later
            else:
                seen.add(k)
        if probes:
            check.run(counts)
        else:
            skipped += 1

    def annotated(args: tuple, kwargs: dict):
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            _annotate(exc, op_name)
            raise

    if is_method:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            code = code_cell[0]
            # A ProcessGroup method called from distributed_c10d's own code runs inside a
            # torch.distributed function whose module-level wrapper already decided.
            if code is None or getframe(1).f_globals is c10d_globals:
                return call(*args, **kwargs)
            decide(code, args, kwargs)
            return annotated(args, kwargs)

    elif key_fn is None:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            nonlocal skipped
            if code_cell[0] == first_use_code and (args[gi] if len(args) > gi else kwargs.get(gname)) in seen:
                skipped += 1  # first-use, steady state: the default policy's common case
            elif code_cell[0] is None:
                return call(*args, **kwargs)
            else:
                decide(code_cell[0], args, kwargs)
            try:
                return call(*args, **kwargs)
            except Exception as exc:
                _annotate(exc, op_name)
                raise

    else:

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            code = code_cell[0]
            if code is None:
                return call(*args, **kwargs)
            decide(code, args, kwargs)
            return annotated(args, kwargs)

    def read() -> int:
        return skipped

    def reset() -> None:
        nonlocal skipped
        skipped = 0

    if not is_method and op_name != "batch_isend_irecv":
        # The steady state again, with the original's own parameters instead of *args/**kwargs;
        # every other case falls through to the wrapper above.
        peer = (_param_index(original, ops.PEER_PARAMS) or (0, None))[1] if op_name in ops.P2P_OPS else None
        fast = None
        if op_name not in ops.P2P_OPS or peer is not None:
            fast = fastpath.exact_signature_wrapper(original, wrapper, call, seen, code_cell, _annotate, op_name, peer)
        if fast is not None:
            wrapper, fast_read, fast_reset = functools.wraps(original)(fast[0]), fast[1], fast[2]
            slow_read, slow_reset = read, reset

            def read() -> int:
                return fast_read() + slow_read()

            def reset() -> None:
                fast_reset()
                slow_reset()

    _SKIPPED.append((op_name, read, reset))
    _stands_for(wrapper, original, None if is_method else _MODULE)
    return wrapper


def _stands_for(wrapper: Callable, original: Callable, module: str | None) -> None:
    """Mark `wrapper` as standing in for `original`: for uninstall, for TorchDynamo and for pickle."""
    setattr(wrapper, _ORIGINAL_ATTR, original)
    # TorchDynamo sees torch's own function, never the guard's code (comm_guard/dynamo.py): a compiled
    # graph holds what it holds unguarded, and eager calls keep the guard.
    dynamo.stand_in(wrapper, original)
    if module is not None:
        # pickle saves a function as module + name and checks that the name leads back to it:
        # torch.distributed.<name> is this wrapper while installed (the original's module holds the original).
        wrapper.__module__ = module


def _lifecycle(original: Callable) -> Callable:
    """Wrap a group-creating or -destroying call so `first-use` probes every op again afterwards."""

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:
            _rearm()

    _stands_for(wrapper, original, _MODULE)
    return wrapper


def _p2pop_unwrapping(original: Callable) -> Callable:
    """Wrap P2POp.__new__/__init__ so a guarded isend/irecv is stored as torch's own function."""
    # torch checks `op in [isend, irecv]` and `op.op is isend` against its own functions;
    # batch_isend_irecv is guarded as a whole, so its ops must not be guarded twice.

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if len(args) > 1:
            args = (args[0], getattr(args[1], _ORIGINAL_ATTR, args[1]), *args[2:])
        elif "op" in kwargs:
            kwargs["op"] = getattr(kwargs["op"], _ORIGINAL_ATTR, kwargs["op"])
        return original(*args, **kwargs)

    setattr(wrapper, _ORIGINAL_ATTR, original)
    dynamo.stand_in(wrapper, original)  # Dynamo builds a P2POp with torch's own __init__, as unguarded
    return wrapper


def _cached_guard(owner: object, name: str, func: Callable, build: Callable[[], Callable]) -> Callable:
    """The guard wrapper of `func`, built once per process and reused by every later install.

    Reuse keeps one skip counter per wrapped function, so a wrapper someone captured during
    an earlier install still counts where `stats()` looks.
    """
    key = (id(owner), name)
    cached = _WRAPPERS.get(key)
    if cached is None or cached[0] is not func:
        cached = _WRAPPERS[key] = (func, build())
    return cached[1]


def _patch(patches: list, owner: object, name: str, wrapper: Callable, original: object) -> None:
    setattr(owner, name, wrapper)
    patches.append((owner, name, original, wrapper))


def _patch_methods() -> None:
    """Replace ProcessGroup's communication methods with guarded ones."""
    import torch.distributed as dist

    pg = dist.ProcessGroup
    for name in ops.PG_METHODS:
        raw = pg.__dict__.get(name)  # the class-dict object, restored as is by uninstall
        if raw is None:
            continue
        func = getattr(pg, name)
        build = functools.partial(_guarded, func, name, _method_key(name), func, True)
        _patch(_METHOD_PATCHES, pg, name, _cached_guard(pg, name, func, build), raw)


def _patch_all() -> None:
    """Replace torch.distributed's functions (and P2POp's constructor) with guarded ones."""
    import torch.distributed as dist

    def patch(owner: object, name: str, wrapper: Callable, original: object) -> None:
        _patch(_PATCHES, owner, name, wrapper, original)

    for name in ops.MODULE_OPS:
        func = getattr(dist, name, None)
        if callable(func):
            build = functools.partial(_guarded, func, name, _module_key(func, name), func, False)
            patch(dist, name, _cached_guard(dist, name, func, build), func)
    for name in ops.LIFECYCLE_OPS:
        func = getattr(dist, name, None)
        if callable(func):
            patch(dist, name, _lifecycle(func), func)
    for name in ("__new__", "__init__"):
        raw = dist.P2POp.__dict__.get(name)
        if raw is None:  # a torch without this override has nothing to unwrap there
            continue
        func = getattr(dist.P2POp, name)
        wrapped = _p2pop_unwrapping(func)
        patch(dist.P2POp, name, staticmethod(wrapped) if name == "__new__" else wrapped, raw)


def _unpatch(patches: list) -> list[str]:
    """Restore the original objects of `patches`; return names someone else had re-patched meanwhile."""
    foreign = []
    while patches:
        owner, name, original, wrapper = patches.pop()
        current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if isinstance(current, staticmethod):
            current = current.__func__
        if isinstance(wrapper, staticmethod):
            wrapper = wrapper.__func__
        if current is wrapper:
            setattr(owner, name, original)
        else:
            foreign.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return foreign


def _unpatch_all() -> list[str]:
    """Restore every original object; return names someone else had re-patched meanwhile."""
    dynamo.hide()
    return _unpatch(_METHOD_PATCHES) + _unpatch(_PATCHES)


def install(
    policy: str | None = None,
    threshold_gb: float = DEFAULT_THRESHOLD_GB,
    probe: Callable | None = None,
    *,
    methods: bool = False,
) -> str:
    """Wrap torch.distributed's collectives with the memory guard and return the active policy."""
    return install_settings(Settings.checked(policy, threshold_gb, probe), methods=methods)


def install_settings(settings: Settings, *, methods: bool = False) -> str:
    """`install()` with arguments already checked by `Settings.checked` (the slime integration's path)."""
    if not isinstance(methods, bool):  # before anything is patched: nothing below may fail
        raise TypeError(f"comm guard: methods must be True or False, got {methods!r}")
    import torch.distributed

    if not torch.distributed.is_available():
        raise RuntimeError("comm guard: this torch build has no torch.distributed; there is nothing to guard")
    with _LOCK:
        if not _PATCHES:
            _patch_all()
            dynamo.show([(wrapper, original) for _, _, original, wrapper in _PATCHES])
        if methods and not _METHOD_PATCHES:
            _patch_methods()
        elif not methods and _METHOD_PATCHES:
            _warn_foreign(_unpatch(_METHOD_PATCHES))
        _STATE.policy, _STATE.settings = settings.policy, settings
        _STATE.check.probe = settings.probe
        _STATE.check.threshold_bytes = settings.threshold_bytes
        _rearm()
        _CODE[0] = settings.policy.code
    return settings.policy.name


def uninstall() -> None:
    """Put torch.distributed's original functions back; a no-op when not installed."""
    with _LOCK:
        _CODE[0] = None  # wrappers someone still holds now pass straight through
        _STATE.policy = _STATE.settings = None
        foreign = _unpatch_all()
        _rearm()
    _warn_foreign(foreign)


def _warn_foreign(foreign: list[str]) -> None:
    if foreign:
        warnings.warn(
            "slime_flashqla.comm_guard: left in place because something re-patched them after install "
            f"(their guard is now inactive): {', '.join(foreign)}",
            RuntimeWarning,
            stacklevel=3,
        )


def is_installed() -> bool:
    """True while the guard's wrappers are in place."""
    return bool(_PATCHES)


def methods_guarded() -> bool:
    """True while ProcessGroup's methods are wrapped too (`install(methods=True)`)."""
    return bool(_METHOD_PATCHES)


def active_policy() -> str | None:
    """The policy in force, or None when not installed."""
    policy = _STATE.policy
    return policy and policy.name


def installed_settings() -> Settings | None:
    """The settings the install in force was given (the very object), or None when not installed."""
    return _STATE.settings


def rearm() -> None:
    """Make `first-use` probe every op again on its next call (after offload or a manual group rebuild)."""
    _rearm()


def _rearm() -> None:
    """Forget every `first-use` key (the per-op sets stay: the wrappers hold them)."""
    for keys in _SEEN.values():
        keys.clear()


def stats() -> dict[str, dict[str, int]]:
    """Return op name -> {"checked", "skipped", "cleared"} for every op called since the last reset."""
    skipped: dict[str, int] = {}
    for name, read, _ in _SKIPPED:
        skipped[name] = skipped.get(name, 0) + read()
    out = {}
    for name, c in sorted(_COUNTS.items()):
        n_skipped = skipped.get(name, 0)
        if c[0] or n_skipped:
            out[name] = {"checked": c[0], "skipped": n_skipped, "cleared": c[1]}
    return out


def reset_stats() -> None:
    """Zero every counter (the wrappers keep their counter objects)."""
    for c in _COUNTS.values():
        c[:] = [0, 0]
    for _, _, reset in _SKIPPED:
        reset()


def _after_fork_in_child() -> None:
    """Start a forked child clean: originals back, counters at zero."""
    _CODE[0] = None
    _STATE.policy = _STATE.settings = None
    _unpatch_all()
    _rearm()
    reset_stats()
    _STATE.check.warned = False


os.register_at_fork(after_in_child=_after_fork_in_child)
