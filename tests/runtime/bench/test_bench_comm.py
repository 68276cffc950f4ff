"""`bench comm` on real gloo ranks: every op and variant measured, `first-use` probe-free in steady state."""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from helpers.comm_guard_state import clean_comm_guard  # noqa: F401  (autouse fixture: bench comm installs policies here)
from slime_flashqla import cli
from slime_flashqla.bench import comm
from slime_flashqla.cli import bench as bench_cli


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_bench_comm_gloo_two_ranks(tmp_path, monkeypatch, capfd):
    for var in ("MASTER_ADDR", "MASTER_PORT"):  # run() sets them for its ranks; restore afterwards
        monkeypatch.setenv(var, "unset")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    # No width, as in a log: plain rows kept whole (pytest-xdist's workers set COLUMNS=80, where rich folds cells).
    monkeypatch.delenv("COLUMNS", raising=False)
    out = tmp_path / "comm.json"
    markdown = tmp_path / "comm.md"
    argv = ["--backend", "gloo", "--nproc", "2", "--sizes", "4K", "--rounds", "1", "--iters-small", "6"]
    assert cli.main(["bench", "comm", *argv, "--warmup", "2", "--json", str(out), "--markdown", str(markdown)]) == 0
    report = json.loads(out.read_text())

    assert report["meta"]["backend"] == "gloo"
    assert report["meta"]["world_size"] == 2
    assert [(r["op"], r["bytes"]) for r in report["rows"]] == [(op, 0 if op == "barrier" else 4096) for op in comm.OPS]
    calls = 6 * len(comm.MODES)  # 1 round, a block of 6 calls in each timing mode
    for row in report["rows"]:
        for mode in comm.MODES:
            assert all(us > 0 for us in row["median_us"][mode].values()), row
            assert set(row["median_us"][mode]) == set(comm.TIMED)
            assert set(row["ratio"][mode]) == {"always", "whitelist", "first-use", "off", comm.WITH_METHODS, comm.AGAIN}
            assert set(row["ratio_of_medians"][mode]) == set(row["ratio"][mode])
            assert all(r > 0 for r in row["ratio"][mode].values()), row
        names = {"isend+irecv": ["isend", "irecv"]}.get(row["op"], [row["op"]])
        for name in names:
            # timed calls only (after warm-up): `always` probes each, `first-use` none, `off` none
            assert row["stats"]["always"][name] == {"checked": calls, "skipped": 0, "cleared": 0}
            assert row["stats"]["first-use"][name] == {"checked": 0, "skipped": calls, "cleared": 0}
            assert row["stats"][comm.WITH_METHODS][name] == {"checked": 0, "skipped": calls, "cleared": 0}
            assert row["stats"]["off"][name] == {"checked": 0, "skipped": calls, "cleared": 0}
            whitelisted = name in {"all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"}
            skipped = whitelisted or name in {"barrier", "isend", "irecv"}
            assert row["stats"]["whitelist"][name]["checked"] == (0 if skipped else calls)
        assert row["stats"]["unwrapped"] == {}
        assert row["stats"][comm.AGAIN] == {}
    overhead = report["wrapper_overhead_us"]
    assert set(overhead) >= {"bare call", "off", "first-use, steady state", "always (probe consulted)"}
    printed = capfd.readouterr()  # by rank 0, a child process: tables as the other benchmarks print them
    assert "latency (gloo, 2 ranks)" in printed.out and "back-to-back (gloo, 2 ranks)" in printed.out
    assert re.search(r"all_reduce\W+4 KiB", printed.out) and "first-use, steady state" in printed.out
    assert "[Gloo]" not in printed.out + printed.err
    # Item 27: the A/A spread (the unwrapped call against itself) is the run's resolution, and it is said.
    again = [row["ratio"][mode][comm.AGAIN] for row in report["rows"] for mode in comm.MODES]
    assert report["meta"]["aa_spread"] == {"low": min(again), "high": max(again)}
    assert f"A/A: {min(again):.2f}x to {max(again):.2f}x" in printed.out
    table = markdown.read_text()
    assert f"A/A: {min(again):.2f}x to {max(again):.2f}x" in table
    assert "| all_reduce | 4 KiB |" in table
    assert "latency:" in table and "back-to-back:" in table
    assert "| first-use, steady state |" in table


