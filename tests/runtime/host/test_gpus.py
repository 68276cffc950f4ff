"""The node's GPUs: one enumeration behind the doctor's list and the stack's architectures and names."""

from __future__ import annotations

import torch

from slime_flashqla.host.gpus import gpu_archs_and_names, gpus

# A mixed node as torch reports it: two H200s and an A100 (index -> name, capability).
DEVICES = {0: ("NVIDIA H200", (9, 0)), 1: ("NVIDIA A100", (8, 0)), 2: ("NVIDIA H200", (9, 0))}


def node(monkeypatch, devices):
    """Patch torch's reporting functions only: what host/gpus.py asks torch is answered from `devices`."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(devices))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: devices[index][0])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: devices[index][1])


def test_a_mixed_node_lists_every_device_and_each_architecture_and_name_once(monkeypatch):
    node(monkeypatch, DEVICES)
    assert gpus() == [
        {"index": 0, "name": "NVIDIA H200", "capability": "9.0"},
        {"index": 1, "name": "NVIDIA A100", "capability": "8.0"},
        {"index": 2, "name": "NVIDIA H200", "capability": "9.0"},
    ]
    assert gpu_archs_and_names() == ("sm_80,sm_90", "NVIDIA H200, NVIDIA A100")


def test_a_two_digit_major_capability_is_one_architecture(monkeypatch):
    node(monkeypatch, {0: ("NVIDIA GB10", (12, 1))})
    assert gpu_archs_and_names() == ("sm_121", "NVIDIA GB10")


def test_without_a_cuda_device_there_is_none(monkeypatch):
    node(monkeypatch, {})
    assert gpus() == []
    assert gpu_archs_and_names() == ("none", "none")
