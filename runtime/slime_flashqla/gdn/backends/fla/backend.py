"""The `fla` backend: FLA's own Triton kernels (never FLA's forwarding to FlashQLA, library.py).

Its facts: CUDA tensors only, FLA's version rules and the Hopper backward bug (FLA #640,
`hopper_backward_problem`), the forwarding note doctor shows, and FLA's public function for
the benchmarks' `direct` variants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_flashqla.gdn.backends.base import GDNBackend
from slime_flashqla.gdn.backends.fla.library import hopper_backward_problem
from slime_flashqla.host.packages import installed_version, is_installed

if TYPE_CHECKING:
    import torch

    from slime_flashqla.gdn.inputs import GDNShape


class FLABackend(GDNBackend):
    """FLA's own Triton kernels (never FLA's forwarding to FlashQLA)."""

    name = "fla"
    label = "FLA"
    module = "fla"
    auto_priority = 1  # where FlashQLA does not fit: FLA never beat it on an H200 (docs/benchmarks.md)
    runs = "FLA's own kernels run these inputs"
    # The kernel sources (fla-core carries the fla package since 0.5) and the Triton that compiles them.
    kernel_distributions = ("flash-linear-attention", "fla-core", "triton")
    # tilelang: none, the preload covers TileLang factories and FLA's kernels are Triton's

    @property
    def supports_gva(self) -> bool:
        from slime_flashqla.gdn.backends.fla.library import fla_supports_gva

        return fla_supports_gva()

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        import torch

        if not is_installed(self.module):
            return False, "flash-linear-attention is not installed (pip install flash-linear-attention)"
        if not torch.cuda.is_available():
            return False, "FLA's Triton kernels need a CUDA device; torch.cuda.is_available() is False"
        return True, "flash-linear-attention is installed and a CUDA device is present"

    def input_problem(self, shape: GDNShape, dtype: torch.dtype, device: torch.device) -> str | None:
        if device.type != "cuda":
            return f"FLA's Triton kernels need CUDA tensors, got {device.type} tensors (use 'torch' on CPU)"
        return None

    def runtime_problem(self, device: torch.device, backward: bool, dtype: torch.dtype) -> str | None:
        if not is_installed(self.module):
            return "flash-linear-attention is not installed"
        if backward and device.type == "cuda":
            import torch

            capability = torch.cuda.get_device_capability(device)
            fla, triton = installed_version("fla"), installed_version("triton")
            return hopper_backward_problem(fla, triton, capability, tilelang=is_installed("tilelang"))
        return None

    def kernel(self):
        from slime_flashqla.gdn.backends.fla.library import fla_own_chunk_gated_delta_rule

        return fla_own_chunk_gated_delta_rule()

    def prepare(self, q, k, v, g, beta, kwargs: dict):
        """q/k normalised by this package's fixed-launch l2norm, so FLA's autotuned one never runs."""
        from slime_flashqla.gdn.qk_l2norm import l2norm_qk

        q, k, v, g, beta, kwargs = super().prepare(q, k, v, g, beta, kwargs)
        q, k, kwargs = l2norm_qk(q, k, kwargs)
        return q, k, v, g, beta, kwargs

    def warmup_paths(self) -> dict[str, dict]:
        """Kernel paths a warm-up must force beside what the layer runs: FLA has one path."""
        return {"kernel": {}}

    def library_fn(self):
        """FLA's public function, as slime calls it; with FLA_FLASH_QLA=0 its dispatch runs FLA's own kernels."""
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        return chunk_gated_delta_rule

    def library_problem(self, direct: bool) -> str | None:
        from slime_flashqla.gdn.backends.fla.library import fla_forwards_to_flashqla, fla_own_chunk_gated_delta_rule

        try:
            fla_own_chunk_gated_delta_rule()
        except (ImportError, RuntimeError) as error:
            return str(error)
        if direct and fla_forwards_to_flashqla():
            return "FLA would forward this call to FlashQLA here: run it with FLA_FLASH_QLA=0"
        return None

    def report(self) -> dict:
        from slime_flashqla.gdn.backends.fla.library import fla_forwards_to_flashqla

        return {"fla_kernel": self._runs_here(), "fla_forwards_to_flashqla": fla_forwards_to_flashqla()}

    def _runs_here(self) -> str:
        """What this backend runs here, in agreement with its availability."""
        if not is_installed(self.module):
            return "none: flash-linear-attention is not installed"
        if not self.available()[0]:
            return "nothing here: the fla backend is unusable (see its row)"
        return "FLA's own kernels (slime-flashqla calls FLA past its FlashQLA forwarding)"

    def report_rows(self, report: dict) -> list[tuple[str, str]]:
        return [
            ("'fla' runs", report["fla_kernel"]),
            ("FLA forwards to FlashQLA", str(report["fla_forwards_to_flashqla"])),
        ]

    def known_problems(self, report: dict) -> list[str]:
        if not any(gpu["capability"] == "9.0" for gpu in report["gpus"]):
            return []
        # The rule this backend refuses training by, read from the report's versions.
        packages = report["packages"]
        problem = hopper_backward_problem(
            packages.get("fla"), packages.get("triton"), (9, 0), tilelang=bool(packages.get("tilelang"))
        )
        return [problem] if problem else []

    def report_notes(self, report: dict) -> list[str]:
        if not report["fla_forwards_to_flashqla"]:
            return []
        # What `pip install ./runtime[flashqla]` itself sets up (FLA 0.6 with flash-qla): no fix is wanted.
        return [
            "FLA's public chunk_gated_delta_rule forwards to FlashQLA in this environment (FLA >= 0.6 with "
            "flash_qla installed; FLA_FLASH_QLA=0 turns it off): code calling FLA directly may not run FLA's "
            "kernels. slime-flashqla's 'fla' backend bypasses the forwarding."
        ]
