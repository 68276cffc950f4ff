"""slime's memory check before collectives, under the comm guard's policy.

slime (`slime/utils/reloadable_process_group.py`) runs every wrapped torch.distributed call, and
every ReloadableProcessGroup method, inside the module-global `_wrap_low_level_call(check_memory)`;
with `check_memory` it calls `available_memory()` (mem_get_info, memory_allocated, memory_reserved,
psutil) and clears the cache below 3 GiB free. Here that context manager is slime's own with the
check taken out of it, and the policy decides:

- `first-use` (default): the comm guard's wrappers, installed over slime's, probe the first call
  of each op on each group (they see the group and op, which slime's context manager is not
  given); slime's call sites probe nothing, except a ReloadableProcessGroup method called
  directly, probed on its first call per inner group. `dist._coalescing_manager`, which slime
  probes unnamed, launches nothing itself: every collective issued inside it goes through a
  guarded function.
- `whitelist`: slime's call sites probe exactly where slime does (slime's own `check_memory`).
- `always`: slime's call sites probe on every call, skip list or not.
- `off`: nothing is probed.

A probe reads free bytes only (the comm guard's probe: `torch.cuda.mem_get_info`), never
memory_stats()/memory_reserved(); below the threshold slime's own `clear_memory()` runs.
"""

from __future__ import annotations

import functools
import inspect
import types
import warnings
from collections.abc import Callable

from slime_flashqla import comm_guard
from slime_flashqla.comm_guard.policy import ALWAYS, FIRST_USE, WHITELIST
from slime_flashqla.integrations.slime.patches import PatchSet

RPG_MODULE = "slime.utils.reloadable_process_group"
# On the patched `_wrap_low_level_call`: a one-item list, the check every patched call site runs.
CURRENT_CHECK_ATTR = "__slime_flashqla_check__"
# slime's own name for the check's probe; wrappers of its module-level collectives carry it.
_SLIME_COMM_WRAPPER = "get_new_comm_function.<locals>.new_function"


class CallSiteCheck:
    """The probe slime's call sites run under `always` / `whitelist`, with its counters."""

    def __init__(self, policy: str, threshold_gb: float, probe: Callable[[], int | None]) -> None:
        self.policy, self.probe = policy, probe
        self.threshold_bytes = int(threshold_gb * comm_guard.GIB)
        self.checked = self.cleared = 0
        self._warned = False
        self._seen: set = set()  # (method, inner group) of ReloadableProcessGroup calls probed under first-use

    def first_call(self, method: str, inner) -> bool:
        """Whether this ReloadableProcessGroup method is called on this inner group for the first time."""
        key = (method, inner)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def rearm(self) -> None:
        """Probe every ReloadableProcessGroup method's first call again (slime rebuilt its groups)."""
        self._seen.clear()

    def wanted(self, check_memory: bool) -> bool:
        """Whether this call site probes, given slime's own decision for it."""
        return self.policy == ALWAYS or (self.policy == WHITELIST and check_memory)

    def run(self, module) -> None:
        """Probe, and clear with slime's clear_memory() below the threshold; never raise (the check is advisory)."""
        self.checked += 1
        try:
            free = self.probe()
            if free is not None and free < self.threshold_bytes:
                module.clear_memory()
                self.cleared += 1
        except Exception as exc:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"slime_flashqla slime integration: memory probe failed ({type(exc).__name__}: {exc}); "
                    "collectives continue unchecked where it fails",
                    RuntimeWarning,
                    stacklevel=4,
                )


