"""`slime-flashqla warmup`: argument checks, the done markers, and one compile shared by concurrent processes.

The kernels here are the `torch` backend's (nothing to compile), so the locking, marker
and parallel machinery is what runs for real; the FlashQLA compile itself is a GPU test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slime_flashqla.workload.heads import HeadConfig

WARMUP_CPU = (sys.executable, "-m", "slime_flashqla", "warmup", "--device", "cpu", "--backends", "torch")


def warmup(tmp_path, *args, check=True):
    cmd = [*WARMUP_CPU, "--cache-dir", str(tmp_path / "cache"), "--lengths", "40+30", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=check)


def refusal(result) -> str:
    """The one line a refused warmup prints: on stderr, exit 2, nothing on stdout (issue 25 D18)."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slime-flashqla warmup: "), result.stderr
    return lines[0]


def test_bad_arguments_fail_before_any_work(tmp_path):
    assert "multiple of Hk" in refusal(warmup(tmp_path, "--heads", "16/30", check=False))
    assert "--lengths" in refusal(warmup(tmp_path, "--heads", "2/4", "--lengths", "40+-1", check=False))
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--jobs", "0"), "--jobs must be at least 1, got 0"),
        (("--jobs", "-3"), "--jobs must be at least 1, got -3"),
        (("--max-tokens", "100000000000"), "--max-tokens must be between 64 and 4194304 tokens, got 100000000000"),
        (("--lengths", "4000000+4000000"), "--lengths '4000000+4000000': a batch holds at most 4194304 tokens"),
        (("--json", "nodir/x.json"), "--json nodir/x.json: the directory nodir does not exist"),
        (("--json", "adir"), "--json adir: is a directory, not a regular file"),
        (("--json", "/proc/version"), "--json /proc/version: cannot write in /proc"),
        (("--tp", "8"), "--tp 8 splits a --model's heads"),  # it was ignored beside --heads
    ],
    ids=["jobs-0", "jobs-negative", "max-tokens", "lengths", "json-nodir", "json-dir", "json-proc", "tp-no-model"],
)
def test_bounds_and_the_output_path_are_checked_before_any_work(tmp_path, monkeypatch, args, says):
    """Bounds and the --json path are checked before any work: nothing is locked first (issue 25 D5, D12, D16)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    assert says in refusal(warmup(tmp_path, "--heads", "2/4", *args, check=False))
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def test_jobs_never_exceed_the_configurations(tmp_path):
    """No more worker processes than parts to warm, whatever --jobs says (issue 25 D16)."""
    done = warmup(tmp_path, "--heads", "2/4", "--jobs", "30", "--json", str(tmp_path / "r.json"))
    assert done.stdout.startswith(f"warming 1 part(s) of 1 configuration(s) into {tmp_path / 'cache'} with 1 job(s)")
    assert [r["status"] for r in json.loads((tmp_path / "r.json").read_text())["results"]] == ["compiled"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")
def test_without_a_gpu_warmup_refuses_up_front(tmp_path):
    """Without a GPU warmup refuses in one line before any work (issue 25 D17, issue 24 item 3)."""
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "warmup", "--heads", "1/1", "--backends", "torch",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = refusal(done)
    assert "no CUDA GPU is visible" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def test_the_table_keeps_configuration_names_whole(tmp_path):
    """The results table keeps each configuration name whole on a narrow terminal (issue 24 item 3)."""
    done = subprocess.run(
        [*WARMUP_CPU, "--cache-dir", str(tmp_path / "cache"), "--heads", "2/4,1/2", "--max-tokens", "128",
         "--lengths", "40+30"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "64"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for key in ("torch-hk2-hv4-varlen-bfloat16-layer-t128", "torch-hk1-hv2-varlen-bfloat16-layer-t128"):
        assert any(key in line for line in done.stdout.splitlines()), done.stdout


def test_second_run_finds_the_marker(tmp_path):
    first = warmup(tmp_path, "--heads", "2/4", "--json", str(tmp_path / "a.json"))
    assert "compiled" in first.stdout
    warmup(tmp_path, "--heads", "2/4", "--json", str(tmp_path / "b.json"))
    statuses = [r["status"] for r in json.loads((tmp_path / "b.json").read_text())["results"]]
    assert statuses == ["cached"]
    forced = warmup(tmp_path, "--heads", "2/4", "--force", "--json", str(tmp_path / "c.json"))
    assert [r["status"] for r in json.loads((tmp_path / "c.json").read_text())["results"]] == ["compiled"]
    assert forced.returncode == 0


def test_concurrent_processes_compile_once(tmp_path):
    """Two ranks starting at once: one compiles under the lock, the other waits and finds it done."""
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "slime_flashqla", "warmup", "--device", "cpu", "--backends", "torch"),
                *("--cache-dir", str(tmp_path / "cache"), "--lengths", "300+300", "--heads", "2/4"),
                *("--json", str(tmp_path / f"rank{rank}.json")),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for rank in range(2)
    ]
    for proc in procs:
        proc.communicate(timeout=300)
        assert proc.returncode == 0
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text())["results"][0] for rank in range(2)]
    assert sorted(r["status"] for r in results) == ["cached", "compiled"]
    marker = json.loads(
        (
            tmp_path / "cache" / "slime-flashqla-locks" / "torch-hk2-hv4-varlen-bfloat16-layer-t32768.done.json"
        ).read_text()
    )
    compiled = next(r for r in results if r["status"] == "compiled")
    assert marker["seconds"] == compiled["seconds"]


def test_parallel_jobs_cover_every_configuration(tmp_path):
    warmup(tmp_path, "--heads", "2/4,1/2,1/4", "--jobs", "2", "--json", str(tmp_path / "r.json"))
    keys = sorted(r["key"] for r in json.loads((tmp_path / "r.json").read_text())["results"])
    assert keys == [
        "torch-hk1-hv2-varlen-bfloat16-layer-t32768",
        "torch-hk1-hv4-varlen-bfloat16-layer-t32768",
        "torch-hk2-hv4-varlen-bfloat16-layer-t32768",
    ]


def test_flashqla_is_warmed_in_parts_one_per_forced_kernel_path():
    from slime_flashqla.kernel_cache.warmup import warmup_parts

    assert warmup_parts("flashqla") == ["layer", "no-cp", "intra-cp", "no-cp+states", "intra-cp+states"]
    assert warmup_parts("fla") == ["layer", "kernel", "kernel+states"]
    assert warmup_parts("torch") == ["layer"]  # the reference compiles nothing
    assert warmup_parts("flashqla", varlen=False) == ["layer"]


def test_coverage_packs_reach_every_sequence_count_and_the_budget():
    from slime_flashqla.kernel_cache.warmup import SEQUENCE_COUNTS, coverage_packs, stream_sample

    packs = coverage_packs(32768)
    counts = {len(p) for p in packs}
    assert set(SEQUENCE_COUNTS) <= counts

    def block(sequences, heads, sms):  # flash_qla 0.1.3, hopper/fused_fwd.py: the forward's value block
        grid, target = sequences * heads, int(sms * 0.7)
        return 128 if grid >= target else 64 if grid * 2 >= target else 32

    # Every block size some pack of up to 32768 one-token sequences reaches, a counted pack reaches too.
    for heads in (2, 4, 8, 16, 32, 48, 64):
        for sms in (78, 114, 132, 148, 170):
            anything = {block(n, heads, sms) for n in range(1, 32769)}
            assert {block(n, heads, sms) for n in counts} == anything, (heads, sms)
    assert max(sum(p) for p in packs) == 32768 and (32768,) in packs
    assert all(sum(p) <= 32768 and min(p) >= 16 for p in packs)
    sample = stream_sample(32768)
    assert len(sample) == 24 and all(sum(p) <= 32768 for p in sample)
    assert sample == stream_sample(32768)  # the same packs on every node: one cache serves all
    small = coverage_packs(64)
    assert all(sum(p) <= 64 for p in small) and {1, 2, 4} <= {len(p) for p in small}


def test_the_warmed_parts_are_listed_in_the_results(tmp_path):
    done = warmup(tmp_path, "--heads", "2/4", "--max-tokens", "128", "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0
    (result,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert result["key"] == "torch-hk2-hv4-varlen-bfloat16-layer-t128"
    too_small = warmup(tmp_path, "--heads", "2/4", "--max-tokens", "8", check=False)
    assert "--max-tokens must be between 64 and 4194304 tokens, got 8" in refusal(too_small)


def test_lengths_take_the_shared_shape_grammar_and_warmups_own_bound():
    from slime_flashqla.cli.warmup import parse_lengths

    assert parse_lengths("1000+3096,8192x2,1000+3096") == ((1000, 3096), (8192, 8192))
    with pytest.raises(ValueError, match=r"--lengths '40\+-1': bad shape"):
        parse_lengths("40+-1")
    with pytest.raises(ValueError, match="a batch holds at most 4194304 tokens"):
        parse_lengths("4000000+4000000")


def test_a_bad_preload_setting_is_refused_before_any_work(tmp_path, monkeypatch):
    """A bad SLIME_FLASHQLA_PRELOAD is refused before any work, whichever backends are warmed (issue 34 ND24)."""
    monkeypatch.setenv("SLIME_FLASHQLA_PRELOAD", "maybe")
    line = refusal(warmup(tmp_path, "--heads", "2/4", check=False))
    assert "SLIME_FLASHQLA_PRELOAD='maybe': use 1" in line
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def warmup_args(*argv):
    from slime_flashqla.cli import build_parser

    return build_parser().parse_args(["warmup", *argv])


def test_cp_sizes_split_a_model_s_heads_over_tp_times_cp():
    """Under context parallelism each rank's kernel runs Hk/(TP*CP) and Hv/(TP*CP) heads (issue 31)."""
    from slime_flashqla.cli.warmup import build_tasks

    tasks = build_tasks(warmup_args("--model", "qwen3-next-80b-a3b", "--tp", "1,2,4,8", "--cp", "1,2",
                                    "--backends", "torch"))  # fmt: skip
    assert sorted({t.heads for t in tasks}) == sorted(
        {HeadConfig(16, 32), HeadConfig(8, 16), HeadConfig(4, 8), HeadConfig(2, 4), HeadConfig(1, 2)}
    )
    assert {t.heads for t in build_tasks(warmup_args("--model", "qwen3-next-80b-a3b", "--cp", "4",
                                                     "--backends", "torch"))} == {HeadConfig(4, 8)}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--heads", "2/4", "--cp", "2"), "--cp 2 splits a --model's heads"),
        (
            ("--model", "qwen3-next-80b-a3b", "--tp", "8", "--cp", "4"),
            "TP=8 x CP=4 does not divide the head counts 16/32",
        ),
        (("--model", "qwen3-next-80b-a3b", "--cp", "0"), "--cp '0': give a comma list of context-parallel sizes"),
        (("--model", "qwen3-next-80b-a3b", "--cp", "x"), "--cp 'x': give a comma list of context-parallel sizes"),
        (("--heads", "2/4", "--jobs", "1000"), "--jobs must be at most 256, got 1000"),
        (("--heads", "2/4", "--jobs", "many"), "--jobs must be auto or a whole number, got 'many'"),
        (("--heads", "2/4", "--compile-threads", "0"), "--compile-threads must be at least 1, got 0"),
        (("--heads", "2/4", "--compile-threads", "65"), "--compile-threads must be at most 64, got 65"),
    ],
    ids=["cp-no-model", "cp-too-many", "cp-zero", "cp-word", "jobs-huge", "jobs-word", "threads-0", "threads-65"],
)
def test_cp_jobs_and_threads_are_bounded_before_any_work(tmp_path, args, says):
    assert says in refusal(warmup(tmp_path, *args, check=False))
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def test_training_only_leaves_out_the_parts_only_check_runs():
    from slime_flashqla.cli.warmup import build_tasks

    every = [t.part for t in build_tasks(warmup_args("--heads", "16/32"))]
    assert sorted(every) == sorted(["layer", "no-cp", "intra-cp", "no-cp+states", "intra-cp+states"])
    training = [t.part for t in build_tasks(warmup_args("--heads", "16/32", "--training-only"))]
    assert sorted(training) == sorted(["layer", "no-cp", "intra-cp"])


