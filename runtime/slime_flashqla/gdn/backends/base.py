"""`GDNBackend`: what every GDN kernel backend answers, and the answers most of them share.

Reasons are data: a check returns (ok, reason), or a problem or None, and `auto`, `doctor`
and the benchmarks show them as they are. A backend imports torch and its kernel package
inside its methods, so the registry and the CLI's choices built from it import neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slime_flashqla.host.packages import require

if TYPE_CHECKING:
    import torch

    from slime_flashqla.gdn.inputs import GDNShape


@dataclass(frozen=True)
class TileLangSource:
    """A backend built from `@tilelang.jit` factories: whose programs `warmup` records and a layer preloads."""

    package: str  # import name, e.g. "flash_qla"
    distributions: tuple[str, ...]  # whose versions decide whether a recorded program still fits
    importer: Callable[[], object]  # imports the package the way its backend does


class GDNBackend:
    """One GDN kernel backend: its name, what it needs, and how a call reaches its kernel."""

    name: str
    label: str  # how reasons and reports name it ("FlashQLA")
    module: str | None = None  # the package its kernel comes from (None: this package's own code)
    device_types: tuple[str, ...] | None = ("cuda",)  # where its kernel runs (None: any device)
    # `auto` tries backends lowest first and runs the first that fits; None: `auto` never tries it.
    auto_priority: int | None = None
    supports_gva = True  # q/k may keep their own (smaller) head count
    unavailable_error: type[Exception] = RuntimeError
    specialisations: TileLangSource | None = None  # what kernels/preload.py may preload for it
    runs = "runs these inputs"  # how `supports` says yes

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        """(ok, reason): whether this machine can run the backend at all (with `backward`: train with it)."""
        raise NotImplementedError

    def runs_on(self, device_type: str) -> bool:
        """Whether the kernel runs on tensors of this device type ('cuda', 'cpu')."""
        return self.device_types is None or device_type in self.device_types

    def input_problem(self, shape: GDNShape, dtype: torch.dtype, device: torch.device) -> str | None:
        """Why the backend cannot take these inputs, or None."""
        return None

    def runtime_problem(self, device: torch.device, backward: bool, dtype: torch.dtype) -> str | None:
        """Why the backend cannot run on this device (forward, or with `backward`), or None."""
        return None

    def supports(self, shape: GDNShape, dtype: torch.dtype, device: torch.device, backward: bool):
        """(ok, reason) for one call: the inputs' problem, else the runtime's, else why it runs."""
        problem = self.input_problem(shape, dtype, device) or self.runtime_problem(device, backward, dtype)
        return (False, problem) if problem else (True, self.runs_reason(device, backward))

    def runs_reason(self, device: torch.device, backward: bool) -> str:
        """Why the backend runs a call that has no problem."""
        return self.runs

    def require(self) -> None:
        """Raise, naming the package to install, where the backend's package is missing."""
        if self.module is not None:
            require(self.module, self.name)

    def kernel(self):
        """The chunk_gated_delta_rule function this backend calls."""
        raise NotImplementedError

    def prepare(self, q, k, v, g, beta, kwargs: dict):
        """The inputs as this backend's kernel takes them: q/k repeated to v's heads where it takes no GVA."""
        group = v.shape[2] // q.shape[2]
        if group > 1 and not self.supports_gva:
            q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        return q, k, v, g, beta, kwargs

    def warmup_paths(self) -> dict[str, dict]:
        """Kernel paths a warm-up must force beside what the layer runs (by default none)."""
        return {}

    def start_imports(self) -> list[tuple[str, str, Callable[[], object]]]:
        """(label, package, loader) of what a layer's first step imports for this kernel (kernels/imports.py)."""
        return [(f"{self.module} kernel", self.module, self.kernel)] if self.module else []

    def library_fn(self):
        """The library's own chunk_gated_delta_rule, as slime calls it (the benchmarks' `direct` variants)."""
        raise NotImplementedError(f"the {self.name} backend has no library function of its own")

    def library_problem(self, direct: bool) -> str | None:
        """Why a benchmark cannot reach this kernel (with `direct`, the library's own function) here, or None."""
        return None

    def report(self) -> dict:
        """doctor's JSON fields of this backend beyond its availability row (by default none)."""
        return {}

    def report_rows(self, report: dict) -> list[tuple[str, str]]:
        """doctor's table rows of those fields."""
        return []

    def known_problems(self, report: dict) -> list[str]:
        """doctor's warnings: known-bad combinations (an upstream bug's versions) seen in the report."""
        return []

    def report_notes(self, report: dict) -> list[str]:
        """doctor's notes: facts of this environment worth knowing that ask nothing of the user."""
        return []

    def requirement_problem(self, report: dict) -> str | None:
        """Why `doctor --require` of this backend fails on the report (by default: it is unusable), or None."""
        info = report["backends"][self.name]
        return None if info["available"] else f"{self.label} is not usable: {info['reason']}"
