"""A warmed kernel cache (TileLang's and Triton's) as one tar archive, to move to another machine or image.

The archive's first member is a manifest: the GPU architecture and the versions the
kernels were built with, the warm-up configurations it holds, and every file's size
and sha256.  Import reads the manifest and refuses another stack before it writes
anything, checks every member (regular files with relative names only) and every
hash, and publishes into the live cache the way the libraries themselves do.
This module is the two commands; the rooms they use:

- format.py: the archive's names and layout, ArchiveError, ImportResult;
- stack.py: the stack a kernel was built for, and the comparison with this machine's;
- manifest.py: reading and checking the manifest;
- publish.py: import's member checks, staging, locks and publishing.

SIGTERM removes an import's staging directory as Ctrl-C does (a SIGKILLed importer's is removed by
the next import). The export is written beside its path and renamed into place
(files/output_paths.py): onto a regular file or nothing, never onto a device, FIFO or directory.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path, PurePosixPath

from slime_flashqla.files.atomic import is_temporary
from slime_flashqla.files.lock import LOCK_DIR
from slime_flashqla.files.output_paths import check_output_path, publish_atomically
from slime_flashqla.files.termination import sigterm_raises
from slime_flashqla.kernel_cache.format import (
    ARCHIVE_SUFFIXES,
    CACHE_NAMES,
    CHUNK,
    FORMAT,
    MANIFEST_NAME,
    STAGING_PREFIX,
    ArchiveError,
    ImportResult,
)
from slime_flashqla.kernel_cache.manifest import manifest_of, open_archive, stack_fit
from slime_flashqla.kernel_cache.publish import (
    checked_members,
    lock_each_directory,
    member_caches,
    publish,
    stage_members,
    staging_directories,
)
from slime_flashqla.kernel_cache.stack import Stack, StackMismatch, current_stack, with_gpu_arch

_WRITE_MODES = {".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.xz": "w:xz", ".txz": "w:xz", ".tar.bz2": "w:bz2"}


def _is_transient(rel: PurePosixPath) -> bool:
    """Files a cache holds only while someone writes or locks: never exported."""
    name = rel.name
    if any(part == ".staging" or part.startswith(("tmp.pid_", STAGING_PREFIX)) for part in rel.parts):
        return True  # TileLang's and Triton's in-progress writes, and ours
    if is_temporary(name) or (name.startswith(".") and ".tmp" in name):
        return True  # ours (files/atomic.py), and TileLang's per-file temporaries: .<name>.<pid>_<uuid>.tmp
    return name == "lock" or (rel.parent.name == LOCK_DIR and name.endswith(".lock"))


def _cache_files(root: Path) -> list[tuple[PurePosixPath, Path]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if not _is_transient(rel) and path.is_file() and not path.is_symlink():
                files.append((rel, path))
    return files


def check_cache_dirs(cache_dirs: dict) -> None:
    """Refuse, before anything is read, one directory given as both caches, or one inside the other.

    Its files would go into the archive twice, and an import would then put each cache's files
    into the other cache too.
    """
    roots = {cache: cache_dirs.get(cache) for cache in CACHE_NAMES if cache_dirs.get(cache)}
    if len(roots) < 2:
        return
    (first, a), (second, b) = roots.items()
    real_a, real_b = Path(os.path.realpath(a)), Path(os.path.realpath(b))
    advice = "give each cache its own directory, or leave Triton's out (--no-triton)"
    if real_a == real_b:
        raise ArchiveError(f"the {first} cache {a} and the {second} cache {b} are one directory: "
                           f"every file would be exported twice; {advice}")  # fmt: skip
    for (inner, inner_dir, real_inner), (outer, outer_dir, real_outer) in (
        ((second, b, real_b), (first, a, real_a)),
        ((first, a, real_a), (second, b, real_b)),
    ):
        if real_outer in real_inner.parents:
            raise ArchiveError(f"the {inner} cache {inner_dir} is inside the {outer} cache {outer_dir}: "
                               f"its files would be exported twice; {advice}")  # fmt: skip


def _is_kernel_cache_archive(path: Path) -> bool:
    """An archive `export` wrote (its name, and the manifest as its first member): never a kernel file."""
    if not path.name.lower().endswith(ARCHIVE_SUFFIXES):
        return False
    try:
        with tarfile.open(path, "r:*") as tar:
            first = tar.next()
    except (tarfile.TarError, EOFError, OSError):
        return False
    return first is not None and first.name == MANIFEST_NAME


def _hash_file(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def warmup_configurations(tilelang_dir: Path) -> list[dict]:
    """The warm-up configurations marked done in a TileLang cache (slime-flashqla-locks/*.done.json)."""
    configurations = []
    for marker in sorted((Path(tilelang_dir) / LOCK_DIR).glob("*.done.json")):
        key = marker.name[: -len(".done.json")]
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            data = {}
        configurations.append({"task": data.get("task", key), "seconds": data.get("seconds")})
    return configurations


def _write_mode(path: Path) -> str:
    name = path.name.lower()
    return next((mode for suffix, mode in _WRITE_MODES.items() if name.endswith(suffix)), "w")


def _tarinfo(name: str, size: int, mtime: float, executable: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, int(mtime)
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def export_archive(path, cache_dirs: dict, *, stack: Stack | None = None, replace: bool = False) -> dict:
    """Write the caches in `cache_dirs` ({"tilelang": dir, "triton": dir}) to a tar at `path`; returns the manifest.

    `path` must end in one of ARCHIVE_SUFFIXES and be a regular file or nothing (a symlink to one is
    written through); an existing archive is replaced only with `replace`. All checked before anything is read.
    """
    given = Path(path)
    dest = check_output_path(given, what="", suffixes=ARCHIVE_SUFFIXES)
    if dest.exists() and not replace:
        raise ArchiveError(f"{given}: already exists; --force replaces it")
    check_cache_dirs(cache_dirs)
    entries, caches = [], {}
    for cache in CACHE_NAMES:
        root = cache_dirs.get(cache)
        if root is None or not Path(root).is_dir():
            continue
        # The archive being written, and any archive written into the cache before, are not kernels.
        files = [
            (rel, source)
            for rel, source in _cache_files(Path(root))
            if source.resolve() != dest.resolve() and not _is_kernel_cache_archive(source)
        ]
        if files:
            caches[cache] = {"source_dir": str(Path(root).absolute()), "files": len(files)}
            entries += [(f"{cache}/{rel}", source) for rel, source in files]
    if not entries:
        looked = ", ".join(
            f"{cache} {root}" + ("" if Path(root).is_dir() else " (no such folder)")
            for cache, root in ((cache, cache_dirs.get(cache)) for cache in CACHE_NAMES)
            if root
        )
        raise ArchiveError(f"nothing to export: no kernel files in {looked}; run `slime-flashqla warmup` first")
    records = {}
    for name, source in entries:
        size, sha256 = _hash_file(source)
        records[name] = {"size": size, "sha256": sha256}
    for cache in caches:
        caches[cache]["bytes"] = sum(r["size"] for n, r in records.items() if n.startswith(f"{cache}/"))
    tilelang_dir = cache_dirs.get("tilelang")
    manifest = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "stack": (stack or current_stack()).as_dict(),
        "caches": caches,
        "warmup_configurations": warmup_configurations(tilelang_dir) if tilelang_dir else [],
        "files": records,
    }

    def write(temp: Path) -> None:
        with tarfile.open(temp, _write_mode(given)) as tar:
            data = json.dumps(manifest, indent=2, sort_keys=True).encode()
            now = datetime.datetime.now().timestamp()
            tar.addfile(_tarinfo(MANIFEST_NAME, len(data), now, False), io.BytesIO(data))
            for name, source in entries:
                _add_member(tar, name, source, records[name])

    # The archive appears whole or not at all, and never in place of a device, FIFO or directory.
    publish_atomically(dest, write, what=str(given))
    return manifest


class _HashingReader(io.RawIOBase):
    """A file read once, start to end, hashing what it hands out."""

    def __init__(self, handle) -> None:
        self._handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._handle.readinto(buffer)
        self.digest.update(memoryview(buffer)[:count])
        self.size += count
        return count


def _add_member(tar: tarfile.TarFile, name: str, source: Path, record: dict) -> None:
    changed = ArchiveError(f"{source} changed during export; export again when no compile is running")
    try:
        handle = open(source, "rb")  # noqa: SIM115 (closed by the `with` below; only the open's error differs)
    except FileNotFoundError:
        raise ArchiveError(f"{source} disappeared during export; export again when no compile is running") from None
    with handle:
        stat = os.fstat(handle.fileno())
        if stat.st_size != record["size"]:
            raise changed
        reader = _HashingReader(handle)
        info = _tarinfo(name, record["size"], stat.st_mtime, bool(stat.st_mode & 0o111))
        try:
            tar.addfile(info, reader)  # streamed: a large kernel library is never held in memory whole
        except OSError as error:
            if "unexpected end of data" not in str(error):
                raise
            raise changed from None
        if reader.size != record["size"] or reader.digest.hexdigest() != record["sha256"] or handle.read(1):
            raise changed


def import_archive(
    path, cache_dirs: dict, *, stack: Stack | None = None, gpu_arch: str | None = None, force: bool = False, warn=None
) -> ImportResult:
    """Check the archive at `path` against this stack, then publish its files into `cache_dirs`; returns the counts.

    `warn` gets one line per warning (--force's mismatches, what an older archive could not show).
    """
    warn = warn or (lambda line: print(line, file=sys.stderr))
    result = ImportResult()
    with open_archive(path) as tar:
        manifest = manifest_of(tar, path)
        here = stack or current_stack()
        if gpu_arch:
            here = with_gpu_arch(here, gpu_arch)
        mismatches, notes = stack_fit(manifest, here)
        if mismatches and not force:
            raise StackMismatch(
                f"{path} holds kernels built for another stack: {'; '.join(mismatches)}. "
                "Nothing was imported; export a cache from a machine with this stack (--force imports anyway)"
            )
        if mismatches:
            result.forced_mismatches = mismatches
            warn(f"WARNING: --force: importing kernels built for another stack: {'; '.join(mismatches)}")
        for note in notes:
            warn(f"note: {path}: {note}")
        targets = {cache: Path(cache_dirs[cache]).absolute() for cache in CACHE_NAMES if cache_dirs.get(cache)}
        members = checked_members(tar, manifest, targets, path)
        used = member_caches(members)
        result.caches = {cache: targets[cache] for cache in used}
        # SIGTERM (docker stop) unwinds like Ctrl-C, so the staging directories go with it.
        with sigterm_raises(), contextlib.ExitStack() as held:
            lock_each_directory(held, [targets[cache] for cache in used])
            stagings = staging_directories(held, {cache: targets[cache] for cache in used})
            units = stage_members(tar, members, manifest, targets, stagings, path)
            publish(units, targets, stagings, result, path)
    return result
