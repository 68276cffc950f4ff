"""slime-flashqla: FlashQLA / FLA kernel backends for Qwen Gated DeltaNet training.

Importing this package imports torch-free metadata only; every submodule that
touches fla, flash_qla, tilelang or triton imports them lazily, when a backend
is actually asked for.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("slime-flashqla")
except _metadata.PackageNotFoundError:  # running from a source tree (PYTHONPATH=runtime)
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
