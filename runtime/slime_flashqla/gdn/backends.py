"""The GDN kernel backends: `torch`, `fla`, `flashqla`, each a small class whose checks return (ok, reason).

Reasons are data: `auto` and `slime-flashqla doctor` report them instead of swallowing them.
`GDNBackend` says what every backend answers and holds the common answers; a backend's own
facts live in its subclass, and `KERNEL_BACKENDS` (under gdn/names.py's names) is the registry.
"""

from __future__ import annotations

import functools

import torch

from slime_flashqla.gdn.errors import FlashQLAUnavailableError
from slime_flashqla.gdn.inputs import GDNShape
from slime_flashqla.gdn.packages import is_installed, require
from slime_flashqla.gdn.qk_l2norm import l2norm_qk
from slime_flashqla.gdn.validation import describe_unmet, flashqla_runtime_status, validate_flashqla_runtime

FLASHQLA_HEAD_DIM = 128


def needs_backward(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will run a backward pass through these inputs."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


class GDNBackend:
    """One GDN kernel backend: its name, what it needs, and how a call reaches its kernel."""

    name: str
    module: str | None = None  # the package its kernel comes from (None: this package's own code)
    supports_gva = True  # q/k may keep their own (smaller) head count
    unavailable_error: type[Exception] = RuntimeError
    specialisations = None  # a source of recorded kernel specialisations to preload (kernels/preload.py)
    runs = "runs these inputs"  # how `supports` says yes

    def available(self, device: torch.device | None = None) -> tuple[bool, str]:
        """(ok, reason): whether this machine can run the backend at all."""
        raise NotImplementedError

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
        """The inputs as this backend's kernel takes them (by default, as they are)."""
        return q, k, v, g, beta, kwargs

    def warmup_paths(self) -> dict[str, dict]:
        """Kernel paths a warm-up must force beside what the layer runs (by default none)."""
        return {}


class TorchBackend(GDNBackend):
    """The pure-PyTorch reference: any device, any float dtype, any head size."""

    name = "torch"
    runs = "pure PyTorch runs any valid input"

    def available(self, device: torch.device | None = None) -> tuple[bool, str]:
        return True, "pure PyTorch, always available"

    def kernel(self):
        from slime_flashqla.gdn.reference import chunk_gated_delta_rule_torch

        return chunk_gated_delta_rule_torch


class FLABackend(GDNBackend):
    """FLA's own Triton kernels (never FLA's forwarding to FlashQLA)."""

    name = "fla"
    module = "fla"
    runs = "FLA's own kernels run these inputs"
    # specialisations: none, the preload covers TileLang factories and FLA's kernels are Triton's

    @property
    def supports_gva(self) -> bool:
        from slime_flashqla.gdn.fla_kernels import fla_supports_gva

        return fla_supports_gva()

    def available(self, device: torch.device | None = None) -> tuple[bool, str]:
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
            from slime_flashqla.gdn.fla_kernels import hopper_backward_problem
            from slime_flashqla.gdn.packages import installed_version

            capability = torch.cuda.get_device_capability(device)
            fla, triton = installed_version("fla"), installed_version("triton")
            return hopper_backward_problem(fla, triton, capability, tilelang=is_installed("tilelang"))
        return None

    def kernel(self):
        from slime_flashqla.gdn.fla_kernels import fla_own_chunk_gated_delta_rule

        return fla_own_chunk_gated_delta_rule()

    def prepare(self, q, k, v, g, beta, kwargs: dict):
        """q/k normalised by this package's fixed-launch l2norm, so FLA's autotuned one never runs."""
        q, k, kwargs = l2norm_qk(q, k, kwargs)
        return q, k, v, g, beta, kwargs

    def warmup_paths(self) -> dict[str, dict]:
        """Kernel paths a warm-up must force beside what the layer runs: FLA has one path."""
        return {"kernel": {}}


class FlashQLABackend(GDNBackend):
    """FlashQLA's TileLang kernels, K = V = 128, on the GPUs the installed release runs (gdn/flashqla_support.py)."""

    name = "flashqla"
    module = "flash_qla"
    unavailable_error = FlashQLAUnavailableError

    # Where flash-qla is missing: the pip name, so the refusal says what to install.
    missing_package = "needs the flash-qla package, which is not installed (pip install flash-qla)"

    def unmet(self, device: torch.device | None, backward: bool) -> tuple[list[str], str]:
        """(every unmet requirement, the runtime status's reason) for this device."""
        status = flashqla_runtime_status(device, backward=backward)
        problems = list(status.problems)
        if not is_installed(self.module):
            problems.append(self.missing_package)
        return problems, status.reason

    def available(self, device: torch.device | None = None, *, backward: bool = False) -> tuple[bool, str]:
        problems, reason = self.unmet(device, backward)
        return (False, describe_unmet(problems)) if problems else (True, reason)

    def input_problem(self, shape: GDNShape, dtype: torch.dtype, device: torch.device) -> str | None:
        if shape.key_dim != FLASHQLA_HEAD_DIM or shape.value_dim != FLASHQLA_HEAD_DIM:
            return f"FlashQLA needs K = V = 128, got K={shape.key_dim}, V={shape.value_dim}"
        if dtype not in (torch.bfloat16, torch.float16):
            return f"FlashQLA needs bfloat16 or float16 q/k/v, got {dtype}"
        if device.type != "cuda":
            return f"FlashQLA needs CUDA tensors, got {device.type} tensors"
        return None

    def runtime_problem(self, device: torch.device, backward: bool, dtype: torch.dtype) -> str | None:
        problems, _ = self.unmet(device, backward)
        if problems:
            return describe_unmet(problems)
        if dtype == torch.float16:
            from slime_flashqla.gdn.flashqla_support import kernels_on, sm
            from slime_flashqla.gdn.packages import installed_version

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
    def specialisations(self):
        """FlashQLA's TileLang factories, as a source of what `warmup` records and a layer preloads."""
        from slime_flashqla.kernels.tilelang_specs import TileLangPackage

        # TileLang and its TVM runtime build the programs; flash-qla's sources are what they build.
        return TileLangPackage("flash_qla", ("flash-qla", "tilelang", "apache-tvm-ffi"), _flash_qla_kernel)


@functools.cache  # called on every launch: the check, import and attribute lookup happen once
def _flash_qla_kernel():
    from slime_flashqla.gdn.deferred_compile import import_deferring_torch_compile

    # flash_qla picks its kernels at import from CUDA device 0 and raises ValueError there on a GPU
    # its release does not dispatch (flash-qla 0.1.3 on SM121): refuse first, in one line.
    validate_flashqla_runtime(0, backward=False)

    # FlashQLA's @torch.compile'd l2norm would import TorchInductor at import time; this backend
    # never calls it (prepare() normalises q/k), so its compile waits for a first call that never comes.
    return import_deferring_torch_compile("flash_qla").chunk_gated_delta_rule


KERNEL_BACKENDS = {b.name: b for b in (FlashQLABackend(), FLABackend(), TorchBackend())}
