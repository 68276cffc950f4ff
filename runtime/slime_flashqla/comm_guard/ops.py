"""Which torch.distributed calls the guard wraps, and slime's profiled skip list."""

from __future__ import annotations

# slime #1947: the ops that profiling showed safe to run without the free-memory
# check.  Kept verbatim so `whitelist` reproduces slime's behaviour exactly.
SKIP_OPS = frozenset(
    {
        "all_gather_into_tensor",
        "allgather_into_tensor_coalesced",
        "barrier",
        "broadcast_object_list",
        "reduce_scatter_tensor",
        "all_to_all_single",
        "isend",
        "irecv",
    }
)

# Module-level collectives and point-to-point calls; names the installed torch
# lacks are skipped at install time.
MODULE_OPS = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_gather_object",
    "_all_gather_base",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "scatter",
    "scatter_object_list",
    "gather",
    "gather_object",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "send_object_list",
    "recv_object_list",
    "isend",
    "irecv",
    "batch_isend_irecv",
)

# Communication methods of torch.distributed.ProcessGroup.  Called from user code
# (or a ProcessGroup subclass that forwards to an inner group) they bypass the
# module-level functions, so they get their own wrappers under their own names.
PG_METHODS = (
    "allreduce",
    "allreduce_coalesced",
    "allgather",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "_allgather_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "scatter",
    "gather",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "recv_anysource",
)

# Calls that create or destroy process groups: afterwards communicators (and
# their buffers) may be allocated anew, so `first-use` probes every op again.
LIFECYCLE_OPS = (
    "init_process_group",
    "new_group",
    "new_subgroups",
    "new_subgroups_by_enumeration",
    "split_group",
    "destroy_process_group",
)

# PyTorch's NCCL backend can build a separate communicator for a pair of
# point-to-point peers, so for these ops `first-use` keys on the peer as well.
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "send_object_list", "recv_object_list"})
PEER_PARAMS = ("dst", "src", "group_dst", "group_src", "peer")


def should_check_memory_for_comm(op_name: str) -> bool:
    """slime's skip-list rule: False for the 8 profiled-safe ops, True for every other op."""
    return op_name not in SKIP_OPS
