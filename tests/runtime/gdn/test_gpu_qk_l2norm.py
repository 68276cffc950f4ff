"""The `flashqla` backend normalises q/k with this package's fixed-launch Triton l2norm, so no torch.compile starts.

q and k share one autograd node; the result must match FLA's public `l2norm` (same math: float32
sum of squares + eps, rsqrt, cast back) to rounding, and FlashQLA's own path to bf16 level.

FlashQLA's own l2norm is `@torch.compile`d: its first call in a process starts Dynamo and
Inductor, the largest part of a warm first training step (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slime_flashqla.host.packages import is_installed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (is_installed("fla") and is_installed("flash_qla")), reason="needs FLA and flash-qla"),
]
TESTS = Path(__file__).resolve().parents[2]

# A fresh process: Dynamo's counters start at zero and nothing is compiled yet. The arguments
# are a layer's (16/32 heads, bf16 beta, no states), whose kernels `slime-flashqla warmup` compiles.
SCRIPT = textwrap.dedent(
    """
    import json, torch
    from helpers.gdn_inputs import make_inputs
    from slime_flashqla.gdn import get_chunk_gated_delta_rule

    inputs = make_inputs(lengths=(300, 724), key_heads=16, value_heads=32, key_dim=128, value_dim=128,
                         dtype=torch.bfloat16, beta_dtype=torch.bfloat16, device="cuda")

    def step(fn):
        names = ("q", "k", "v", "g", "beta")
        leaves = {n: inputs[n].detach().clone().requires_grad_() for n in names}
        o, _ = fn(leaves["q"], leaves["k"], leaves["v"], g=leaves["g"], beta=leaves["beta"],
                  use_qk_l2norm_in_kernel=True, cu_seqlens=inputs["cu_seqlens"])
        o.float().square().sum().backward()
        torch.cuda.synchronize()
        return [o.detach()] + [leaves[n].grad for n in names]

    def frames():
        import torch._dynamo.utils as du
        return du.counters["frames"]["total"]

    ours = step(get_chunk_gated_delta_rule("flashqla"))
    after_ours = frames()

    # The backend's one autograd node for q and k against FLA's public l2norm on each.
    from fla.modules.norm.l2norm import l2norm as fla_l2norm
    from slime_flashqla.gdn.qk_l2norm import _qk_function
    q, k = (inputs[n].detach().clone().requires_grad_() for n in ("q", "k"))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    fused = _qk_function()(q, k)
    public = (fla_l2norm(q), fla_l2norm(k))
    pairs = list(zip(fused, public))
    pairs += list(zip(torch.autograd.grad(fused, (q, k), (dq, dk)), torch.autograd.grad(public, (q, k), (dq, dk))))
    with torch.no_grad():  # the forward-only path skips the autograd node: same kernels, same values
        plain = _qk_function()(q, k)
        pairs += list(zip(plain, fused))
    same = [((a.double() - b.double()).norm() / b.double().norm()).item() for a, b in pairs]
    nodes = [plain[0].grad_fn is None, fused[0].grad_fn is fused[1].grad_fn]
    import flash_qla
    theirs = step(flash_qla.chunk_gated_delta_rule)
    rel = [((a.double() - b.double()).norm() / b.double().norm()).item() for a, b in zip(ours, theirs)]
    print(json.dumps({"nodes": nodes, "same": same,
                      "frames_after_ours": after_ours,
                      "frames_after_flashqla_own": frames(), "rel": rel}))
    """
)


def test_flashqla_backend_starts_no_torch_compile_and_matches_flashqlas_own_l2norm():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(result)
    # q and k share one autograd node (none under no_grad); against FLA's public l2norm the
    # outputs and gradients differ by rounding only, and the no-grad path gives the same values.
    assert result["nodes"] == [True, True]
    assert max(result["same"][:4]) < 4e-3, result["same"]
    assert max(result["same"][4:]) == 0.0, result["same"]
    assert result["frames_after_ours"] == 0, "the flashqla backend ran something through torch.compile"
    # The control: FlashQLA's own l2norm does go through torch.compile, so the count can move.
    assert result["frames_after_flashqla_own"] > 0
    # Same math (float32 sum of squares + eps, rsqrt): outputs and gradients agree to bf16 level.
    assert max(result["rel"]) < 1e-2, result["rel"]