def patch_call_sites(patches: PatchSet, module, check: CallSiteCheck) -> None:
    """Replace slime's `_wrap_low_level_call` by its own context manager, the check decided by the policy."""
    if "_wrap_low_level_call" in vars(module).get("__slime_flashqla_replaced__", {}):
        # Patched already, by an install this process inherited (a forked child's): the new check goes in.
        getattr(module._wrap_low_level_call, CURRENT_CHECK_ATTR)[0] = check
        return
    current = [check]  # every call site below reads the check from here, so a reinstall reaches them
    original = module._wrap_low_level_call

    @functools.wraps(original)
    def _wrap_low_level_call(check_memory=True):
        if current[0].wanted(check_memory):
            current[0].run(module)
        return original(check_memory=False)  # slime's own, for its note on a failing collective

    setattr(_wrap_low_level_call, CURRENT_CHECK_ATTR, current)
    patches.set(module, "_wrap_low_level_call", _wrap_low_level_call)
    group_class = module.ReloadableProcessGroup
    reload_groups = group_class.reload_process_groups

    def reload_process_groups():
        reload_groups()
        # slime rebuilds its groups with the new_group it saved before any guard: probe their first use again
        comm_guard.rearm()
        current[0].rearm()

    reload_process_groups = functools.wraps(reload_groups)(reload_process_groups)
    patches.set(group_class, "reload_process_groups", staticmethod(reload_process_groups))
    forward = group_class._fwd

    @functools.wraps(forward)
    def _fwd(self, method, *args, **kwargs):
        # A direct call of a group method: no torch.distributed function, so no guard wrapper, saw it.
        if current[0].policy == FIRST_USE and current[0].first_call(method, self.group):
            current[0].run(module)
        return forward(self, method, *args, **kwargs)

    patches.set(group_class, "_fwd", _fwd)


def _slime_wrappers(module) -> dict[str, Callable]:
    """torch.distributed names that hold slime's collective wrappers now (empty before monkey_patch_torch_dist)."""
    import torch.distributed as dist

    found = {}
    for name, value in vars(dist).items():
        if (
            type(value) is types.FunctionType
            and value.__code__.co_filename == module.__file__
            and value.__qualname__.endswith(_SLIME_COMM_WRAPPER)
        ):
            found[name] = value
    return found


def show_torch_signatures(patches: PatchSet, module) -> None:
    """Give slime's `(*args, **kwargs)` wrappers torch's signatures, so the guard finds their `group` argument."""
    import torch.distributed.distributed_c10d as c10d

    for name, wrapper in _slime_wrappers(module).items():
        torch_own = getattr(c10d, name, None)
        if callable(torch_own) and "__wrapped__" not in vars(wrapper):
            patches.set(wrapper, "__wrapped__", torch_own)


def _p2p_op_to_torch_own(func: Callable, own: dict) -> Callable:
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if len(args) > 1 and args[1] in own:
            args = (args[0], own[args[1]], *args[2:])
        elif kwargs.get("op") in own:
            kwargs["op"] = own[kwargs["op"]]
        return func(*args, **kwargs)

    return wrapper


def hand_torch_own_p2p_ops(patches: PatchSet) -> None:
    """P2POp gets torch's own isend/irecv for the guard's or slime's wrappers of them.

    torch refuses any other `op` ("Invalid op"); the guard maps its wrapper to the function it
    wrapped, which over slime's patch is slime's wrapper, and slime maps only the current
    `dist.isend` (the guard's). So P2POp is wrapped once more, outside both.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    own = {}
    for name in ("isend", "irecv"):
        fn = getattr(dist, name)
        while fn is not None and fn is not getattr(c10d, name):
            own[fn] = getattr(c10d, name)
            fn = vars(fn).get("__wrapped__") if hasattr(fn, "__dict__") else None
    for name in ("__new__", "__init__"):
        raw = dist.P2POp.__dict__.get(name)
        if raw is None:
            continue
        func = raw.__func__ if isinstance(raw, staticmethod) else raw
        wrapped = _p2p_op_to_torch_own(func, own)
        patches.set(dist.P2POp, name, staticmethod(wrapped) if name == "__new__" else wrapped)


def install_guard(signatures: PatchSet, p2p_ops: PatchSet, threshold_gb: float, probe) -> None:
    """The comm guard's `first-use` over torch.distributed, and over slime's wrappers where they are in place.

    Undo in reverse: `p2p_ops`, then `comm_guard.uninstall()`, then `signatures`.
    """
    import sys

    module = sys.modules.get(RPG_MODULE)
    over_slime = module is not None and bool(_slime_wrappers(module))
    if over_slime:
        show_torch_signatures(signatures, module)
    comm_guard.install(FIRST_USE, threshold_gb=threshold_gb, probe=probe)
    if over_slime:
        hand_torch_own_p2p_ops(p2p_ops)


def guard_sees_group(name: str) -> bool:
    """Whether the guard can read `group` from torch.distributed.<name>'s signature (for the doctor and tests)."""
    import torch.distributed as dist

    try:
        return "group" in inspect.signature(getattr(dist, name)).parameters
    except (TypeError, ValueError, AttributeError):
        return False