def test_gloo_connection_chatter_is_held_back_and_the_rest_let_through():
    """torch 2.8's Gloo prints a connect line per rank from C++; only that line is dropped, in a real process."""
    script = (
        "import os\n"
        "from slime_flashqla.bench import comm\n"
        "with comm.without_gloo_chatter():\n"
        "    os.write(2, b'[Gloo] Rank 1 is connected to 1 peer ranks. '\n"
        "             b'Expected number of connected peer ranks is : 1\\n')\n"
        "    os.write(1, b'a real warning\\n')\n"
        "    print('from python', flush=True)\n"
        "print('after')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "[Gloo]" not in done.stdout + done.stderr
    assert "a real warning" in done.stderr and "from python" in done.stderr and done.stdout == "after\n"


def test_paired_ratio_cancels_drift_between_rounds():
    # The machine slows down 3x over the run; the variant is 2% slower than the baseline of
    # its own round every time.  Pairing recovers 1.02; the ratio of medians does not
    # when one slow round lands on the variant only.
    baseline = [10.0, 20.0, 30.0, 40.0, 50.0]
    variant = [1.02 * b for b in baseline]
    assert comm.paired_ratio(variant, baseline) == pytest.approx(1.02)
    variant[1] = 1.02 * 45.0  # a disturbed block: the paired median ignores one outlier of five
    assert comm.paired_ratio(variant, baseline) == pytest.approx(1.02)
    assert statistics.median(variant) / statistics.median(baseline) == pytest.approx(1.02 * 40 / 30)
    with pytest.raises(ValueError, match="longer"):
        comm.paired_ratio([1.0], [1.0, 2.0])


def test_bench_cli_dispatches_by_name():
    parser = argparse.ArgumentParser(prog="slime-flashqla")
    bench_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "comm", "--backend", "gloo", "--sizes", "4K", "64M", "--ops", "barrier"])
    assert (args.benchmark, args.sizes, args.ops) == ("comm", [4096, 64 * 1024**2], ["barrier"])
    assert callable(args.func)
    for bad in (["bench", "comm", "--sizes", "3"], ["bench", "comm", "--sizes", "lots"], ["bench"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


@pytest.mark.parametrize("kind", ["directory", "fifo", "missing folder"])
def test_an_unusable_output_path_is_refused_before_any_rank_starts(tmp_path, capfd, kind):
    """--json/--markdown are checked first (a FIFO once hung the run after it, a folder failed it at the end)."""
    target = tmp_path / "out.json"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = tmp_path / "no" / "out.json"
    argv = ["--backend", "gloo", "--nproc", "2", "--sizes", "4K", "--rounds", "1", "--iters-small", "2"]
    for option in ("--json", "--markdown"):
        assert cli.main(["bench", "comm", *argv, option, str(target)]) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"slime-flashqla bench comm: {option}"), err


# ---------------------------------------------------------------- bounds, checked before any rank starts (issue 34)


def _comm_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slime-flashqla")
    bench_cli.register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.parametrize("size", ["infK", "1e400K", "1e30G", "17G", "1e12"])
def test_a_size_out_of_bounds_is_a_usage_error_not_a_traceback(size, capsys):
    """A size that overflows or passes 16 GiB is an argparse usage error, exit 2 (issue 34 ND19, ND20)."""
    with pytest.raises(SystemExit) as raised:
        _comm_parser().parse_args(["bench", "comm", "--sizes", size])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("slime-flashqla bench comm: error: argument --sizes: size") and size.upper() in err[-1]
    assert "16 GiB" in err[-1] or "use bytes" in err[-1]


def _cli(*argv, env=None, **popen) -> subprocess.Popen:
    """The CLI in a process group of its own, so that a test can stop every process it started."""
    return subprocess.Popen(
        [sys.executable, "-m", "slime_flashqla", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        **popen,
    )


def _finish(process: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    """Its exit status, stdout and stderr; None where it ran past `timeout` (then its whole group is killed)."""
    try:
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return None, out, err


def _without_launcher_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}


def _ranks_beyond_memory() -> list[str]:
    """Enough ranks with a 16 GiB message that they cannot fit in this machine's available memory."""
    from slime_flashqla.bench.options import available_memory

    available = available_memory()
    if available is None:
        pytest.skip("this machine does not say how much memory is available (/proc/meminfo)")
    ranks = max(2, available // (3 * 16 * 2**30) + 1)  # each rank holds up to three buffers of the size
    if ranks > 64:
        pytest.skip(f"{available / 2**30:.0f} GiB available: 64 ranks of 16 GiB messages fit")
    return ["--nproc", str(ranks), "--sizes", "16G", "--ops", "all_reduce"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--nproc", "65", "--ops", "barrier"], "--nproc must be <= 64"),
        (["--nproc", "3", "--ops", "isend+irecv"], "world size 3 is odd"),
        (_ranks_beyond_memory, "GiB of memory"),
    ],
)
def test_what_the_parent_can_know_is_refused_before_any_rank_starts(argv, words):
    """What the parent can know (memory for --nproc, an odd world for isend+irecv) is refused before any rank starts.

    Issue 35 item 2, issue 34 ND20, ND21.

    Run under an 8 GiB address-space limit, as the probe ran it, so that a regression fails here
    instead of exhausting the machine; the process group is killed at the deadline.
    """

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))

    argv = argv() if callable(argv) else argv
    process = _cli("bench", "comm", "--backend", "gloo", "--rounds", "1", *argv, env=_without_launcher_env(),
                   preexec_fn=limit)  # fmt: skip
    code, out, err = _finish(process, timeout=30)
    assert code == 2, (code, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slime-flashqla bench comm: ") and words in lines[0], lines
    assert out == ""


# ---------------------------------------------------------------- a launcher's environment (ND3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launcher_env() -> dict:
    """A stale torchrun shell or a PyTorchJob pod: WORLD_SIZE and friends, and no peer that will ever come."""
    return {**_without_launcher_env(), "WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port())}  # fmt: skip


def _wait_for(process: subprocess.Popen, condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            code, out, err = _finish(process, timeout=5)
            pytest.fail(f"never got there: exit {code}, stdout {out[-500:]!r}, stderr {err[-2000:]!r}")
        time.sleep(0.05)


def _stderr_line(process: subprocess.Popen, words: str, timeout: float = 60) -> str:
    """Read stderr until a line holding `words` arrives (the process must still be running)."""
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = process.stderr.readline()
            seen.append(line)
            if words in line:
                return line
            if not line:
                break
    code, _, err = _finish(process, timeout=5)
    pytest.fail(f"no stderr line with {words!r}: exit {code}, stderr {''.join(seen) + err!r}")


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("signum", "code", "word"), [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")]
)
def test_a_launcher_environment_says_it_waits_and_a_signal_stops_the_wait(signum, code, word):
    """With a launcher's WORLD_SIZE rank 0 says it waits; SIGTERM or Ctrl-C ends the wait (issue 34 ND3)."""
    process = _cli("bench", "comm", "--backend", "gloo", "--ops", "barrier", env=_launcher_env())
    waiting = _stderr_line(process, "waiting")
    assert "WORLD_SIZE=2" in waiting and "unset WORLD_SIZE" in waiting, waiting
    process.send_signal(getattr(signal, signum))
    status, out, err = _finish(process, timeout=20)
    assert status == code, (status, err)
    assert err.strip().splitlines() == [f"slime-flashqla bench comm: {word}"], err
    assert out == ""


@pytest.mark.distributed
def test_a_launcher_environment_without_peers_ends_after_the_rendezvous_timeout():
    process = _cli("bench", "comm", "--backend", "gloo", "--ops", "barrier", "--rendezvous-timeout", "2",
                   env=_launcher_env())  # fmt: skip
    status, _, err = _finish(process, timeout=60)
    assert status == 2, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "waiting" in lines[0], lines
    assert lines[1].startswith("slime-flashqla bench comm: ") and "within 2 s" in lines[1], lines
    assert "unset WORLD_SIZE" in lines[1]


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"WORLD_SIZE": "2"}, "RANK"),
        ({"WORLD_SIZE": "two", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "peers"),
        ({"WORLD_SIZE": "3", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "world size 3 is odd"),
    ],
)
def test_an_unusable_launcher_environment_is_one_line(env, words):
    argv = ["bench", "comm", "--backend", "gloo", "--ops", "isend+irecv", "--rendezvous-timeout", "1"]
    process = _cli(*argv, env={**_without_launcher_env(), **env})
    status, _, err = _finish(process, timeout=60)
    assert status == 2, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines


# ---------------------------------------------------------------- signals to --nproc runs (ND23, issue 35 items 2-3)


def _ranks_of(process: subprocess.Popen) -> list:
    try:
        return psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _long_run(tmp_path) -> tuple[subprocess.Popen, list]:
    """`bench comm --nproc 2` in the middle of its timed rounds, with its two ranks."""
    out = tmp_path / "comm.json"
    argv = ["bench", "comm", "--backend", "gloo", "--nproc", "2", "--ops", "all_reduce", "--sizes", "4K",
            "--rounds", "100000", "--json", str(out)]  # fmt: skip
    process = _cli(*argv, env=_without_launcher_env(), cwd=tmp_path)
    _wait_for(process, lambda: len(_ranks_of(process)) == 2)
    ranks = _ranks_of(process)
    time.sleep(3)  # connected and timing
    assert process.poll() is None
    return process, ranks


def _gone(ranks, timeout: float = 15) -> bool:
    """Every rank has exited (a zombie has: in a container with no init nobody reaps a dead orphan)."""
    _, alive = psutil.wait_procs(ranks, timeout=timeout)
    return all(_exited(rank) for rank in alive)


def _exited(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.distributed
@pytest.mark.parametrize("to", ["parent", "group"])
def test_sigterm_stops_the_ranks_writes_nothing_and_says_one_line(tmp_path, to):
    """SIGTERM to the parent or its group stops every rank in one line, writing nothing (issue 34 ND23, 35 item 3)."""
    process, ranks = _long_run(tmp_path)
    if to == "parent":
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGTERM)
    status, out, err = _finish(process, timeout=30)
    assert status == 143, (status, err[-3000:])
    assert err.strip().splitlines()[-1:] == ["slime-flashqla bench comm: terminated (SIGTERM)"], err[-3000:]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-3000:]
    assert _gone(ranks), [r.pid for r in ranks]
    assert out == "" and list(tmp_path.iterdir()) == [], "no table printed, nothing written, no temp file left"


