"""What signals leave behind (issue 25 D11) and a reader that closes the pipe (issue 24 item 7), on real processes.

SIGTERM is what `docker stop` and Kubernetes send: the command must clean up as for Ctrl-C. SIGKILL
cannot be caught: the next run must sweep what it left. To hit the command mid-work every time, the
test waits until its staging directory or temp file exists and freezes it there with SIGSTOP; it is
sent the signal while stopped and resumed with SIGCONT.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from helpers.kernel_cache_files import make_caches, temp_leftovers, tilelang_entry_problems
from slime_flashqla.kernel_cache.archive import export_archive
from slime_flashqla.kernel_cache.format import MANIFEST_NAME

pytestmark = pytest.mark.slow

BIG = 192 * 2**20  # one large kernel library: staging and writing it takes long enough to be caught


def command(*args) -> list[str]:
    return [sys.executable, "-m", "slime_flashqla", "cache", *map(str, args)]


def big_caches(root: Path) -> dict:
    tilelang, triton = make_caches(root)
    with open(triton / "KEY000" / "huge.cubin", "wb") as handle:
        handle.truncate(BIG)  # sparse: cheap to make, read as BIG bytes of zeros
    return {"tilelang": tilelang, "triton": triton}


def caught_mid_work(process: subprocess.Popen, appeared) -> None:
    """Wait until `appeared()` is true, then stop the process there (it must still be running)."""
    deadline = time.monotonic() + 120
    while not appeared():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the command never got to the point to interrupt"
        time.sleep(0.002)
    process.send_signal(signal.SIGSTOP)
    assert process.poll() is None, "the command finished before it could be stopped mid-work"


def deliver(process: subprocess.Popen, signum: int) -> tuple[int, str]:
    process.send_signal(signum)
    process.send_signal(signal.SIGCONT)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("big")
    path = root / "big.tar.gz"
    export_archive(path, big_caches(root / "src"))
    return path


def staging_dirs(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.glob(".slime-flashqla-import-*")]


def staging_the_big_file(*roots: Path) -> bool:
    """The big library is half-written into staging: mid-import, well before publishing and cleanup.

    A staging directory alone also exists during the final cleanup; a signal caught there lands
    after the work (CI once stopped an import at that point, and it finished with 0).
    """
    for staging in staging_dirs(*roots):
        try:
            if any(0 < part.stat().st_size < BIG for part in staging.rglob("huge.cubin")):
                return True
        except FileNotFoundError:  # removed while we looked
            continue
    return False


def test_sigterm_mid_import_removes_the_staging_directory(big_archive, tmp_path):
    tl, tr = tmp_path / "tl", tmp_path / "tr"
    process = subprocess.Popen(
        command("import", big_archive, "--tilelang-dir", tl, "--triton-dir", tr),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    caught_mid_work(process, lambda: staging_the_big_file(tl, tr))
    returncode, stderr = deliver(process, signal.SIGTERM)
    assert returncode == 143 and stderr == "slime-flashqla cache import: terminated (SIGTERM)\n"
    assert staging_dirs(tl, tr) == [] and temp_leftovers(tl, tr) == []
    assert tilelang_entry_problems(tl) == []  # what went in before the signal is whole


def test_sigkill_mid_import_leaves_staging_that_the_next_import_removes(big_archive, tmp_path):
    tl, tr = tmp_path / "tl", tmp_path / "tr"
    dirs = ("--tilelang-dir", tl, "--triton-dir", tr)
    process = subprocess.Popen(command("import", big_archive, *dirs), stderr=subprocess.PIPE)
    caught_mid_work(process, lambda: staging_the_big_file(tl, tr))
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert staging_dirs(tl, tr), "SIGKILL cannot be caught: its staging directory stays"
    again = subprocess.run(command("import", big_archive, *dirs), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert staging_dirs(tl, tr) == [] and temp_leftovers(tl, tr) == []
    assert (tr / "KEY000" / "huge.cubin").stat().st_size == BIG


def export_temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(".out.tar.gz.*.tmp"))


def writing_the_archive(directory: Path) -> bool:
    """The archive's temp file holds bytes: mid-export.

    The output-path check creates and removes an empty file of the same name pattern at start-up
    (can this directory be written?); a signal caught then lands before the export began.
    """
    for temp in export_temps(directory):
        try:
            if temp.stat().st_size > 0:
                return True
        except FileNotFoundError:  # the check's own file, removed while we looked
            continue
    return False


def test_sigterm_mid_export_removes_the_temp_file_and_keeps_the_old_archive(tmp_path):
    caches = big_caches(tmp_path / "src")
    out = tmp_path / "out.tar.gz"
    out.write_bytes(b"previous archive")
    process = subprocess.Popen(
        command("export", out, "--tilelang-dir", caches["tilelang"], "--triton-dir", caches["triton"], "--force"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    caught_mid_work(process, lambda: writing_the_archive(tmp_path))
    returncode, stderr = deliver(process, signal.SIGTERM)
    assert returncode == 143 and stderr == "slime-flashqla cache export: terminated (SIGTERM)\n"
    assert export_temps(tmp_path) == [] and out.read_bytes() == b"previous archive"


def test_sigkill_mid_export_leaves_a_temp_file_that_the_next_export_removes(tmp_path):
    caches = big_caches(tmp_path / "src")
    out = tmp_path / "out.tar.gz"
    args = ("--tilelang-dir", caches["tilelang"], "--triton-dir", caches["triton"])
    process = subprocess.Popen(command("export", out, *args), stderr=subprocess.PIPE)
    caught_mid_work(process, lambda: writing_the_archive(tmp_path))
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert export_temps(tmp_path) and not out.exists()
    again = subprocess.run(command("export", out, *args), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert export_temps(tmp_path) == [] and out.stat().st_size > 0


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path):
    """`cache info big.tar --json | head -1` ends quietly with 141, as SIGPIPE ends other tools (no `Broken pipe`)."""
    caches = make_caches(tmp_path / "src")
    path = tmp_path / "k.tar"
    export_archive(path, {"tilelang": caches[0], "triton": caches[1]})
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile(MANIFEST_NAME))
    # Far more JSON than a pipe holds, so the writer is still writing when the reader leaves.
    manifest["files"].update({f"triton/K{i:06d}/f": {"size": 1, "sha256": "0" * 64} for i in range(20_000)})
    big = tmp_path / "listing.tar"
    data = json.dumps(manifest).encode()
    with tarfile.open(big, "w") as tar:
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    process = subprocess.Popen(command("info", big, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline() == b"{\n"
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and stderr == ""
