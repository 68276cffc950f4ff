"""The backend names: one home, matching the backend objects, and importable without torch."""

from __future__ import annotations

import subprocess
import sys

from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.names import AUTO, BACKENDS, DEFAULT_BACKEND, KERNEL_BACKEND_NAMES


def test_every_kernel_name_has_one_backend_object_and_auto_is_the_extra_choice():
    assert set(KERNEL_BACKEND_NAMES) == set(KERNEL_BACKENDS)
    assert all(KERNEL_BACKENDS[name].name == name for name in KERNEL_BACKEND_NAMES)
    assert (*KERNEL_BACKEND_NAMES, AUTO) == BACKENDS and DEFAULT_BACKEND in KERNEL_BACKEND_NAMES


def test_the_names_and_the_cli_parser_import_no_torch():
    code = (
        "import sys, slime_flashqla.gdn.names, slime_flashqla.cli\n"
        "slime_flashqla.cli.build_parser()\n"
        "print(sorted(m for m in ('torch', 'triton', 'fla', 'flash_qla', 'tilelang') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_the_package_s_public_names_still_import_from_it():
    import slime_flashqla.gdn as gdn

    assert gdn.BACKENDS == BACKENDS
    for name in gdn.__all__:
        assert getattr(gdn, name) is not None
