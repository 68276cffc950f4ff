"""Test processes started with this folder first on PYTHONPATH install the slime integration at interpreter start.

tests/runtime/integrations runs slime's own test files this way, so that the processes those
tests spawn (torch.multiprocessing.spawn starts fresh interpreters) have it too, as every
Megatron actor has it under `--spec slime_flashqla.integrations.slime ...`. With
$SLIME_FLASHQLA_TEST_INSTALL_LOG set, each process appends one JSON line at exit: its pid and
what the integration replaced there.
"""

import atexit
import json
import os

from slime_flashqla.integrations.slime import install

_installation = install()
_log = os.environ.get("SLIME_FLASHQLA_TEST_INSTALL_LOG")


def _record() -> None:
    from slime_flashqla import comm_guard

    line = {
        "pid": os.getpid(),
        "installed": _installation is not None,
        "policy": _installation.policy if _installation else None,
        "replaced": _installation.replaced() if _installation else [],
        "guard_stats": comm_guard.stats(),
    }
    with open(_log, "a") as f:
        f.write(json.dumps(line) + "\n")


if _log:
    atexit.register(_record)
