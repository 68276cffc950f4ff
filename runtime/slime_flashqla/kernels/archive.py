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
one filesystem; importers hold an exclusive file lock on the destination while they stage
and publish.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import sys
import tarfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from slime_flashqla.kernels.warmup import LOCK_DIR, config_lock

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
_CHUNK = 1 << 20


class ArchiveError(Exception):
    """A user-facing problem with an archive or a cache directory; the message is one line."""


class StackMismatch(ArchiveError):
    """The archive was built on another GPU architecture or software stack."""


@dataclass(frozen=True)
class Stack:
    """What decides whether a compiled kernel fits: GPU architecture and versions (device name is informational)."""

    gpu_arch: str
    gpu_name: str
    versions: dict = field(default_factory=dict)

    def compared_fields(self) -> dict:
        """The fields an import compares, in report order."""
        return {"gpu_arch": self.gpu_arch, **self.versions}

    def as_dict(self) -> dict:
        """The stack as manifest JSON."""
        return {"gpu_arch": self.gpu_arch, "gpu_name": self.gpu_name, "versions": dict(self.versions)}

    @classmethod
    def from_dict(cls, data: dict) -> Stack:
        """The stack a manifest describes."""
        return cls(str(data["gpu_arch"]), str(data.get("gpu_name", "unknown")), dict(data["versions"]))


@dataclass
class ImportResult:
    """What an import wrote."""

    published: int = 0  # files moved into the cache
    present: int = 0  # files skipped: already in the cache (or published by a concurrent writer)
    groups_rewritten: int = 0  # Triton group files pointed at this machine's cache directory
    caches: dict = field(default_factory=dict)  # cache name -> the directory it went to
    forced_mismatches: list = field(default_factory=list)


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu() -> tuple[str, str]:
    import torch

    if not torch.cuda.is_available():
        return "none", "none"
    archs, names = set(), []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        archs.add(f"sm_{major}{minor}")
        name = torch.cuda.get_device_name(index)
        if name not in names:
            names.append(name)
    return ",".join(sorted(archs)), ", ".join(names)


def current_stack() -> Stack:
    """This machine's stack: GPU architecture (via torch) and versions (via importlib.metadata, nothing imported)."""
    import torch

    versions = {name: _distribution_version(name) for name in VERSION_DISTRIBUTIONS}
    versions["torch.cuda"] = torch.version.cuda
    versions["python"] = f"{sys.version_info[0]}.{sys.version_info[1]}"
    versions["machine"] = platform.machine()
    arch, name = _gpu()
    return Stack(arch, name, versions)


def with_gpu_arch(stack: Stack, gpu_arch: str) -> Stack:
    """`stack` for a GPU named on the command line (an image build sees none); refuses to contradict a visible GPU."""
    if not GPU_ARCH_PATTERN.match(gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch!r}: expected a compute capability like sm_90 or sm_121")
    if stack.gpu_arch not in ("none", gpu_arch):
        raise ArchiveError(f"--gpu-arch {gpu_arch} contradicts this machine's GPU ({stack.gpu_arch}, {stack.gpu_name})")
    return replace(stack, gpu_arch=gpu_arch, gpu_name=f"{stack.gpu_name} (--gpu-arch {gpu_arch})")


def stack_mismatches(archived: Stack, here: Stack) -> list[str]:
    """One 'field: archive value (archive) vs here value (here)' entry per compared field that differs."""
    theirs, ours = archived.compared_fields(), here.compared_fields()
    keys = list(theirs) + [key for key in ours if key not in theirs]
    return [
        f"{key} {theirs.get(key) or 'none'} (archive) vs {ours.get(key) or 'none'} (here)"
        for key in keys
        if theirs.get(key) != ours.get(key)
    ]


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
    name = path.name
    if name.endswith((".tar.gz", ".tgz")):
        return "w:gz"
    if name.endswith(".tar.xz"):
        return "w:xz"
    return "w"


