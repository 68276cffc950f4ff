"""Host time per call of the GDN input check (and the `flashqla` call path), as one JSON line.

A measurement script, not a test (pytest does not collect it). It imports only what every
version of the package has (`slime_flashqla.gdn.inputs.check_inputs`, and
`slime_flashqla.gdn.get_chunk_gated_delta_rule` for the call path), so the same script
measures an older checkout and a newer one: point PYTHONPATH at the `runtime/` to measure.

    PYTHONPATH=$PWD/runtime python3 tools/gpu/check_inputs_host_time.py --device cuda

Each figure is the median over --repeats rounds of the mean host time of --calls calls,
timed without synchronising, after a warm-up; the GPU is synchronised between rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (the figure) or cpu (to try the script)")
    parser.add_argument("--tokens", type=int, default=32768, help="packed tokens T")
    parser.add_argument("--sequences", type=int, default=8, help="sequences in cu_seqlens")
    parser.add_argument("--key-heads", type=int, default=16)
    parser.add_argument("--value-heads", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--calls", type=int, default=2000, help="calls per round of the check")
    parser.add_argument("--repeats", type=int, default=9, help="rounds; the median is reported")
    parser.add_argument("--path-calls", type=int, default=50, help="calls per round of the flashqla call path")
    parser.add_argument("--no-call-path", action="store_true", help="time the check only")
    parser.add_argument("--label", default="", help="a name for this run in the JSON line (e.g. before, after)")
    return parser.parse_args(argv)


def make_inputs(args, torch, device):
    """bf16 q/k/v and beta, float32 g, int32 cu_seqlens of near-equal sequences, as a GDN layer makes them."""
    t, hk, hv, d = args.tokens, args.key_heads, args.value_heads, args.head_dim
    q = torch.randn(1, t, hk, d, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, t, hk, d, device=device, dtype=torch.bfloat16)
    v = torch.randn(1, t, hv, d, device=device, dtype=torch.bfloat16)
    g = torch.nn.functional.logsigmoid(torch.randn(1, t, hv, device=device) + 2.0)
    beta = torch.rand(1, t, hv, device=device, dtype=torch.bfloat16)
    bounds = [round(i * t / args.sequences) for i in range(args.sequences + 1)]
    cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=device)
    return q, k, v, g, beta, cu_seqlens


def host_us_per_call(fn, calls: int, repeats: int, synchronize) -> float:
    """Median over rounds of the mean host time of one call, in microseconds."""
    for _ in range(max(20, calls // 10)):
        fn()
    synchronize()
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter_ns() - start) / calls / 1e3)
        synchronize()
    return round(statistics.median(rounds), 2)


def checkout_commit(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", os.path.dirname(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    import slime_flashqla.gdn.inputs as inputs_module
    from slime_flashqla.gdn.inputs import check_inputs

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    q, k, v, g, beta, cu_seqlens = make_inputs(args, torch, device)
    result = {
        "probe": "check_inputs_host_time",
        "label": args.label,
        "device": torch.cuda.get_device_name(device) if cuda else str(device),
        "torch": torch.__version__,
        "slime_flashqla": os.path.dirname(inputs_module.__file__),
        "commit": checkout_commit(inputs_module.__file__),
        "tokens": args.tokens,
        "sequences": args.sequences,
        "heads": f"{args.key_heads}/{args.value_heads}",
        "head_dim": args.head_dim,
        "calls": args.calls,
        "repeats": args.repeats,
    }

    def check():
        check_inputs(q, k, v, g, beta, None, None, cu_seqlens)

    # The hot path: one cu_seqlens tensor for every GDN layer of a step.
    result["check_inputs_us"] = host_us_per_call(check, args.calls, args.repeats, synchronize)
    # Without cu_seqlens (a dense batch): the shape checks alone.
    result["check_inputs_dense_us"] = host_us_per_call(
        lambda: check_inputs(q, k, v, g, beta, None, None, None), args.calls, args.repeats, synchronize
    )
    # cu_seqlens made under inference_mode (evaluation, reference log-probs): no version counter.
    with torch.inference_mode():
        inference_cu = cu_seqlens.clone()
    try:
        result["check_inputs_inference_cu_seqlens_us"] = host_us_per_call(
            lambda: check_inputs(q, k, v, g, beta, None, None, inference_cu),
            max(1, args.calls // 10),
            args.repeats,
            synchronize,
        )
    except Exception as error:  # the older check refused these: record what it said
        result["check_inputs_inference_cu_seqlens_us"] = None
        result["check_inputs_inference_cu_seqlens_error"] = f"{type(error).__name__}: {error}"

    if args.no_call_path:
        result["flashqla_call_us"] = None
        result["flashqla_call_skipped"] = "--no-call-path"
    else:
        try:
            from slime_flashqla.gdn import get_chunk_gated_delta_rule

            fn = get_chunk_gated_delta_rule("flashqla")

            def call():
                fn(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)

            with torch.no_grad():  # forward only: the host cost of the path, not of autograd
                result["flashqla_call_us"] = host_us_per_call(call, args.path_calls, args.repeats, synchronize)
            result["path_calls"] = args.path_calls
        except Exception as error:  # no GPU, no flash-qla: the check's figure still stands
            result["flashqla_call_us"] = None
            result["flashqla_call_skipped"] = f"{type(error).__name__}: {error}"
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
