"""CompileLog counts what the libraries report: TileLang's compile log, Triton's autotune report, TorchDynamo."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from slime_flashqla.kernels.compile_log import CompileEvent, CompileLog, count


@pytest.fixture
def log():
    saved = sys.stdout
    yield CompileLog().install()
    sys.stdout = saved


def test_a_tilelang_compile_is_counted_by_name_and_a_cache_load_is_not(log):
    # The exact lines tilelang/jit/kernel.py logs around a real compile, on its module logger.
    kernel_logger = logging.getLogger("tilelang.jit.kernel")
    kernel_logger.info("TileLang begins to compile kernel `fused_chunk_gdr_bwd_kernel` with `out_idx=None`")
    kernel_logger.info("TileLang completes to compile kernel `fused_chunk_gdr_bwd_kernel`")
    logging.getLogger("tilelang.cache").debug("Found kernel in disk cache for fused_chunk_gdr_fwd_kernel")
    assert log.take() == [CompileEvent("tilelang-compile", "fused_chunk_gdr_bwd_kernel")]
    assert log.take() == []  # take() hands each event out once


def test_the_autotuner_report_is_counted_and_passed_through(capsys):
    pytest.importorskip("triton", reason="the autotune report is hooked where triton is installed")
    saved = sys.stdout  # pytest swaps sys.stdout between phases: hook it inside the test itself
    log = CompileLog().install()
    # What triton/runtime/autotuner.py prints once it has benchmarked the configs of a new key.
    print("Autotuning kernel l2norm_fwd_kernel with config BT: 16, num_warps: 4")
    print(
        "Triton autotuning for function l2norm_fwd_kernel,\nwith key as (128, 5, 'torch.bfloat16'),\n"
        "finished after 9.81s,\nbest config selected: BT: 32, num_warps: 8;"
    )
    sys.stdout = saved
    events = log.take()
    assert count(events, "triton-autotune") == 1 and events[0].name == "l2norm_fwd_kernel"
    assert "finished after 9.81s" in capsys.readouterr().out


def test_torch_compile_frames_are_counted_once_each(log):
    log.take()

    @torch.compile(backend="eager", dynamic=False)
    def double(x):
        return x * 2

    double(torch.ones(3))
    first = log.take()
    double(torch.ones(3))  # same shape: Dynamo's guard holds, nothing is compiled again
    again = log.take()
    double(torch.ones(5))  # a new static shape: a recompile
    assert count(first, "torch-compile") == 1 and count(again, "torch-compile") == 0
    assert count(log.take(), "torch-compile") == 1


def test_install_hooks_triton_where_it_is_installed():
    import importlib.util

    saved = sys.stdout
    try:
        log = CompileLog().install()
    finally:
        sys.stdout = saved
    assert "tilelang" in log.hooked
    assert ("triton" in log.hooked) == (importlib.util.find_spec("triton") is not None)
