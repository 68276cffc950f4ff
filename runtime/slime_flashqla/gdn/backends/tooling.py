"""`ToolHooks`: what the warm-up, the preload, the start-up imports and the benchmarks ask a GDN backend.

`TileLangSource` is the one declaration of a backend built from `@tilelang.jit` factories;
kernels/tilelang_specs.py's `TileLangPackage` is what records and loads its programs from it.
`kernel_distributions` is the one declaration of what a backend's compiled kernels depend on:
kernels/fingerprint.py builds the stack fingerprint from it, for the archive, the preload and doctor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TileLangSource:
    """A backend built from `@tilelang.jit` factories: whose programs `warmup` records and a layer preloads."""

    package: str  # import name, e.g. "flash_qla"
    importer: Callable[[], object]  # imports the package the way its backend does


class ToolHooks:
    """The tools' hooks of one backend; each asks nothing of a backend that has no such kernels."""

    name: str  # the kernel contract's (contract.py)
    module: str | None
    tilelang: TileLangSource | None = None  # what kernels/preload.py may preload for it
    # The distributions whose versions decide whether this backend's compiled kernels fit a machine,
    # beside those every backend shares (kernels/fingerprint.py: torch, Triton, slime-flashqla).
    kernel_distributions: tuple[str, ...] = ()

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
