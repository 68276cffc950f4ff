"""Give both installs the same arguments, in a process where slime patched torch.distributed; print one JSON line.

    python install_arguments_worker.py

For every case (a dict of install arguments, named by its repr): what `comm_guard.install(...)`
and `slime_flashqla.integrations.slime.install(...)` did with it ("accepted", or the exception's
type and message), and whether each left the process exactly as it found it (refused), or as it
found it after uninstall() (accepted). slime's `monkey_patch_torch_dist()` runs first, as in a
Megatron actor, so slime's collective wrappers are there to be touched.
"""

from __future__ import annotations

import decimal
import fractions
import json
import sys
import types

import numpy as np
import torch.distributed as dist

from slime_flashqla import comm_guard
from slime_flashqla.integrations import slime as integration
from slime_flashqla.integrations.slime.source import import_slime_module

POLICIES = [None, "always", "whitelist", "first-use", "off"]
THRESHOLDS = [
    3.0,
    0,
    -0.0,
    2**20,
    2**21,
    2e6,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    -1,
    -1e-9,
    True,
    False,
    np.float32(2.5),
    np.float64("nan"),
    np.int64(3),
    np.bool_(True),
    fractions.Fraction(1, 2),
    decimal.Decimal("3"),
    "3",
    None,
    [3],
    complex(1, 0),
]
PROBES = [None, lambda: 0, 3, "probe", print]
MORE_POLICIES = [" Always ", "OFF", "sometimes", "", 3, True, b"off", ["always"]]


def cases() -> list[dict]:
    """Every argument each install takes, bad and good, under every policy."""
    out = [{"policy": policy, "threshold_gb": threshold} for policy in POLICIES for threshold in THRESHOLDS]
    out += [{"policy": policy, "probe": probe} for policy in POLICIES for probe in PROBES]
    out += [{"policy": policy} for policy in MORE_POLICIES]
    out += [{"policy": "sometimes", "threshold_gb": float("nan"), "probe": 3}]  # which one is named first
    return out


def snapshot(rpg) -> dict:
    """What an install may touch: torch.distributed, P2POp, ProcessGroup, slime's modules and wrappers, finders."""
    slime_modules = [m for name, m in sorted(sys.modules.items()) if name.startswith(("slime.", "slime_plugins."))]
    functions = [v for v in vars(dist).values() if type(v) is types.FunctionType]
    wrappers = [f for f in functions if f.__code__.co_filename == rpg.__file__]
    return {
        # submodules an install imports (torch.distributed.elastic, ...) become attributes: not a patch
        "dist": {k: id(v) for k, v in vars(dist).items() if not issubclass(type(v), types.ModuleType)},
        "P2POp": {k: id(v) for k, v in vars(dist.P2POp).items()},
        "ProcessGroup": {k: id(v) for k, v in vars(dist.ProcessGroup).items()},
        "slime modules": {m.__name__: {k: id(v) for k, v in vars(m).items()} for m in slime_modules},
        "slime wrappers": sorted(f"{w.__name__}:{sorted(vars(w))}" for w in wrappers),
        "meta_path": [id(f) for f in sys.meta_path],
        "guard": (comm_guard.is_installed(), comm_guard.active_policy()),
        "integration": integration.active() is not None,
    }


def label(arguments: dict) -> str:
    """The case's name: its arguments, a callable by its name (a lambda's repr holds an address)."""
    shown = {k: f"<{v.__name__}>" if callable(v) and not isinstance(v, type) else v for k, v in arguments.items()}
    return repr(shown)


def outcome(install, uninstall, arguments: dict, rpg) -> dict:
    """What one install did with `arguments`, and whether the process is as it was (after uninstall if accepted)."""
    before = snapshot(rpg)
    try:
        install(**arguments)
    except Exception as error:
        said = f"{type(error).__name__}: {error}"
    else:
        said = "accepted"
        uninstall()
    return {"said": said, "untouched": snapshot(rpg) == before}


def main() -> dict:
    rpg = import_slime_module("slime.utils.reloadable_process_group")
    import_slime_module("slime_plugins.models.qwen3_next")
    rpg.monkey_patch_torch_dist()
    results = {}
    for arguments in cases():
        results[label(arguments)] = {
            "comm_guard": outcome(comm_guard.install, comm_guard.uninstall, arguments, rpg),
            "integration": outcome(integration.install, integration.uninstall, arguments, rpg),
        }
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
