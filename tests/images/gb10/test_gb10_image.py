"""The GB10 image: the base's CUDA PyTorch kept, FLA installed, FlashQLA only when opted in."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from images.support import entrypoint

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


def test_self_check_says_training_uses_fla():
    done = entrypoint("true")
    assert done.returncode == 0
    assert "train with --qwen-gdn-backend fla" in done.stderr
    assert "forward-only" in done.stderr
