"""A warmed kernel cache (TileLang's and Triton's) as one tar archive, to move to another machine or image.

The archive's first member is a manifest: the GPU architecture and the versions the
kernels were built with, the warm-up configurations it holds, and every file's size
and sha256.  Import reads the manifest and refuses another stack before it writes
anything, checks every member (regular files with relative names only) and every
hash, and publishes into the live cache the way the libraries themselves do:

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
cache, the lock included, and SIGTERM removes the staging directory as Ctrl-C does (a SIGKILLed
importer's is removed by the next import). The export is written beside its path and renamed into place
(files/output_paths.py): onto a regular file or nothing, never onto a device, FIFO or directory.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import io
import json
import os
import platform
import re
import shutil
import sys
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from stat import S_ISDIR, S_ISLNK

from slime_flashqla.files.lock import LOCK_DIR, LockPathError, directory_lock
from slime_flashqla.files.output_paths import check_output_path, publish_atomically
from slime_flashqla.files.termination import sigterm_raises
from slime_flashqla.kernels.cuda_toolchain import same_release, tilelang_nvcc_version

FORMAT = "slime-flashqla-kernel-cache/1"
MANIFEST_NAME = "slime-flashqla-manifest.json"
# Top-level folders of the archive, one per cache.
CACHE_NAMES = ("tilelang", "triton")
# Distributions whose versions decide whether a cached kernel fits: the compilers (tilelang with
# its apache-tvm-ffi runtime, triton), the kernel sources (flash-qla, fla), torch, and this package.
VERSION_DISTRIBUTIONS = (
    "torch",
    "triton",
    "pytorch-triton",
    "tilelang",
    "apache-tvm-ffi",
    "flash-qla",
    "flash-linear-attention",
    "fla-core",
    "slime-flashqla",
)
# Parents of TileLang's kernel entry directories (tilelang/cache/kernel_cache.py, binary_cache.py).
TILELANG_ENTRY_ROOTS = ("kernels", "cuda-binaries")
TRITON_GROUP_PREFIX = "__grp__"
STAGING_PREFIX = ".slime-flashqla-import-"
IMPORT_LOCK_KEY = "cache-import"
GPU_ARCH_PATTERN = re.compile(r"^sm_\d+[a-z]?$")
# A manifest's gpu_arch: one or more compute capabilities, or none where no GPU was visible.
MANIFEST_GPU_ARCH = re.compile(r"none|sm_\d+[a-z]?(,sm_\d+[a-z]?)*")
# Names `export` writes, each in the compression tarfile writes for it (import reads them all).
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2")
_WRITE_MODES = {".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.xz": "w:xz", ".txz": "w:xz", ".tar.bz2": "w:bz2"}
# The largest manifest read: a million files fit in about 150 MiB of JSON, TileLang and Triton
# caches hold thousands; a bigger one is refused before it is read (a gzip bomb costs nothing).
MAX_MANIFEST_BYTES = 64 * 2**20
# Stack fields an archive written before they were recorded lacks (see Stack.missing).
TOOLCHAIN_FIELDS = ("nvcc", "driver", "driver_cuda")
_CHUNK = 1 << 20


class ArchiveError(Exception):
    """A user-facing problem with an archive or a cache directory; the message is one line."""


class StackMismatch(ArchiveError):
    """The archive was built on another GPU architecture or software stack."""


@dataclass(frozen=True)
class Stack:
    """What decides whether a compiled kernel fits: GPU architecture, versions, TileLang's nvcc.

    The GPU's name and the driver are recorded but never compared: an H100 and an H200 run the
    same sm_90 kernels, and a compiled kernel loads under any driver that runs this stack's CUDA.
    """

    gpu_arch: str
    gpu_name: str
    versions: dict = field(default_factory=dict)
    nvcc: str | None = None  # the CUDA compiler TileLang compiles with (cuda_toolchain.py)
    driver: str | None = None  # NVIDIA driver version (nvidia-smi)
    driver_cuda: str | None = None  # the newest CUDA that driver runs
    missing: tuple = ()  # TOOLCHAIN_FIELDS the manifest does not record (an older slime-flashqla wrote it)

    def compared_fields(self) -> dict:
        """The fields an import compares exactly, in report order (nvcc is compared apart, by release)."""
        return {"gpu_arch": self.gpu_arch, **self.versions}

    def as_dict(self) -> dict:
        """The stack as manifest JSON."""
        return {
            "gpu_arch": self.gpu_arch,
            "gpu_name": self.gpu_name,
            "versions": dict(self.versions),
            "nvcc": self.nvcc,
            "driver": self.driver,
            "driver_cuda": self.driver_cuda,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Stack:
        """The stack a manifest describes (checked by _read_manifest)."""
        toolchain = {name: data.get(name) for name in TOOLCHAIN_FIELDS}
        missing = tuple(name for name in TOOLCHAIN_FIELDS if name not in data)
        return cls(data["gpu_arch"], data.get("gpu_name") or "unknown", dict(data["versions"]), **toolchain,
                   missing=missing)  # fmt: skip


@dataclass
class ImportResult:
    """What an import wrote."""

    published: int = 0  # files moved into the cache
    present: int = 0  # files skipped: already in the cache (or published by a concurrent writer)
    groups_rewritten: int = 0  # Triton group files pointed at this machine's cache directory
    caches: dict = field(default_factory=dict)  # cache name -> the directory it went to
    forced_mismatches: list = field(default_factory=list)


def current_stack() -> Stack:
    """This machine's stack: GPU and driver (via torch, nvidia-smi), versions (package metadata), TileLang's nvcc."""
    import torch

    from slime_flashqla.diagnostics.node import (
        distribution_version,
        driver_cuda,
        gpu_archs_and_names,
        nvidia_smi_driver,
    )

    versions = {name: distribution_version(name) for name in VERSION_DISTRIBUTIONS}
    versions["torch.cuda"] = torch.version.cuda
    versions["python"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    versions["machine"] = platform.machine()
    arch, name = gpu_archs_and_names()
    cuda = arch != "none"
    driver = (nvidia_smi_driver(), driver_cuda()) if cuda else (None, None)
    return Stack(arch, name, versions, nvcc=tilelang_nvcc_version(), driver=driver[0], driver_cuda=driver[1])


def shown(text) -> str:
    """`text` safe to print: control characters (escape sequences, newlines) escaped, so archives cannot forge lines."""
    text = str(text)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def with_gpu_arch(stack: Stack, gpu_arch: str) -> Stack:
    """`stack` for a GPU named on the command line (an image build sees none); refuses to contradict a visible GPU."""
    if not GPU_ARCH_PATTERN.match(gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch!r}: expected a compute capability like sm_90 or sm_121")
    if stack.gpu_arch not in ("none", gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch} contradicts this machine's GPU ({stack.gpu_arch}, {stack.gpu_name})")
    return replace(stack, gpu_arch=gpu_arch, gpu_name=f"{stack.gpu_name} (--gpu-arch {gpu_arch})")


def stack_mismatches(archived: Stack, here: Stack, caches=CACHE_NAMES) -> list[str]:
    """One 'field archive-value (archive) vs here-value (here)' entry per compared field that differs.

    `caches` are the caches the archive holds: TileLang's nvcc is compared (by CUDA release,
    major.minor) only for a TileLang cache, and only where both sides know it. TileLang's own
    cache key holds neither the compiler nor the CUDA version, so it would load such kernels.
    """
    theirs, ours = archived.compared_fields(), here.compared_fields()
    keys = list(theirs) + [key for key in ours if key not in theirs]
    found = [
        f"{shown(key)} {shown(theirs.get(key) or 'none')} (archive) vs {shown(ours.get(key) or 'none')} (here)"
        for key in keys
        if theirs.get(key) != ours.get(key)
    ]
    if "tilelang" in caches and archived.nvcc and here.nvcc and not same_release(archived.nvcc, here.nvcc):
        found.append(f"nvcc {shown(archived.nvcc)} (archive) vs {shown(here.nvcc)} (here)")
    return found


def stack_notes(archived: Stack, caches=CACHE_NAMES) -> list[str]:
    """What could not be compared: toolchain fields an older archive lacks (it is accepted; these say so)."""
    if "nvcc" in archived.missing and "tilelang" in caches:
        return ["the archive predates the nvcc and driver fields (an older slime-flashqla wrote it): "
                "the CUDA compiler its TileLang kernels were built with was not compared"]  # fmt: skip
    return []


def _is_transient(rel: PurePosixPath) -> bool:
    """Files a cache holds only while someone writes or locks: never exported."""
    name = rel.name
    if any(part == ".staging" or part.startswith(("tmp.pid_", STAGING_PREFIX)) for part in rel.parts):
        return True  # TileLang's and Triton's in-progress writes, and ours
    if name.startswith(".") and ".tmp" in name:
        return True  # TileLang's per-file temporaries: .<name>.<pid>_<uuid>.tmp
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
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
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


def _open_archive(path) -> tarfile.TarFile:
    path = Path(path)
    if not path.is_file():
        raise ArchiveError(f"{path}: no such file")
    try:
        return tarfile.open(path, "r:*")
    except tarfile.ReadError:
        raise ArchiveError(f"{path}: not a tar archive (nor a gzip, bzip2 or xz compressed one)") from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveError(f"{path}: cannot read it ({error})") from None


def _read_manifest(tar: tarfile.TarFile, path) -> dict:
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


def read_manifest(path) -> dict:
    """The manifest of the archive at `path` (reads only its first member)."""
    with _open_archive(path) as tar:
        return _read_manifest(tar, path)


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


def _checked_members(tar: tarfile.TarFile, manifest: dict, targets: dict, path) -> list[tarfile.TarInfo]:
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
        for chunk in iter(lambda: source.read(_CHUNK), b""):
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


def _stage_members(tar, members, manifest, targets, stagings, path) -> dict:
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


def _clear_stale_staging(root: Path) -> None:
    # Called under the import lock: no other importer is staging, so any staging dir is a crashed one's.
    for entry in root.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(entry, ignore_errors=True)


def import_archive(
    path, cache_dirs: dict, *, stack: Stack | None = None, gpu_arch: str | None = None, force: bool = False, warn=None
) -> ImportResult:
    """Check the archive at `path` against this stack, then publish its files into `cache_dirs`; returns the counts.

    `warn` gets one line per warning (--force's mismatches, what an older archive could not show).
    """
    warn = warn or (lambda line: print(line, file=sys.stderr))
    result = ImportResult()
    with _open_archive(path) as tar:
        manifest = _read_manifest(tar, path)
        here = stack or current_stack()
        if gpu_arch:
            here = with_gpu_arch(here, gpu_arch)
        archived = Stack.from_dict(manifest["stack"])
        held_caches = [cache for cache in CACHE_NAMES if cache in manifest.get("caches", {})] or CACHE_NAMES
        mismatches = stack_mismatches(archived, here, held_caches)
        if mismatches and not force:
            raise StackMismatch(
                f"{path} holds kernels built for another stack: {'; '.join(mismatches)}. "
                "Nothing was imported; export a cache from a machine with this stack (--force imports anyway)"
            )
        if mismatches:
            result.forced_mismatches = mismatches
            warn(f"WARNING: --force: importing kernels built for another stack: {'; '.join(mismatches)}")
        for note in stack_notes(archived, held_caches):
            warn(f"note: {path}: {note}")
        targets = {cache: Path(cache_dirs[cache]).absolute() for cache in CACHE_NAMES if cache_dirs.get(cache)}
        members = _checked_members(tar, manifest, targets, path)
        used = sorted({_split(member.name)[0] for member in members})
        result.caches = {cache: targets[cache] for cache in used}
        # SIGTERM (docker stop) unwinds like Ctrl-C, so the staging directories go with it.
        with sigterm_raises(), contextlib.ExitStack() as held:
            _lock_each_directory(held, [targets[cache] for cache in used])
            stagings = {}
            for cache in used:
                stagings[cache] = targets[cache] / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
                stagings[cache].mkdir()
                held.callback(shutil.rmtree, stagings[cache], True)
            units = _stage_members(tar, members, manifest, targets, stagings, path)
            _publish(units, targets, stagings, result, path)
    return result


def _lock_each_directory(held: contextlib.ExitStack, roots: list[Path]) -> None:
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


def _publish(units: dict, targets: dict, stagings: dict, result: ImportResult, path) -> None:
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
