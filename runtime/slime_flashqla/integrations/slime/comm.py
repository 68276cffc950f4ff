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

The policy's decision, the first-use keys and the memory check (probe, counters, one warning if
the probe fails) are the comm guard's (`comm_guard.policy`, `comm_guard.guard.first_time`,
`comm_guard.memory.MemoryCheck`); what is slime's here is where they run, and `clear_memory()`.
A probe reads free bytes only (the comm guard's probe: `torch.cuda.mem_get_info`), never
memory_stats()/memory_reserved(); below the threshold slime's own `clear_memory()` runs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import types
from collections.abc import Callable

from slime_flashqla import comm_guard
from slime_flashqla.comm_guard.guard import first_time, install_settings
from slime_flashqla.comm_guard.memory import MemoryCheck
from slime_flashqla.comm_guard.settings import Settings
from slime_flashqla.integrations.slime.patches import PatchSet
from slime_flashqla.integrations.slime.source import TESTED_SLIME

RPG_MODULE = "slime.utils.reloadable_process_group"
logger = logging.getLogger("slime_flashqla.integrations.slime")
# slime's own name for the check's probe; wrappers of its module-level collectives carry it.
_SLIME_COMM_WRAPPER = "get_new_comm_function.<locals>.new_function"
# The first-use keys of direct ReloadableProcessGroup calls: (method, inner group), re-armed with the guard's.
GROUP_METHOD_KEYS = "ReloadableProcessGroup method"


def _slime_clear_memory() -> None:
    """slime's own clear_memory(), as its module holds it now."""
    sys.modules[RPG_MODULE].clear_memory()


class CallSiteCheck:
    """What slime's call sites run: the comm guard's policy and memory check, clearing with slime's clear_memory()."""

    def __init__(self, settings: Settings) -> None:
        self.policy = settings.policy
        self.memory = MemoryCheck(
            settings.threshold_bytes, settings.probe, _slime_clear_memory, "slime_flashqla slime integration"
        )
        self.counts = [0, 0]  # checked, cleared


def patch_call_sites(patches: PatchSet, module, check: CallSiteCheck) -> None:
    """Replace slime's `_wrap_low_level_call` by its own context manager, the check decided by the policy.

    What this slime lacks stays as slime has it, named in one warning (slime's own memory check runs there).
    """
    missing = []
    if callable(getattr(module, "_wrap_low_level_call", None)):
        _patch_context_manager(patches, module, check)
    else:
        missing.append("_wrap_low_level_call")
    group_class = getattr(module, "ReloadableProcessGroup", None)
    if not isinstance(group_class, type):
        missing.append("ReloadableProcessGroup")
    else:
        for name, patch in (("reload_process_groups", _patch_reload), ("_fwd", _patch_forward)):
            if callable(getattr(group_class, name, None)):
                patch(patches, group_class, check)
            else:
                missing.append(f"ReloadableProcessGroup.{name}")
    if missing:
        logger.warning(
            "slime-flashqla: this slime's %s has no %s: left as slime has them (no memory check by the integration "
            "there); the integration was tested with slime %s",
            module.__name__,
            ", ".join(missing),
            TESTED_SLIME,
        )


def _patch_context_manager(patches: PatchSet, module, site: CallSiteCheck) -> None:
    original = module._wrap_low_level_call

    @functools.wraps(original)
    def _wrap_low_level_call(check_memory=True):
        # slime's check_memory=False is its skip list; a first use is for the guard's wrappers to see, not this site.
        if site.policy.checks(skippable=not check_memory, first_time=False):
            site.memory.run(site.counts)
        return original(check_memory=False)  # slime's own, for its note on a failing collective

    patches.set(module, "_wrap_low_level_call", _wrap_low_level_call)


def _patch_reload(patches: PatchSet, group_class: type, site: CallSiteCheck) -> None:
    reload_groups = group_class.reload_process_groups

    def reload_process_groups():
        reload_groups()
        # slime rebuilds its groups with the new_group it saved before any guard: probe their first use again
        comm_guard.rearm()

    reload_process_groups = functools.wraps(reload_groups)(reload_process_groups)
    patches.set(group_class, "reload_process_groups", staticmethod(reload_process_groups))


def _patch_forward(patches: PatchSet, group_class: type, site: CallSiteCheck) -> None:
    forward = group_class._fwd

    @functools.wraps(forward)
    def _fwd(self, method, *args, **kwargs):
        # A direct call of a group method: no torch.distributed function, so no guard wrapper, saw it.
        if site.policy.first_use and first_time(GROUP_METHOD_KEYS, (method, self.group)):
            site.memory.run(site.counts)
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


def install_guard(signatures: PatchSet, p2p_ops: PatchSet, settings: Settings | None) -> None:
    """The comm guard's `first-use` with `settings` (None: a guard installed before, kept), over slime's wrappers too.

    Undo in reverse: `p2p_ops`, then `comm_guard.uninstall()` (if `settings`), then `signatures`.
    """
    module = sys.modules.get(RPG_MODULE)
    over_slime = module is not None and bool(_slime_wrappers(module))
    if settings is not None:
        if over_slime:
            show_torch_signatures(signatures, module)
        try:
            install_settings(settings)
        except BaseException:
            signatures.undo()  # a refused guard leaves slime's wrappers as they were
            raise
    if over_slime:
        hand_torch_own_p2p_ops(p2p_ops)


def guard_sees_group(name: str) -> bool:
    """Whether the guard can read `group` from torch.distributed.<name>'s signature (for the doctor and tests)."""
    import torch.distributed as dist

    try:
        return "group" in inspect.signature(getattr(dist, name)).parameters
    except (TypeError, ValueError, AttributeError):
        return False
