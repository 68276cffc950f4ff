"""`slime-flashqla cache export|import|info`, run as the user runs them, and several importers at once."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import kernel_cache_files
from helpers.kernel_cache_files import (
    files_under,
    make_caches,
    sha256,
    temp_leftovers,
    tilelang_entry_problems,
    triton_group_problems,
)
from slime_flashqla.kernel_cache.archive import export_archive
from slime_flashqla.kernel_cache.manifest import read_manifest
from slime_flashqla.kernel_cache.stack import current_stack


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


WARMUP = (sys.executable, "-m", "slime_flashqla", "warmup", "--device", "cpu", "--backends", "torch")
WARMUP += ("--heads", "2/4", "--lengths", "40+30")


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "cache", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def one_line_error(result, action: str) -> str:
    """The refusal: exit 2, one line on stderr, nothing on stdout (so `> log` keeps the reason visible)."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"slime-flashqla cache {action}: "), result.stderr
    return lines[0]


def dirs(root: Path):
    return ["--tilelang-dir", root / "tl", "--triton-dir", root / "tr"]


def test_export_info_import_with_markers_from_a_real_warmup(tmp_path):
    warm = subprocess.run(
        [*WARMUP, "--cache-dir", str(tmp_path / "tl")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert warm.returncode == 0, warm.stdout + warm.stderr
    make_caches(tmp_path / "more")
    (tmp_path / "tr").mkdir()
    for path in (tmp_path / "more" / "triton").iterdir():
        path.rename(tmp_path / "tr" / path.name)

    export = cli("export", tmp_path / "k.tar", *dirs(tmp_path))
    assert export.returncode == 0, export.stdout + export.stderr
    assert "1 warm-up configuration(s)" in export.stdout
    info = cli("info", tmp_path / "k.tar", "--json")
    manifest = json.loads(info.stdout)
    markers = sorted((tmp_path / "tl" / "slime-flashqla-locks").glob("*.done.json"))
    assert len(markers) == 1
    task = json.loads(markers[0].read_text())["task"]
    assert [c["task"] for c in manifest["warmup_configurations"]] == [task]
    table = cli("info", tmp_path / "k.tar")
    assert table.returncode == 0 and "fits this machine" in table.stdout and "yes" in table.stdout

    imported = cli("import", tmp_path / "k.tar", *dirs(tmp_path / "new"))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "file(s) added, 0 already there" in imported.stdout
    marker = f"slime-flashqla-locks/{markers[0].name}"
    assert files_under(tmp_path / "new" / "tl")[marker] == files_under(tmp_path / "tl")[marker]
    again = cli("import", tmp_path / "k.tar", *dirs(tmp_path / "new"))
    assert " 0 file(s) added" in again.stdout
    # warmup treats the imported configuration as done: it loads, it does not compile again
    warm = subprocess.run(
        [*WARMUP, "--json", str(tmp_path / "w.json"), "--cache-dir", str(tmp_path / "new" / "tl")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert warm.returncode == 0 and json.loads((tmp_path / "w.json").read_text())["results"][0]["status"] == "cached"


def test_user_errors_are_one_line_and_exit_2(tmp_path):
    (tmp_path / "text.tar").write_text("no tar here")
    assert "no such file" in one_line_error(cli("import", tmp_path / "missing.tar", *dirs(tmp_path)), "import")
    assert "not a tar archive" in one_line_error(cli("import", tmp_path / "text.tar", *dirs(tmp_path)), "import")
    assert "not a tar archive" in one_line_error(cli("info", tmp_path / "text.tar"), "info")
    (tmp_path / "empty").mkdir()
    empty = cli("export", tmp_path / "k.tar", "--tilelang-dir", tmp_path / "empty", "--no-triton")
    assert "nothing to export" in one_line_error(empty, "export")
    nowhere = cli("export", tmp_path / "no" / "k.tar", *dirs(tmp_path / "c"))
    assert "directory" in one_line_error(nowhere, "export") and "does not exist" in nowhere.stderr
    assert not (tmp_path / "k.tar").exists()


def test_export_names_a_cache_folder_that_does_not_exist(tmp_path):
    """A cache folder that does not exist, or is a file, is named in one line; nothing is written (issue 35 item 20)."""
    make_caches(tmp_path / "src")
    missing = tmp_path / "nonexistent"
    both = cli("export", tmp_path / "e.tar", "--tilelang-dir", missing, "--triton-dir", tmp_path / "nonexistent2")
    assert one_line_error(both, "export").endswith(f"--tilelang-dir {missing}: the folder does not exist")
    triton = cli("export", tmp_path / "e.tar", "--tilelang-dir", tmp_path / "src" / "tilelang", "--triton-dir", missing)
    assert one_line_error(triton, "export").endswith(f"--triton-dir {missing}: the folder does not exist")
    (tmp_path / "file").write_text("")
    a_file = cli("export", tmp_path / "e.tar", "--tilelang-dir", tmp_path / "file", "--no-triton")
    assert one_line_error(a_file, "export").endswith(f"--tilelang-dir {tmp_path / 'file'}: not a folder")
    assert not (tmp_path / "e.tar").exists()


def test_export_refuses_one_folder_for_both_caches_in_one_line(tmp_path):
    make_caches(tmp_path / "src")
    same = tmp_path / "src" / "tilelang"
    done = cli("export", tmp_path / "e.tar", "--tilelang-dir", same, "--triton-dir", same)
    assert "are one directory" in one_line_error(done, "export") and "--no-triton" in done.stderr
    assert not (tmp_path / "e.tar").exists()
    alone = cli("export", tmp_path / "e.tar", "--tilelang-dir", same, "--triton-dir", same, "--no-triton")
    assert alone.returncode == 0, alone.stderr


def test_mismatching_stack_is_refused_in_one_line_and_force_warns(tmp_path):
    here = current_stack()
    tilelang, triton = make_caches(tmp_path / "src")
    other = replace(here, gpu_arch="sm_100" if here.gpu_arch != "sm_100" else "sm_90", gpu_name="NVIDIA B200")
    other = replace(other, versions={**here.versions, "tilelang": "9.9.9"})
    export_archive(tmp_path / "other.tar", {"tilelang": tilelang, "triton": triton}, stack=other)

    line = one_line_error(cli("import", tmp_path / "other.tar", *dirs(tmp_path / "t")), "import")
    assert f"gpu_arch {other.gpu_arch} (archive) vs {here.gpu_arch} (here)" in line
    assert f"tilelang 9.9.9 (archive) vs {here.versions['tilelang'] or 'none'} (here)" in line
    assert not (tmp_path / "t").exists()
    info = cli("info", tmp_path / "other.tar")
    assert info.returncode == 0 and "no: gpu_arch" in info.stdout

    forced = cli("import", tmp_path / "other.tar", *dirs(tmp_path / "t"), "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    warning = forced.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("WARNING: --force: importing kernels built for another stack")
    assert len(forced.stdout.strip().splitlines()) == 1 and forced.stdout.startswith("imported ")
    assert tilelang_entry_problems(tmp_path / "t" / "tl") == []


def test_errors_go_to_stderr_and_stdout_stays_empty(tmp_path):
    """A refusal goes to stderr and stdout stays empty, so `cache import x.tar > log` still shows it (issue 25 D18)."""
    for action, args in (
        ("import", (tmp_path / "missing.tar", *dirs(tmp_path))),
        ("info", (tmp_path / "missing.tar",)),
        ("export", (tmp_path / "k.tar", "--tilelang-dir", tmp_path / "none", "--triton-dir", tmp_path / "none")),
    ):
        done = cli(action, *args)
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert done.stderr.startswith(f"slime-flashqla cache {action}: ") and done.stderr.count("\n") == 1


def make_device_node(path: Path) -> bool:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        return False
    return True


def test_export_never_replaces_a_device_node_fifo_or_directory(tmp_path):
    """Export writes only a regular file: a device, FIFO or folder is never replaced, even by --force (issue 25 D1)."""
    make_caches(tmp_path / "src")
    source = ["--tilelang-dir", tmp_path / "src" / "tilelang", "--no-triton"]
    targets = [tmp_path / "fifo", tmp_path / "adir.tar"]
    os.mkfifo(targets[0])
    targets[1].mkdir()
    if make_device_node(tmp_path / "mynull"):
        targets.append(tmp_path / "mynull")
    (tmp_path / "fifo.tar").symlink_to("fifo")
    targets.append(tmp_path / "fifo.tar")
    kinds = {path: stat.S_IFMT(os.lstat(path).st_mode) for path in targets}
    for path in targets:
        for force in ((), ("--force",)):
            line = one_line_error(cli("export", path, *source, *force), "export")
            assert "not a regular file" in line or "must end in" in line, line
    assert {path: stat.S_IFMT(os.lstat(path).st_mode) for path in targets} == kinds
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_export_refuses_a_suffix_it_does_not_write_and_an_existing_archive_without_force(tmp_path):
    """Export writes the format its suffix names, and replaces an archive only with --force (issue 24 item 7)."""
    make_caches(tmp_path / "src")
    source = ["--tilelang-dir", tmp_path / "src" / "tilelang", "--no-triton"]
    line = one_line_error(cli("export", tmp_path / "x.zip", *source), "export")
    assert line.endswith("the name must end in .tar, .tar.gz, .tgz, .tar.xz, .txz, .tar.bz2")
    assert not (tmp_path / "x.zip").exists()

    (tmp_path / "real.tar").write_text("keep")
    (tmp_path / "link.tar").symlink_to("real.tar")
    for path in (tmp_path / "real.tar", tmp_path / "link.tar"):
        line = one_line_error(cli("export", path, *source), "export")
        assert line.endswith("already exists; --force replaces it"), line
    assert (tmp_path / "real.tar").read_text() == "keep"
    forced = cli("export", tmp_path / "link.tar", *source, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "link.tar").is_symlink() and read_manifest(tmp_path / "real.tar")["caches"]
    assert forced.stdout.startswith(f"wrote {tmp_path / 'real.tar'}: ")
    for name, magic in (
        ("k.tar.xz", b"\xfd7zXZ"),
        ("k.txz", b"\xfd7zXZ"),
        ("k.tar.bz2", b"BZh"),
        ("k.tgz", b"\x1f\x8b"),
    ):
        assert cli("export", tmp_path / name, *source).returncode == 0
        assert (tmp_path / name).read_bytes().startswith(magic), name
        assert read_manifest(tmp_path / name)["caches"]


@pytest.mark.skipif(torch_cuda_available(), reason="describes a machine without a GPU")
def test_export_summary_says_what_no_gpu_means(tmp_path):
    """On a machine without a GPU the summary says so and names --gpu-arch (issue 24 item 7)."""
    make_caches(tmp_path / "src")
    done = cli("export", tmp_path / "k.tar", "--tilelang-dir", tmp_path / "src" / "tilelang", "--no-triton")
    assert done.returncode == 0, done.stderr
    assert "none (none)" not in done.stdout
    assert "no GPU visible" in done.stdout and "--gpu-arch" in done.stdout


def test_one_lock_per_directory_whatever_the_aliases(tmp_path):
    """One lock per folder whatever its spelling (path, symlink, `..`): import never waits on itself (issue 25 D2)."""
    make_caches(tmp_path / "src")
    archive_path = tmp_path / "a.tar"
    assert cli("export", archive_path, "--tilelang-dir", tmp_path / "src" / "tilelang",
               "--triton-dir", tmp_path / "src" / "triton").returncode == 0  # fmt: skip
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "sub").mkdir()
    cases = {
        "same path": ("--tilelang-dir", tmp_path / "one", "--triton-dir", tmp_path / "one"),
        "symlink": ("--tilelang-dir", tmp_path / "real", "--triton-dir", tmp_path / "alias"),
        "dot-dot": ("--tilelang-dir", tmp_path / "two", "--triton-dir", tmp_path / "sub" / ".." / "two"),
    }
    for case, args in cases.items():
        done = subprocess.run(
            [sys.executable, "-m", "slime_flashqla", "cache", "import", archive_path, *map(str, args)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (case, done.stderr)
        assert " 0 already there" in done.stdout, (case, done.stdout)
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "env"), "TRITON_CACHE_DIR": str(tmp_path / "env")}
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "cache", "import", str(archive_path)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert temp_leftovers(tmp_path / "one", tmp_path / "real", tmp_path / "two", tmp_path / "env") == []


@pytest.mark.slow
def test_concurrent_importers_and_a_writer_leave_an_intact_cache(tmp_path):
    """Four importing ranks at once, a process writing into both caches as TileLang and Triton do, and a reader
    that checks, while they run, that nothing visible is partial."""
    tilelang, triton = make_caches(tmp_path / "src", entries=32, kernels=32, so_size=64 * 1024)
    archive_path = tmp_path / "kernels.tar"
    manifest = export_archive(archive_path, {"tilelang": tilelang, "triton": triton})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    target = {"tilelang": tmp_path / "node" / "tl", "triton": tmp_path / "node" / "tr"}
    for root in target.values():
        root.mkdir(parents=True)
    stop = tmp_path / "stop"
    helper = [sys.executable, kernel_cache_files.__file__]
    writer = subprocess.Popen(
        [*helper, "writer", target["tilelang"], target["triton"], tilelang, triton, stop, tmp_path / "writer.json"]
    )
    reader = subprocess.Popen(
        [
            *helper,
            "reader",
            target["tilelang"],
            target["triton"],
            tmp_path / "manifest.json",
            stop,
            tmp_path / "reader.json",
        ]
    )
    time.sleep(0.3)  # the writer is publishing before the first importer starts
    importers = [
        subprocess.Popen(
            [sys.executable, "-m", "slime_flashqla", "cache", "import", archive_path, *dirs(tmp_path / "node")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [process.communicate(timeout=240)[0] for process in importers]
    stop.touch()
    assert writer.wait(timeout=120) == 0 and reader.wait(timeout=120) == 0
    for process, output in zip(importers, outputs, strict=True):
        assert process.returncode == 0, output
    added = [int(output.split(" file(s) added")[0].rsplit(" ", 1)[1]) for output in outputs]
    # One importer (the first to hold the lock) publishes what the writer does not; the others find it there.
    raced = kernel_cache_files.RACED * (len(kernel_cache_files.TILELANG_ENTRY_FILES) + 1 + 4)
    assert len(manifest["files"]) - raced <= max(added) and sorted(added)[:3] == [0, 0, 0], added

    seen = json.loads((tmp_path / "reader.json").read_text())
    assert seen["scans"] > 0 and seen["problems"] == []
    written = json.loads((tmp_path / "writer.json").read_text())
    assert written["rounds"] >= 5
    for name, record in manifest["files"].items():
        cache, rel = name.split("/", 1)
        if "__grp__" not in rel:
            assert sha256(target[cache] / rel) == record["sha256"], name
    for name, digest in written["files"].items():
        cache, rel = name.split("/", 1)
        assert sha256(target[cache] / rel) == digest, name
    assert tilelang_entry_problems(target["tilelang"]) == []
    assert triton_group_problems(target["triton"]) == []
    assert temp_leftovers(*target.values()) == []
    assert read_manifest(archive_path)["files"] == manifest["files"]
