"""The comm guard's and the integration's installs take arguments the same way; a refusal touches nothing.

One check (`comm_guard.settings.Settings.checked`) serves both: a policy, a threshold and a probe
that one refuses, the other refuses with the same exception and message; what one accepts, the
other accepts, whatever the policy. Run in a process where slime's `monkey_patch_torch_dist()`
has put its wrappers on torch.distributed, where a half-done install would show (issue 33 step 1,
issue 34 ND8).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .slime_processes import require_slime_comm_dependencies, slime_env

pytestmark = pytest.mark.slime

WORKER = Path(__file__).with_name("install_arguments_worker.py")


@pytest.fixture(scope="module")
def outcomes(slime_source) -> dict:
    require_slime_comm_dependencies()
    done = subprocess.run(
        [sys.executable, str(WORKER)], env=slime_env(slime_source), capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_both_installs_refuse_and_accept_the_same_arguments(outcomes):
    differ = {
        case: seen for case, seen in outcomes.items() if seen["comm_guard"]["said"] != seen["integration"]["said"]
    }
    assert not differ, json.dumps(differ, indent=1)


def test_a_refused_install_touches_nothing_and_an_accepted_one_is_undone(outcomes):
    touched = {
        f"{case} by {who}": seen[who]["said"]
        for case, seen in outcomes.items()
        for who in ("comm_guard", "integration")
        if not seen[who]["untouched"]
    }
    assert not touched, json.dumps(touched, indent=1)


@pytest.mark.parametrize(
    ("threshold", "said"),
    [
        ("1e+308", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got 1e+308"),
        ("2097152", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got 2097152"),
        ("2000000.0", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got 2000000.0"),
        ("nan", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got nan"),
        ("-1", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got -1"),
        ("True", "ValueError: comm guard: threshold_gb must be a number from 0 to 1048576 (GiB), got True"),
        ("np.float32(2.5)", "accepted"),
        ("1048576", "accepted"),
        ("Fraction(1, 2)", "accepted"),
        ("-0.0", "accepted"),
    ],
)
@pytest.mark.parametrize("policy", ["None", "'whitelist'", "'first-use'"])
def test_both_installs_accept_and_refuse_the_same_thresholds(outcomes, threshold, said, policy):
    seen = outcomes[f"{{'policy': {policy}, 'threshold_gb': {threshold}}}"]
    assert seen["integration"]["said"] == said
    assert seen["comm_guard"]["said"] == said