def _tarinfo(name: str, size: int, mtime: float, executable: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, int(mtime)
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def export_archive(path, cache_dirs: dict, *, stack: Stack | None = None) -> dict:
    """Write the caches in `cache_dirs` ({"tilelang": dir, "triton": dir}) to a tar at `path`; returns the manifest."""
    path = Path(path)
    entries, caches = [], {}
    for cache in CACHE_NAMES:
        root = cache_dirs.get(cache)
        if root is None or not Path(root).is_dir():
            continue
        # An archive (or an older one) written into the cache itself is not a kernel.
        files = [(rel, source) for rel, source in _cache_files(Path(root)) if source.resolve() != path.resolve()]
        if files:
            caches[cache] = {"source_dir": str(Path(root).absolute()), "files": len(files)}
            entries += [(f"{cache}/{rel}", source) for rel, source in files]
    if not entries:
        looked = ", ".join(f"{cache} {cache_dirs.get(cache)}" for cache in CACHE_NAMES if cache_dirs.get(cache))
        raise ArchiveError(f"nothing to export: no kernel files in {looked}; run `slime-flashqla warmup` first")
    if not path.parent.is_dir():
        raise ArchiveError(f"{path}: directory {path.parent} does not exist")
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
    # The archive appears whole or not at all: a temp sibling, fsynced, then renamed.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tarfile.open(temp, _write_mode(path)) as tar:
            data = json.dumps(manifest, indent=2, sort_keys=True).encode()
            now = datetime.datetime.now().timestamp()
            tar.addfile(_tarinfo(MANIFEST_NAME, len(data), now, False), io.BytesIO(data))
            for name, source in entries:
                _add_member(tar, name, source, records[name])
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    return manifest


def _add_member(tar: tarfile.TarFile, name: str, source: Path, record: dict) -> None:
    try:
        data = source.read_bytes()
        stat = source.stat()
    except FileNotFoundError:
        raise ArchiveError(f"{source} disappeared during export; export again when no compile is running") from None
    if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ArchiveError(f"{source} changed during export; export again when no compile is running")
    tar.addfile(_tarinfo(name, len(data), stat.st_mtime, bool(stat.st_mode & 0o111)), io.BytesIO(data))


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
        manifest = json.loads(tar.extractfile(first).read())
    except ValueError:
        raise ArchiveError(f"{path}: its {MANIFEST_NAME} is not valid JSON") from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveError(f"{path}: damaged archive ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ArchiveError(f"{path}: archive format {found!r}; this slime-flashqla reads {FORMAT!r}")
    try:
        Stack.from_dict(manifest["stack"])
        if not isinstance(manifest["files"], dict):
            raise TypeError
    except (KeyError, TypeError, AttributeError):
        raise ArchiveError(f"{path}: its manifest lacks the stack or the file list") from None
    return manifest


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
    """Every member after the manifest, each one checked, before anything is written."""
    try:
        members = tar.getmembers()[1:]
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveError(f"{path}: damaged archive ({error})") from None
    files, seen = manifest["files"], set()
    for member in members:
        cache = PurePosixPath(member.name).parts[0] if member.name else ""
        reason = _unsafe_reason(member, targets.get(cache))
        if reason is None and member.name not in files:
            reason = "not listed in the manifest"
        if reason is None and member.name in seen:
            reason = "appears twice"
        if reason is None and member.size != files[member.name].get("size"):
            reason = f"size {member.size} but the manifest says {files[member.name].get('size')}"
        if reason:
            raise ArchiveError(f"{path}: refusing member {member.name!r}: {reason}; nothing was imported")
        seen.add(member.name)
    missing = sorted(set(files) - seen)
    if missing:
        raise ArchiveError(f"{path}: incomplete, {len(missing)} file(s) of the manifest missing (first {missing[0]})")
    return members


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
    """Check the archive at `path` against this stack, then publish its files into `cache_dirs`; returns the counts."""
    result = ImportResult()
    with _open_archive(path) as tar:
        manifest = _read_manifest(tar, path)
        here = stack or current_stack()
        if gpu_arch:
            here = with_gpu_arch(here, gpu_arch)
        mismatches = stack_mismatches(Stack.from_dict(manifest["stack"]), here)
        if mismatches and not force:
            raise StackMismatch(
                f"{path} holds kernels built for another stack: {'; '.join(mismatches)}. "
                "Nothing was imported; export a cache from a machine with this stack (--force imports anyway)"
            )
        if mismatches:
            result.forced_mismatches = mismatches
            (warn or print)(f"WARNING: --force: importing kernels built for another stack: {'; '.join(mismatches)}")
        targets = {cache: Path(cache_dirs[cache]).absolute() for cache in CACHE_NAMES if cache_dirs.get(cache)}
        members = _checked_members(tar, manifest, targets, path)
        used = sorted({_split(member.name)[0] for member in members})
        result.caches = {cache: targets[cache] for cache in used}
        with contextlib.ExitStack() as held:
            stagings = {}
            for cache in used:  # a fixed order, so two importers never wait on each other's second lock
                targets[cache].mkdir(parents=True, exist_ok=True)
                held.enter_context(config_lock(targets[cache], IMPORT_LOCK_KEY))
                _clear_stale_staging(targets[cache])
                stagings[cache] = targets[cache] / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
                stagings[cache].mkdir()
                held.callback(shutil.rmtree, stagings[cache], True)
            units = _stage_members(tar, members, manifest, targets, stagings, path)
            _publish(units, targets, stagings, result)
    return result


def _publish(units: dict, targets: dict, stagings: dict, result: ImportResult) -> None:
    def is_triton_group(key) -> bool:
        cache, unit_path = key
        return cache == "triton" and unit_path.name.startswith(TRITON_GROUP_PREFIX)

    # Triton's group files last: once one exists, Triton loads the files it names.
    for key in sorted(units, key=is_triton_group):
        (cache, unit_path), unit = key, units[key]
        target = targets[cache] / unit_path
        published = False
        if unit.write:
            if is_triton_group(key):
                result.groups_rewritten += _rewrite_triton_group(stagings[cache] / unit_path, target.parent)
            publish = _publish_dir if unit.is_dir else _publish_file
            published = publish(stagings[cache] / unit_path, target)
        if published:
            result.published += len(unit.rels)
        else:
            result.present += len(unit.rels)
