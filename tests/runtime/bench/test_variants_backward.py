"""The benchmarks' training pass backpropagates as a model does: same gradients, no sympy import on the way."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from slime_flashqla.bench.variants import backward_from


def test_backward_from_gives_the_gradients_of_tensor_backward():
    """The engine call accumulates exactly what output.backward(grad) accumulates, into every leaf."""
    torch.manual_seed(0)
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(5, 3, dtype=torch.float64)
    (x @ w).tanh().backward(grad)
    expected = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    backward_from((x @ w).tanh(), grad)
    assert torch.equal(x.grad, expected[0]) and torch.equal(w.grad, expected[1])


def test_the_training_pass_imports_no_sympy():
    """A fresh process's first layer training pass leaves sympy unimported, as loss.backward() in a model does."""
    code = textwrap.dedent(
        """
        import sys
        import torch
        from slime_flashqla.bench.variants import layer_call
        layer = torch.nn.Linear(8, 8, dtype=torch.float64)

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = layer

            def forward(self, x, cu_seqlens=None):
                return self.inner(x)

        x = torch.randn(4, 8, dtype=torch.float64)
        layer_call(Layer(), {"x": x, "cu_seqlens": None, "grad": torch.ones(4, 8, dtype=torch.float64)}, True)()
        assert layer.weight.grad is None  # reset after the pass, as the benchmarks do
        print("sympy" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
