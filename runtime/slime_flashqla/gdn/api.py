"""`get_chunk_gated_delta_rule(backend)`: one callable with FLA's signature for every backend."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from slime_flashqla.gdn.backends import KERNEL_BACKENDS, needs_backward
from slime_flashqla.gdn.errors import FlashQLAUnavailableError
from slime_flashqla.gdn.inputs import GDNShape, check_inputs

logger = logging.getLogger("slime_flashqla.gdn")

BACKENDS = ("fla", "flashqla", "torch", "auto")


# FlashQLA's GVA kernels (q/k with Hk < Hv heads) win big on long packed batches but lose to
# the same kernels on q/k repeated to Hv heads on short ones, in forward+backward: on an
# H200, 16/32 heads, 1000+3096 tokens: 1.83 ms repeated vs 2.01 ms GVA; 8192+24576 tokens:
# 5.75 ms repeated vs 3.78 ms GVA (docs/benchmarks.md). Up to this many tokens `auto`
# repeats q/k for FlashQLA training calls.
FLASHQLA_REPEAT_MAX_TOKENS = 8192


@dataclass(frozen=True)
class BackendChoice:
    """What `auto` runs for a kind of input, and why."""

    backend: str
    reason: str
    repeat_qk: bool = False  # expand q/k to the value head count before the kernel


def _check_name(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {backend!r}; valid names are: {', '.join(BACKENDS)}")
    return backend


def _launch(name: str, shape: GDNShape, q, k, v, g, beta, **kwargs):
    backend = KERNEL_BACKENDS[name]
    kernel = backend.kernel()
    group = shape.value_heads // shape.key_heads
    if group > 1 and not backend.supports_gva:
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    if name == "flashqla":
        # FlashQLA's TileLang kernels take dense strides; slices of a fused projection are not.
        q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    return kernel(q, k, v, g=g, beta=beta, **kwargs)


def _checked_call(name: str):
    backend = KERNEL_BACKENDS[name]

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
        problem = backend.input_problem(shape, q.dtype, q.device)
        if problem:
            raise ValueError(f"chunk_gated_delta_rule[{name}]: {problem}")
        backward = needs_backward(q, k, v, g, beta, initial_state)
        problem = backend.runtime_problem(q.device, backward, q.dtype)
        if problem:
            error = FlashQLAUnavailableError if name == "flashqla" else RuntimeError
            raise error(f"chunk_gated_delta_rule[{name}]: {problem}")
        return _launch(
            name,
            shape,
            q,
            k,
            v,
            g,
            beta,
            scale=scale,
            initial_state=initial_state,
            output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            cu_seqlens=cu_seqlens,
        )

    chunk_gated_delta_rule.__qualname__ = f"chunk_gated_delta_rule[{name}]"
    chunk_gated_delta_rule.backend = name
    return chunk_gated_delta_rule


def choose_backend(shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool) -> BackendChoice:
    """The backend `auto` runs for these inputs, with the reason (runs no kernel)."""
    if device.type != "cuda":
        return BackendChoice("torch", f"inputs are on {device.type}; FLA and FlashQLA run on CUDA only")
    ok, why = KERNEL_BACKENDS["flashqla"].supports(shape, dtype, device, backward)
    if ok:
        if backward and shape.value_heads > shape.key_heads and shape.tokens <= FLASHQLA_REPEAT_MAX_TOKENS:
            return BackendChoice(
                "flashqla",
                f"{why}; q/k repeated to {shape.value_heads} heads: faster than GVA for training at "
                f"<= {FLASHQLA_REPEAT_MAX_TOKENS} tokens",
                repeat_qk=True,
            )
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
        """Every choice made so far, keyed by (device, dtype, Hk, Hv, K, V, backward, short batch)."""
        return dict(self._choices)

    def choose(self, shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool):
        """The (cached, logged-once) choice for this kind of input."""
        short = shape.tokens <= FLASHQLA_REPEAT_MAX_TOKENS
        key = (str(device), dtype, shape.key_heads, shape.value_heads, shape.key_dim, shape.value_dim, backward, short)
        choice = self._choices.get(key)
        if choice is None:
            with self._lock:
                choice = self._choices.get(key)
                if choice is None:
                    choice = choose_backend(shape, dtype, device, backward)
                    self._choices[key] = choice
                    logger.info(
                        "GDN backend auto -> %s for %s %s Hk=%d Hv=%d K=%d V=%d%s%s: %s",
                        choice.backend,
                        device,
                        str(dtype).removeprefix("torch."),
                        shape.key_heads,
                        shape.value_heads,
                        shape.key_dim,
                        shape.value_dim,
                        " (training)" if backward else "",
                        f", <= {FLASHQLA_REPEAT_MAX_TOKENS} tokens" if short else "",
                        choice.reason,
                    )
        return choice

    def __call__(self, q, k, v, *, g, beta, initial_state=None, cu_seqlens=None, **kwargs):
        shape = check_inputs(q, k, v, g, beta, kwargs.get("scale"), initial_state, cu_seqlens)
        backward = needs_backward(q, k, v, g, beta, initial_state)
        choice = self.choose(shape, q.dtype, q.device, backward)
        if choice.repeat_qk:
            group = shape.value_heads // shape.key_heads
            q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        return self._calls[choice.backend](
            q, k, v, g=g, beta=beta, initial_state=initial_state, cu_seqlens=cu_seqlens, **kwargs
        )


def get_chunk_gated_delta_rule(backend: str):
    """Return chunk_gated_delta_rule for `backend` (fla, flashqla, torch, auto), imports deferred."""
    _check_name(backend)
    if backend == "auto":
        return AutoChunkGatedDeltaRule()
    KERNEL_BACKENDS[backend].require()
    return _checked_call(backend)
