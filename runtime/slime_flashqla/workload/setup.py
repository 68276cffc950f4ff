"""One GDN layer's setup as plain data: what `bench gdn`, `bench stream` and its worker build layers and inputs from.

Torch-free, so that the stream's parent can hand it to a worker as JSON; the torch code
turns `device` and `dtype` into torch objects where it uses them.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields

DTYPES = ("bfloat16", "float16", "float32")
LAYER_MODELS = ("qwen3-next", "qwen3.5")
# torch.Generator.manual_seed takes an unsigned 64-bit seed.
MAX_SEED = 2**64 - 1
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class LayerSetupError(ValueError):
    """A layer setup with a value no layer can be built from; the message names the field."""


@dataclass(frozen=True)
class LayerSetup:
    """Device, dtype, sizes, seed and layer class of the GDN layer a benchmark builds."""

    device: str  # "cpu", "cuda" or "cuda:N", as str(torch.device) writes it
    dtype: str  # of q/k/v, beta and the layer's weights (g is float32): a name in DTYPES
    head_dim: int  # K = V head size
    hidden_size: int
    seed: int  # of the layer's weights and the random inputs
    layer_model: str = "qwen3-next"  # which GDN layer class the layer level builds
    slime_source: str | None = None  # slime's checkout, for the slime-layer-* variants

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise LayerSetupError(f"layer setup: device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise LayerSetupError(f"layer setup: dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("head_dim", "hidden_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise LayerSetupError(f"layer setup: {name} must be a positive integer, got {value!r}")
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise LayerSetupError(f"layer setup: seed must be an integer from 0 to 2**64-1, got {self.seed!r}")
        if self.layer_model not in LAYER_MODELS:
            raise LayerSetupError(
                f"layer setup: layer_model must be one of {', '.join(LAYER_MODELS)}, got {self.layer_model!r}"
            )
        if self.slime_source is not None and not isinstance(self.slime_source, str):
            raise LayerSetupError(f"layer setup: slime_source must be a path string or None, got {self.slime_source!r}")

    @property
    def device_type(self) -> str:
        """`cpu` or `cuda`, as torch.device(...).type says, without torch."""
        return self.device.partition(":")[0]

    def to_json(self) -> dict:
        """The setup as a JSON-ready dict (from_json reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> LayerSetup:
        """The setup a to_json dict describes; LayerSetupError for a missing, unknown or bad field."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise LayerSetupError(f"layer setup: unknown field(s) {', '.join(unknown)}")
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in data]
        if missing:
            raise LayerSetupError(f"layer setup: missing field(s) {', '.join(missing)}")
        return cls(**data)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
