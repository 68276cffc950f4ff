"""Both Qwen GDN layers on CPU: shapes, gradients, packed sequences, GVA, checkpoints, backend choice."""

from __future__ import annotations

import argparse

import pytest
import torch

from slime_flashqla.args import add_gdn_backend_argument
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.host.packages import is_installed
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint, packed_batch
from slime_flashqla.workload.models import gdn_layer_config

CONFIG = {**gdn_layer_config(2, 4, head_dim=16, hidden_size=64), "linear_value_head_dim": 8}
LAYERS = [Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet]


def build(cls, seed=0, **kwargs):
    torch.manual_seed(seed)
    layer = cls(CONFIG, backend="torch", **kwargs)
    init_like_checkpoint(layer, std=0.1)
    return layer


@pytest.mark.parametrize("cls", LAYERS)
def test_forward_backward_shapes_and_gradients(cls):
    layer = build(cls)
    x = torch.randn(2, 33, 64, requires_grad=True)
    y = layer(x)
    assert y.shape == (2, 33, 64)
    y.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for name, param in layer.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("cls", LAYERS)
def test_packed_sequences_do_not_see_each_other(cls):
    """With cu_seqlens, the conv and the recurrence restart at each boundary: packed == separate."""
    layer = build(cls)
    lengths = [5, 40, 19]
    x = torch.randn(1, sum(lengths), 64)
    cu_seqlens = torch.tensor([0, 5, 45, 64], dtype=torch.int32)
    packed = layer(x, cu_seqlens=cu_seqlens)
    separate = torch.cat([layer(part) for part in x.split(lengths, dim=1)], dim=1)
    torch.testing.assert_close(packed, separate, rtol=1e-5, atol=1e-6)
    # ... and without cu_seqlens the same tokens do leak, so the test can tell the difference.
    assert not torch.allclose(layer(x), separate, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("cls", LAYERS)
def test_gva_equals_repeated_heads(cls):
    """Passing q/k with Hk heads gives what repeating them to Hv heads gives."""
    layer = build(cls)
    x = torch.randn(1, 30, 64)
    cu_seqlens = torch.tensor([0, 12, 30], dtype=torch.int32)
    gva = layer(x, cu_seqlens=cu_seqlens)
    kernel = get_chunk_gated_delta_rule("torch")
    seen = []

    def repeating(q, k, v, **kwargs):
        group = v.shape[2] // q.shape[2]
        seen.append(group)
        return kernel(q.repeat_interleave(group, 2), k.repeat_interleave(group, 2), v, **kwargs)

    layer.chunk_gated_delta_rule = repeating
    repeated = layer(x, cu_seqlens=cu_seqlens)
    assert seen == [2]
    torch.testing.assert_close(gva, repeated, rtol=1e-5, atol=1e-6)


def test_qwen3_next_and_qwen3_5_agree_given_the_same_weights():
    """The fused Qwen3-Next projections, un-grouped per key head, are Qwen3.5's separate ones."""
    nxt = build(Qwen3NextGatedDeltaNet)
    q35 = build(Qwen3_5GatedDeltaNet, seed=1)
    hk, hv, dk, dv = 2, 4, 16, 8
    group = hv // hk
    w = nxt.in_proj_qkvz.weight.view(hk, 2 * dk + 2 * group * dv, 64)
    q, k, v, z = w.split([dk, dk, group * dv, group * dv], dim=1)
    ba = nxt.in_proj_ba.weight.view(hk, 2 * group, 64)
    b, a = ba.split([group, group], dim=1)
    state = {
        "in_proj_qkv.weight": torch.cat([q.reshape(-1, 64), k.reshape(-1, 64), v.reshape(-1, 64)]),
        "in_proj_z.weight": z.reshape(-1, 64),
        "in_proj_b.weight": b.reshape(-1, 64),
        "in_proj_a.weight": a.reshape(-1, 64),
        **{k: t for k, t in nxt.state_dict().items() if not k.startswith("in_proj")},
    }
    q35.load_state_dict(state, strict=True)
    x = torch.randn(1, 25, 64)
    torch.testing.assert_close(nxt(x), q35(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("cls", "hf_module", "hf_class", "hf_config"),
    [
        (Qwen3NextGatedDeltaNet, "qwen3_next", "Qwen3NextGatedDeltaNet", "Qwen3NextConfig"),
        (Qwen3_5GatedDeltaNet, "qwen3_5", "Qwen3_5GatedDeltaNet", "Qwen3_5TextConfig"),
    ],
)
def test_matches_hugging_face_layer(cls, hf_module, hf_class, hf_config, monkeypatch):
    """Load a Hugging Face layer's state dict as is and get its output (an independent implementation)."""
    transformers = pytest.importorskip("transformers")
    import importlib

    config_cls = getattr(transformers, hf_config)
    hf_cfg = config_cls(
        hidden_size=64,
        linear_num_value_heads=4,
        linear_num_key_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
    )
    modeling = importlib.import_module(f"transformers.models.{hf_module}.modeling_{hf_module}")
    # With FLA importable, transformers binds FLA's Triton kernel even for CPU tensors; the
    # reference we want is Hugging Face's own PyTorch implementation.
    kernel = modeling.torch_chunk_gated_delta_rule
    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", getattr(kernel, "__wrapped__", kernel))
    torch.manual_seed(0)
    hf_layer = getattr(modeling, hf_class)(hf_cfg, layer_idx=0).float()
    with torch.no_grad():
        for param in hf_layer.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.1)
        hf_layer.norm.weight.uniform_(0.5, 1.5)
    ours = cls(hf_cfg, backend="torch")
    ours.load_state_dict(hf_layer.state_dict(), strict=True)
    x = torch.randn(2, 20, 64)
    with torch.no_grad():
        expected = hf_layer(x)
        expected = expected[0] if isinstance(expected, tuple) else expected
        torch.testing.assert_close(ours(x), expected, rtol=1e-4, atol=1e-5)


def test_backend_precedence():
    args = argparse.Namespace(qwen_gdn_backend="auto")
    assert Qwen3NextGatedDeltaNet(CONFIG, args=args, backend="torch").backend == "torch"
    assert Qwen3NextGatedDeltaNet(CONFIG, args=args).backend == "auto"
    if is_installed("fla"):
        assert Qwen3NextGatedDeltaNet(CONFIG).backend == "fla"
    else:  # the default still means FLA, and says how to get it
        with pytest.raises(ImportError, match="flash-linear-attention"):
            Qwen3NextGatedDeltaNet(CONFIG)


def test_bad_backend_and_config():
    with pytest.raises(ValueError, match="valid names"):
        Qwen3NextGatedDeltaNet(CONFIG, backend="triton")
    with pytest.raises(ValueError, match="lacks linear_conv_kernel_dim"):
        Qwen3NextGatedDeltaNet({k: v for k, v in CONFIG.items() if k != "linear_conv_kernel_dim"}, backend="torch")
    with pytest.raises(ValueError, match="multiple of"):
        Qwen3NextGatedDeltaNet({**CONFIG, "linear_num_key_heads": 3}, backend="torch")


def test_bad_hidden_states_and_cu_seqlens():
    layer = build(Qwen3NextGatedDeltaNet)
    with pytest.raises(ValueError, match=r"\[B, T, 64\]"):
        layer(torch.randn(1, 5, 32))
    with pytest.raises(ValueError, match="B == 1"):
        layer(torch.randn(2, 5, 64), cu_seqlens=torch.tensor([0, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match="end at T=5"):
        layer(torch.randn(1, 5, 64), cu_seqlens=torch.tensor([0, 6], dtype=torch.int32))


def test_argument():
    parser = add_gdn_backend_argument(argparse.ArgumentParser())
    assert parser.parse_args([]).qwen_gdn_backend == "fla"
    assert parser.parse_args(["--qwen-gdn-backend", "auto"]).qwen_gdn_backend == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--qwen-gdn-backend", "cuda"])


@pytest.fixture
def tp_rank0_group(request):
    """A TP group of `request.param` ranks for rank 0 alone (torch's fake process group: collectives do nothing)."""
    if request.param == 1:
        yield None
        return
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=request.param)
    try:
        yield dist.new_group(list(range(request.param)))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("tp_rank0_group", [1, 2], indirect=True, ids=["unsplit", "tp2-rank0"])
@pytest.mark.parametrize("cls", LAYERS)
def test_the_layer_on_this_package_s_triton_kernels_equals_it_on_their_references(cls, tp_rank0_group, monkeypatch):
    """The conv, gates and gated norm as the layer wires them on CUDA (q, k, v and z read in place in the projection).

    Compiled on a GPU, in Triton's interpreter off it: output and every gradient against the same
    layer on the ops' PyTorch references, float32, a ragged pack with a sequence shorter than the
    conv; b/a's gradient folded into the conv gradient's spare columns as on CUDA. Also as rank 0
    of TP2 computing on its share of whole parameters (slime's contract), with no collectives.
    """
    from helpers.triton_interpreter import KERNELS_UNAVAILABLE, ON_GPU
    from slime_flashqla.layers import ops

    if KERNELS_UNAVAILABLE:
        pytest.skip(KERNELS_UNAVAILABLE)
    device = "cuda" if ON_GPU else "cpu"
    # The float32 reference conv must not run in cuDNN's TF32 (10-bit mantissa) on a GPU.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    layer = build(cls).to(device)
    if tp_rank0_group is not None:
        layer.compute_on_share(tp_group=tp_rank0_group)
    x, cu_seqlens = packed_batch([2, 21, 9], 64, device=device, dtype=torch.float32)
    dy = torch.randn_like(x)

    def run():
        layer.zero_grad(set_to_none=True)
        xi = x.detach().clone().requires_grad_()
        y = layer(xi, cu_seqlens=cu_seqlens)
        y.backward(dy)
        return [y, xi.grad, *(p.grad for p in layer.parameters())]

    monkeypatch.setattr(ops, "use_triton_ops", lambda t: False)
    reference = run()
    monkeypatch.setattr(ops, "use_triton_ops", lambda t: True)
    folds = []
    fold = ops._folded
    monkeypatch.setattr(ops, "_folded", lambda *args: folds.append(fold(*args)) or folds[-1])
    kernels = run()
    assert folds and folds[-1] is not None, "b/a's gradient should ride in the conv gradient's spare columns"
    names = ["output", "input grad", *(name for name, _ in layer.named_parameters())]
    for name, ours, ref in zip(names, kernels, reference, strict=True):
        torch.testing.assert_close(ours, ref, rtol=2e-4, atol=2e-5, msg=lambda m, name=name: f"{name}: {m}")
