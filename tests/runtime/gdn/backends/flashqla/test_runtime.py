"""validate_flashqla_runtime on described machines: what passes, what fails, and what it says."""

from __future__ import annotations

import pytest

from slime_flashqla.gdn import FlashQLAUnavailableError, flashqla_runtime_status, validate_flashqla_runtime

from ...fake_gpu import machine  # noqa: F401  (fixture)


@pytest.mark.parametrize("torch_version", ["2.8.0", "2.8.0a0+git1234", "2.10.0.dev20251101+cu129", "2.9.1+cu128"])
def test_torch_versions_that_pass(machine, torch_version):  # noqa: F811
    machine(torch_version=torch_version)
    validate_flashqla_runtime()


@pytest.mark.parametrize("torch_version", ["2.7.1+cu128", "2.7.0a0+gitabc", "1.13.1"])
def test_torch_too_old(machine, torch_version):  # noqa: F811
    machine(torch_version=torch_version)
    with pytest.raises(FlashQLAUnavailableError, match=r"PyTorch >= 2\.8, found " + torch_version.replace("+", r"\+")):
        validate_flashqla_runtime()


@pytest.mark.parametrize("cuda", ["12.8", "12.9", "13.0", "13.1"])
def test_cuda_builds_that_pass(machine, cuda):  # noqa: F811
    machine(cuda=cuda)
    validate_flashqla_runtime()


def test_cuda_build_too_old(machine):  # noqa: F811
    machine(cuda="12.6")
    with pytest.raises(FlashQLAUnavailableError, match=r"CUDA >= 12\.8, found CUDA 12\.6"):
        validate_flashqla_runtime()


def test_cpu_build(machine):  # noqa: F811
    machine(torch_version="2.8.0+cpu", cuda=None)
    with pytest.raises(FlashQLAUnavailableError, match="CUDA build of PyTorch"):
        validate_flashqla_runtime()


def test_no_device(machine):  # noqa: F811
    machine(available=False)
    with pytest.raises(FlashQLAUnavailableError, match="needs a CUDA device"):
        validate_flashqla_runtime()


@pytest.mark.parametrize("capability", [(9, 0), (10, 0), (10, 3)])
def test_training_capabilities(machine, capability):  # noqa: F811
    machine(capability=capability)
    validate_flashqla_runtime(backward=True)
    assert not flashqla_runtime_status().forward_only


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (7, 5), (11, 0)])
def test_unsupported_capabilities(machine, capability):  # noqa: F811
    machine(capability=capability)
    sm = f"SM{capability[0]}{capability[1]}"
    with pytest.raises(FlashQLAUnavailableError, match=f"found {sm}"):
        validate_flashqla_runtime(backward=False)


def test_unparsable_version(machine):  # noqa: F811
    machine(torch_version="not-a-version")
    with pytest.raises(FlashQLAUnavailableError, match="cannot parse the PyTorch version"):
        validate_flashqla_runtime()


def test_error_is_a_runtime_error():
    assert issubclass(FlashQLAUnavailableError, RuntimeError)


def test_device_argument_reaches_torch(machine, monkeypatch):  # noqa: F811
    import torch

    machine()
    seen = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: seen.append(device) or (9, 0))
    validate_flashqla_runtime("cuda:1")
    assert seen == ["cuda:1"]