@pytest.mark.distributed
def test_ctrl_c_to_the_group_stops_every_rank_with_one_line(tmp_path):
    process, ranks = _long_run(tmp_path)
    os.killpg(process.pid, signal.SIGINT)
    status, out, err = _finish(process, timeout=30)
    assert status == 130, (status, err[-3000:])
    assert err.strip().splitlines() == ["slime-flashqla bench comm: interrupted"], err[-3000:]
    assert _gone(ranks)
    assert out == "" and list(tmp_path.iterdir()) == []


@pytest.mark.distributed
def test_the_ranks_do_not_outlive_a_killed_parent(tmp_path):
    """The ranks end with a killed parent: none lives on as an orphan (issue 35 item 2)."""
    process, ranks = _long_run(tmp_path)
    process.send_signal(signal.SIGKILL)
    _finish(process, timeout=30)
    assert _gone(ranks), [r.pid for r in ranks]


def test_the_aa_note_says_when_the_ratios_are_noise():
    """The A/A note says when the spread makes every other ratio noise (issue 35 item 27)."""
    wide = comm.resolution_note({"low": 0.32, "high": 3.64})
    assert wide.startswith("A/A: 0.32x to 3.64x") and "cannot be told from noise" in wide
    narrow = comm.resolution_note({"low": 0.99, "high": 1.02})
    assert narrow.startswith("A/A: 0.99x to 1.02x") and "cannot be told from noise" not in narrow
    assert "resolution" in narrow


@pytest.mark.distributed
def test_a_rank_that_fails_is_one_line_naming_its_error():
    """A rank that fails (here out of memory) is one line naming its error (issue 34 ND20, probe case CL4).

    Each process may map 3 GiB more than a process that imported torch maps (a CUDA build of torch maps
    several GiB more than a CPU one): two ranks pass the memory check, and a rank's 2 GiB buffers do not fit.
    """
    peak = subprocess.run(
        [sys.executable, "-c", "import torch, slime_flashqla.bench.comm; print(open('/proc/self/status').read())"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    mapped = int(re.search(r"^VmPeak:\s+(\d+) kB", peak, re.MULTILINE).group(1)) * 1024
    cap = mapped + 3 * 2**30

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    argv = ["bench", "comm", "--backend", "gloo", "--nproc", "2", "--ops", "all_to_all_single", "--sizes", "2G",
            "--rounds", "1", "--iters-large", "1", "--warmup", "0"]  # fmt: skip
    code, out, err = _finish(_cli(*argv, env=_without_launcher_env(), preexec_fn=limit), timeout=120)
    assert code == 1, (code, err[-2000:])
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "can't allocate memory" in lines[0], lines
    assert "Traceback" not in lines[0] and "ProcessRaisedException" not in lines[0]
