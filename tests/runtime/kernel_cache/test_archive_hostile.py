"""Hostile and malformed kernel cache archives (issue 25 D4, D7-D10): refused in one line before anything is written.

Archives are real files, rewritten member by member from a real export; the CLI runs as a subprocess.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from helpers.kernel_cache_files import files_under, make_caches, rewrite, temp_leftovers
from slime_flashqla.kernel_cache.archive import export_archive, import_archive
from slime_flashqla.kernel_cache.format import MANIFEST_NAME, ArchiveError


def cache_cli(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "cache", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.fixture
def source(tmp_path) -> Path:
    tilelang, triton = make_caches(tmp_path / "source")
    path = tmp_path / "kernels.tar"
    export_archive(path, {"tilelang": tilelang, "triton": triton})
    return path


def targets(root: Path) -> dict:
    return {"tilelang": root / "tl", "triton": root / "tr"}


def written(root: Path) -> list[str]:
    """Files an import left in the target caches, other than its own lock files."""
    return [name for name in files_under(root) if not name.endswith("cache-import.lock")] if root.exists() else []


# --- D4: the manifest's size is capped before it is read ---------------------------------------------------


def manifest_bomb(path: Path, size: int) -> Path:
    """A gzip archive whose first member is a manifest of `size` bytes of spaces (a few KiB on disk)."""
    chunk = b" " * (1 << 20)

    class Spaces(io.RawIOBase):
        left = size

        def readable(self):
            return True

        def readinto(self, buffer):
            count = min(len(buffer), self.left)
            buffer[:count] = chunk[:count]
            self.left -= count
            return count

    with gzip.open(path, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size = size
        tar.addfile(info, io.BufferedReader(Spaces(), 1 << 20))
    return path


def refused_with_peak_memory(action: str, path: Path, *extra) -> tuple[int, list[str], int]:
    """Run `cache ACTION PATH` in a fresh parent that waits for it alone: (exit status, stderr lines, peak MiB)."""
    code = (
        "import resource, subprocess, sys; "
        "done = subprocess.run([sys.executable, '-m', 'slime_flashqla', 'cache', *sys.argv[1:]], "
        "capture_output=True, text=True); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); "
        "print(done.stderr, end='')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, action, str(path), *map(str, extra)], capture_output=True, text=True, timeout=300
    )
    first, *lines = done.stdout.splitlines()
    returncode, peak_mib = map(int, first.split())
    return returncode, lines, peak_mib


def test_a_huge_manifest_is_refused_before_it_is_read(tmp_path):
    size = 256 * 2**20 + 2
    bomb = manifest_bomb(tmp_path / "bomb.tar.gz", size)
    assert bomb.stat().st_size < 2 * 2**20
    (tmp_path / "text.tar").write_text("not a tar")
    for action in ("info", "import"):
        extra = ["--tilelang-dir", tmp_path / "tl", "--triton-dir", tmp_path / "tr"] if action == "import" else []
        _, _, baseline_mib = refused_with_peak_memory(action, tmp_path / "text.tar", *extra)
        returncode, lines, peak_mib = refused_with_peak_memory(action, bomb, *extra)
        assert returncode == 2 and lines == [
            f"slime-flashqla cache {action}: {bomb}: its {MANIFEST_NAME} is {size} bytes, more "
            "than a manifest may be (64 MiB); not a kernel cache this slime-flashqla wrote"
        ]
        # Read whole, it took twice its size (512 MiB more); refused, what any refusal takes.
        assert peak_mib < baseline_mib + 32, (peak_mib, baseline_mib)
    assert not (tmp_path / "tl").exists()


# --- ND2: members are checked as they are read, so a member-count bomb costs what one member costs ---------


def member_count_bomb(source: Path, path: Path, count: int) -> Path:
    """`source`'s manifest, then `count` empty members it does not list, gzipped (one header repeated: a few KiB)."""
    with tarfile.open(source) as tar:
        first = tar.next()
        manifest = tar.extractfile(first).read()
    padding = b"\0" * (-len(manifest) % tarfile.BLOCKSIZE)
    header = tarfile.TarInfo("tilelang/x/unlisted").tobuf(tarfile.GNU_FORMAT)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(first.tobuf(tarfile.GNU_FORMAT) + manifest + padding)
        for start in range(0, count, 1000):
            out.write(header * min(1000, count - start))
        out.write(b"\0" * 2 * tarfile.BLOCKSIZE)
    return path


