"""Per-call latency samples: CUDA events on a GPU, time.perf_counter on the CPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Summary of the timed calls of one benchmark row, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    iters: int
    warmup: int
    timer: str


def _cuda_samples(fn: Callable[[], object], iters: int) -> list[float]:
    # One event pair per call and a single sync at the end: the host queues calls ahead
    # of the GPU, as in training, and each pair still brackets exactly one call.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends, strict=True):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)]


def _cpu_samples(fn: Callable[[], object], iters: int) -> list[float]:
    samples = []
    for _ in range(iters):
        begin = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - begin) * 1e3)
    return samples


def measure(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int) -> Timing:
    """Run `fn` warmup times untimed, then iters times timed; return the median and range."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
    samples = _cuda_samples(fn, iters) if cuda else _cpu_samples(fn, iters)
    return Timing(
        median_ms=statistics.median(samples),
        min_ms=min(samples),
        max_ms=max(samples),
        iters=iters,
        warmup=warmup,
        timer="cuda-events" if cuda else "perf_counter",
    )
