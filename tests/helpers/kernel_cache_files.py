"""Kernel caches on disk as TileLang 0.1.15 and Triton 3.6 lay them out and write them, for the archive tests.

No GPU compiles here, so the files are random bytes, but the layout and the write
protocols are the libraries' own (tilelang/cache/kernel_cache.py and binary_cache.py:
an entry directory staged whole and published with one rename, with a manifest of
sizes and sha256; triton/runtime/cache.py: each file through a temp dir and
os.replace, the `__grp__<name>.json` group file with absolute child paths last).

Run as a script it is one of the processes of the concurrency test:
  writer TILELANG TRITON SOURCE_TILELANG SOURCE_TRITON STOP LOG  keeps publishing entries until STOP exists
  reader TILELANG TRITON MANIFEST STOP LOG                       keeps checking that nothing visible is partial
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import shutil
import sys
import tarfile
import time
import uuid
from pathlib import Path

TILELANG_NAMESPACE = Path("0.1.15") / "linux-x86_64"
TILELANG_ENTRY_FILES = ("device_kernel.cu", "host_kernel.cu", "executable.so", "params.json")
TILELANG_MANIFEST = "manifest.json"
TRITON_SUFFIXES = (".cubin", ".ptx", ".json")
LOCK_DIR = "slime-flashqla-locks"
# Entries and kernels of the archive that the concurrency test's writer publishes too.
RACED = 4


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def publish_tilelang_entry(cache: Path, key: str, contents: dict[str, bytes]) -> bool:
    """TileLang's save: the entry and its manifest staged in .staging, renamed into kernels/; False if present."""
    root = cache / TILELANG_NAMESPACE
    final = root / "kernels" / key
    if final.is_dir():
        return False
    staging = root / ".staging" / f"{key}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        files = {}
        for name, data in contents.items():
            (staging / name).write_bytes(data)
            files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (staging / TILELANG_MANIFEST).write_text(json.dumps({"version": 1, "files": files}, indent=2, sort_keys=True))
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, final)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return False
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish_cuda_binary(cache: Path, key: str, data: bytes) -> None:
    """TileLang's CUDABinaryCache.save: kernel.cubin and metadata.json, one rename."""
    root = cache / "0.1.15"
    staging = root / ".staging" / "cuda-binaries" / f"{key}.{os.getpid()}.{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    (staging / "kernel.cubin").write_bytes(data)
    metadata = {
        "format": "tilelang.cuda-binary-cache.v1",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    (root / "cuda-binaries").mkdir(parents=True, exist_ok=True)
    os.rename(staging, root / "cuda-binaries" / key)


def triton_put(cache: Path, key: str, filename: str, data: bytes) -> Path:
    """Triton's FileCacheManager.put: through <key>/tmp.pid_<pid>_<uuid>/ and os.replace."""
    directory = cache / key
    directory.mkdir(parents=True, exist_ok=True)
    temp_dir = directory / f"tmp.pid_{os.getpid()}_{uuid.uuid4()}"
    temp_dir.mkdir()
    (temp_dir / filename).write_bytes(data)
    os.replace(temp_dir / filename, directory / filename)
    os.removedirs(temp_dir)
    return directory / filename


def triton_kernel(cache: Path, key: str, name: str, rng: random.Random, size: int = 2048) -> None:
    """One compiled Triton kernel: its files, then the group file naming them by absolute path."""
    group = {}
    for suffix in TRITON_SUFFIXES:
        group[name + suffix] = str(triton_put(cache, key, name + suffix, rng.randbytes(size)))
    triton_put(cache, key, f"__grp__{name}.json", json.dumps({"child_paths": group}).encode())


def tilelang_contents(rng: random.Random, so_size: int) -> dict[str, bytes]:
    return {name: rng.randbytes(so_size if name.endswith(".so") else 512) for name in TILELANG_ENTRY_FILES}


def make_caches(root: Path, *, entries: int = 3, kernels: int = 3, so_size: int = 4096, seed: int = 0):
    """A TileLang and a Triton cache under `root` with warm-up markers and the transient files a live cache has."""
    rng = random.Random(seed)
    tilelang, triton = root / "tilelang", root / "triton"
    for index in range(entries):
        publish_tilelang_entry(tilelang, f"{index:064x}", tilelang_contents(rng, so_size))
        publish_cuda_binary(tilelang, f"{index + 100:064x}", rng.randbytes(1024))
    for index in range(kernels):
        triton_kernel(triton, f"KEY{index:03d}", f"kernel_{index}", rng)
    locks = tilelang / LOCK_DIR
    locks.mkdir(parents=True, exist_ok=True)
    for task in ("flashqla-hk2-hv8-varlen-bfloat16", "flashqla-hk16-hv32-varlen-bfloat16"):
        (locks / f"{task}.done.json").write_text(json.dumps({"task": task, "seconds": 201.5, "pid": 1}))
        (locks / f"{task}.lock").touch()
    # What a crashed or running writer leaves behind: never exported.
    (tilelang / TILELANG_NAMESPACE / ".staging" / "dead_1_abc").mkdir(parents=True)
    (tilelang / TILELANG_NAMESPACE / ".staging" / "dead_1_abc" / "executable.so").write_bytes(b"partial")
    (tilelang / TILELANG_NAMESPACE / ".staging" / "dead_1_abc" / ".params.json.1_abc.tmp").write_bytes(b"partial")
    (triton / "KEY000" / "tmp.pid_1_dead").mkdir()
    (triton / "KEY000" / "tmp.pid_1_dead" / "kernel_0.cubin").write_bytes(b"partial")
    return tilelang, triton


def rewrite(source: Path, target: Path, edit) -> Path:
    """Copy an archive member by member, letting `edit(manifest, members)` change them; members are (TarInfo, bytes)."""
    with tarfile.open(source) as tar:
        infos = tar.getmembers()
        members = [(info, tar.extractfile(info).read() if info.isreg() else b"") for info in infos]
    manifest = json.loads(members[0][1])
    members = members[1:]
    edit(manifest, members)
    with tarfile.open(target, "w") as tar:
        data = json.dumps(manifest).encode()
        from slime_flashqla.kernel_cache.archive import MANIFEST_NAME

        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return target


def files_under(root: Path) -> dict[str, bytes]:
    """Every regular file under `root`, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def tilelang_entry_problems(cache: Path) -> list[str]:
    """Visible TileLang kernel entries that are not whole (TileLang's own manifest check)."""
    problems = []
    for entry in sorted((cache / TILELANG_NAMESPACE / "kernels").glob("*")):
        try:
            listed = json.loads((entry / TILELANG_MANIFEST).read_text())["files"]
            for name, meta in listed.items():
                if sha256(entry / name) != meta["sha256"]:
                    problems.append(f"{entry}/{name}: sha256")
            if set(listed) != set(TILELANG_ENTRY_FILES):
                problems.append(f"{entry}: lists {sorted(listed)}")
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{entry}: {type(error).__name__} {error}")
    return problems


def _triton_groups(cache: Path) -> list[Path]:
    """Group files in Triton's kernel directories, as Triton finds them: by key, never through an importer's staging.

    A directory may vanish between listing and reading (an importer removes its staging directory when done),
    so a listing that fails is skipped, not fatal: Triton itself only ever opens `<cache>/<key>/` by name.
    """
    groups = []
    try:
        keys = sorted(entry.name for entry in os.scandir(cache) if not entry.name.startswith("."))
    except FileNotFoundError:
        return groups
    for key in keys:
        try:
            groups += sorted(
                cache / key / entry.name
                for entry in os.scandir(cache / key)
                if entry.name.startswith("__grp__") and entry.name.endswith(".json")
            )
        except (FileNotFoundError, NotADirectoryError):
            continue
    return groups


def triton_group_problems(cache: Path) -> list[str]:
    """Visible Triton group files that do not parse or name a file that is not there (or outside `cache`)."""
    problems = []
    for group in _triton_groups(cache):
        try:
            children = json.loads(group.read_text())["child_paths"]
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{group}: {type(error).__name__} {error}")
            continue
        for child in children.values():
            if Path(child).parent != group.parent or not Path(child).is_file():
                problems.append(f"{group}: names {child}")
    return problems


def temp_leftovers(*roots: Path) -> list[str]:
    """Staging or temp files/dirs left in the caches (an empty .staging dir of TileLang's is fine)."""
    left = []
    for root in roots:
        for path in Path(root).rglob("*"):
            name = path.name
            if (
                name.startswith((".slime-flashqla-import-", "tmp.pid_"))
                or ".tmp" in name
                or (".staging" in path.parts[len(Path(root).parts) :] and path.is_file())
            ):
                left.append(str(path))
    return left


def _writer(tilelang, triton, source_tilelang, source_triton, stop, log) -> None:
    """Publish new entries and some of what the archive holds (same content, racing the importers) until `stop` exists.

    Only the last RACED entries and kernels of the archive are written here: the importers must publish the rest.
    """
    tilelang, triton, stop = Path(tilelang), Path(triton), Path(stop)
    sources = sorted((Path(source_tilelang) / TILELANG_NAMESPACE / "kernels").glob("*"))[-RACED:]
    kernels = sorted(Path(source_triton).glob("*/__grp__*.json"))[-RACED:]
    rng, written, index = random.Random(os.getpid()), {}, 0
    while not stop.exists() or index < 5:
        source = sources[index % len(sources)]
        publish_tilelang_entry(tilelang, source.name, {n: (source / n).read_bytes() for n in TILELANG_ENTRY_FILES})
        key = f"{0xF000 + index:064x}"
        contents = tilelang_contents(rng, 4096)
        publish_tilelang_entry(tilelang, key, contents)
        for name, data in contents.items():
            written[f"tilelang/{TILELANG_NAMESPACE}/kernels/{key}/{name}"] = hashlib.sha256(data).hexdigest()
        group = kernels[index % len(kernels)]
        name = group.name[len("__grp__") : -len(".json")]
        children = {}
        for suffix in TRITON_SUFFIXES:  # the same kernel again, as a process compiling it here would write it
            children[name + suffix] = str(
                triton_put(triton, group.parent.name, name + suffix, (group.parent / (name + suffix)).read_bytes())
            )
        triton_put(triton, group.parent.name, group.name, json.dumps({"child_paths": children}).encode())
        triton_kernel(triton, f"NEW{index:04d}", f"new_{index}", rng)
        for suffix in TRITON_SUFFIXES:
            path = triton / f"NEW{index:04d}" / f"new_{index}{suffix}"
            written[f"triton/{path.relative_to(triton)}"] = sha256(path)
        index += 1
        time.sleep(0.02)
    Path(log).write_text(json.dumps({"rounds": index, "files": written}))


def _reader(tilelang, triton, manifest, stop, log) -> None:
    """Until `stop` exists, look at everything visible: no entry, group or archived file may be partial."""
    tilelang, triton, stop = Path(tilelang), Path(triton), Path(stop)
    files = json.loads(Path(manifest).read_text())["files"]
    problems, scans = [], 0
    while not stop.exists():
        problems += tilelang_entry_problems(tilelang) + triton_group_problems(triton)
        for name, meta in files.items():
            cache, rel = name.split("/", 1)
            path = (tilelang if cache == "tilelang" else triton) / rel
            if path.name.startswith("__grp__"):
                continue  # rewritten to this cache's paths: checked above
            try:
                if sha256(path) != meta["sha256"]:
                    problems.append(f"{path}: sha256 while visible")
            except FileNotFoundError:
                pass
        scans += 1
    Path(log).write_text(json.dumps({"scans": scans, "problems": sorted(set(problems))}))


if __name__ == "__main__":
    role, *arguments = sys.argv[1:]
    {"writer": _writer, "reader": _reader}[role](*arguments)
