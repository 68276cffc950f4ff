"""The main job behind `slime-flashqla check`: one GDN layer forward+backward on the best backend.

On CUDA the layer runs a Qwen3-Next TP1-sized GDN layer (16 key heads, 32 value heads,
K = V = 128) on packed sequences in bf16, and the kernel's output and gradients are
compared with the pure-PyTorch reference on the same inputs; on CPU it runs a small
layer on the `torch` backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from slime_flashqla.gdn.backends import REFERENCE
from slime_flashqla.gdn.inputs import GDNShape

# bf16 inputs and float32 accumulation: FLA and FlashQLA agree with the float32 reference
# at relative error ~1e-3..4e-3 on an H200 (docs/benchmarks.md); 2e-2 leaves headroom and
# still catches a wrong kernel, whose error is of order 1.
PARITY_TOLERANCE = 2e-2


@dataclass
class CheckResult:
    """What `check` ran and saw."""

    backend: str
    reason: str
    device: str
    shape: str
    forward_ms: float
    backward_ms: float
    parity: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| in float64."""
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()


def _layer_config(cuda: bool) -> dict:
    from slime_flashqla.workload.models import gdn_layer_config

    if cuda:  # Qwen3-Next-80B GDN sizes at TP1
        return gdn_layer_config(16, 32)
    return gdn_layer_config(2, 4, head_dim=64, hidden_size=256)


def _kernel_parity(backend: str, device: torch.device, hk: int, hv: int) -> dict[str, float]:
    """Relative error of the kernel's o, final state and gradients against the torch reference.

    The check's layer heads and the layer's dtypes (beta in the q/k/v dtype, g and the states in
    float32) with initial and final states: the kernels `warmup`'s `+states` parts compile, so
    `check` on a warmed node compiles nothing.
    """
    from slime_flashqla.gdn import get_chunk_gated_delta_rule

    generator = torch.Generator(device="cpu").manual_seed(0)
    lengths = [300, 724]
    tokens, dim = sum(lengths), 128

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    inputs = {
        "q": rand(1, tokens, hk, dim),
        "k": rand(1, tokens, hk, dim),
        "v": rand(1, tokens, hv, dim),
        "g": torch.nn.functional.logsigmoid(rand(1, tokens, hv)),
        "beta": torch.rand(1, tokens, hv, generator=generator),
        "initial_state": rand(len(lengths), hv, dim, dim) * 0.1,
    }
    cu_seqlens = torch.tensor([0, lengths[0], tokens], dtype=torch.int32, device=device)
    do = rand(1, tokens, hv, dim).to(device)
    dht = rand(len(lengths), hv, dim, dim).to(device)

    def run(name, dtype):
        leaves = {
            key: value.to(device, dtype if key in ("q", "k", "v", "beta") else torch.float32).requires_grad_()
            for key, value in inputs.items()
        }
        fn = get_chunk_gated_delta_rule(name)
        o, ht = fn(
            leaves["q"],
            leaves["k"],
            leaves["v"],
            g=leaves["g"],
            beta=leaves["beta"],
            initial_state=leaves["initial_state"],
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu_seqlens,
        )
        ((o.float() * do).sum() + (ht.float() * dht).sum()).backward()
        return {"o": o, "final_state": ht, **{f"d{key}": leaf.grad for key, leaf in leaves.items()}}

    # The reference sees the same bf16-rounded q/k/v, so only the kernel's error is measured.
    reference = run(REFERENCE, torch.bfloat16)
    actual = run(backend, torch.bfloat16)
    return {key: relative_error(actual[key], reference[key]) for key in reference}


def run_check(backend: str = "auto") -> CheckResult:
    """Build a GDN layer, run forward+backward on `backend` and check the results."""
    from slime_flashqla.layers import Qwen3NextGatedDeltaNet, init_like_checkpoint, packed_batch

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    config = _layer_config(cuda)
    lengths = [1000, 3096] if cuda else [100, 156]
    torch.manual_seed(0)
    layer = Qwen3NextGatedDeltaNet(config, backend=backend).to(device=device, dtype=dtype)
    init_like_checkpoint(layer)
    x, cu_seqlens = packed_batch(lengths, config["hidden_size"], device=device, dtype=dtype)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    start = time.perf_counter()
    y = layer(x, cu_seqlens=cu_seqlens)
    sync()
    forward_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    y.float().square().mean().backward()
    sync()
    backward_ms = (time.perf_counter() - start) * 1e3

    heads, dim = config["linear_num_key_heads"], config["linear_key_head_dim"]
    shape = GDNShape(1, x.shape[1], heads, config["linear_num_value_heads"], dim, dim, len(lengths), True)
    # What the step ran: auto's choices are cached per kind of input, so this is the one it made.
    choice = layer.chunk_gated_delta_rule.choice_for(shape, dtype, x.device, backward=True)
    chosen, reason = choice.backend, choice.reason
    result = CheckResult(
        backend=chosen,
        reason=reason,
        device=str(torch.cuda.get_device_name(device) if cuda else "cpu"),
        shape=(
            f"Qwen3NextGatedDeltaNet Hk={config['linear_num_key_heads']} Hv={config['linear_num_value_heads']} "
            f"K=V={config['linear_key_head_dim']}, {dtype}, tokens {'+'.join(map(str, lengths))}"
        ),
        forward_ms=forward_ms,
        backward_ms=backward_ms,
    )
    if not torch.isfinite(y).all():
        result.problems.append("the layer output has NaN/Inf")
    for name, param in [("input", x), *layer.named_parameters()]:
        if param.grad is None or not torch.isfinite(param.grad).all():
            result.problems.append(f"the gradient of {name} is missing or not finite")
    if chosen != REFERENCE:
        result.parity = _kernel_parity(chosen, device, config["linear_num_key_heads"], config["linear_num_value_heads"])
        result.problems += [
            f"{chosen} differs from the torch reference in {key}: relative error {err:.2e} > {PARITY_TOLERANCE}"
            for key, err in result.parity.items()
            if not err <= PARITY_TOLERANCE
        ]
    return result
