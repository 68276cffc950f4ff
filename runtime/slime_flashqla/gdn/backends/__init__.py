"""The GDN kernel backends' registry: the one list of their names and objects, importing no torch.

Each backend is a small object (base.py's `GDNBackend`: the kernel contract of contract.py, with
doctor's hooks, reporting.py, and the tools', tooling.py) holding its own facts: what it refuses
and why, its version rules and known upstream bugs, what it imports at start, its warm-up paths,
doctor's rows and the library's own function for the benchmarks. A backend with helpers of its
own is a package (`fla/`, `flashqla/`, `torch/`) that keeps them inside. The CLI's choices
(gdn/names.py), `auto` (auto.py), doctor, warm-up and the benchmarks read them from here, so a
new backend is its module, one line below, and its tests.
"""

from slime_flashqla.gdn.backends.base import GDNBackend
from slime_flashqla.gdn.backends.fla import FLABackend
from slime_flashqla.gdn.backends.flashqla import FlashQLABackend
from slime_flashqla.gdn.backends.torch import TorchBackend

# Every kernel backend under its name, in the order the CLI offers them.
KERNEL_BACKENDS: dict[str, GDNBackend] = {b.name: b for b in (FLABackend(), FlashQLABackend(), TorchBackend())}
# Not a kernel: it picks one of the above per kind of input (auto.py), and never falls back silently.
AUTO = "auto"
# slime's own default: a run changes kernel only when asked to, never because a package is installed.
DEFAULT_BACKEND = "fla"
# The pure-PyTorch reference: what parity checks compare against, and what `auto` runs where nothing else fits.
REFERENCE = "torch"

__all__ = ["AUTO", "DEFAULT_BACKEND", "KERNEL_BACKENDS", "REFERENCE", "GDNBackend"]
