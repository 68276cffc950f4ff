"""Host time per call of the `flashqla` path's pieces at 4096 tokens (docs/benchmarks.md).

A diagnosis script, not a test: `python tools/gpu/host_time_probe.py` on a GPU node with FLA
and flash-qla installed and the 16/32 kernels warmed. Each figure is the median of 7 repeats
of 200 calls timed on the host without synchronising, after 20 warm-up calls.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import flash_qla
from fla.modules.norm.l2norm import l2norm as fla_l2
from flash_qla.utils import l2norm as fq_l2norm

from helpers.gdn_inputs import make_inputs
from slime_flashqla.gdn import check_inputs, get_chunk_gated_delta_rule
from slime_flashqla.gdn.qk_l2norm import _qk_function

inp = make_inputs(
    lengths=(1000, 3096),
    key_heads=16,
    value_heads=32,
    key_dim=128,
    value_dim=128,
    dtype=torch.bfloat16,
    beta_dtype=torch.bfloat16,
    device="cuda",
)
q, k, v, g, beta, cu = (inp[n] for n in ("q", "k", "v", "g", "beta", "cu_seqlens"))
fused = _qk_function()
ours = get_chunk_gated_delta_rule("flashqla")
auto = get_chunk_gated_delta_rule("auto")


def per_call(fn, n=200, reps=7):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t) / n
        torch.cuda.synchronize()
        out.append(host * 1e6)
    return round(statistics.median(out), 1)


qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
dq = torch.randn_like(q)


def fb(f):
    def run():
        a, b = f(qg, kg)
        torch.autograd.backward((a, b), (dq, dq))

    return run


res = {}
with torch.no_grad():
    res["l2norm fwd: fla public x2"] = per_call(lambda: (fla_l2(q), fla_l2(k)))
    res["l2norm fwd: fused q/k"] = per_call(lambda: fused(q, k))
    res["l2norm fwd: flashqla own x2"] = per_call(lambda: (fq_l2norm(q), fq_l2norm(k)))
    res["check_inputs"] = per_call(lambda: check_inputs(q, k, v, g, beta, None, None, cu))
    kw = dict(g=g, beta=beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    res["kernel fwd: flashqla backend"] = per_call(lambda: ours(q, k, v, **kw), n=50)
    res["kernel fwd: auto"] = per_call(lambda: auto(q, k, v, **kw), n=50)
    res["kernel fwd: flash_qla direct"] = per_call(lambda: flash_qla.chunk_gated_delta_rule(q, k, v, **kw), n=50)
res["l2norm fwd: fused q/k with grad enabled (one autograd node, as in training)"] = per_call(lambda: fused(qg, kg))
res["l2norm fwd+bwd: fla public x2"] = per_call(fb(lambda a, b: (fla_l2(a), fla_l2(b))))
res["l2norm fwd+bwd: fused q/k"] = per_call(fb(fused))
res["l2norm fwd+bwd: flashqla own x2"] = per_call(fb(lambda a, b: (fq_l2norm(a), fq_l2norm(b))))
a, b = fused(qg, kg)
c, d = fla_l2(qg), fla_l2(kg)
ga = torch.autograd.grad((a, b), (qg, kg), (dq, dq))
gc = torch.autograd.grad((c, d), (qg, kg), (dq, dq))
res["fused == public (out, grads)"] = [
    torch.equal(a, c),
    torch.equal(b, d),
    torch.equal(ga[0], gc[0]),
    torch.equal(ga[1], gc[1]),
]
print("HOSTOV " + json.dumps(res))
