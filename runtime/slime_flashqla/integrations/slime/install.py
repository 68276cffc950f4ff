"""Installing the slime integration in a process: once, under a lock, undoable, switched off by one variable.

What `install()` does, and what it leaves alone, is in docs/en/slime.md. A live process shows
it three ways: the log line written at install (logger `slime_flashqla.integrations.slime`),
`slime_flashqla.integrations.slime.active()`, and `__slime_flashqla_replaced__` on each slime
module it patched.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from slime_flashqla import comm_guard
from slime_flashqla.comm_guard import guard
from slime_flashqla.comm_guard.policy import FIRST_USE
from slime_flashqla.comm_guard.settings import DEFAULT_THRESHOLD_GB, Settings
from slime_flashqla.integrations.slime import comm, gdn
from slime_flashqla.integrations.slime.patches import PatchOnImport, PatchSet
from slime_flashqla.integrations.slime.switches import switch_on

SWITCH_ENV = "SLIME_FLASHQLA_SLIME"
logger = logging.getLogger("slime_flashqla.integrations.slime")

# slime module -> what the integration changes in it, in words (the doctor shows this before install).
PLAN = {
    gdn.BACKEND_MODULE: "get_chunk_gated_delta_rule -> slime_flashqla.gdn's (auto, flashqla, fla, torch)",
    gdn.QWEN3_NEXT_MODULE: (
        "Qwen3NextGatedDeltaNet -> slime_flashqla.integrations.slime.gdn.Qwen3NextGatedDeltaNet; "
        "get_chunk_gated_delta_rule -> slime_flashqla.gdn's; " + gdn.ATTENTION_PLAN
    ),
    gdn.QWEN3_5_MODULE: (
        "Qwen3_5GatedDeltaNet -> slime_flashqla.integrations.slime.gdn.Qwen3_5GatedDeltaNet; "
        "get_chunk_gated_delta_rule -> slime_flashqla.gdn's; " + gdn.ATTENTION_PLAN
    ),
    comm.RPG_MODULE: (
        "_wrap_low_level_call -> slime's own without its available_memory() check, the comm guard's policy deciding; "
        "ReloadableProcessGroup.reload_process_groups re-arms first-use"
    ),
}


def enabled() -> bool:
    """Whether $SLIME_FLASHQLA_SLIME allows the integration (unset or 1: yes; 0: no)."""
    return switch_on(SWITCH_ENV, "use slime-flashqla in slime", "not")


@dataclass(repr=False)
class Installation:
    """The integration in force in this process."""

    policy: str
    threshold_gb: float
    pid: int = field(default_factory=os.getpid)
    call_sites: comm.CallSiteCheck | None = None
    patches: PatchSet = field(default_factory=PatchSet)
    signatures: PatchSet = field(default_factory=PatchSet)
    p2p_ops: PatchSet = field(default_factory=PatchSet)
    finder: PatchOnImport | None = None
    guard: Settings | None = None  # what the integration installed the comm guard with; None: it did not
    kept_guard: str | None = None  # the policy of a comm guard installed before it, kept as it is

    def replaced(self) -> list[str]:
        """Every slime name replaced so far (modules imported later are added as they import)."""
        return self.patches.targets()

    def comm_checks(self) -> dict[str, int]:
        """Probes run by slime's call sites (always / whitelist); the guard's are in comm_guard.stats()."""
        checked, cleared = self.call_sites.counts if self.call_sites else (0, 0)
        return {"checked": checked, "cleared": cleared}

    def describe(self) -> str:
        """One line: what is in force."""
        if self.kept_guard is not None:
            where = f"a comm guard installed before the integration (policy {self.kept_guard}), kept as it is"
        else:
            where = "the comm guard's wrappers" if self.policy == FIRST_USE else "slime's call sites"
        return (
            f"slime-flashqla slime integration installed in pid {self.pid}: GDN layers and backends from "
            f"slime_flashqla; collective memory check policy {self.policy} (decided by {where}, threshold "
            f"{self.threshold_gb:g} GiB); ${SWITCH_ENV}=0 turns it off"
        )

    def __repr__(self) -> str:
        return (
            f"<slime-flashqla slime integration in pid {self.pid}: policy {self.policy}, threshold "
            f"{self.threshold_gb:g} GiB, {len(self.replaced())} slime names replaced>"
        )


_LOCK = threading.RLock()
_ACTIVE: list[Installation] = []


def active() -> Installation | None:
    """The installation in force in this process, or None."""
    return _ACTIVE[0] if _ACTIVE and _ACTIVE[0].pid == os.getpid() else None


def install(policy: str | None = None, threshold_gb: float = DEFAULT_THRESHOLD_GB, probe=None) -> Installation | None:
    """Put slime_flashqla's backends, layers and comm guard policy under slime in this process (once); None when off.

    `policy` defaults to $SLIME_FLASHQLA_COMM_CHECK, else first-use; `probe` returns free bytes
    (default: the comm guard's). The arguments are checked as `comm_guard.install` checks them.
    A second call returns the installation in force unchanged. A comm guard installed before is
    kept as it is (its policy, threshold and probe) and left installed by uninstall().
    """
    with _LOCK:
        if not enabled():
            logger.info("slime-flashqla slime integration not installed: $%s=0", SWITCH_ENV)
            return None
        settings = Settings.checked(policy, threshold_gb, probe)  # before anything is touched
        gdn.split_enabled()  # a bad $SLIME_FLASHQLA_GDN_SPLIT is refused here, not inside slime's import
        current = active()
        if current is not None:
            return current
        found = Installation(settings.policy.name, settings.threshold_gb)
        found.call_sites = comm.CallSiteCheck(settings)
        if settings.policy.first_use:
            if comm_guard.is_installed():
                found.kept_guard = comm_guard.active_policy()
                logger.warning(
                    "slime-flashqla: a comm guard was installed before the integration (policy %s): kept as it is, "
                    "its settings in force instead of the integration's, and left installed by uninstall()",
                    found.kept_guard,
                )
            else:
                found.guard = settings
            comm.install_guard(found.signatures, found.p2p_ops, found.guard)
        found.finder = PatchOnImport(
            {
                gdn.BACKEND_MODULE: lambda module: gdn.patch_backend_module(found.patches, module),
                gdn.QWEN3_NEXT_MODULE: lambda module: gdn.patch_layer_module(found.patches, module),
                gdn.QWEN3_5_MODULE: lambda module: gdn.patch_layer_module(found.patches, module),
                comm.RPG_MODULE: lambda module: comm.patch_call_sites(found.patches, module, found.call_sites),
            }
        )
        found.finder.activate()
        _ACTIVE[:] = [found]
        logger.info(found.describe())
        return found


def uninstall() -> None:
    """Put slime's own names back and remove the comm guard it installed; a no-op when not installed."""
    with _LOCK:
        current = active()
        if current is None:
            return
        _undo(current)
        _ACTIVE.clear()
        logger.info("slime-flashqla slime integration uninstalled in pid %d", current.pid)


def _undo(found: Installation, in_forked_child: bool = False) -> None:
    """Everything `found` changed, back as it was, in reverse."""
    found.finder.deactivate()
    found.patches.undo(in_forked_child=in_forked_child)
    found.p2p_ops.undo(in_forked_child=in_forked_child)
    if found.guard is not None:
        if guard.installed_settings() is found.guard:
            comm_guard.uninstall()
        elif comm_guard.is_installed():  # someone installed it again over the integration's: theirs now
            logger.warning("slime-flashqla: the comm guard was re-installed after the integration: left installed")
    found.signatures.undo(in_forked_child=in_forked_child)


def _after_fork_in_child() -> None:
    """Start a forked child clean, as the comm guard does: slime's own names back, nothing installed."""
    global _LOCK
    _LOCK = threading.RLock()  # another thread of the parent may have held it when it forked
    if _ACTIVE:
        _undo(_ACTIVE.pop(), in_forked_child=True)


os.register_at_fork(after_in_child=_after_fork_in_child)
