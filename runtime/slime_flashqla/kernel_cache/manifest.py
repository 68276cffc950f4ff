"""The archive's manifest: read from its first member, capped in size, and every field checked before it is used."""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from slime_flashqla.kernel_cache.format import (
    CACHE_NAMES,
    FORMAT,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    ArchiveError,
    shown,
)
from slime_flashqla.kernel_cache.stack import TOOLCHAIN_FIELDS, Stack, stack_mismatches, stack_notes

# A manifest's gpu_arch: one or more compute capabilities, or none where no GPU was visible.
MANIFEST_GPU_ARCH = re.compile(r"none|sm_\d+[a-z]?(,sm_\d+[a-z]?)*")


def open_archive(path) -> tarfile.TarFile:
    """The archive at `path` open for reading, in any compression tarfile reads; a one-line ArchiveError if not."""
    path = Path(path)
    if not path.is_file():
        raise ArchiveError(f"{path}: no such file")
    try:
        return tarfile.open(path, "r:*")
    except tarfile.ReadError:
        raise ArchiveError(f"{path}: not a tar archive (nor a gzip, bzip2 or xz compressed one)") from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveError(f"{path}: cannot read it ({error})") from None


def manifest_of(tar: tarfile.TarFile, path) -> dict:
    """The checked manifest of an open archive: its first member, read before any other (`path` names it in errors)."""
    try:
        first = tar.next()
        if first is None or first.name != MANIFEST_NAME or not first.isreg():
            raise ArchiveError(f"{path}: not a slime-flashqla kernel cache archive (no {MANIFEST_NAME} first)")
        if first.size > MAX_MANIFEST_BYTES:  # the header's size: refused before a byte of it is read
            raise ArchiveError(
                f"{path}: its {MANIFEST_NAME} is {first.size} bytes, more than a manifest may be "
                f"({MAX_MANIFEST_BYTES // 2**20} MiB); not a kernel cache this slime-flashqla wrote"
            )
        manifest = json.loads(tar.extractfile(first).read(MAX_MANIFEST_BYTES))
    except RecursionError:
        raise ArchiveError(f"{path}: its {MANIFEST_NAME} is nested too deeply to be a manifest") from None
    except ValueError:
        raise ArchiveError(f"{path}: its {MANIFEST_NAME} is not valid JSON") from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveError(f"{path}: damaged archive ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ArchiveError(f"{path}: archive format {shown(repr(found))}; this slime-flashqla reads {FORMAT!r}")
    _check_manifest(manifest, _ManifestField(path))
    return manifest


def stack_fit(manifest: dict, here: Stack) -> tuple[list[str], list[str]]:
    """(mismatches, notes): where the archive's stack differs from `here`, and what could not be compared."""
    archived = Stack.from_dict(manifest["stack"])
    # The caches it holds decide what is compared (TileLang's nvcc only for a TileLang cache).
    held = [cache for cache in CACHE_NAMES if cache in manifest.get("caches", {})] or CACHE_NAMES
    return stack_mismatches(archived, here, held), stack_notes(archived, held)


def read_manifest(path) -> dict:
    """The manifest of the archive at `path` (reads only its first member)."""
    with open_archive(path) as tar:
        return manifest_of(tar, path)


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}


def _json_type(value) -> str:
    if isinstance(value, bool | int | float) and not isinstance(value, bool):
        return f"the number {value!r}"
    return _JSON_TYPES.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class _ManifestField:
    """Checks one field of a manifest; a wrong one is refused naming the archive and the field."""

    archive: object
    name: str = ""

    def at(self, key) -> _ManifestField:
        return _ManifestField(self.archive, f"{self.name}.{key}" if self.name else str(key))

    def refuse(self, value, expected: str):
        found = shown(repr(value)) if isinstance(value, str) else _json_type(value)
        raise ArchiveError(f"{self.archive}: its manifest's {shown(self.name)} is {found}, expected {expected}")

    def get(self, data: dict, key, kind, expected: str, *, optional: bool = False):
        if key not in data:
            if optional:
                return None
            raise ArchiveError(f"{self.archive}: its manifest lacks {shown(self.at(key).name)} ({expected})")
        value = data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            self.at(key).refuse(value, expected)
        return value


def _as_tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _count(check: _ManifestField, data: dict, key) -> int:
    value = check.get(data, key, int, "a whole number >= 0")
    if value < 0:
        check.at(key).refuse(value, "a whole number >= 0")
    return value


def _check_manifest(manifest: dict, check: _ManifestField) -> None:
    """Every field that import, info and the summaries read, of the type they read it as."""
    check.get(manifest, "created", str, "a date string", optional=True)
    stack = check.get(manifest, "stack", dict, "an object")
    at = check.at("stack")
    arch = at.get(stack, "gpu_arch", str, "a compute capability such as sm_90, or none")
    if not MANIFEST_GPU_ARCH.fullmatch(arch):
        at.at("gpu_arch").refuse(arch, "a compute capability such as sm_90, or none")
    at.get(stack, "gpu_name", str, "a string", optional=True)
    for name in TOOLCHAIN_FIELDS:
        at.get(stack, name, (str, type(None)), "a version string or null", optional=True)
    versions = at.get(stack, "versions", dict, "an object of version strings")
    for name, version in versions.items():
        if not isinstance(version, str | None):
            at.at("versions").at(name).refuse(version, "a version string or null")
    caches = check.get(manifest, "caches", dict, "an object", optional=True) or {}
    for name, info in caches.items():
        if name not in CACHE_NAMES:
            check.at("caches").refuse(name, f"one of {', '.join(CACHE_NAMES)}")
        if not isinstance(info, dict):
            check.at("caches").at(name).refuse(info, "an object")
        where = check.at("caches").at(name)
        where.get(info, "source_dir", str, "a directory name")
        _count(where, info, "files")
        _count(where, info, "bytes")
    configurations = check.get(manifest, "warmup_configurations", list, "a list", optional=True) or []
    for index, configuration in enumerate(configurations):
        where = check.at("warmup_configurations").at(index)
        if not isinstance(configuration, dict):
            where.refuse(configuration, "an object")
        where.get(configuration, "task", str, "a configuration key")
        where.get(configuration, "seconds", (int, float, type(None)), "a number of seconds or null", optional=True)
    files = check.get(manifest, "files", dict, "an object")
    for name, record in files.items():
        where = check.at("files").at(name)
        if not isinstance(record, dict):
            where.refuse(record, "an object with size and sha256")
        _count(where, record, "size")
        digest = where.get(record, "sha256", str, "a sha256 (64 hex digits)")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            where.at("sha256").refuse(digest, "a sha256 (64 hex digits)")
