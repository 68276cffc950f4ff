"""`get_chunk_gated_delta_rule(backend)`: one callable with FLA's signature for every backend."""

from __future__ import annotations

import logging
import threading

import torch

from slime_flashqla.gdn.backends import AUTO, KERNEL_BACKENDS
from slime_flashqla.gdn.backends.auto import BackendChoice, choose_backend, explain_auto
from slime_flashqla.gdn.empty import empty_outputs
from slime_flashqla.gdn.errors import GDNInputError
from slime_flashqla.gdn.inputs import GDNShape, check_inputs
from slime_flashqla.gdn.names import BACKENDS

logger = logging.getLogger("slime_flashqla.gdn")


__all__ = [
    "AutoChunkGatedDeltaRule",
    "BackendChoice",
    "choose_backend",
    "explain_auto",
    "get_chunk_gated_delta_rule",
    "needs_backward",
]


def needs_backward(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will run a backward pass through these inputs."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _check_name(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(BACKENDS)}")
    return backend


def _launch(name: str, shape: GDNShape, q, k, v, g, beta, **kwargs):
    if shape.empty:  # no kernel is written for an empty grid
        return empty_outputs(shape, q, v, kwargs.get("initial_state"), kwargs.get("output_final_state", False))
    backend = KERNEL_BACKENDS[name]
    kernel = backend.kernel()
    q, k, v, g, beta, kwargs = backend.prepare(q, k, v, g, beta, kwargs)
    return kernel(q, k, v, g=g, beta=beta, **kwargs)


def _checked_call(name: str):
    backend = KERNEL_BACKENDS[name]
    # The runtime verdict (versions, capability, package) cannot change within a process;
    # re-deriving it on every call cost tens of microseconds of host time per launch.
    runtime_verdicts: dict[tuple, str | None] = {}

    def run_checked(shape: GDNShape, q, k, v, g, beta, *, initial_state=None, **kwargs):
        """Run on inputs `check_inputs` already passed (as `shape`)."""
        problem = backend.input_problem(shape, q.dtype, q.device)
        if problem:
            raise GDNInputError(f"chunk_gated_delta_rule[{name}]: {problem}")
        backward = needs_backward(q, k, v, g, beta, initial_state)
        key = (q.device, backward, q.dtype)
        if key not in runtime_verdicts:
            runtime_verdicts[key] = backend.runtime_problem(q.device, backward, q.dtype)
        problem = runtime_verdicts[key]
        if problem:
            raise backend.unavailable_error(f"chunk_gated_delta_rule[{name}]: {problem}")
        return _launch(name, shape, q, k, v, g, beta, initial_state=initial_state, **kwargs)

    def chunk_gated_delta_rule(
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
        shape = check_inputs(q, k, v, g, beta, scale, initial_state, cu_seqlens)
        return run_checked(
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

    chunk_gated_delta_rule.__qualname__ = f"chunk_gated_delta_rule[{name}]"
    chunk_gated_delta_rule.backend = name
    chunk_gated_delta_rule.run_checked = run_checked
    return chunk_gated_delta_rule


class AutoChunkGatedDeltaRule:
    """`auto`: picks a backend per kind of input, logs each new choice and its reason once."""

    backend = AUTO

    def __init__(self) -> None:
        self._choices: dict[tuple, BackendChoice] = {}
        self._lock = threading.Lock()
        self._calls = {name: _checked_call(name) for name in KERNEL_BACKENDS}

    @property
    def choices(self) -> dict[tuple, BackendChoice]:
        """Every choice made so far, keyed by (device, dtype, K, V, backward)."""
        return dict(self._choices)

    def choose(self, shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool):
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
        # The named keywords are the other backends' own, so an unknown one is a TypeError here,
        # before the check, as it is for them. Inputs are checked once; the chosen backend skips
        # its own copy of the check.
        shape = check_inputs(q, k, v, g, beta, scale, initial_state, cu_seqlens)
        backward = needs_backward(q, k, v, g, beta, initial_state)
        choice = self.choose(shape, q.dtype, q.device, backward)
        return self._calls[choice.backend].run_checked(
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


def get_chunk_gated_delta_rule(backend: str):
    """Return chunk_gated_delta_rule for `backend` (fla, flashqla, torch, auto), imports deferred."""
    _check_name(backend)
    if backend == AUTO:
        return AutoChunkGatedDeltaRule()
    KERNEL_BACKENDS[backend].require()
    return _checked_call(backend)
