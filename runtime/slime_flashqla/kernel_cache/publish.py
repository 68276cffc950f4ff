"""Import's mechanics: every member checked before a write, staged beside the cache, and published whole.

- a TileLang kernel entry (`<version>/<platform>/kernels/<key>/`, `<version>/cuda-binaries/<key>/`)
  is a directory that TileLang publishes with one rename and never changes afterwards;
  an imported entry is staged whole and renamed into place the same way, and an entry
  that already exists is left alone;
- every other file (Triton's, the warm-up markers) is staged and moved into place with
  os.replace, Triton's `__grp__*.json` group files last, since a group file names its
  kernel's other files and is what makes Triton treat the kernel as cached.

The staging directory sits at the top of the destination cache, so every rename stays on
one filesystem; importers hold an exclusive file lock (files/lock.py) on each distinct destination
directory while they stage and publish. Nothing is written through a symbolic link already in the
cache, the lock included.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from stat import S_ISDIR, S_ISLNK

from slime_flashqla.files.lock import LockPathError, directory_lock
from slime_flashqla.kernel_cache.format import (
    CACHE_NAMES,
    CHUNK,
    STAGING_PREFIX,
    TILELANG_ENTRY_ROOTS,
    TRITON_GROUP_PREFIX,
    ArchiveError,
    ImportResult,
)

IMPORT_LOCK_KEY = "cache-import"


def _unsafe_reason(member: tarfile.TarInfo, target_root: Path | None) -> str | None:
    """Why `member` must not be extracted, or None."""
    if not member.isreg():
        return "not a regular file (links, devices and directories are never extracted)"
    rel = PurePosixPath(member.name)
    if rel.is_absolute() or any(part in ("", ".", "..") for part in member.name.split("/")):
        return "absolute path or '..' in its name"
    if len(rel.parts) < 2 or rel.parts[0] not in CACHE_NAMES:
        return f"outside the archive's cache folders ({', '.join(CACHE_NAMES)})"
    if target_root is None:
        return f"the archive holds a {rel.parts[0]} cache but no {rel.parts[0]} directory was given"
    data_filter = getattr(tarfile, "data_filter", None)  # Python >= 3.11.4
    if data_filter is not None:
        try:
            data_filter(member, str(target_root))
        except tarfile.FilterError as error:
            return str(error)
    return None


def checked_members(tar: tarfile.TarFile, manifest: dict, targets: dict, path) -> list[tarfile.TarInfo]:
    """Every member after the manifest, each one checked as it is read, before anything is written."""
    files, seen, members = manifest["files"], set(), []
    # Read one header at a time, never all first (getmembers): a small archive can hold millions of
    # headers, and each is refused before the next is read. Every member past the manifest's count
    # is unlisted or a repeat, so at most one more than the manifest lists is ever read.
    for member in _members_after_manifest(tar, path):
        cache = PurePosixPath(member.name).parts[0] if member.name else ""
        reason = _unsafe_reason(member, targets.get(cache))
        if reason is None and member.name not in files:
            reason = "not listed in the manifest"
        if reason is None and member.name in seen:
            reason = "appears twice"
        if reason is None and member.size != files[member.name].get("size"):
            reason = f"size {member.size} but the manifest says {files[member.name].get('size')}"
        if reason:
            raise _refused(path, member.name, reason)
        seen.add(member.name)
        members.append(member)
    missing = sorted(set(files) - seen)
    if missing:
        raise ArchiveError(f"{path}: incomplete, {len(missing)} file(s) of the manifest missing (first {missing[0]})")
    _check_units(members, targets, path)
    return members


def _members_after_manifest(tar: tarfile.TarFile, path) -> Iterator[tarfile.TarInfo]:
    """The archive's members after the manifest (already read), one header read per step."""
    while True:
        try:
            member = tar.next()
        except (tarfile.TarError, EOFError, OSError) as error:
            raise ArchiveError(f"{path}: damaged archive ({error})") from None
        if member is None:
            return
        yield member


def _refused(path, name: str, reason: str) -> ArchiveError:
    return ArchiveError(f"{path}: refusing member {name!r}: {reason}; nothing was imported")


