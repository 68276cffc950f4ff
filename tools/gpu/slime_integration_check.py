"""GPU check of the slime integration: slime's layer built through it, with `auto`, against slime's own layer.

A check script, not a test (pytest does not collect it). On a GPU node with FLA and flash-qla:

    SLIME_SOURCE=$PWD/.slime-src PYTHONPATH=$PWD/runtime python3 tools/gpu/slime_integration_check.py \
        [--models qwen3-next,qwen3.5] [--pack 4096+2500+1200+300+96]

For each model: slime's own layer class (its real FLA ShortConvolution and FusedRMSNormGated,
`--qwen-gdn-backend flashqla`: slime's factory and flash_qla's kernel) is built first, with no
integration; then the integration is installed and the class slime's `Attention` builds by name
(`slime_plugins.models.qwen3_next.Qwen3NextGatedDeltaNet`, ...) is built with
`--qwen-gdn-backend auto`. Both are cast to bf16 as Megatron's Float16Module does, hold the same
weights (loaded by name), and run forward+backward on one packed batch with one output gradient.
Output, input gradient and every parameter gradient are compared (relative L2 error). Prints one
JSON line; exits 1 where a comparison is over its bound or `auto` did not run FlashQLA, 2 where no GPU
is visible.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

import torch

from slime_flashqla.integrations.slime import import_slime_module, install, uninstall
from slime_flashqla.integrations.slime.source import GDN_CLASSES, GDN_MODULES, slime_gdn_layer_class
from slime_flashqla.layers import init_like_checkpoint, packed_batch
from slime_flashqla.workload.models import gdn_layer_config

# bf16 forward+backward through two implementations of the conv, gates and norm: rounding apart.
BOUNDS = {"out": 1e-2, "dx": 1e-2, "param_grad": 2e-2}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def forward_backward(layer, x, cu, dy):
    xl = x.detach().clone().requires_grad_()
    out = layer(xl, cu_seqlens=cu)
    out.backward(dy)
    torch.cuda.synchronize()
    return out.detach(), xl.grad, {name: p.grad for name, p in layer.named_parameters()}


def check(model: str, cfg, lengths: list[int]) -> dict:
    torch.manual_seed(0)
    theirs = slime_gdn_layer_class(model)(cfg, layer_idx=0, args=SimpleNamespace(qwen_gdn_backend="flashqla"))
    theirs = theirs.cuda().to(torch.bfloat16)
    install()
    try:
        slime_name = getattr(import_slime_module(GDN_MODULES[model]), GDN_CLASSES[model])
        ours = slime_name(cfg, 0, args=SimpleNamespace(qwen_gdn_backend="auto"))
    finally:
        uninstall()  # the next model's slime layer is slime's own again, its factory too
    init_like_checkpoint(ours)
    ours = ours.cuda().to(torch.bfloat16)
    theirs.load_state_dict(ours.state_dict(), strict=True)

    x, cu = packed_batch(lengths, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    for layer in (theirs, ours):  # kernels compile on the first call of each
        forward_backward(layer, x, cu, dy)
        layer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    out_a, dx_a, grads_a = forward_backward(ours, x, cu, dy)
    out_b, dx_b, grads_b = forward_backward(theirs, x, cu, dy)
    seconds = time.perf_counter() - start
    param_errors = {name: rel(grads_a[name], grads_b[name]) for name in grads_b}
    choices = {str(key): choice.backend for key, choice in ours.chunk_gated_delta_rule.choices.items()}
    errors = {"out": rel(out_a, out_b), "dx": rel(dx_a, dx_b), "param_grad": max(param_errors.values())}
    return {
        "ours": f"{type(ours).__module__}.{type(ours).__qualname__}",
        "theirs": f"{type(theirs).__module__}.{type(theirs).__qualname__}",
        "auto_ran": sorted(set(choices.values())),
        "errors": errors,
        "worst_param": max(param_errors, key=param_errors.get),
        "seconds_warm": round(seconds, 3),
        "ok": all(errors[k] <= BOUNDS[k] for k in BOUNDS)
        and set(choices.values()) == {"flashqla"}
        and type(ours) is not type(theirs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3-next,qwen3.5")
    parser.add_argument("--pack", default="4096+2500+1200+300+96")
    parser.add_argument("--heads", default="16/32")
    parser.add_argument("--hidden", type=int, default=2048)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        # Without it the layers fail deep in TileLang or FlashQLA with a traceback, not a verdict.
        print("slime_integration_check.py needs a CUDA GPU (torch.cuda.is_available() is False): run it on a GPU node",
              file=sys.stderr)  # fmt: skip
        return 2
    started = time.perf_counter()
    key_heads, value_heads = (int(h) for h in args.heads.split("/"))
    lengths = [int(n) for n in args.pack.split("+")]
    cfg = SimpleNamespace(**gdn_layer_config(key_heads, value_heads, hidden_size=args.hidden), dtype=torch.bfloat16)
    results = {model: check(model, cfg, lengths) for model in args.models.split(",")}
    report = {
        "check": "slime_integration",
        "ok": all(r["ok"] for r in results.values()),
        "device": torch.cuda.get_device_name(),
        "tokens": sum(lengths),
        "bounds": BOUNDS,
        "models": results,
        "seconds_total": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
