"""Into an already-touched process: slime imported through a symbolic link, a forked child's own install."""

from __future__ import annotations

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