def _check_units(members, targets: dict, path) -> None:
    """Refuse, before anything is written, a unit that cannot be published whole and inside its cache.

    A unit under another unit of the archive would be half shadowed by it; one under a file of the
    cache cannot be created; one under a symbolic link of the cache would be written wherever the
    link points (tarfile's data filter sees only the member's name, not what the cache holds).
    """
    units: dict = {}  # (the cache's real directory, unit) -> the first member in it
    for member in members:
        cache, rel = _split(member.name)
        key = (os.path.realpath(targets[cache]), _unit(cache, rel))
        if units.setdefault(key, member.name) != member.name and key[1] != rel.parent:
            raise _refused(path, member.name, f"it goes where {units[key]!r} goes")
    kinds: dict = {}  # path in a cache -> "dir", "file", "link", or None where nothing is

    def kind(target: Path) -> str | None:
        if target not in kinds:
            try:
                mode = os.lstat(target).st_mode
            except FileNotFoundError:
                mode = None
            kinds[target] = None if mode is None else "link" if S_ISLNK(mode) else "dir" if S_ISDIR(mode) else "file"
        return kinds[target]

    for (root, unit), name in units.items():
        inside = next((units[(root, up)] for up in unit.parents[:-1] if (root, up) in units), None)
        if inside is not None:
            raise _refused(path, name, f"it lies inside {inside!r}, another member of the archive")
        for ancestor in (*reversed(unit.parents[:-1]), unit):
            found = kind(Path(root) / ancestor)
            if found is None:
                break  # nothing in the cache at or below a missing directory
            if found == "link":
                raise _refused(path, name, f"{Path(root) / ancestor} in the cache is a symbolic link")
            if found == "file" and ancestor != unit:
                raise _refused(path, name, f"{Path(root) / ancestor} in the cache is a file, not a directory")


def _unit(cache: str, rel: PurePosixPath) -> PurePosixPath:
    """What one rename publishes: a TileLang kernel entry directory, or the file itself."""
    if cache == "tilelang" and len(rel.parts) >= 3 and rel.parts[-3] in TILELANG_ENTRY_ROOTS:
        return rel.parent
    return rel


def _split(member_name: str) -> tuple[str, PurePosixPath]:
    parts = PurePosixPath(member_name).parts
    return parts[0], PurePosixPath(*parts[1:])


def _stage_member(source, destination: Path | None) -> str:
    """Copy a member to `destination` (fsynced), or only read it when None; returns its sha256."""
    # Hashed even when not written: a damaged archive is refused whole.
    digest = hashlib.sha256()
    with contextlib.ExitStack() as files:
        out = None
        if destination is not None:
            destination.parent.mkdir(parents=True, exist_ok=True)
            out = files.enter_context(open(destination, "wb"))
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    return digest.hexdigest()


@dataclass
class _Unit:
    """One thing published by one rename, and the archive files in it."""

    write: bool  # False: the cache already has it
    is_dir: bool
    rels: list = field(default_factory=list)


def stage_members(tar, members, manifest, targets, stagings, path) -> dict:
    """Hash every member and stage those whose unit the cache lacks; returns {(cache, unit path): _Unit}."""
    units: dict = {}
    for member in members:
        cache, rel = _split(member.name)
        unit_path = _unit(cache, rel)
        unit = units.get((cache, unit_path))
        if unit is None:  # decided once per unit, so a unit is never staged in part
            unit = _Unit(write=not (targets[cache] / unit_path).exists(), is_dir=unit_path != rel)
            units[(cache, unit_path)] = unit
        unit.rels.append(rel)
        try:
            sha256 = _stage_member(tar.extractfile(member), stagings[cache] / rel if unit.write else None)
        except (tarfile.TarError, EOFError) as error:
            raise ArchiveError(f"{path}: damaged archive at {member.name} ({error}); nothing was imported") from None
        if sha256 != manifest["files"][member.name]["sha256"]:
            raise ArchiveError(f"{path}: {member.name} fails its sha256 check (corrupted archive); nothing imported")
    return units


