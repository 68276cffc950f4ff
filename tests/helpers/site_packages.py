"""Tiny installed distributions in a folder on sys.path: what `find_spec` and package metadata see as installed."""

from __future__ import annotations

import importlib
from pathlib import Path


def site_package(
    site: Path, module: str, distribution: str | None = None, version: str = "1.0", init: str = ""
) -> None:
    """Write an importable `module` into `site`, with a dist-info for `distribution` when one is given.

    `init` is the package's `__init__.py`. The import system's caches are cleared afterwards, so a
    lookup made within the same second as the write still finds it.
    """
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(init)
    if distribution:
        info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    importlib.invalidate_caches()
