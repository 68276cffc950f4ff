"""Capture triton_ops' real kernel launches on the CPU and compile them for sm_90 without a GPU.

Run as a script in a process without TRITON_INTERPRET (the test runs it in a subprocess):
each op's host function is called with CPU tensors at several token counts, every launch is
captured instead of run, and Triton's own binder turns its arguments into the
specialisation (signature, constants, divisibility) and compile options it would use on a
GPU. The script prints one JSON object: per kernel, the distinct specialisations seen across
the token counts, and for the first one the registers, stack and local bytes of the sm_90
cubin (ptxas puts spilled registers on the stack). Uses Triton 3.6's JIT internals; where
they are missing (3.4 has no _pack_args) it exits 3.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

TOKEN_COUNTS = (1, 17, 4096, 5003)


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime import jit

    create_binder = getattr(jit, "create_function_from_signature", None)
    if create_binder is None or not hasattr(jit.JITFunction, "_pack_args"):
        sys.exit(3)
    from slime_flashqla.triton_ops import _host, causal_conv1d, l2norm

    # The package's `gdn_gates` and `rms_norm_gated` are the functions; their modules by from-imports.
    from slime_flashqla.triton_ops.gdn_gates import _backward as gates_backward
    from slime_flashqla.triton_ops.gdn_gates import _forward as gates_forward
    from slime_flashqla.triton_ops.rms_norm_gated import _backward as norm_backward
    from slime_flashqla.triton_ops.rms_norm_gated import _forward as norm_forward

    captured = []
    label = [""]

    def capture(self, *args, grid, warmup, **kwargs):
        captured.append((self, label[0], args, kwargs))

    jit.JITFunction.run = capture
    _host.interpreting = lambda: True  # let the host functions take CPU tensors; nothing launches

    # Qwen3-Next's fused projection at 16/32 heads of 128 (q, k, v, z per key head) and
    # Qwen3.5's [q | k | v] projection: the layers' two layouts besides a plain tensor.
    next_layout = causal_conv1d.ProjectionLayout(16, 128, 256, 256)
    flat_layout = causal_conv1d.ProjectionLayout(1, 2048, 4096)
    for tokens in TOKEN_COUNTS:
        mixed = torch.randn(1, tokens, 3 * 2048, dtype=torch.bfloat16)
        cu = torch.tensor([0, tokens], dtype=torch.int32)
        plain = causal_conv1d.ProjectionLayout.plain(3 * 2048)
        for name, layout, x in (
            ("", plain, mixed),
            ("[qwen3-next]", next_layout, torch.randn(1, tokens, next_layout.width, dtype=torch.bfloat16)),
            ("[qwen3.5]", flat_layout, torch.randn(1, tokens, flat_layout.width, dtype=torch.bfloat16)),
        ):
            label[0] = name
            w = torch.randn(layout.channels, 1, 4, dtype=torch.bfloat16)
            outputs = causal_conv1d._forward(x, w, cu, layout, 4)
            causal_conv1d._backward(x, w, cu, layout, 4, tuple(torch.randn_like(o) for o in outputs))
        label[0] = ""
        ba = torch.randn(1, tokens, 16, 4, dtype=torch.bfloat16)
        a_log, dt_bias = torch.randn(32, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16)
        g, beta = gates_forward(ba[..., 2:], ba[..., :2], a_log, dt_bias, 32)
        gates_backward(ba[..., 2:], beta, a_log, dt_bias, torch.randn_like(g), torch.randn_like(beta), 32, beta.dtype)
        q = mixed[..., :2048].reshape(1, tokens, 16, 128)
        # Also `tokens` rows as one 2-D tensor, so row counts of 1 and odd ones come up too.
        for x in (q, torch.randn(tokens, 128, dtype=torch.bfloat16)):
            y, rstd = l2norm.l2norm_fwd(x)
            l2norm.l2norm_bwd(y, rstd, torch.randn_like(y))
        for rows in (tokens * 32, tokens):
            core = torch.randn(rows, 128, dtype=torch.bfloat16)
            gate, norm_weight = torch.randn_like(core), torch.ones(128, dtype=torch.bfloat16)
            _, norm_rstd = norm_forward(core, gate, norm_weight, 1e-6)
            norm_backward(core, gate, norm_weight, norm_rstd, torch.randn_like(core))

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    report = {}
    for fn, name, args, kwargs in captured:
        kwargs = {"debug": False, **kwargs}
        binder = create_binder(fn.signature, fn.params, backend)
        bound_args, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
        entry = report.setdefault(fn.__name__ + name, {"specialisations": []})
        key = repr((sorted(signature.items()), sorted(constexprs.items()), sorted(attrs.items()), options))
        if key in entry["specialisations"]:
            continue
        entry["specialisations"].append(key)
        if len(entry["specialisations"]) > 1:
            continue
        kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(kernel.asm["cubin"])
            cubin.flush()
            usage = subprocess.run([str(cuobjdump), "-res-usage", cubin.name], capture_output=True, text=True).stdout
        found = re.search(r"REG:(\d+) STACK:(\d+).*?LOCAL:(\d+)", usage, re.S)
        if found:
            # ptxas puts spilled registers on the stack (STACK), not in LOCAL, for these kernels.
            entry.update(
                registers=int(found.group(1)), stack_bytes=int(found.group(2)), local_bytes=int(found.group(3))
            )
        entry.update(num_warps=options.num_warps, maxnreg=options.maxnreg)
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    main()
