"""Memory check before torch.distributed collectives, with slime's skip list and a steady-state-free policy.

`install()` wraps torch.distributed's collectives and point-to-point calls (and, with
`methods=True`, the ProcessGroup methods) so that, when the policy says so, a probe of free GPU memory
runs first; below the threshold the guard synchronizes, collects garbage and
empties PyTorch's CUDA cache, so that NCCL finds room for communicator buffers.
docs/en/comm_guard.md explains the policies and how to choose one.
"""

from slime_flashqla.comm_guard.guard import (
    active_policy,
    install,
    is_installed,
    methods_guarded,
    rearm,
    reset_stats,
    stats,
    uninstall,
)
from slime_flashqla.comm_guard.memory import GIB, probe
from slime_flashqla.comm_guard.ops import SKIP_OPS, should_check_memory_for_comm
from slime_flashqla.comm_guard.policy import DEFAULT_POLICY, ENV_VAR, POLICIES

__all__ = [
    "DEFAULT_POLICY",
    "ENV_VAR",
    "GIB",
    "POLICIES",
    "SKIP_OPS",
    "active_policy",
    "install",
    "is_installed",
    "methods_guarded",
    "probe",
    "rearm",
    "reset_stats",
    "should_check_memory_for_comm",
    "stats",
    "uninstall",
]
