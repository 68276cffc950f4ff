"""`get_chunk_gated_delta_rule(backend)`: one callable class with FLA's signature for every backend.

A `GDNKernel` runs one kernel backend; `AutoGDNKernel` (`auto`) overrides only `choice_for`,
picking a backend per kind of input. Callers ask either one `choice_for(...)` what runs and
why, instead of probing which shape of callable they hold.
"""

from __future__ import annotations

import logging
import threading

import torch

from slime_flashqla.gdn.backends import AUTO, KERNEL_BACKENDS
from slime_flashqla.gdn.backends.auto import BackendChoice, choose_backend, explain_auto
from slime_flashqla.gdn.backends.contract import KernelContract
from slime_flashqla.gdn.empty import empty_outputs
from slime_flashqla.gdn.errors import GDNInputError
from slime_flashqla.gdn.inputs import GDNShape, check_inputs
from slime_flashqla.gdn.names import BACKENDS

__all__ = [
    "AutoGDNKernel",
    "BackendChoice",
    "GDNKernel",
    "choose_backend",
    "explain_auto",
    "get_chunk_gated_delta_rule",
    "needs_backward",
]

logger = logging.getLogger("slime_flashqla.gdn")

ASKED_FOR = "asked for explicitly"


def needs_backward(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will run a backward pass through these inputs."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _check_name(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(BACKENDS)}")
    return backend


def _launch(backend: KernelContract, shape: GDNShape, q, k, v, g, beta, **kwargs):
    if shape.empty:  # no kernel is written for an empty grid
        return empty_outputs(shape, q, v, kwargs.get("initial_state"), kwargs.get("output_final_state", False))
    kernel = backend.kernel()
    q, k, v, g, beta, kwargs = backend.prepare(q, k, v, g, beta, kwargs)
    return kernel(q, k, v, g=g, beta=beta, **kwargs)


class GDNKernel:
    """chunk_gated_delta_rule on one kernel backend, refusing with the reason before any launch."""

    def __init__(self, backend: KernelContract) -> None:
        self.backend = backend.name
        self._backend = backend
        # The runtime verdict (versions, capability, package) cannot change within a process;
        # re-deriving it on every call cost tens of microseconds of host time per launch.
        self._runtime_verdicts: dict[tuple, str | None] = {}

    def __repr__(self) -> str:
        return f"<chunk_gated_delta_rule[{self.backend}]>"

    def choice_for(self, shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool) -> BackendChoice:
        """The backend that runs inputs of this kind, and why (runs no kernel)."""
        return BackendChoice(self.backend, ASKED_FOR)

    def run_checked(self, shape: GDNShape, q, k, v, g, beta, *, initial_state=None, **kwargs):
        """Run on inputs `check_inputs` already passed (as `shape`)."""
        backend, name = self._backend, self.backend
        problem = backend.input_problem(shape, q.dtype, q.device)
        if problem:
            raise GDNInputError(f"chunk_gated_delta_rule[{name}]: {problem}")
        backward = needs_backward(q, k, v, g, beta, initial_state)
        key = (q.device, backward, q.dtype)
        if key not in self._runtime_verdicts:
            self._runtime_verdicts[key] = backend.runtime_problem(q.device, backward, q.dtype)
        problem = self._runtime_verdicts[key]
        if problem:
            raise backend.unavailable_error(f"chunk_gated_delta_rule[{name}]: {problem}")
        return _launch(backend, shape, q, k, v, g, beta, initial_state=initial_state, **kwargs)

    def __call__(
        self,
        q,
        k,
        v,
        *,
        g,
        beta,
        scale=None,
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=False,
        cu_seqlens=None,
    ):
        # The named keywords are FLA's own, so an unknown one is a TypeError here, before the check.
        shape = check_inputs(q, k, v, g, beta, scale, initial_state, cu_seqlens)
        return self.run_checked(
            shape,
            q,
            k,
            v,
            g,
            beta,
            scale=shape.scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=shape.cu_seqlens,
        )


class AutoGDNKernel(GDNKernel):
    """`auto`: picks a backend per kind of input, logs each new choice and its reason once."""

    def __init__(self) -> None:  # no backend of its own: each call runs the chosen backend's GDNKernel
        self.backend = AUTO
        self._choices: dict[tuple, BackendChoice] = {}
        self._lock = threading.Lock()
        self._kernels = {name: GDNKernel(backend) for name, backend in KERNEL_BACKENDS.items()}

    @property
    def choices(self) -> dict[tuple, BackendChoice]:
        """Every choice made so far, keyed by (device, dtype, K, V, backward)."""
        return dict(self._choices)

    def choice_for(self, shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool) -> BackendChoice:
        """The (cached, logged-once) choice for this kind of input."""
        key = (device, dtype, shape.key_dim, shape.value_dim, backward)
        choice = self._choices.get(key)
        if choice is None:
            with self._lock:
                choice = self._choices.get(key)
                if choice is None:
                    choice = choose_backend(shape, dtype, device, backward)
                    self._choices[key] = choice
                    logger.info(
                        "GDN backend auto -> %s for %s %s K=%d V=%d%s: %s",
                        choice.backend,
                        device,
                        str(dtype).removeprefix("torch."),
                        shape.key_dim,
                        shape.value_dim,
                        " (training)" if backward else "",
                        choice.reason,
                    )
        return choice

    def run_checked(self, shape: GDNShape, q, k, v, g, beta, *, initial_state=None, **kwargs):
        """Run on checked inputs through the backend chosen for them; it skips its own copy of the check."""
        backward = needs_backward(q, k, v, g, beta, initial_state)
        choice = self.choice_for(shape, q.dtype, q.device, backward)
        return self._kernels[choice.backend].run_checked(shape, q, k, v, g, beta, initial_state=initial_state, **kwargs)


def get_chunk_gated_delta_rule(backend: str) -> GDNKernel:
    """Return chunk_gated_delta_rule for `backend` (fla, flashqla, torch, auto), imports deferred."""
    _check_name(backend)
    if backend == AUTO:
        return AutoGDNKernel()
    KERNEL_BACKENDS[backend].require()
    return GDNKernel(KERNEL_BACKENDS[backend])
