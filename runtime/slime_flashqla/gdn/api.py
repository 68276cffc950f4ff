"""`get_chunk_gated_delta_rule(backend)`: one callable with FLA's signature for every backend."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from slime_flashqla.gdn.backends import KERNEL_BACKENDS, needs_backward
from slime_flashqla.gdn.empty import empty_outputs
from slime_flashqla.gdn.errors import GDNInputError
from slime_flashqla.gdn.inputs import GDNShape, check_inputs
from slime_flashqla.gdn.names import BACKENDS

logger = logging.getLogger("slime_flashqla.gdn")


@dataclass(frozen=True)
class BackendChoice:
    """What `auto` runs for a kind of input, and why."""

    backend: str
    reason: str


def _check_name(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(BACKENDS)}")
    return backend


def _launch(name: str, shape: GDNShape, q, k, v, g, beta, **kwargs):
    if shape.empty:  # no kernel is written for an empty grid
        return empty_outputs(shape, q, v, kwargs.get("initial_state"), kwargs.get("output_final_state", False))
    backend = KERNEL_BACKENDS[name]
    kernel = backend.kernel()
    group = shape.value_heads // shape.key_heads
    if group > 1 and not backend.supports_gva:
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
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


def choose_backend(shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool) -> BackendChoice:
    """The backend `auto` runs for these inputs, with the reason (runs no kernel)."""
    if device.type != "cuda":
        return BackendChoice("torch", f"inputs are on {device.type}; FLA and FlashQLA run on CUDA only")
    # One rule for every shape: on an H200, a FlashQLA-with-GVA variant was the fastest on every
    # benchmarked packed batch from 4096 to 32768 tokens, kernel and layer, and FLA never won
    # (docs/benchmarks.md), so `auto` does not switch by shape.
    ok, why = KERNEL_BACKENDS["flashqla"].supports(shape, dtype, device, backward)
    if ok:
        return BackendChoice("flashqla", why)
    fla_ok, fla_why = KERNEL_BACKENDS["fla"].supports(shape, dtype, device, backward)
    if fla_ok:
        return BackendChoice("fla", f"FlashQLA not used: {why}; FLA's own kernels run these inputs")
    return BackendChoice("torch", f"FlashQLA not used: {why}; FLA not used: {fla_why}")


def explain_auto(
    device=None,
    *,
    dtype: torch.dtype = torch.bfloat16,
    key_heads: int = 16,
    value_heads: int = 32,
    key_dim: int = 128,
    value_dim: int = 128,
    tokens: int = 32768,
    varlen: bool = True,
    backward: bool = True,
) -> BackendChoice:
    """What `auto` would run for inputs of this description, without a kernel launch."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    shape = GDNShape(1, tokens, key_heads, value_heads, key_dim, value_dim, 1, varlen)
    return choose_backend(shape, dtype, device, backward)


class AutoChunkGatedDeltaRule:
    """`auto`: picks a backend per kind of input, logs each new choice and its reason once."""

    backend = "auto"

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
    if backend == "auto":
        return AutoChunkGatedDeltaRule()
    KERNEL_BACKENDS[backend].require()
    return _checked_call(backend)
