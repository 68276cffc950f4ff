"""A slime whose reloadable_process_group differs from 624b824's imports: what is there is patched, the rest named.

Each case writes a small `slime` package whose `slime/utils/reloadable_process_group.py` lacks
some of what the integration patches, installs the integration in a fresh process, and imports
that module, as a Megatron actor of such a slime run would (issue 34 ND4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .slime_processes import RUNTIME

CONTEXT_MANAGER = """
from contextlib import contextmanager

CALLS = []

def clear_memory():
    CALLS.append("clear_memory")

@contextmanager
def _wrap_low_level_call(check_memory=True):
    CALLS.append(("slime's check", check_memory))
    yield
"""
GROUP_CLASS = """
class ReloadableProcessGroup:
    @staticmethod
    def reload_process_groups():
        CALLS.append("reload")
"""
FORWARD = """
    def _fwd(self, method, *args, **kwargs):
        CALLS.append(("fwd", method))
"""

PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from slime_flashqla.integrations import slime as integration
installation = integration.install(policy="always", probe=lambda: 0, threshold_gb=1)
import slime.utils.reloadable_process_group as rpg
if hasattr(rpg, "_wrap_low_level_call"):
    with rpg._wrap_low_level_call(check_memory=False):
        pass
print(json.dumps({"replaced": installation.replaced(), "calls": getattr(rpg, "CALLS", None),
                  "checks": installation.comm_checks()}))
integration.uninstall()
"""


def run_with(tmp_path, source: str) -> tuple[dict, list[str]]:
    """(what the probe printed, the log lines) for a slime whose reloadable_process_group is `source`."""
    utils = tmp_path / "slime" / "utils"
    utils.mkdir(parents=True)
    for init in (tmp_path / "slime" / "__init__.py", utils / "__init__.py"):
        init.write_text("")
    (utils / "reloadable_process_group.py").write_text("def monkey_patch_torch_dist():\n    pass\n" + source)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SLIME")},
            "PYTHONPATH": f"{RUNTIME}:{tmp_path}",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr.strip().splitlines()


def test_a_slime_without_the_call_sites_imports_and_one_line_says_what_was_not_patched(tmp_path):
    out, log = run_with(tmp_path, "")
    assert out["replaced"] == [] and out["checks"] == {"checked": 0, "cleared": 0}
    assert log == [
        "WARNING slime-flashqla: this slime's slime.utils.reloadable_process_group has no _wrap_low_level_call, "
        "ReloadableProcessGroup: left as slime has them (no memory check by the integration there); "
        "the integration was tested with slime 624b824"
    ]


def test_a_slime_without_reloadable_process_group_gets_its_call_sites_checked(tmp_path):
    out, log = run_with(tmp_path, CONTEXT_MANAGER)
    assert out["replaced"] == ["slime.utils.reloadable_process_group._wrap_low_level_call"]
    assert out["checks"] == {"checked": 1, "cleared": 1}  # `always`, below the threshold: slime's clear_memory
    assert out["calls"] == ["clear_memory", ["slime's check", False]]
    assert len(log) == 1 and "has no ReloadableProcessGroup:" in log[0]


@pytest.mark.parametrize(("extra", "missing"), [("", "ReloadableProcessGroup._fwd"), (FORWARD, None)])
def test_a_group_class_is_patched_where_it_has_the_methods(tmp_path, extra, missing):
    out, log = run_with(tmp_path, CONTEXT_MANAGER + GROUP_CLASS + extra)
    expected = ["_wrap_low_level_call", "ReloadableProcessGroup.reload_process_groups"]
    if not missing:
        expected.append("ReloadableProcessGroup._fwd")
    assert [name.removeprefix("slime.utils.reloadable_process_group.") for name in out["replaced"]] == expected
    assert log == ([] if missing is None else [log[0]]) and (missing is None or f"has no {missing}:" in log[0])
