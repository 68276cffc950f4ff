"""`KernelContract`: what a GDN kernel backend answers for a call to reach its kernel, and for `auto` to choose it.

A kernel owns the chunked recurrence and its backward; the q/k l2norm a backend runs itself,
the GVA repeat and empty grids are `prepare`'s and `gdn/api.py`'s. Reasons are data: a check
returns (ok, reason), or a problem or None, and `auto`, `doctor` and the benchmarks show them
as they are. A backend imports torch and its kernel package inside its methods, so the
registry and the CLI's choices built from it import neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_flashqla.host.packages import require

if TYPE_CHECKING:
    import torch

    from slime_flashqla.gdn.inputs import GDNShape


class KernelContract:
    """One GDN kernel backend as a call sees it: its name, what it needs, and how a call reaches its kernel."""

    name: str
    label: str  # how reasons and reports name it ("FlashQLA")
    module: str | None = None  # the package its kernel comes from (None: this package's own code)
    device_types: tuple[str, ...] | None = ("cuda",)  # where its kernel runs (None: any device)
    # `auto` tries backends lowest first and runs the first that fits; None: `auto` never tries it.
    auto_priority: int | None = None
    supports_gva = True  # q/k may keep their own (smaller) head count
    unavailable_error: type[Exception] = RuntimeError
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
