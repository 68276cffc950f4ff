"""Per-call latency samples: CUDA events on a GPU, time.perf_counter on the CPU.

On a GPU, `device_samples` holds the device back with a spin kernel while the host queues
the timed calls, so each event pair brackets the device's own work and nothing of the
host's: the latency a training step sees when its host runs ahead.  The time the host took
to queue the calls is measured beside it.  `samples` is the older "queued" timing, where a
call whose host side is slower than its kernels is timed at the host's pace.
"""

from __future__ import annotations

import os
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
    host_ms: float | None = None  # host time to issue one call (device timing only)
    host_bound_rounds: int = 0  # rounds in which the host could not queue the calls ahead of the device


@dataclass(frozen=True)
class DeviceSamples:
    """One round of `device_samples`: device ms per call, host ms per call, and whether the host stayed ahead."""

    device_ms: list[float]
    host_ms: float
    ahead: bool


# Spin-kernel cycles per millisecond, per device, measured once (clocks differ between GPUs).
_cycles_per_ms: dict[int, float] = {}
# Tries with a longer hold before a round counts as host-bound (a call that synchronises,
# or more launches than the device's queue holds, can never be queued ahead).
_AHEAD_ATTEMPTS = 3
_MAX_HOLD_MS = 5000.0


def _spin_cycles_per_ms(device: torch.device) -> float:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _cycles_per_ms:
        with torch.cuda.device(index):
            cycles = 2_000_000
            torch.cuda._sleep(cycles)  # first launch loads the kernel: not timed
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            _cycles_per_ms[index] = cycles / begin.elapsed_time(end)
    return _cycles_per_ms[index]


def spin_kernel(device: torch.device, ms: float) -> Callable[[], None]:
    """A call that queues a spin kernel keeping `device` busy for about `ms` (calibrated once per device)."""
    cycles = int(ms * _spin_cycles_per_ms(device))
    return lambda: torch.cuda._sleep(cycles)


def cprofile_rows(stats: dict, order: str, count: int, per: int = 1) -> list[list]:
    """pstats' `count` heaviest functions by "own" or "cumulative" time: [function, calls, own ms, cum ms] per `per`."""
    column = {"own": 2, "cumulative": 3}[order]  # {(file, line, name): (calls, primitive, own, cumulative, callers)}
    top = sorted(stats.items(), key=lambda item: -item[1][column])[:count]
    return [
        [f"{os.path.basename(file)}:{line}({name})", calls / per, own * 1e3 / per, cumulative * 1e3 / per]
        for (file, line, name), (calls, _, own, cumulative, _) in top
    ]


def device_samples(fn: Callable[[], object], device: torch.device, iters: int, host_guess_ms: float) -> DeviceSamples:
    """Time `iters` calls of `fn` queued behind a spin kernel: device ms per call, and host ms per call."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    guess = max(host_guess_ms, 0.05)
    for _ in range(_AHEAD_ATTEMPTS):
        # Built before the gate: the spin's first calibration must not count as hold.
        hold = spin_kernel(device, min(2.0 * guess * iters + 1.0, _MAX_HOLD_MS))
        torch.cuda.synchronize(device)
        gate = torch.cuda.Event(enable_timing=True)
        pairs = _event_pairs(iters)  # made before the host clock starts: not part of a call's host time
        gate.record()
        hold()
        begin = time.perf_counter()
        _record_calls(fn, pairs)
        host_ms = (time.perf_counter() - begin) * 1e3
        torch.cuda.synchronize(device)
        held_ms = gate.elapsed_time(pairs[0][0])
        device_ms = [start.elapsed_time(end) for start, end in pairs]
        # The device started the first call after `held_ms`; if the host had queued every
        # call by then, no event pair can contain time spent waiting for the host.
        if host_ms < held_ms:
            return DeviceSamples(device_ms, host_ms / iters, True)
        guess = max(2.0 * guess, host_ms / iters)
    return DeviceSamples(device_ms, host_ms / iters, False)


def _event_pairs(iters: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]


def _record_calls(fn: Callable[[], object], pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]]) -> None:
    """Issue one call of `fn` between each pair of CUDA events, recording both (no sync)."""
    for start, end in pairs:
        start.record()
        fn()
        end.record()


def _cuda_samples(fn: Callable[[], object], iters: int) -> list[float]:
    # One event pair per call and a single sync at the end: the host queues calls ahead
    # of the GPU, as in training, and each pair still brackets exactly one call.
    pairs = _event_pairs(iters)
    _record_calls(fn, pairs)
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def _cpu_samples(fn: Callable[[], object], iters: int) -> list[float]:
    samples = []
    for _ in range(iters):
        begin = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - begin) * 1e3)
    return samples


def timer_name(device: torch.device, *, ahead: bool = False) -> str:
    """The clock used on this device: `ahead` for `device_samples`, else `samples`."""
    if device.type != "cuda":
        return "perf_counter"
    return "cuda-events, host ahead" if ahead else "cuda-events, queued"


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


def summarize(
    values: list[float],
    device: torch.device,
    *,
    warmup: int,
    host_ms: list[float] | None = None,
    host_bound_rounds: int = 0,
) -> Timing:
    """The median and range of samples taken on `device` (with the host's median ms per call when timed)."""
    return Timing(
        median_ms=statistics.median(values),
        min_ms=min(values),
        max_ms=max(values),
        iters=len(values),
        warmup=warmup,
        timer=timer_name(device, ahead=host_ms is not None),
        host_ms=statistics.median(host_ms) if host_ms else None,
        host_bound_rounds=host_bound_rounds,
    )


def gpu_ms_by_kernel(step: Callable[[], object], steps: int = 3, top: int = 14) -> dict:
    """GPU milliseconds per call of `step`, by kernel name (torch.profiler), the `top` largest and the total."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    by_name: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" or getattr(event, "self_device_time_total", 0):
            by_name[event.key] += getattr(event, "self_device_time_total", 0) / 1e3 / steps
    rows = sorted(by_name.items(), key=lambda kv: -kv[1])
    return {"total_ms": sum(by_name.values()), "kernels": [(k[:90], round(ms, 3)) for k, ms in rows[:top]]}


def kernel_table_lines(table: dict) -> list[str]:
    """`gpu_ms_by_kernel`'s table as printable lines, one per kernel: GPU ms, then its name."""
    return [f"   {ms:8.3f} ms  {name}" for name, ms in table["kernels"]]
