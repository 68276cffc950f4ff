"""The `flashqla` backend normalises q/k with FLA's Triton l2norm, so no torch.compile starts.

It calls FLA's kernels for q and k from one autograd node, past FLA's per-call dispatch; the
result must be bit-identical to FLA's public `l2norm`.

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

from slime_flashqla.gdn.packages import is_installed

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
    from slime_flashqla.gdn.qk_l2norm import qk_l2norm_impl

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
    from slime_flashqla.gdn.qk_l2norm import _fla_l2norm, _fla_l2norm_fwd_bwd, _qk_function
    q, k = (inputs[n].detach().clone().requires_grad_() for n in ("q", "k"))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    fused = _qk_function()(q, k)
    public = (_fla_l2norm()(q), _fla_l2norm()(k))
    same = [torch.equal(a, b) for a, b in zip(fused, public)]
    same += [torch.equal(a, b) for a, b in zip(torch.autograd.grad(fused, (q, k), (dq, dk)),
                                               torch.autograd.grad(public, (q, k), (dq, dk)))]
    with torch.no_grad():  # the forward-only path skips the autograd node: same kernels, same bits
        plain = _qk_function()(q, k)
        same += [torch.equal(a, b) and not a.requires_grad for a, b in zip(plain, public)]
    import flash_qla
    theirs = step(flash_qla.chunk_gated_delta_rule)
    rel = [((a.double() - b.double()).norm() / b.double().norm()).item() for a, b in zip(ours, theirs)]
    print(json.dumps({"impl": qk_l2norm_impl(), "fused": _fla_l2norm_fwd_bwd() is not None, "same": same,
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
    assert result["impl"] == "fla-triton"
    # On CUDA no FLA backend replaces its l2norm, so q and k share one autograd node that runs
    # FLA's own kernels: outputs and gradients are bit-identical to FLA's public l2norm, and
    # so are the outputs of the no-grad path, which runs the forward kernels without the node.
    assert result["fused"] is True
    assert result["same"] == [True] * 6, result["same"]
    assert result["frames_after_ours"] == 0, "the flashqla backend ran something through torch.compile"
    # The control: FlashQLA's own l2norm does go through torch.compile, so the count can move.
    assert result["frames_after_flashqla_own"] > 0
    # Same math (float32 sum of squares + eps, rsqrt): outputs and gradients agree to bf16 level.
    assert max(result["rel"]) < 1e-2, result["rel"]
