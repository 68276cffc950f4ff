"""`GDNBackend`: what the registry holds, the kernel contract with doctor's and the tools' hooks.

- `contract.py`: what a call and `auto` need (`KernelContract`);
- `reporting.py`: what `doctor` asks (`ReportHooks`);
- `tooling.py`: what the warm-up, preload, start-up imports and benchmarks ask (`ToolHooks`).

A backend subclasses `GDNBackend` and overrides what it has; every hook has a default.
"""

from __future__ import annotations

from slime_flashqla.gdn.backends.contract import KernelContract
from slime_flashqla.gdn.backends.reporting import ReportHooks
from slime_flashqla.gdn.backends.tooling import ToolHooks


class GDNBackend(KernelContract, ReportHooks, ToolHooks):
    """One GDN kernel backend: its kernel contract, and what doctor and the tools ask of it."""
