"""The GB10 image with FlashQLA opted in (INSTALL_FLASHQLA=1): what it adds to gb10's tests."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re

import pytest

from images.support import wheel_tags

# gb10-flashqla is gb10's Dockerfile, so inside it SLIME_FLASHQLA_IMAGE says gb10: a gb10 image
# built without FlashQLA that runs these by hand skips them here.
pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(
        os.environ.get("SLIME_FLASHQLA_INSTALL_FLASHQLA") != "1", reason="built without INSTALL_FLASHQLA=1: no TileLang"
    ),
]


def test_tilelang_wheel_is_for_this_machine_and_its_glibc():
    tags = wheel_tags(importlib.metadata.distribution("tilelang"))
    floors = [tuple(map(int, m.groups())) for t in tags for m in [re.search(r"manylinux_(\d+)_(\d+)_", t)] if m]
    assert all(t.endswith(platform.machine()) for t in tags), tags
    glibc = tuple(map(int, os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2]))
    assert floors and min(floors) <= glibc, (tags, glibc)