def test_help_says_what_each_part_is_for():
    done = subprocess.run([*WARMUP_CPU[:4], "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(done.stdout.split())
    assert "--training-only" in text and "--cp" in text and "--compile-threads" in text
    assert "only `slime-flashqla check` runs" in text and "(default auto" in text


def test_the_longest_parts_start_first_across_configurations():
    from slime_flashqla.kernel_cache.warmup import WarmupTask, in_start_order

    tasks = [WarmupTask("flashqla", HeadConfig(*h), part=p) for h in ((16, 32), (2, 4))
             for p in ("layer", "no-cp", "intra-cp", "no-cp+states", "intra-cp+states")]  # fmt: skip
    order = [(t.heads.label, t.part) for t in in_start_order(tasks)]
    assert order[:2] == [("16/32", "layer"), ("2/4", "layer")]
    assert {part for _, part in order[-4:]} == {"no-cp+states", "intra-cp+states"}


def test_by_default_parts_run_at_once_as_the_node_allows(tmp_path):
    """By default as many parts run at once as the node's CPUs and memory allow (issue 31)."""
    from slime_flashqla.kernel_cache.capacity import default_jobs, node_budget

    done = warmup(tmp_path, "--heads", "2/4,1/2,1/4", "--json", str(tmp_path / "r.json"))
    jobs = default_jobs(3, node_budget())
    header = done.stdout.splitlines()[0]
    assert f"with {jobs} job(s) at once" in header and f"({node_budget().cpus} CPU(s), " in header, done.stdout
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert sorted(r["status"] for r in results) == ["compiled"] * 3
    assert all(r["peak_rss_mib"] > 0 for r in results)  # what each part's process took, to size JOB_MEMORY


def test_progress_shows_parts_done_of_all_and_the_slowest_still_running(tmp_path):
    done = warmup(tmp_path, "--heads", "2/4,1/2", "--jobs", "2")
    lines = [line for line in done.stdout.splitlines() if line.startswith("  [")]
    assert [line[:8] for line in lines] == ["  [1/2] ", "  [2/2] "], done.stdout
    assert lines[-1].endswith("; none running") and ": compiled in " in lines[-1]


def test_the_progress_line_names_the_slowest_running_part():
    import io

    from slime_flashqla.kernel_cache.progress import WarmupProgress

    out = io.StringIO()
    progress = WarmupProgress(3, console=None, out=out, now=lambda: 100.0)
    progress.finished("torch 2/4 no-cp", "compiled in 4.0 s", {"torch 2/4 layer": 20.0, "torch 1/2 layer": 70.0})
    progress.tick({"torch 2/4 layer": 20.0, "torch 1/2 layer": 70.0})  # within the quiet interval: no line
    assert out.getvalue().splitlines() == [
        "  [1/3] torch 2/4 no-cp: compiled in 4.0 s; running: torch 2/4 layer 80 s (slowest), 1 more"
    ]
    clock = [200.0]
    later = WarmupProgress(3, console=None, out=out, now=lambda: clock[0], quiet_seconds=30)
    later.tick({"torch 2/4 layer": 20.0})
    assert len(out.getvalue().splitlines()) == 1
    clock[0] = 240.0  # 40 s without a line: one says what is still running
    later.tick({"torch 2/4 layer": 20.0})
    assert out.getvalue().splitlines()[-1] == "  [0/3] running: torch 2/4 layer 220 s (slowest)"


def _part_processes(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if b"slime_flashqla.kernel_cache.part" in command and ppid == parent:
                found.append(int(entry))
    return found


def _wait_for_parts(proc, timeout=120.0) -> list[int]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parts = _part_processes(proc.pid)
        if parts:
            return parts
        time.sleep(0.05)
    raise AssertionError("no part process started")


def test_a_part_that_dies_is_reported_with_its_log_and_the_others_finish(tmp_path):
    """A part that dies is reported with its log, and the other parts finish (issue 31)."""
    import signal

    cmd = [*WARMUP_CPU, "--cache-dir", str(tmp_path / "cache"), "--lengths", "40+30", "--heads", "2/4,1/2",
           "--jobs", "1", "--json", str(tmp_path / "r.json")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = _wait_for_parts(proc)
    os.kill(first[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    results = {r["key"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    killed = results["torch-hk1-hv2-varlen-bfloat16-layer-t32768"]  # the first to start: heads in order
    assert killed["status"].startswith("failed: the part's process was killed by SIGKILL (out of memory?)")
    kept = tmp_path / "r.torch-hk1-hv2-varlen-bfloat16-layer-t32768.log"
    assert kept.is_file() and f"log: {kept}" in killed["status"]
    assert results["torch-hk2-hv4-varlen-bfloat16-layer-t32768"]["status"] == "compiled"


def test_sigterm_stops_warmup_and_its_part_processes(tmp_path):
    import signal

    cmd = [*WARMUP_CPU, "--cache-dir", str(tmp_path / "cache"), "--lengths", "40+30", "--heads", "2/4",
           "--json", str(tmp_path / "r.json")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = _wait_for_parts(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err
    assert not any(os.path.exists(f"/proc/{pid}") for pid in parts)
    assert not (tmp_path / "r.json").exists()


class _AheadSource:
    """The `compile_ahead` of a backend's SpecialisationSource, as FlashQLA's TileLangPackage has it."""

    def __init__(self, fail=False):
        self.fail, self.calls = fail, []

    def compile_ahead(self, steps, threads, lock):
        import types

        if self.fail:
            raise RuntimeError("no TileLang here\nsecond line")
        steps()
        with lock("form-abc") as waited:
            self.calls.append((threads, waited))
        return types.SimpleNamespace(describe=lambda: f"3 of 3 kernel(s) built ahead on {threads} thread(s)")


def test_a_part_compiles_ahead_on_its_threads_under_per_kernel_locks_and_never_fails_for_it(tmp_path, monkeypatch):
    from helpers.preload_source import use_source
    from slime_flashqla.kernel_cache.warmup import LOCK_DIR, WarmupTask, compile_ahead

    source = use_source(monkeypatch, _AheadSource())
    task, ran = WarmupTask("testing", HeadConfig(2, 4)), []
    said = compile_ahead(task, tmp_path, 4, lambda: ran.append("steps"))
    assert said == "3 of 3 kernel(s) built ahead on 4 thread(s)" and ran == ["steps"]
    assert source.calls[0][0] == 4 and (tmp_path / LOCK_DIR / "form-abc.lock").exists()  # a real lock file
    assert compile_ahead(task, tmp_path, 1, lambda: ran.append("again")) == "" and ran == ["steps"]
    source.fail = True
    assert compile_ahead(task, tmp_path, 4, lambda: None) == "not compiled ahead: no TileLang here second line"
    assert compile_ahead(WarmupTask("torch", HeadConfig(2, 4)), tmp_path, 4, lambda: None) == ""
