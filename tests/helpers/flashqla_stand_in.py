"""A stand-in flash-qla distribution: real files on a sys.path entry, for tests of what reads the installed release.

It has a dist-info (importlib.metadata sees the version) and a `flash_qla` package whose import
raises: whatever decides from the installed release must do so without importing it.
"""

from __future__ import annotations

from pathlib import Path

NEVER_IMPORTED = "the stand-in for flash-qla {version} was imported: validation must refuse before any import"


def install_stand_in_flashqla(root: Path, version: str) -> None:
    """Write a flash-qla `version` distribution under `root` (a sys.path entry) whose import raises."""
    package = root / "flash_qla"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"raise ImportError({NEVER_IMPORTED.format(version=version)!r})\n")
    info = root / f"flash_qla-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash-qla\nVersion: {version}\n")
