"""Refuses a Python older than pyproject.toml's requires-python while pip reads the package's metadata.

pip checks a local project's requires-python only while it resolves the dependencies, after it may
have downloaded torch; this runs before. Everything else about the package is in pyproject.toml.
"""

import re
import sys
from pathlib import Path

from setuptools import setup

floor = re.search(
    r'^requires-python = ">=(\d+)\.(\d+)"', (Path(__file__).parent / "pyproject.toml").read_text(), re.MULTILINE
)
if floor is None:
    sys.exit("setup.py: pyproject.toml's requires-python is no longer of the form '>=X.Y' this check reads")
if sys.version_info[:2] < (int(floor[1]), int(floor[2])):
    sys.exit(
        f"slime-flashqla needs Python >= {floor[1]}.{floor[2]} (this is {sys.version.split()[0]}): "
        f"create the virtual environment with python{floor[1]}.{floor[2]} or newer"
    )
setup()
