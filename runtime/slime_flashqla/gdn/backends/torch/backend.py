"""The `torch` backend: the pure-PyTorch reference (reference.py), on any device, dtype and head size."""

from __future__ import annotations

from slime_flashqla.gdn.backends.base import GDNBackend


class TorchBackend(GDNBackend):
    """The pure-PyTorch reference: any device, any float dtype, any head size."""

    name = "torch"
    label = "PyTorch"
    device_types = None
    runs = "pure PyTorch runs any valid input"

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        return True, "pure PyTorch, always available"

    def kernel(self):
        from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch

        return chunk_gated_delta_rule_torch
