"""slime's linear-attention `Attention` split over TP and CP ranks, on real gloo processes, against one process.

Each rank runs slime's own code paths as a slime run does: slime's `get_batch` cuts the rollout
into its per-sequence zigzag CP slices and pads them (a padding segment included), slime's
`Attention` class is built by slime's module (the integration's subclass of it, or slime's own
for the baseline), and Megatron's `mpu`/sequence-parallel names are real gloo groups
(helpers/megatron_gloo.py). The reference is one process running slime's own `hf_forward` (its
input norm and slime's own GDN layer) on the whole pack. Float64 and the `torch` kernel, so any
relative difference above 1e-10 is a mistake (1e-6 for slime's input norm, computed in float32).
Gradients are compared after the reduction Megatron applies:
every gradient summed over CP (its data-parallel x CP all-reduce) and, under sequence
parallelism, parameters marked `sequence_parallel` summed over TP (finalize_model_grads).

slime's own wrapper must fail the same check: under CP its input gradient misses what later
chunks' losses on other ranks send back (its all-gather's backward keeps only this rank's
slice), and under TP every rank runs every head.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from runtime.comm_guard.comm_guard_harness import run_world

from . import slime_models

pytestmark = pytest.mark.distributed
MODELS = ("qwen3-next", "qwen3.5")
# (TP, CP, sequence parallelism) over worlds of 2 and 4 ranks
CASES = {
    2: [(2, 1, False), (2, 1, True), (1, 2, False)],
    4: [(2, 2, True), (2, 2, False), (1, 4, False)],
}
LENGTHS = [1, 2, 3, 29, 7, 18, 5]  # shorter than the conv width, across every chunk edge once padded
HEADS = (4, 8)  # key, value heads: TP x CP = 4 divides both
HIDDEN, VOCAB = 24, 50


def _case_id(model, tp, cp, sp):
    return f"{model}-tp{tp}{'-sp' if sp else ''}-cp{cp}"


def _config():
    return SimpleNamespace(
        hidden_size=HIDDEN,
        linear_num_key_heads=HEADS[0],
        linear_num_value_heads=HEADS[1],
        linear_key_head_dim=8,
        linear_value_head_dim=4,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
    )


def _weights(attention, seed: int) -> dict[str, torch.Tensor]:
    """Checkpoint-like float64 weights for every parameter of slime's Attention, the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in attention.state_dict().items():
        noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float64)
        if name.endswith("A_log"):
            state[name] = torch.log(torch.rand(tensor.shape, generator=gen, dtype=torch.float64) * 15 + 0.5)
        elif name.endswith(("dt_bias", "norm.weight")):
            state[name] = 1 + 0.1 * noise
        elif name.endswith("conv1d.weight"):
            state[name] = noise / 2
        else:
            state[name] = 0.2 * noise
    return state