def test_a_member_count_bomb_is_refused_at_its_first_unlisted_member(source, tmp_path):
    bomb = member_count_bomb(source, tmp_path / "many.tar.gz", 200_000)
    one = member_count_bomb(source, tmp_path / "one.tar.gz", 1)
    extra = ["--tilelang-dir", tmp_path / "tl", "--triton-dir", tmp_path / "tr"]
    _, _, baseline_mib = refused_with_peak_memory("import", one, *extra)
    returncode, lines, peak_mib = refused_with_peak_memory("import", bomb, *extra)
    assert returncode == 2 and lines == [
        f"slime-flashqla cache import: {bomb}: refusing member 'tilelang/x/unlisted': not listed in the manifest; "
        "nothing was imported"
    ]
    # Every header read first took 0.7 KiB a member (140 MiB here); checked as read, what one such member takes.
    assert peak_mib < baseline_mib + 32, (peak_mib, baseline_mib)
    assert not (tmp_path / "tl").exists() and not (tmp_path / "tr").exists()


# --- D7: every field import and info read has the type they read it as -------------------------------------


def edit_manifest(change):
    def edit(manifest, members):
        change(manifest)

    return edit


WRONG_TYPES = {
    "files entry a string": (lambda m: m.update(files={k: "x" for k in m["files"]}), "files."),
    "files entry null": (lambda m: m.update(files={k: None for k in m["files"]}), "files."),
    "sha256 missing": (lambda m: [r.pop("sha256") for r in m["files"].values()], "lacks files."),
    "size a string": (lambda m: [r.update(size="12") for r in m["files"].values()], ".size is '12'"),
    "size true": (lambda m: [r.update(size=True) for r in m["files"].values()], ".size is true or false"),
    "versions a list": (lambda m: m["stack"].update(versions=["torch", "2.8"]), "stack.versions is a list"),
    "versions a string": (lambda m: m["stack"].update(versions="torch 2.8"), "stack.versions is 'torch 2.8'"),
    "a version a number": (lambda m: m["stack"]["versions"].update(torch=2.8), "stack.versions.torch is the number"),
    "stack a list": (lambda m: m.update(stack=[]), "stack is a list"),
    "gpu_arch not an arch": (lambda m: m["stack"].update(gpu_arch="sm_90; rm -rf"), "stack.gpu_arch is 'sm_90; rm"),
    "caches a list": (lambda m: m.update(caches=["tilelang"]), "caches is a list"),
    "caches without files": (lambda m: [c.pop("files") for c in m["caches"].values()], "lacks caches."),
    "caches without bytes": (lambda m: [c.pop("bytes") for c in m["caches"].values()], "lacks caches."),
    "configurations strings": (lambda m: m.update(warmup_configurations=["a"]), "warmup_configurations.0 is 'a'"),
    "configuration without task": (lambda m: m.update(warmup_configurations=[{}]), "lacks warmup_configurations.0"),
    "nvcc a number": (lambda m: m["stack"].update(nvcc=12.8), "stack.nvcc is the number 12.8"),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_a_manifest_field_of_the_wrong_type_is_refused_naming_it(source, tmp_path, case):
    change, says = WRONG_TYPES[case]
    bad = rewrite(source, tmp_path / "bad.tar", edit_manifest(change))
    with pytest.raises(ArchiveError) as refused:
        import_archive(bad, targets(tmp_path / "t"))
    message = str(refused.value)
    assert message.startswith(f"{bad}: its manifest") and says in message, message
    assert written(tmp_path / "t") == [] and temp_leftovers(tmp_path / "t") == []
    for action, extra in (
        ("info", ()),
        ("import", ("--tilelang-dir", tmp_path / "t1", "--triton-dir", tmp_path / "t2")),
    ):
        done = cache_cli(action, bad, *extra)
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert done.stderr == f"slime-flashqla cache {action}: {message}\n"


def test_a_deeply_nested_manifest_is_refused(source, tmp_path):
    def nest(manifest, members):
        manifest["stack"]["versions"]["torch"] = "NEST"

    bad = rewrite(source, tmp_path / "nested.tar", nest)
    with tarfile.open(bad) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar.getmembers()]
    data = members[0][1].replace(b'"NEST"', b"[" * 200_000 + b"]" * 200_000)
    with tarfile.open(bad, "w") as tar:
        for index, (info, body) in enumerate(members):
            body = data if index == 0 else body
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    done = cache_cli("info", bad)
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr == f"slime-flashqla cache info: {bad}: its {MANIFEST_NAME} is nested too deeply to be a manifest\n"
    )


# --- D8: archive text never reaches the terminal raw ---------------------------------------------------------

FORGED = "2.8\x1b[2K\rimported OK: 0 problems\nFAKE LINE"


