"""Both GDN layers end to end on the GPU, every backend, against the float32 CPU layer."""

from __future__ import annotations

import itertools

import pytest
import torch

from slime_flashqla.host.packages import is_installed
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.workload.models import gdn_layer_config

pytestmark = pytest.mark.gpu
# bf16 weights and activations through projections, conv, kernel and norm: ~1e-2 relative
# error against a float32 run of the same layer; a wrong head layout or leaked token errs by O(1).
TOLERANCE = 3e-2
CONFIG = gdn_layer_config(16, 32)
BACKENDS = [
    pytest.param("fla", marks=pytest.mark.skipif(not is_installed("fla"), reason="FLA not installed")),
    pytest.param("flashqla", marks=pytest.mark.skipif(not is_installed("flash_qla"), reason="flash-qla not installed")),
    "auto",
]


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("cls", [Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet])
@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_matches_float32_cpu_layer(cls, backend):
    torch.manual_seed(0)
    reference = cls(CONFIG, backend="torch")
    init_like_checkpoint(reference)
    layer = cls(CONFIG, backend=backend).to("cuda", torch.bfloat16)
    layer.load_state_dict(reference.state_dict())
    # Ragged, with sequences shorter than the conv's width (4) at the start, middle and end.
    lengths = [1, 3, 700, 2, 1339, 3]
    cu = torch.tensor(list(itertools.accumulate(lengths, initial=0)), dtype=torch.int32)
    x = torch.randn(1, sum(lengths), 2048)
    x_ref = x.clone().requires_grad_()
    y_ref = reference(x_ref, cu_seqlens=cu)
    y_ref.square().mean().backward()
    x_gpu = x.to("cuda", torch.bfloat16).requires_grad_()
    y = layer(x_gpu, cu_seqlens=cu.cuda())
    y.float().square().mean().backward()
    errors = {"output": rel(y.cpu(), y_ref), "d_input": rel(x_gpu.grad.cpu(), x_ref.grad)}
    reference_grads = dict(reference.named_parameters())
    for name, param in layer.named_parameters():  # every parameter's gradient
        errors[f"d_{name}"] = rel(param.grad.cpu(), reference_grads[name].grad)
    print(f"{cls.__name__}[{backend}] tokens {'+'.join(map(str, lengths))}: {errors}")
    assert all(v <= TOLERANCE for v in errors.values()), errors