class _Iterator:
    """A micro-batch as slime's DataIterator hands it to get_batch."""

    def __init__(self, tokens):
        responses = [max(1, len(t) // 2) for t in tokens]
        self.batch = {
            "tokens": tokens,
            "loss_masks": [torch.ones(n, dtype=torch.int) for n in responses],
            "total_lengths": [len(t) for t in tokens],
            "response_lengths": responses,
        }

    def get_next(self, keys):
        return {key: self.batch.get(key) for key in keys}


def _world(rank, world_size, source, cases):
    import torch.distributed as dist

    from helpers import fla_stand_ins
    from helpers.megatron_gloo import megatron_on_gloo
    from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch
    from slime_flashqla.integrations.slime import install, uninstall
    from slime_flashqla.integrations.slime.patches import original_attribute
    from slime_flashqla.integrations.slime.source import GDN_CLASSES, GDN_MODULES, import_slime_module

    modules = {model: import_slime_module(GDN_MODULES[model], source) for model in MODELS}
    data = import_slime_module("slime.backends.megatron_utils.data", source)
    cp_utils = import_slime_module("slime.backends.megatron_utils.cp_utils", source)
    accelerator = import_slime_module("slime.utils.accelerator", source)
    accelerator.current_device = lambda: "cpu"
    accelerator.device = lambda index=None: torch.device("cpu")
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRMSNorm

    for module in modules.values():
        # slime's FLA modules and kernel for CPU ones (FLA needs a GPU), as tests/runtime/integrations does
        module.ShortConvolution, module.FusedRMSNormGated = (
            fla_stand_ins.ShortConvolution,
            fla_stand_ins.FusedRMSNormGated,
        )
        module.get_chunk_gated_delta_rule = lambda backend: chunk_gated_delta_rule_torch
    modules["qwen3-next"].Qwen3NextAttention, modules["qwen3-next"].Qwen3NextRMSNorm = (
        Qwen3NextAttention,
        Qwen3NextRMSNorm,
    )

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, (tp, cp, sp) in cases:
            checkpoint = slime_models.write_hf_checkpoint(Path(tmp) / f"{model}-{rank}", model, _config())
            place = megatron_on_gloo(tp, cp)
            module = modules[model]
            for mode in ("split", "slime"):
                installed = install(policy="off") if mode == "split" else None
                try:
                    results[(model, tp, cp, sp, mode)] = _check(
                        module, data, cp_utils, checkpoint, tp, cp, sp, mode, place,
                        original_attribute(module, "Attention"), original_attribute(module, GDN_CLASSES[model]),
                    )  # fmt: skip
                finally:
                    if installed is not None:
                        uninstall()
                dist.barrier()
    return results


def _check(module, data, cp_utils, checkpoint, tp, cp, sp, mode, place, slime_attention, slime_layer_class):
    """(errors against one process, the kernel's (q, v) shapes) of slime's Attention class on this rank."""
    import torch.distributed as dist

    args = slime_models.slime_args(checkpoint, "torch" if mode == "split" else "fla")
    args.sequence_parallel = sp
    attention = module.Attention(args, SimpleNamespace(), slime_models.LAYER_NUMBER).double()
    state = _weights(attention, seed=3)
    attention.load_state_dict(state)
    calls = []
    kernel = attention.linear_attn.chunk_gated_delta_rule
    attention.linear_attn.chunk_gated_delta_rule = lambda q, k, v, **kw: (
        calls.append((q.shape, v.shape)) or kernel(q, k, v, **kw)
    )

    # The reference: slime's own hf_forward (input norm, slime's GDN layer) on the whole pack, one process.
    from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch

    # "torch": a name both slime's factory stand-in and the integration's take; the kernel is then set plainly.
    layer = slime_layer_class(attention.hf_config, 0, args=SimpleNamespace(qwen_gdn_backend="torch")).double()
    layer.chunk_gated_delta_rule = chunk_gated_delta_rule_torch
    prefix = "linear_attn."
    layer.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    reference = SimpleNamespace(input_layernorm=copy.deepcopy(attention.input_layernorm), linear_attn=layer)

    gen = torch.Generator().manual_seed(7)
    tokens = [torch.randint(1, VOCAB, (n,), generator=gen) for n in LENGTHS]
    embedding = torch.randn(VOCAB, HIDDEN, generator=gen, dtype=torch.float64)
    batch = data.get_batch(_Iterator(tokens), ["tokens", "loss_masks", "total_lengths", "response_lengths"], 4)
    params = batch["packed_seq_params"]
    offsets = params.cu_seqlens_q.tolist()

    # The whole pack in its natural order: each sequence padded (with 0) to its slot in cu_seqlens.
    whole_tokens = torch.zeros(offsets[-1], dtype=torch.long)
    for t, start in zip(tokens, offsets, strict=False):
        whole_tokens[start : start + len(t)] = t
    mine = _rank_rows(cp_utils, offsets)
    assert torch.equal(whole_tokens[mine], batch["tokens"][0]), "the pack's natural order disagrees with get_batch"
    dy = torch.randn(offsets[-1], 1, HIDDEN, generator=gen, dtype=torch.float64)

    x_whole = embedding[whole_tokens].unsqueeze(1).requires_grad_()  # Megatron's [s, b, h]
    out_whole = slime_attention.hf_forward(reference, x_whole.transpose(0, 1), params).transpose(0, 1)
    out_whole.backward(dy)
    expected_grads = {"input_layernorm." + n: p.grad for n, p in reference.input_layernorm.named_parameters()}
    expected_grads.update({prefix + n: p.grad for n, p in layer.named_parameters()})

    def local(t):  # this rank's zigzag rows, then its sequence-parallel slice of them (Megatron's embedding)
        t = t[mine]
        return t.chunk(tp, dim=0)[place["tp_rank"]] if sp else t

    x = local(embedding[whole_tokens].unsqueeze(1)).clone().requires_grad_()
    out, bias = attention(x, None, packed_seq_params=params)
    assert bias is None and out.shape == x.shape
    out.backward(local(dy))
    errors = {"out": _error(out, local(out_whole)), "dx": _error(x.grad, local(x_whole.grad))}
    for name, param in attention.named_parameters():
        grad = param.grad.clone()
        if cp > 1:
            dist.all_reduce(grad, group=place["cp_group"])
        if sp and getattr(param, "sequence_parallel", False):
            dist.all_reduce(grad, group=place["tp_group"])
        errors[name] = _error(grad, expected_grads[name])
    return {"errors": errors, "kernel": [tuple(s) for pair in calls for s in pair], "tokens": offsets[-1]}


def _error(actual, expected) -> float:
    """Largest difference relative to the largest expected value."""
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


# slime's input norm (transformers' Qwen3NextRMSNorm) computes in float32 whatever its input's dtype:
# its weight's gradient, summed over other token slices, differs at float32's rounding.
TOLERANCE = {"input_layernorm.weight": 1e-6}


def _rank_rows(cp_utils, offsets):
    """The pack's rows this CP rank holds: slime's own slice_with_cp of each sequence's positions."""
    positions = torch.arange(offsets[-1])
    rows = [cp_utils.slice_with_cp(positions[a:b], 0) for a, b in itertools.pairwise(offsets)]
    return torch.cat(rows)


@pytest.fixture(scope="module")
def split_runs(slime_source):
    """Every case of every world, run once: {(model, tp, cp, sp, mode): [rank results]}."""
    from .slime_processes import require_slime_comm_dependencies

    require_slime_comm_dependencies()
    for name in ("httpx", "transformers"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"slime's get_batch and layers import {name}, not installed here (env/dev-tools.txt has it)")
    runs = {}
    for world, cases in CASES.items():
        todo = [(model, case) for case in cases for model in MODELS]
        ranks = run_world(_world, world, start_method="spawn", deadline_s=600, source=str(slime_source), cases=todo)
        for key in ranks[0]:
            runs[key] = [r[key] for r in ranks]
    return runs


ALL = [pytest.param(m, *c, id=_case_id(m, *c)) for cs in CASES.values() for c in cs for m in MODELS]


@pytest.mark.parametrize(("model", "tp", "cp", "sp"), ALL)
def test_each_rank_computes_its_share_with_one_process_s_gradients(split_runs, model, tp, cp, sp):
    for result in split_runs[(model, tp, cp, sp, "split")]:
        bad = {k: v for k, v in result["errors"].items() if not v < TOLERANCE.get(k, 1e-10)}
        assert not bad, bad
        hk, hv = HEADS
        assert result["kernel"] == [
            (1, result["tokens"], hk // (tp * cp), 8),
            (1, result["tokens"], hv // (tp * cp), 4),
        ]


@pytest.mark.parametrize(("model", "tp", "cp", "sp"), ALL)
def test_slime_s_own_wrapper_fails_the_same_check(split_runs, model, tp, cp, sp):
    for result in split_runs[(model, tp, cp, sp, "slime")]:
        # every rank runs every head (slime repeats q/k to the value heads) on the whole pack
        assert result["kernel"][0][2] == HEADS[1]
        assert result["errors"]["out"] < 1e-10  # its forward is right
        if cp > 1:
            assert result["errors"]["dx"] > 1e-3, result["errors"]  # its input gradient is not


def _refusals(rank, world_size, source):
    """The one-line errors slime's split Attention gives, each before any collective, on a 2-rank CP world."""
    from helpers import fla_stand_ins
    from helpers.megatron_gloo import megatron_on_gloo
    from slime_flashqla.integrations.slime import install
    from slime_flashqla.integrations.slime.source import import_slime_module

    module = import_slime_module("slime_plugins.models.qwen3_5", source)
    data = import_slime_module("slime.backends.megatron_utils.data", source)
    module.accelerator.current_device = lambda: "cpu"
    module.FusedRMSNormGated = fla_stand_ins.FusedRMSNormGated
    megatron_on_gloo(1, 2)
    install(policy="off")
    messages = {}
    with tempfile.TemporaryDirectory() as tmp:
        odd = SimpleNamespace(**{**vars(_config()), "linear_num_key_heads": 3, "linear_num_value_heads": 3})
        args = slime_models.slime_args(slime_models.write_hf_checkpoint(Path(tmp) / "odd", "qwen3.5", odd), "torch")
        try:
            module.Attention(args, SimpleNamespace(), slime_models.LAYER_NUMBER)
        except ValueError as error:
            messages["heads"] = str(error)
        args = slime_models.slime_args(
            slime_models.write_hf_checkpoint(Path(tmp) / "ok", "qwen3.5", _config()), "torch"
        )
        args.allgather_cp = True
        try:
            module.Attention(args, SimpleNamespace(), slime_models.LAYER_NUMBER)
        except ValueError as error:
            messages["allgather_cp"] = str(error)
        args.allgather_cp = False
        attention = module.Attention(args, SimpleNamespace(), slime_models.LAYER_NUMBER).double()
        x = torch.randn(8, 1, HIDDEN, dtype=torch.float64)
        for name, offsets in {"unpadded": [0, 5, 16], "local": [0, 8]}.items():
            params = data.PackedSeqParams(cu_seqlens_q=torch.tensor(offsets, dtype=torch.int32), qkv_format="thd")
            try:
                attention(x, None, packed_seq_params=params)
            except ValueError as error:
                messages[name] = str(error)
    return messages


def test_what_cannot_split_is_refused_in_one_line_before_any_collective(slime_source):
    # A rank that failed after a collective would leave its peer waiting: run_world's deadline would say so.
    for messages in run_world(_refusals, 2, start_method="spawn", deadline_s=240, source=str(slime_source)):
        assert "TP x CP = 1 x 2, which must divide the GDN heads (linear_num_key_heads=3" in messages["heads"]
        assert "--allgather-cp" in messages["allgather_cp"]
        assert "sequence 0 of the pack has 5 tokens, not a multiple of 2*CP=4" in messages["unpadded"]
        assert "must end at T=16" in messages["local"] and "8 tokens on each of 2 ranks" in messages["local"]
        assert all("\n" not in m for m in messages.values())


def test_the_off_switch_brings_slime_s_wrapper_back_and_names_stay(slime_source, monkeypatch, tmp_path):
    from slime_flashqla.integrations.slime import gdn
    from slime_flashqla.integrations.slime.patches import original_attribute
    from slime_flashqla.integrations.slime.source import import_slime_module

    for model in MODELS:
        module = import_slime_module(slime_models.MODULES[model], slime_source)
        slime_own = original_attribute(module, "Attention")
        monkeypatch.setenv(gdn.SPLIT_ENV, "0")
        with slime_models.integration():
            assert module.Attention is slime_own
        monkeypatch.setenv(gdn.SPLIT_ENV, "1")
        with slime_models.integration():
            assert issubclass(module.Attention, slime_own) and module.Attention is not slime_own
        assert module.Attention is slime_own
    monkeypatch.setenv(gdn.SPLIT_ENV, "yes")
    with pytest.raises(ValueError, match="SLIME_FLASHQLA_GDN_SPLIT is 'yes': set 1"):
        gdn.split_enabled()


def test_install_refuses_a_bad_split_switch_before_touching_slime(monkeypatch):
    from slime_flashqla.integrations.slime import active, gdn, install

    monkeypatch.setenv(gdn.SPLIT_ENV, "maybe")
    with pytest.raises(ValueError, match="SLIME_FLASHQLA_GDN_SPLIT is 'maybe'"):
        install(policy="off")
    assert active() is None
