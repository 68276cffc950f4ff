"""The `flashqla` backend: FlashQLA's TileLang kernels, K = V = 128, on the GPUs its release runs.

Its refusals, its two kernel paths for warm-up, the TileLang programs a layer preloads, doctor's
FlashQLA rows, and flash_qla's own function for the benchmarks; the runtime rules are runtime.py's
and what each release runs per GPU is releases.py's.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from slime_flashqla.gdn.backends.base import GDNBackend
from slime_flashqla.gdn.backends.flashqla.runtime import (
    describe_unmet,
    flashqla_runtime_status,
    validate_flashqla_runtime,
)
from slime_flashqla.gdn.backends.tooling import TileLangSource
from slime_flashqla.gdn.errors import FlashQLAUnavailableError
from slime_flashqla.host.packages import installed_version, is_installed

if TYPE_CHECKING:
    import torch

    from slime_flashqla.gdn.inputs import GDNShape

FLASHQLA_HEAD_DIM = 128


class FlashQLABackend(GDNBackend):
    """FlashQLA's TileLang kernels, K = V = 128, on the GPUs the installed release runs (releases.py)."""

    name = "flashqla"
    label = "FlashQLA"
    module = "flash_qla"
    # One rule for every shape: a FlashQLA-with-GVA variant was the fastest on every benchmarked
    # packed batch, kernel and layer (docs/benchmarks.md).
    auto_priority = 0
    unavailable_error = FlashQLAUnavailableError
    # The kernel sources, and TileLang with the TVM FFI runtime its kernel libraries are built against.
    kernel_distributions = ("flash-qla", "tilelang", "apache-tvm-ffi")

    # Where flash-qla is missing: the pip name, so the refusal says what to install.
    missing_package = "needs the flash-qla package, which is not installed (pip install flash-qla)"

    def unmet(self, device, backward: bool) -> tuple[list[str], str]:
        """(every unmet requirement, the runtime status's reason) for this device."""
        status = flashqla_runtime_status(device, backward=backward)
        problems = list(status.problems)
        if not is_installed(self.module):
            problems.append(self.missing_package)
        return problems, status.reason

    def available(self, device=None, *, backward: bool = False) -> tuple[bool, str]:
        problems, reason = self.unmet(device, backward)
        return (False, describe_unmet(problems)) if problems else (True, reason)

    def input_problem(self, shape: GDNShape, dtype: torch.dtype, device: torch.device) -> str | None:
        import torch

        if shape.key_dim != FLASHQLA_HEAD_DIM or shape.value_dim != FLASHQLA_HEAD_DIM:
            return f"FlashQLA needs K = V = 128, got K={shape.key_dim}, V={shape.value_dim}"
        if dtype not in (torch.bfloat16, torch.float16):
            return f"FlashQLA needs bfloat16 or float16 q/k/v, got {dtype}"
        if device.type != "cuda":
            return f"FlashQLA needs CUDA tensors, got {device.type} tensors"
        return None

    def runtime_problem(self, device: torch.device, backward: bool, dtype: torch.dtype) -> str | None:
        import torch

        problems, _ = self.unmet(device, backward)
        if problems:
            return describe_unmet(problems)
        if dtype == torch.float16:
            from slime_flashqla.gdn.backends.flashqla.releases import kernels_on, sm

            capability = tuple(torch.cuda.get_device_capability(device))
            if not kernels_on(installed_version(self.module), capability).float16:
                return f"FlashQLA's {sm(capability)} forward kernel supports bfloat16 only"
        return None

    def runs_reason(self, device: torch.device, backward: bool) -> str:
        return f"FlashQLA validates ({flashqla_runtime_status(device, backward=backward).reason})"

    def require(self) -> None:
        problems, _ = self.unmet(None, backward=False)
        if problems:
            raise FlashQLAUnavailableError(describe_unmet(problems))

    def kernel(self):
        return _flash_qla_kernel()

    def prepare(self, q, k, v, g, beta, kwargs: dict):
        """q/k normalised here (not by FlashQLA's torch.compile'd l2norm), every input dense."""
        from slime_flashqla.gdn.qk_l2norm import l2norm_qk

        q, k, v, g, beta, kwargs = super().prepare(q, k, v, g, beta, kwargs)
        q, k, kwargs = l2norm_qk(q, k, kwargs)
        # FlashQLA's TileLang kernels take dense strides; slices of a fused projection are not.
        return (*(t.contiguous() for t in (q, k, v, g, beta)), kwargs)

    def warmup_paths(self) -> dict[str, dict]:
        """FlashQLA's two kernel paths, forced: it picks per pack between intra-card CP and none.

        The two paths are different TileLang kernels, and which one a pack takes is FlashQLA's
        cost-model decision, so a warm-up that only runs the packs it happens to draw compiles
        only the paths those packs took. (Keyword arguments of flash-qla 0.1.3.)
        """
        return {"no-cp": {"auto_cp": False}, "intra-cp": {"force_intra_cp": True}}

    @functools.cached_property
    def tilelang(self) -> TileLangSource:
        """FlashQLA's TileLang factories, as a source of what `warmup` records and a layer preloads."""
        return TileLangSource("flash_qla", _flash_qla_kernel)

    def library_fn(self):
        """flash_qla's own function, as FLA >= 0.6 forwards slime's call: it normalises q/k itself."""
        from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators

        # Its l2norm is torch.compile'd: deferred, it still compiles on the first call, as imported plainly.
        return import_deferring_decorators("flash_qla").chunk_gated_delta_rule

    def report(self) -> dict:
        from slime_flashqla.gdn.backends.flashqla.releases import support_line

        ok, reason = self.available(None, backward=True)
        return {
            "flashqla": {
                "ok": ok,
                "reason": reason,
                "forward_only": flashqla_runtime_status(None, backward=True).forward_only,
                "inference_ok": self.available(None, backward=False)[0],
                "support": support_line(installed_version(self.module)),
            }
        }

    def report_rows(self, report: dict) -> list[tuple[str, str]]:
        flashqla = report["flashqla"]
        return [
            ("FlashQLA (training)", ("OK: " if flashqla["ok"] else "NO: ") + flashqla["reason"]),
            ("FlashQLA (inference)", "OK" if flashqla["inference_ok"] else "NO"),
            ("FlashQLA support", flashqla["support"]),
        ]

    def requirement_problem(self, report: dict) -> str | None:
        """`--require flashqla` asks for training, which a forward-only GPU cannot do."""
        flashqla = report["flashqla"]
        return None if flashqla["ok"] else f"FlashQLA is not usable for training: {flashqla['reason']}"


@functools.cache  # called on every launch: the check, import and attribute lookup happen once
def _flash_qla_kernel():
    from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators

    # flash_qla picks its kernels at import from CUDA device 0 and raises ValueError there on a GPU
    # its release does not dispatch (flash-qla 0.1.3 on SM121): refuse first, in one line.
    validate_flashqla_runtime(0, backward=False)

    # FlashQLA's @torch.compile'd l2norm would import TorchInductor at import time; this backend
    # never calls it (prepare() normalises q/k), so its compile waits for a first call that never comes.
    return import_deferring_decorators("flash_qla").chunk_gated_delta_rule
