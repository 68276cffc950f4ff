"""The exact-signature steady path: same arguments reach the original, same counts, same errors."""

from __future__ import annotations

import inspect

import pytest
import torch.distributed as dist

from slime_flashqla.comm_guard import ops
from slime_flashqla.comm_guard.fastpath import exact_signature_wrapper

FIRST_USE, OFF = 3, 0


def build(original, code=FIRST_USE, seen=(), peer=None):
    """A fast wrapper around `original` whose slow path records that it was taken."""
    slow_calls = []

    def slow(*args, **kwargs):
        slow_calls.append((args, kwargs))
        return ("slow", args, kwargs)

    notes = []
    annotate = lambda exc, op: notes.append(op)  # noqa: E731
    built = exact_signature_wrapper(original, slow, original, set(seen), [code], annotate, "op", peer)
    return built, slow_calls, notes


def collective(tensor, op="sum", group=None, async_op=False):
    return ("orig", tensor, op, group, async_op)


def test_steady_first_use_calls_the_original_with_the_same_arguments_and_counts_a_skip():
    (wrapper, read, reset), slow_calls, _ = build(collective, seen={None, "tp"})
    assert wrapper("t") == ("orig", "t", "sum", None, False)
    assert wrapper("t", group="tp", op="max") == ("orig", "t", "max", "tp", False)
    assert wrapper("t", "min", "tp", True) == ("orig", "t", "min", "tp", True)
    assert slow_calls == [] and read() == 3
    reset()
    assert read() == 0


def test_unseen_group_or_other_policy_goes_to_the_generic_wrapper_with_every_argument():
    (wrapper, read, _), slow_calls, _ = build(collective, seen={None})
    assert wrapper("t", group="dp")[0] == "slow"
    assert slow_calls == [(("t", "sum", "dp", False), {})]  # defaults made explicit, by position
    (wrapper, read, _), slow_calls, _ = build(collective, code=OFF, seen={None})
    assert wrapper("t")[0] == "slow" and read() == 0


def test_point_to_point_ops_key_on_group_and_peer():
    def send(tensor, dst=None, group=None, tag=0, group_dst=None):
        return ("orig", tensor, dst, group, tag, group_dst)

    (wrapper, read, _), slow_calls, _ = build(send, seen={(None, 1)}, peer="dst")
    assert wrapper("t", 1) == ("orig", "t", 1, None, 0, None)
    assert wrapper("t", dst=1, tag=3) == ("orig", "t", 1, None, 3, None)
    assert read() == 2 and slow_calls == []
    assert wrapper("t", 0)[0] == "slow"  # another peer: its first use
    # The generic wrapper gets every argument by position, so it keys the call as (group, dst) too.
    assert slow_calls == [(("t", 0, None, 0, None), {})]
    assert build(send, peer="src")[0] is None  # a peer parameter the function does not have


def test_a_raising_original_is_annotated_and_re_raised_as_itself():
    def failing(tensor, group=None):
        raise RuntimeError("NCCL error")

    (wrapper, _, _), _, notes = build(failing, seen={None})
    with pytest.raises(RuntimeError, match="NCCL error"):
        wrapper("t")
    assert notes == ["op"]


def test_keyword_only_var_args_and_positional_only_parameters_are_copied():
    def odd(a, /, b=2, *rest, group=None, flag=False, **extra):
        return (a, b, rest, group, flag, extra)

    (wrapper, read, _), slow_calls, _ = build(odd, seen={"g"})
    assert wrapper(1, 5, 6, 7, group="g", flag=True, x=1) == (1, 5, (6, 7), "g", True, {"x": 1})
    assert read() == 1 and slow_calls == []
    with pytest.raises(TypeError):
        wrapper(a=1, group="g")  # positional-only stays positional-only


def test_signatures_it_cannot_copy_keep_the_generic_wrapper():
    def no_group(tensor, src=0):
        return tensor

    def reserved(tensor, seen=None, group=None):
        return tensor

    def group_in_kwargs(tensor, **kwargs):
        return tensor

    for fn in (no_group, reserved, group_in_kwargs):
        assert build(fn)[0] is None


@pytest.mark.parametrize("name", [n for n in ops.MODULE_OPS if n != "batch_isend_irecv"])
def test_every_torch_collective_with_a_group_gets_a_wrapper_with_its_own_parameters(name):
    original = getattr(dist, name, None)
    if original is None:
        pytest.skip(f"this torch has no torch.distributed.{name}")
    params = inspect.signature(original).parameters
    peer = next((p for p in ops.PEER_PARAMS if p in params), None) if name in ops.P2P_OPS else None
    built = build(original, peer=peer)[0]
    if "group" not in params:
        assert built is None
        return
    code = built[0].__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    assert list(names) == [p.name for p in params.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
