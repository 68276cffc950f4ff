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


def timer_name(device: torch.device) -> str:
    """The clock `samples` uses on this device."""
    return "cuda-events" if device.type == "cuda" else "perf_counter"


def warm(fn: Callable[[], object], device: torch.device, warmup: int) -> None:
    """Run `fn` warmup times untimed and wait for the device."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def samples(fn: Callable[[], object], device: torch.device, iters: int) -> list[float]:
    """Time `iters` calls of `fn`, one sample (ms) per call."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    return _cuda_samples(fn, iters) if device.type == "cuda" else _cpu_samples(fn, iters)


def summarize(values: list[float], device: torch.device, *, warmup: int) -> Timing:
    """The median and range of samples taken on `device`."""
    return Timing(
        median_ms=statistics.median(values),
        min_ms=min(values),
        max_ms=max(values),
        iters=len(values),
        warmup=warmup,
        timer=timer_name(device),
    )