def test_control_characters_in_archive_text_are_escaped(source, tmp_path):
    def forge(manifest, members):
        manifest["stack"]["versions"]["torch"] = FORGED
        manifest["stack"].update(gpu_arch="sm_90", gpu_name="[bold red]H200\x1b]0;title\x07")
        for info in manifest["caches"].values():
            info["source_dir"] = "/cache\nFAKE LINE"

    bad = rewrite(source, tmp_path / "forged.tar", forge)
    refused = cache_cli("import", bad, "--tilelang-dir", tmp_path / "tl", "--triton-dir", tmp_path / "tr")
    assert refused.returncode == 2
    table = cache_cli("info", bad, env={**os.environ, "COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    for output in (refused.stderr, table.stdout):
        assert "\x1b" not in output and "\r" not in output and "\x07" not in output
        assert not any(line.startswith(("FAKE LINE", "imported OK")) for line in output.splitlines()), output
    assert refused.stderr.count("\n") == 1
    assert "torch 2.8\\x1b[2K\\rimported OK: 0 problems\\nFAKE LINE (archive) vs" in refused.stderr
    assert "[bold red]H200" in table.stdout  # shown as it is, not as rich markup
    assert "/cache\\nFAKE LINE" in table.stdout


# --- D9: a unit under another unit, or under a file of the cache, is refused; a failed publish says how far ---


def add_members(extra: dict[str, bytes]):
    def edit(manifest, members):
        import hashlib

        for name, data in extra.items():
            info = tarfile.TarInfo(name)
            manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            members.append((info, data))

    return edit


def test_a_member_under_a_file_of_the_cache_is_refused_before_anything_is_written(source, tmp_path):
    target = targets(tmp_path / "t")
    (target["triton"] / "CCCC").mkdir(parents=True)
    (target["triton"] / "CCCC" / "own.cubin").write_bytes(b"own")
    bad = rewrite(source, tmp_path / "a18.tar", add_members({"triton/CCCC/own.cubin/inner": b"x"}))
    with pytest.raises(ArchiveError, match=r"own.cubin in the cache is a file, not a directory; nothing was imported$"):
        import_archive(bad, target)
    assert written(tmp_path / "t") == ["tr/CCCC/own.cubin"]


def test_a_member_inside_another_unit_of_the_archive_is_refused(source, tmp_path):
    entry = f"tilelang/{'0.1.15/linux-x86_64'}/kernels/kx"
    bad = rewrite(source, tmp_path / "a32.tar", add_members({f"{entry}/sub/f": b"file unit", f"{entry}/f": b"entry"}))
    with pytest.raises(ArchiveError, match=r"'tilelang/0.1.15/linux-x86_64/kernels/kx/sub/f': it lies inside"):
        import_archive(bad, targets(tmp_path / "t"))
    assert written(tmp_path / "t") == []


def test_a_publish_that_fails_midway_says_how_many_files_went_in(source, tmp_path, monkeypatch):
    real_replace, calls = os.replace, []

    def replace_then_disk_full(src, dst):
        calls.append(dst)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_disk_full)
    with pytest.raises(ArchiveError) as refused:
        import_archive(source, targets(tmp_path / "t"))
    message = str(refused.value)
    assert "publishing stopped at" in message and "(No space left on device)" in message
    went_in = int(message.split(" file(s) went in")[0].rsplit(" ", 1)[1])
    assert went_in == len(written(tmp_path / "t")) > 0
    assert temp_leftovers(*targets(tmp_path / "t").values()) == []


# --- D10: nothing is written through a symbolic link already in the cache -----------------------------------


@pytest.mark.parametrize("where", ["lnk", "0.1.15"])
def test_a_symlink_in_the_cache_is_never_written_through(source, tmp_path, where):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = targets(tmp_path / "t")
    target["tilelang"].mkdir(parents=True)
    (target["tilelang"] / where).symlink_to(outside)
    bad = rewrite(source, tmp_path / "a76.tar", add_members({"tilelang/lnk/pwned": b"pwned"}))
    with pytest.raises(ArchiveError, match=rf"{target['tilelang'] / where} in the cache is a symbolic link"):
        import_archive(bad, target)
    assert list(outside.iterdir()) == []


# --- ND18: the import lock is never taken through a symbolic link in the cache ------------------------------


@pytest.mark.parametrize("link", ["lock folder", "lock file"])
def test_the_import_lock_is_never_taken_through_a_symlink(source, tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = targets(tmp_path / "t")
    locks = target["triton"] / "slime-flashqla-locks"  # the Triton cache: no archive member goes there
    if link == "lock folder":
        target["triton"].mkdir(parents=True)
        locks.symlink_to(outside)
        named = locks
    else:
        locks.mkdir(parents=True)
        (locks / "cache-import.lock").symlink_to(outside / "created-by-import")
        named = locks / "cache-import.lock"
    done = cache_cli("import", source, "--tilelang-dir", target["tilelang"], "--triton-dir", target["triton"])
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"slime-flashqla cache import: {named}: a symbolic link; a lock is never taken through one (remove it)"
    ]
    assert list(outside.iterdir()) == []
    assert [name for name in files_under(tmp_path / "t") if "slime-flashqla-locks" not in name] == []
