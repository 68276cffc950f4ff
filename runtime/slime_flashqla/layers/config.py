"""The Hugging Face config fields a Qwen GDN layer is built from."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

REQUIRED_FIELDS = (
    "hidden_size",
    "linear_num_value_heads",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


def _positive_whole(name: str, value) -> int:
    """`value` as a positive int, refusing fractions, bools and anything else in one line."""
    whole = isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())
    if isinstance(value, bool) or not whole or value <= 0:
        raise ValueError(f"GDN layer config: {name} must be a positive whole number, got {value!r}")
    return int(value)


def _floating_dtype(value) -> torch.dtype | None:
    """A config's dtype (a torch.dtype or its name, 'torch.' prefix allowed) as a floating torch.dtype, or None."""
    if value is None:
        return None
    dtype = getattr(torch, value.removeprefix("torch."), None) if isinstance(value, str) else value
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"GDN layer config: dtype {value!r} is not a torch floating dtype (e.g. 'bfloat16')")
    return dtype


@dataclass(frozen=True)
class GDNConfig:
    """Sizes of one Gated DeltaNet layer, read from a Hugging Face style config."""

    hidden_size: int
    num_value_heads: int
    num_key_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel_dim: int
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    dtype: torch.dtype | None = None

    @classmethod
    def from_hf(cls, config) -> GDNConfig:
        """Read a transformers config (or any object / dict with the same attribute names); one-line ValueError."""
        get = config.get if isinstance(config, dict) else lambda name, default=None: getattr(config, name, default)
        missing = [name for name in REQUIRED_FIELDS if get(name) is None]
        if missing:
            raise ValueError(f"GDN layer config lacks {', '.join(missing)}")
        sizes = {name: _positive_whole(name, get(name)) for name in REQUIRED_FIELDS}
        result = cls(
            hidden_size=sizes["hidden_size"],
            num_value_heads=sizes["linear_num_value_heads"],
            num_key_heads=sizes["linear_num_key_heads"],
            key_head_dim=sizes["linear_key_head_dim"],
            value_head_dim=sizes["linear_value_head_dim"],
            conv_kernel_dim=sizes["linear_conv_kernel_dim"],
            hidden_act=get("hidden_act") or "silu",
            rms_norm_eps=float(get("rms_norm_eps") or 1e-6),
            dtype=_floating_dtype(get("dtype") or get("torch_dtype")),
        )
        if result.num_value_heads % result.num_key_heads:
            raise ValueError(
                f"linear_num_value_heads={result.num_value_heads} must be a multiple of "
                f"linear_num_key_heads={result.num_key_heads}"
            )
        if result.hidden_act not in ("silu", "swish"):
            raise ValueError(f"GDN layers use a SiLU short convolution; hidden_act={result.hidden_act!r}")
        return result

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim
