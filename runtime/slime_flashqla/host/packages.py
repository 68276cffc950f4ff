"""Which kernel packages this node has installed and their versions, found without importing them."""

from __future__ import annotations

import importlib.metadata
import importlib.util

# import name -> pip distribution that provides it
PIP_PACKAGES = {
    "fla": "flash-linear-attention",
    "flash_qla": "flash-qla",
    "tilelang": "tilelang",
    "triton": "triton",
}
# distributions whose version stands for the import (fla-core carries the fla package since 0.5)
_DISTRIBUTIONS = {
    "fla": ("fla-core", "flash-linear-attention"),
    "flash_qla": ("flash-qla",),
    "tilelang": ("tilelang",),
    "triton": ("triton", "pytorch-triton"),
}


def distribution_version(name: str) -> str | None:
    """The installed version of distribution `name` (package metadata), or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_installed(module: str) -> bool:
    """True when `module` can be imported (found on sys.path), without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_version(module: str) -> str | None:
    """The installed distribution version behind `module`, or None ("unknown" where no distribution names it)."""
    if not is_installed(module):
        return None
    versions = (distribution_version(dist) for dist in _DISTRIBUTIONS.get(module, (module,)))
    return next((version for version in versions if version is not None), "unknown")


def kernel_package_versions() -> dict[str, str | None]:
    """Each kernel package's installed version (None where it is missing), by import name."""
    return {module: installed_version(module) for module in PIP_PACKAGES}


def require(module: str, backend: str) -> None:
    """Raise ImportError naming the pip package when `module` is missing."""
    if not is_installed(module):
        raise ImportError(
            f"the '{backend}' GDN backend needs the '{module}' module: pip install {PIP_PACKAGES[module]}"
        )
