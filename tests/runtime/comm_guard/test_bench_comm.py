"""`bench comm` on real gloo ranks: every op and variant measured, `first-use` probe-free in steady state."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys

import pytest

from slime_flashqla import cli
from slime_flashqla.bench import comm
from slime_flashqla.cli import bench as bench_cli


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_bench_comm_gloo_two_ranks(tmp_path, monkeypatch, capfd):
    for var in ("MASTER_ADDR", "MASTER_PORT"):  # run() sets them for its ranks; restore afterwards
        monkeypatch.setenv(var, "unset")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
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
    table = markdown.read_text()
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
    import os

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
