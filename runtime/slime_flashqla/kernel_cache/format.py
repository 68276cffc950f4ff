"""What a kernel cache archive is: its names and layout, the error and result of an import, text shown safely.

slime-flashqla-manifest.json      the manifest (manifest.py), always the first member
tilelang/...                      the TileLang cache, as laid out under TILELANG_CACHE_DIR
triton/...                        the Triton cache
"""

from __future__ import annotations

from dataclasses import dataclass, field

FORMAT = "slime-flashqla-kernel-cache/1"
MANIFEST_NAME = "slime-flashqla-manifest.json"
# Top-level folders of the archive, one per cache.
CACHE_NAMES = ("tilelang", "triton")
# Parents of TileLang's kernel entry directories (tilelang/cache/kernel_cache.py, binary_cache.py).
TILELANG_ENTRY_ROOTS = ("kernels", "cuda-binaries")
TRITON_GROUP_PREFIX = "__grp__"
STAGING_PREFIX = ".slime-flashqla-import-"
# Names `export` writes, each in the compression tarfile writes for it (import reads them all).
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
# The largest manifest read: a million files fit in about 150 MiB of JSON, TileLang and Triton
# caches hold thousands; a bigger one is refused before it is read (a gzip bomb costs nothing).
MAX_MANIFEST_BYTES = 64 * 2**20
CHUNK = 1 << 20  # bytes read and written at a time: a large kernel library is never held whole


class ArchiveError(Exception):
    """A user-facing problem with an archive or a cache directory; the message is one line."""


@dataclass
class ImportResult:
    """What an import wrote."""

    published: int = 0  # files moved into the cache
    present: int = 0  # files skipped: already in the cache (or published by a concurrent writer)
    groups_rewritten: int = 0  # Triton group files pointed at this machine's cache directory
    caches: dict = field(default_factory=dict)  # cache name -> the directory it went to
    forced_mismatches: list = field(default_factory=list)


def shown(text) -> str:
    """`text` safe to print: control characters (escape sequences, newlines) escaped, so archives cannot forge lines."""
    text = str(text)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)
