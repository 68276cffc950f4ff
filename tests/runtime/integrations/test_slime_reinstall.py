"""Into an already-touched process: slime imported through a symbolic link, a forked child's own install."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from .slime_processes import require_slime_comm_dependencies, slime_env

pytestmark = pytest.mark.slime


def run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_slime_imported_through_a_symbolic_link_is_the_same_checkout(slime_source, tmp_path):
    link = tmp_path / "slime-link"
    link.symlink_to(slime_source, target_is_directory=True)
    env = slime_env(slime_source)
    env["PYTHONPATH"] = f"{link}:{env['PYTHONPATH']}"  # slime_plugins is imported from the link first
    out = run(
        """
        import slime_plugins
        from slime_flashqla.integrations.slime import import_slime_module
        print("IMPORTED", import_slime_module("slime_plugins.models.qwen_gdn_backend").__name__)
        """,
        env,
    )
    assert "IMPORTED slime_plugins.models.qwen_gdn_backend" in out


def test_a_forked_child_s_install_decides_slime_s_call_sites(slime_source):
    """A child inherits the parent's patched call sites; its own install's policy and probe must reach them."""
    require_slime_comm_dependencies()
    out = run(
        """
        import os
        from slime_flashqla.integrations.slime import install, import_slime_module
        rpg = import_slime_module("slime.utils.reloadable_process_group")
        install(policy="whitelist", probe=lambda: 100 * 1024**3)
        pid = os.fork()
        if pid == 0:
            probes = []
            child = install(policy="always", probe=lambda: probes.append(1) or 100 * 1024**3)
            for check_memory in (False, True):  # `always` probes both, whatever slime's flag
                with rpg._wrap_low_level_call(check_memory=check_memory):
                    pass
            print("CHILD", child.policy, child.comm_checks()["checked"], len(probes), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        """,
        slime_env(slime_source),
    )
    assert "CHILD always 2 2" in out


def test_a_forked_child_starts_clean_and_can_install_and_uninstall(slime_source):
    """After fork the child has slime's own names and no installation; its own install and uninstall work (ND5)."""
    out = run(
        """
        import json, os, sys
        from slime_flashqla.integrations.slime import active, import_slime_module, install, uninstall
        module = import_slime_module("slime_plugins.models.qwen3_next")
        slime_s = module.Qwen3NextGatedDeltaNet
        install()
        pid = os.fork()
        if pid == 0:
            view = {
                "active": active() is not None,
                "slime's class": module.Qwen3NextGatedDeltaNet is slime_s,
                "record": hasattr(module, "__slime_flashqla_replaced__"),
                "finders": [type(f).__name__ for f in sys.meta_path].count("PatchOnImport"),
            }
            child = install("always")
            view["child's install"] = [child is active(), module.Qwen3NextGatedDeltaNet.__module__]
            uninstall()
            view["child's uninstall"] = [active(), module.Qwen3NextGatedDeltaNet is slime_s]
            print("CHILD", json.dumps(view), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("PARENT", json.dumps([active() is not None, module.Qwen3NextGatedDeltaNet.__module__]))
        """,
        slime_env(slime_source),
    )
    child = json.loads(out.split("CHILD ", 1)[1].splitlines()[0])
    assert child == {
        "active": False,
        "slime's class": True,
        "record": False,
        "finders": 0,
        "child's install": [True, "slime_flashqla.integrations.slime.gdn"],
        "child's uninstall": [None, True],
    }
    assert json.loads(out.split("PARENT ", 1)[1].splitlines()[0]) == [True, "slime_flashqla.integrations.slime.gdn"]


def test_a_reloaded_slime_module_is_patched_again_and_uninstall_restores_the_reloaded_one(slime_source):
    """importlib.reload runs slime's code again in the same module: patched as a fresh import is (ND7)."""
    out = run(
        """
        import importlib, json
        from slime_flashqla.integrations.slime import import_slime_module, install, uninstall
        from slime_flashqla.integrations.slime.patches import original_attribute
        module = import_slime_module("slime_plugins.models.qwen3_next")
        install()
        importlib.reload(module)
        reloaded_slime_s = original_attribute(module, "Qwen3NextGatedDeltaNet")
        view = {"after reload": module.Qwen3NextGatedDeltaNet.__module__, "slime's": reloaded_slime_s.__module__}
        uninstall()
        restored = module.Qwen3NextGatedDeltaNet is reloaded_slime_s
        view["after uninstall"] = [restored, hasattr(module, "__slime_flashqla_replaced__")]
        print("VIEW", json.dumps(view))
        """,
        slime_env(slime_source),
    )
    assert json.loads(out.split("VIEW ", 1)[1].splitlines()[0]) == {
        "after reload": "slime_flashqla.integrations.slime.gdn",
        "slime's": "slime_plugins.models.qwen3_next",
        "after uninstall": [True, False],
    }


@pytest.fixture
def clean(monkeypatch):
    """Neither the integration nor the comm guard installed, before and after."""
    from slime_flashqla import comm_guard
    from slime_flashqla.integrations import slime as integration

    monkeypatch.delenv(integration.SWITCH_ENV, raising=False)
    monkeypatch.delenv(comm_guard.ENV_VAR, raising=False)
    integration.uninstall()
    comm_guard.uninstall()
    yield integration, comm_guard
    integration.uninstall()
    comm_guard.uninstall()


def test_a_comm_guard_installed_before_the_integration_is_kept_as_it_is_and_stays(clean, caplog):
    """The user's guard keeps its policy under the integration's first-use, and outlives uninstall() (ND6)."""
    integration, comm_guard = clean
    comm_guard.install("always", threshold_gb=1)
    with caplog.at_level("WARNING", logger="slime_flashqla.integrations.slime"):
        found = integration.install(policy="first-use", threshold_gb=5)
    assert comm_guard.active_policy() == "always"
    assert [r.getMessage() for r in caplog.records] == [
        "slime-flashqla: a comm guard was installed before the integration (policy always): kept as it is, "
        "its settings in force instead of the integration's, and left installed by uninstall()"
    ]
    assert "a comm guard installed before the integration (policy always)" in found.describe()
    integration.uninstall()
    assert comm_guard.is_installed() and comm_guard.active_policy() == "always"


def test_a_comm_guard_installed_over_the_integration_s_stays_after_its_uninstall(clean):
    """A guard someone installs after the integration is theirs: the integration's uninstall leaves it (ND6)."""
    integration, comm_guard = clean
    integration.install(policy="first-use")
    assert comm_guard.active_policy() == "first-use"
    comm_guard.install("always")
    integration.uninstall()
    assert comm_guard.active_policy() == "always"
    comm_guard.uninstall()
    integration.install(policy="first-use")  # and the integration's own guard goes with it, as before
    integration.uninstall()
    assert not comm_guard.is_installed()
