"""Every launch passes the kernel's arguments by name: reordering a kernel's parameters changes no result.

The test copies the package, reverses the order of every kernel's runtime parameters (pointers,
sizes, strides) in the copy's `jit/` modules, and runs each op forward and backward in Triton's
CPU interpreter, in the copy and in the package as it is. A launch that passed its arguments by
position would hand the copy's kernels a stride where a pointer goes (or another stride), and
its outputs would differ or the kernel would fail; by keyword, every output is bitwise the same.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import slime_flashqla
from helpers.triton_interpreter import INTERPRETER_UNAVAILABLE

PACKAGE = Path(slime_flashqla.__file__).parent
TESTS = Path(__file__).parents[2]

# Each op forward and backward at a small size, in float32, every output and gradient saved.
PROBE = textwrap.dedent(
    """
    import sys, torch
    from slime_flashqla import triton_ops

    gen = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).requires_grad_()

    def grads(outputs, *leaves):
        outputs = [o for o in outputs if o.requires_grad]
        cotangents = [torch.randn(o.shape, generator=gen) for o in outputs]
        return list(torch.autograd.grad(outputs, leaves, cotangents))

    out = {}
    layout = triton_ops.ProjectionLayout(groups=2, q_width=4, v_width=8, z_width=8)  # Qwen3-Next's, small
    proj, w = randn(1, 11, layout.width), randn(layout.channels, 1, 4)
    cu = torch.tensor([0, 3, 3, 11], dtype=torch.int32)
    conv = triton_ops.short_conv_silu(proj, w, cu, layout)
    out["short_conv"] = [*conv, *grads(conv, proj, w)]
    x, w = randn(2, 9, 16), randn(16, 1, 3)
    y = triton_ops.causal_conv1d_silu(x, w)
    out["causal_conv1d"] = [y, *grads([y], x, w)]
    ba, A_log, dt_bias = randn(1, 7, 3, 8), randn(12), randn(12)
    gates = triton_ops.gdn_gates(ba[..., 4:], ba[..., :4], A_log, dt_bias)
    out["gdn_gates"] = [*gates, *grads(gates, ba, A_log, dt_bias)]
    q = torch.randn(1, 6, 3, 32, generator=gen)
    y, rstd = triton_ops.l2norm_fwd(q)
    out["l2norm"] = [y, rstd, triton_ops.l2norm_bwd(y, rstd, torch.randn(y.shape, generator=gen))]
    x, gate, weight = randn(10, 32), randn(10, 32), randn(32)
    normed = triton_ops.rms_norm_gated(x, gate, weight, 1e-6)
    out["rms_norm_gated"] = [normed, *grads([normed], x, gate, weight)]
    torch.save({k: [t.detach() for t in v] for k, v in out.items()}, sys.argv[1])
    """
)


def reverse_kernel_parameters(path: Path) -> int:
    """Reverse the runtime parameters of every `*_kernel` in `path` (constexprs keep their place); how many."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kernels = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel")]
    for kernel in kernels:
        runtime = [a for a in kernel.args.args if a.annotation is None]
        constexprs = [a for a in kernel.args.args if a.annotation is not None]
        assert len(runtime) > 1, kernel.name
        kernel.args.args = [*reversed(runtime), *constexprs]
    path.write_text(ast.unparse(tree) + "\n", encoding="utf-8")
    return len(kernels)


def outputs(root: Path, tmp_path: Path, name: str) -> dict:
    """The probe's outputs, run in a fresh interpreted process with `root` (a folder holding slime_flashqla) first."""
    saved = tmp_path / f"{name}.pt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(TESTS)]), "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(saved)], capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(saved)


@pytest.mark.slow
@pytest.mark.skipif(INTERPRETER_UNAVAILABLE is not None, reason=INTERPRETER_UNAVAILABLE or "")
def test_reordering_every_kernel_s_parameters_changes_no_output(tmp_path):
    copy = tmp_path / "reordered"
    shutil.copytree(PACKAGE, copy / "slime_flashqla", ignore=shutil.ignore_patterns("__pycache__"))
    reversed_kernels = sum(reverse_kernel_parameters(p) for p in (copy / "slime_flashqla/triton_ops/jit").glob("*.py"))
    assert reversed_kernels == 9  # conv fwd, dpre, dx; gates fwd, bwd; l2norm fwd, bwd; norm fwd, bwd

    theirs, ours = outputs(copy, tmp_path, "reordered"), outputs(PACKAGE.parent, tmp_path, "as-is")
    assert theirs.keys() == ours.keys()
    for op, tensors in ours.items():
        assert len(theirs[op]) == len(tensors), op
        for i, (a, b) in enumerate(zip(theirs[op], tensors, strict=True)):
            assert torch.equal(a, b), f"{op}: output {i} differs once the kernel's parameters are reordered"
