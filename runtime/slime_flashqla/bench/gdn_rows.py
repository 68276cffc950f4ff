"""`bench gdn`'s data: the parsed Plan of a run and one Row per measurement, shared by the runner and the report."""

from __future__ import annotations

from dataclasses import dataclass

from slime_flashqla.bench.variants import Variant
from slime_flashqla.workload.heads import HeadConfig
from slime_flashqla.workload.lengths import ShapeSpec
from slime_flashqla.workload.setup import LayerSetup


@dataclass
class Plan:
    """Everything a run measures, parsed and checked."""

    setup: LayerSetup  # device, dtype (bfloat16 on a GPU, float32 on the CPU by default), sizes, seed, layer class
    levels: list[str]
    shapes: list[ShapeSpec]
    heads: list[HeadConfig]
    variants: list[Variant]
    modes: list[str]
    warmup: int
    iters: int
    rounds: int = 1
    timing: str = "device"  # on a GPU: device (host queued ahead) or queued (see bench.timing)

    @property
    def rounds_used(self) -> int:
        """The rounds the timed calls really fall into (never more than the calls)."""
        return len(round_sizes(self.iters, self.rounds))

    @property
    def num_rows(self) -> int:
        return len(self.levels) * len(self.shapes) * len(self.heads) * len(self.modes) * len(self.variants)


@dataclass
class Row:
    """One measured (or skipped, or failed) benchmark row; `asdict` of it is a JSON row."""

    level: str
    shape: str
    lengths: list[int]
    tokens: int
    key_heads: int
    value_heads: int
    mode: str
    variant: str
    backend: str
    gva: bool
    status: str = "ok"  # ok | skipped | error
    reason: str = ""
    median_ms: float | None = None
    peak_mib: float | None = None  # layer rows on a GPU: memory allocated at the peak of one call, above its start
    min_ms: float | None = None
    max_ms: float | None = None
    iters: int = 0
    warmup: int = 0
    timer: str = ""
    host_ms: float | None = None  # host time to issue one call (device timing)
    host_bound_rounds: int = 0  # rounds whose calls the host could not queue ahead of the device
    tokens_per_s: float | None = None
    speedup_vs_fla_repeat: float | None = None
    speedup_vs_fastest: float | None = None
    auto_backend: str | None = None
    note: str = ""

    @property
    def heads(self) -> str:
        return f"{self.key_heads}/{self.value_heads}"

    @property
    def group(self) -> tuple:
        return (self.level, self.shape, self.heads, self.mode)


def round_sizes(iters: int, rounds: int) -> list[int]:
    """Split `iters` timed calls over at most `rounds` rounds, as evenly as possible."""
    rounds = max(1, min(rounds, iters))
    return [iters // rounds + (1 if r < iters % rounds else 0) for r in range(rounds)]
