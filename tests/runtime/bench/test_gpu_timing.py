"""`device_samples` on a real GPU: device time without the host's, host time beside it, syncs caught."""

from __future__ import annotations

import statistics
import time

import pytest

from slime_flashqla.bench import timing

pytestmark = pytest.mark.gpu


@pytest.fixture
def device():
    import torch

    return torch.device("cuda", torch.cuda.current_device())


def _spin(device, ms: float):
    return timing.spin_kernel(device, ms)


def test_device_time_is_the_kernels_own(device):
    result = timing.device_samples(_spin(device, 0.5), device, 10, host_guess_ms=0.1)
    assert result.ahead
    # Spin kernels vary with the clock: 25% around the requested 0.5 ms.
    assert statistics.median(result.device_ms) == pytest.approx(0.5, rel=0.25)
    assert result.host_ms < 0.5  # a launch, not a wait


def test_a_slow_host_does_not_reach_the_device_time(device):
    import torch

    kernel = _spin(device, 0.05)

    def slow_host():
        time.sleep(0.002)  # 2 ms of host work before a 0.05 ms kernel
        kernel()

    # The first guess (0.1 ms per call) is too short a hold: the helper retries with a longer one.
    result = timing.device_samples(slow_host, device, 5, host_guess_ms=0.1)
    assert result.ahead
    assert result.host_ms >= 2.0
    assert statistics.median(result.device_ms) < 0.5  # queued timing would read >= 2 ms here

    queued = timing.samples(slow_host, device, 5)
    assert statistics.median(queued) >= 1.5
    torch.cuda.synchronize(device)


def test_a_call_that_synchronises_is_reported_host_bound(device):
    import torch

    kernel = _spin(device, 0.05)

    def syncing():
        kernel()
        torch.cuda.synchronize(device)  # as a .item() or .tolist() on a device tensor would

    result = timing.device_samples(syncing, device, 3, host_guess_ms=0.1)
    assert not result.ahead
    assert len(result.device_ms) == 3


def test_summary_names_the_timer(device):
    summary = timing.summarize([1.0, 2.0, 3.0], device, warmup=1, host_ms=[0.2, 0.4], host_bound_rounds=1)
    assert (summary.median_ms, summary.host_ms, summary.host_bound_rounds) == (2.0, pytest.approx(0.3), 1)
    assert summary.timer == "cuda-events, host ahead"
    assert timing.summarize([1.0], device, warmup=0).timer == "cuda-events, queued"
