"""The GB10 image: the base's CUDA PyTorch kept, FLA installed, FlashQLA only when opted in."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

import pytest

from images.support import entrypoint, wheel_tags

pytestmark = pytest.mark.image


def test_torch_comes_from_the_base_image_not_the_venv():
    import torch

    assert not torch.__file__.startswith(sys.prefix), torch.__file__
    assert sys.prefix == "/opt/venv"


def test_no_flashqla_stack_unless_opted_in(flashqla_opted_in):
    if flashqla_opted_in:
        pytest.skip("built with INSTALL_FLASHQLA=1")
    for dist in ("flash-qla", "tilelang"):
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(dist)


def test_self_check_says_gdn_runs_on_fla_and_what_flashqla_runs():
    from slime_flashqla.gdn.backends.flashqla.releases import support_line
    from slime_flashqla.host.packages import installed_version

    done = entrypoint("true")
    assert done.returncode == 0
    assert "train and run with --qwen-gdn-backend fla" in done.stderr
    assert f"FlashQLA support: {support_line(installed_version('flash_qla'))}" in done.stderr


# env/versions.toml's platform arch -> what the kernel (`uname -m`) calls it
MACHINES = {"arm64": "aarch64", "amd64": "x86_64"}


def test_runs_on_the_platform_the_image_is_built_for(pins):
    arch = pins["images"]["gb10"]["platform"].split("/")[1]
    assert platform.machine() == MACHINES[arch]


def test_no_compiled_package_was_built_from_source_here():
    # A compiled wheel built on this machine is tagged plain linux_<arch>; published ones are
    # manylinux (pure-Python ones, like slime-flashqla's own, are py3-none-any either way).
    ours = [d for d in importlib.metadata.distributions() if str(d.locate_file("")).startswith(sys.prefix)]
    assert len(ours) > 10  # FLA, nox, pytest and their dependencies
    built = {
        d.metadata["Name"]: tags
        for d in ours
        for tags in [wheel_tags(d)]
        if not tags or any(t.split("-")[-1].startswith("linux_") for t in tags)
    }
    assert not built, f"compiled here instead of installed from a published wheel: {built}"
