"""Modules of this repository that are no package (docker/images.py, docker/selfcheck.py), loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load(relative: str, name: str) -> ModuleType:
    """The module at ROOT/`relative`, under `name` (loaded once; noxfile.py uses the same name for images.py)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def images() -> ModuleType:
    """docker/images.py: the image machinery the nox sessions call."""
    return load("docker/images.py", "slime_flashqla_images")
