"""get_chunk_gated_delta_rule: names, missing packages, auto's choice and its reasons, lazy imports."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from helpers.gdn_inputs import make_inputs
from slime_flashqla.gdn import BACKENDS, FlashQLAUnavailableError, explain_auto, get_chunk_gated_delta_rule
from slime_flashqla.host.packages import is_installed

from .fake_gpu import machine  # noqa: F401  (fixture)


def test_backend_names():
    assert BACKENDS == ("fla", "flashqla", "torch", "auto")


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"'flash'.*fla, flashqla, torch, auto"):
        get_chunk_gated_delta_rule("flash")


@pytest.mark.skipif(is_installed("fla"), reason="flash-linear-attention is installed here")
def test_missing_fla_names_the_pip_package():
    with pytest.raises(ImportError, match="pip install flash-linear-attention"):
        get_chunk_gated_delta_rule("fla")


@pytest.mark.skipif(is_installed("flash_qla"), reason="flash-qla is installed here")
def test_missing_flashqla_names_the_pip_package(machine):  # noqa: F811
    machine(capability=(9, 0))
    with pytest.raises(
        FlashQLAUnavailableError, match=r"flash-qla package, which is not installed \(pip install flash-qla\)"
    ):
        get_chunk_gated_delta_rule("flashqla")


def test_flashqla_refusal_names_every_missing_requirement_at_once(machine):  # noqa: F811
    if is_installed("flash_qla"):
        pytest.skip("flash-qla is installed here")
    machine(torch_version="2.7.1+cpu", cuda=None, available=False)
    with pytest.raises(FlashQLAUnavailableError) as refused:
        get_chunk_gated_delta_rule("flashqla")
    message = str(refused.value)
    for needed in (
        "needs PyTorch >= 2.8, found 2.7.1+cpu",
        "needs a CUDA build of PyTorch (CUDA >= 12.8)",
        "needs a CUDA device of compute capability SM90, SM100, SM103 (flash-qla 0.1.3)",
        "torch.cuda.is_available() is False",
        "pip install flash-qla",
    ):
        assert needed in message, (needed, message)
    assert "\n" not in message


def test_flashqla_refusal_on_an_old_cuda_build_and_gpu_names_both(machine):  # noqa: F811
    machine(cuda="12.6", capability=(8, 0))
    with pytest.raises(FlashQLAUnavailableError) as refused:
        get_chunk_gated_delta_rule("flashqla")
    assert "CUDA >= 12.8, found CUDA 12.6" in str(refused.value)
    assert "found SM80" in str(refused.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_flashqla_on_this_cpu_machine_is_refused_with_the_reason():
    with pytest.raises(FlashQLAUnavailableError, match="CUDA"):
        get_chunk_gated_delta_rule("flashqla")


def test_flashqla_on_an_a100_is_refused_before_import(machine):  # noqa: F811
    machine(capability=(8, 0))
    with pytest.raises(FlashQLAUnavailableError, match="found SM80"):
        get_chunk_gated_delta_rule("flashqla")
    assert "flash_qla" not in sys.modules


def test_auto_on_cpu_runs_torch_and_logs_once(caplog):
    fn = get_chunk_gated_delta_rule("auto")
    inputs = make_inputs(lengths=(9, 7))
    reference = get_chunk_gated_delta_rule("torch")
    args = (inputs["q"], inputs["k"], inputs["v"])
    kwargs = dict(g=inputs["g"], beta=inputs["beta"], cu_seqlens=inputs["cu_seqlens"])
    with caplog.at_level(logging.INFO, logger="slime_flashqla.gdn"):
        o1, _ = fn(*args, **kwargs)
        o2, _ = fn(*args, **kwargs)
    messages = [r.getMessage() for r in caplog.records if "auto ->" in r.getMessage()]
    assert len(messages) == 1
    assert "auto -> torch" in messages[0]
    assert "on CUDA only" in messages[0]
    torch.testing.assert_close(o1, reference(*args, **kwargs)[0], rtol=0, atol=0)
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    assert [c.backend for c in fn.choices.values()] == ["torch"]


def test_explain_auto_on_cpu():
    choice = explain_auto("cpu")
    assert choice.backend == "torch"
    assert "cpu" in choice.reason


def test_explain_auto_on_an_h200_without_packages(machine):  # noqa: F811
    if is_installed("flash_qla") or is_installed("fla"):
        pytest.skip("kernel packages installed here")
    machine(capability=(9, 0))
    choice = explain_auto("cuda")
    assert choice.backend == "torch"
    assert "flash-qla package, which is not installed (pip install flash-qla)" in choice.reason
    assert "flash-linear-attention is not installed" in choice.reason


def test_explain_auto_names_sm80(machine):  # noqa: F811
    machine(capability=(8, 0))
    choice = explain_auto("cuda")
    assert choice.backend in ("fla", "torch")
    assert "found SM80" in choice.reason


@pytest.mark.parametrize("backward", [True, False], ids=["training", "inference"])
def test_explain_auto_refuses_flashqla_on_gb10(machine, backward):  # noqa: F811
    machine(capability=(12, 1))
    choice = explain_auto("cuda", backward=backward)
    assert choice.backend != "flashqla"
    assert "raises ValueError at `import flash_qla` on SM121" in choice.reason


def test_explain_auto_refuses_head_dim_64(machine):  # noqa: F811
    machine(capability=(9, 0))
    choice = explain_auto("cuda", key_dim=64, value_dim=64)
    assert choice.backend != "flashqla"
    assert "K = V = 128" in choice.reason


@pytest.mark.skipif(not is_installed("fla"), reason="flash-linear-attention is not installed")
def test_fla_backend_reaches_flas_own_function_past_the_dispatcher():
    """FLA >= 0.6 wraps its public function in a dispatcher that may forward to FlashQLA; 'fla' skips it."""
    import os

    from fla.ops.gated_delta_rule import chunk as fla_chunk

    from slime_flashqla.gdn.backends.fla.library import fla_own_chunk_gated_delta_rule

    own = fla_own_chunk_gated_delta_rule()
    assert not hasattr(own, "__wrapped__")
    assert own.__code__.co_filename.endswith(os.path.join("gated_delta_rule", "chunk.py"))
    public = fla_chunk.chunk_gated_delta_rule
    if hasattr(public, "__wrapped__"):  # the dispatcher is there (FLA >= 0.6): we are not calling it
        assert own is not public