def _rewrite_triton_group(staged_file: Path, target_dir: Path) -> bool:
    """Point a Triton group file's child paths (absolute, the exporter's) at `target_dir`; True if changed."""
    try:
        data = json.loads(staged_file.read_text())
        children = data["child_paths"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(children, dict):
        return False
    rewritten = {}
    for child, child_path in children.items():
        old = PurePosixPath(str(child_path))
        # Triton keeps a kernel's files beside its group file: <cache>/<hash>/<file>.
        rewritten[child] = str(target_dir / old.name) if old.parent.name == target_dir.name else child_path
    if rewritten == children:
        return False
    staged_file.write_text(json.dumps({**data, "child_paths": rewritten}))
    return True


def _inside(root: Path, target: Path) -> None:
    """Refuse a target that a symbolic link made meanwhile would put outside its cache."""
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(target.parent)]) != real_root:
        raise ArchiveError(f"{target.parent} now leads outside the cache {root} (a symbolic link appeared)")


def _publish_dir(staged_dir: Path, target: Path) -> bool:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staged_dir, target)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False  # a compile published the same entry first: entries are immutable, keep it
        raise
    return True


def _publish_file(staged_file: Path, target: Path) -> bool:
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged_file, target)
    return True


def member_caches(members) -> list[str]:
    """The caches (CACHE_NAMES) the checked members go to, in order."""
    return sorted({_split(member.name)[0] for member in members})


def staging_directories(held: contextlib.ExitStack, roots: dict) -> dict:
    """A new staging directory at the top of each cache in `roots` ({cache: dir}), removed when `held` closes."""
    stagings = {}
    for cache, root in roots.items():
        stagings[cache] = root / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        stagings[cache].mkdir()
        held.callback(shutil.rmtree, stagings[cache], True)
    return stagings


def _clear_stale_staging(root: Path) -> None:
    # Called under the import lock: no other importer is staging, so any staging dir is a crashed one's.
    for entry in root.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(entry, ignore_errors=True)


def lock_each_directory(held: contextlib.ExitStack, roots: list[Path]) -> None:
    """Take the import lock once per distinct directory, whatever its aliases (a symlink, `..`, the same path twice).

    flock locks are per open file: a second lock on the same file through another descriptor
    waits for the first forever, in one process too. Taken in (device, inode) order, so two
    importers whose aliases differ never hold one lock each and wait for the other's.
    """
    distinct = {}
    for root in roots:
        root.mkdir(parents=True, exist_ok=True)
        status = root.stat()
        distinct.setdefault((status.st_dev, status.st_ino), root)
    for _, root in sorted(distinct.items()):
        try:
            held.enter_context(directory_lock(root, IMPORT_LOCK_KEY))
        except LockPathError as error:
            raise ArchiveError(str(error)) from None
        _clear_stale_staging(root)


def publish(units: dict, targets: dict, stagings: dict, result: ImportResult, path) -> None:
    """Move each staged unit the caches lack into place, Triton's group files last; counts go into `result`."""

    def is_triton_group(key) -> bool:
        cache, unit_path = key
        return cache == "triton" and unit_path.name.startswith(TRITON_GROUP_PREFIX)

    # Triton's group files last: once one exists, Triton loads the files it names.
    for key in sorted(units, key=is_triton_group):
        (cache, unit_path), unit = key, units[key]
        target = targets[cache] / unit_path
        published = False
        try:
            if unit.write:
                _inside(targets[cache], target)
                if is_triton_group(key):
                    result.groups_rewritten += _rewrite_triton_group(stagings[cache] / unit_path, target.parent)
                publish = _publish_dir if unit.is_dir else _publish_file
                published = publish(stagings[cache] / unit_path, target)
        except (OSError, ArchiveError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            raise ArchiveError(
                f"{path}: publishing stopped at {cache}/{unit_path} ({reason}) after {result.published} file(s) "
                "went in; what went in is whole kernels (Triton's group files go last), import again once fixed"
            ) from None
        if published:
            result.published += len(unit.rels)
        else:
            result.present += len(unit.rels)
