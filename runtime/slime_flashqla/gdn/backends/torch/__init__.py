"""The `torch` backend and its kernel.

- `backend`: `TorchBackend`, which runs anywhere;
- `reference`: the chunked pure-PyTorch gated delta rule with autograd, the parity checks' reference.
"""

from slime_flashqla.gdn.backends.torch.backend import TorchBackend

__all__ = ["TorchBackend"]
