"""`bench stream` on the CPU: a real worker process per variant, the JSON and plot, bad input in one line."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slime_flashqla import cli
from slime_flashqla.bench import stream
from slime_flashqla.bench.stream_progress import ProgressFile
from slime_flashqla.workload.packs import PackDistribution
from slime_flashqla.workload.setup import LayerSetup

TINY = (
    "--device", "cpu", "--backend", "torch", "--steps", "3", "--max-tokens", "96", "--median-len", "40",
    "--min-len", "8", "--head-dim", "8", "--hidden-size", "16", "--heads", "1/2", "--plain",
)  # fmt: skip


def parse(*argv):
    return stream.build_parser().parse_args(list(argv))


def bench(*argv) -> int:
    """`slime-flashqla bench stream ARGV` as the CLI runs it: its exit status, bad input one line on stderr."""
    return cli.main(["bench", "stream", *argv])


def test_a_stream_runs_every_pack_in_a_fresh_process_and_reports_it(tmp_path, capsys):
    path, png = tmp_path / "stream.json", tmp_path / "stream.png"
    plot = ("--plot", str(png)) if _matplotlib() else ()
    assert stream.main(parse(*TINY, "--heads", "1/2,2/4", "--json", str(path), *plot)) == 0
    report = json.loads(path.read_text())
    packs = PackDistribution(max_tokens=96, min_len=8, median_len=40, seed=0).packs(3)
    for heads in ("1/2", "2/4"):
        steps = [s for s in report["steps"] if s["heads"] == heads]
        # the worker ran the parent's packs, step by step
        assert [(s["tokens"], s["sequences"]) for s in steps] == [(sum(p), len(p)) for p in packs]
        assert all(s["variant"] == "torch" and s["seconds"] > 0 for s in steps)
    (first, second) = report["summary"]
    assert {first["heads"], second["heads"]} == {"1/2", "2/4"}
    for item in report["summary"]:
        assert set(item) >= {"first_step_s", "steady_median_s", "stall_s", "compiles_after_warmup",
                             "autotunes_after_warmup"}  # fmt: skip
        # a fresh interpreter, torch imported and a layer built before the first step ends
        assert item["first_step_s"] > item["steady_median_s"] > 0
        assert item["compiles_after_warmup"] == 0 and item["autotunes_after_warmup"] == 0
        later = [s["seconds"] for s in report["steps"] if s["heads"] == item["heads"] and s["step"] > 0]
        assert item["stall_s"] == pytest.approx(sum(max(0.0, s - 1.5 * item["steady_median_s"]) for s in later))
    assert report["environment"]["device"] == "cpu" and report["settings"]["max_tokens"] == 96
    out = capsys.readouterr().out
    assert "first step" in out and "compiles after step 0" in out
    # Plain progress: each variant's start, its first and its last step, with the step's time.
    for heads in ("1/2", "2/4"):
        assert f"  {heads} torch: started, 3 steps" in out
        assert f"  {heads} torch: step 1/3, " in out and f"  {heads} torch: step 3/3, " in out
    if plot:
        assert png.read_bytes()[:4] == b"\x89PNG"


def _matplotlib() -> bool:
    from slime_flashqla.bench.plot import matplotlib_missing

    return matplotlib_missing() is None


def test_the_summary_counts_compiles_and_autotunes_after_step_0_only():
    def step(index, seconds, *events):
        return {"step": index, "tokens": 10, "sequences": 1, "seconds": seconds,
                "events": [{"kind": k, "name": n} for k, n in events]}  # fmt: skip

    result = {
        "job": {"variant": "auto", "heads": "16/32", "level": "layer", "spawned": 100.0},
        "first_step_end": 112.5,
        "setup_events": [{"kind": "triton-load", "name": "l2norm_fwd_kernel"}],
        "hooked": ["tilelang", "triton"],
        "steps": [
            step(0, 2.0, ("tilelang-compile", "fused_chunk_gdr_fwd")),
            step(1, 0.010),
            step(2, 20.0, ("triton-autotune", "l2norm_fwd_kernel"), ("triton-compile", "l2norm_fwd_kernel")),
            step(3, 0.012, ("tilelang-compile", "fused_chunk_gdr_bwd"), ("triton-load", "x")),
            step(4, 0.011),
        ],
    }
    summary = stream.summarize(result)
    assert summary["first_step_s"] == pytest.approx(12.5)
    assert summary["steady_median_s"] == pytest.approx((0.011 + 0.012) / 2)
    assert summary["stall_s"] == pytest.approx(20.0 - 1.5 * 0.0115)
    assert summary["total_s"] == pytest.approx(12.5 + 0.010 + 20.0 + 0.012 + 0.011)
    assert summary["compiles_after_warmup"] == 2 and summary["autotunes_after_warmup"] == 1
    assert summary["compiled_after_warmup"] == {"l2norm_fwd_kernel": 1, "fused_chunk_gdr_bwd": 1}
    assert summary["first_step_compiles"] == 1  # step 0's compile is the first step's, not a stall's


def test_a_worker_that_fails_is_a_failed_variant_with_exit_1(tmp_path, capsys):
    path = tmp_path / "stream.json"
    assert stream.main(parse(*TINY, "--timeout", "1", "--json", str(path))) == 1
    (item,) = json.loads(path.read_text())["summary"]
    assert item["variant"] == "torch" and "timed out after 1 s" in item["error"]
    assert "ERROR timed out" in capsys.readouterr().out


CPU_TORCH = ("--device", "cpu", "--backend", "torch")
SIZES = TINY[4:]  # the tiny sizes without the device and backend


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ((*CPU_TORCH, "--steps", "1"), "--steps must be >= 2"),
        (("--device", "cpu", "--variants", "torch,nope"), "unknown variant(s) nope"),
        ((*CPU_TORCH, "--variants", "torch"), "--backend or --variants"),
        (("--device", "cpu", "--backend", "cuda"), "unknown --backend 'cuda'"),
        ((*CPU_TORCH, "--heads", "3/4"), "multiple of Hk"),
        ((*CPU_TORCH, "--model", "qwen3-next-80b-a3b", "--tp", "3"), "TP=3 does not divide"),
        ((*CPU_TORCH, "--tp", "8"), "--tp 8 splits a --model's heads"),  # it was ignored
        ((*CPU_TORCH, "--max-tokens", "4", "--min-len", "8"), "below the shortest sequence"),
        ((*CPU_TORCH, "--json", "/no/such/dir/x.json"), "does not exist"),
        (("--device", "cpu", "--variants", "fla-repeat"), "fla-repeat cannot run here"),
        ((*CPU_TORCH, "--steps", "1000000000000"), "--steps must be <= 10000"),
        ((*CPU_TORCH, "--max-tokens", "100000000000"), "--max-tokens must be <= 2147483647"),
        ((*CPU_TORCH, "--sigma", "inf"), "--sigma must be"),
        ((*CPU_TORCH, "--dist", "pareto", "--alpha", "1e-300"), "--alpha must be"),
        ((*CPU_TORCH, "--min-fill", "nan"), "--min-fill must be"),
        ((*CPU_TORCH, "--seed", "100000000000000000000000"), "--seed must be <= 18446744073709551615"),
        ((*CPU_TORCH, "--seed", "-1"), "--seed must be >= 0"),
        ((*CPU_TORCH, "--timeout", "nan"), "--timeout must be a finite number"),
        ((*CPU_TORCH, "--timeout", "inf"), "--timeout must be a finite number"),
        ((*CPU_TORCH, "--head-dim", "nan"), None),  # argparse's own refusal: not an int
        ((*CPU_TORCH, "--head-dim", "100000"), "--head-dim must be <= 1024"),  # issue 34 ND20: bounded as bench gdn
        ((*CPU_TORCH, "--hidden-size", "1000000000"), "--hidden-size must be <= 65536"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_worker_starts(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started despite bad input"))
    if words is None:
        with pytest.raises(SystemExit):
            parse(*SIZES, *argv)
        return
    assert bench(*SIZES, *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].startswith("slime-flashqla bench stream: ")


def test_asking_for_cuda_without_a_gpu_is_one_line(capsys):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert bench(*SIZES, "--device", "cuda", "--backend", "auto") == 2
    assert "no CUDA device here" in capsys.readouterr().err


def test_the_cli_lists_bench_stream():
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "bench", "stream", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "--max-tokens" in done.stdout and "--level" in done.stdout


def test_the_median_follows_a_smaller_max_tokens_when_not_given():
    """docs/en/bench_stream.md's CPU example: --max-tokens 256 with the default median (1024) must run."""
    plan = stream.build_plan(parse("--device", "cpu", "--backend", "torch", "--steps", "5", "--max-tokens", "256"))
    assert (plan.packs.min_len, plan.packs.median_len, plan.packs.max_tokens) == (32, 32, 256)
    default = stream.build_plan(parse("--device", "cpu", "--backend", "torch"))
    assert (default.packs.min_len, default.packs.median_len, default.packs.max_tokens) == (32, 1024, 32768)


def test_a_job_carries_the_plan_s_one_setup_nested_in_its_json(tmp_path):
    """The parent hands its LayerSetup to the worker whole; the worker reads the same setup back."""
    argv = (*TINY, "--seed", "9", "--layer-model", "qwen3.5", "--slime-source", str(tmp_path))
    plan = stream.build_plan(parse(*argv))
    assert plan.setup == LayerSetup("cpu", "float32", 8, 16, 9, layer_model="qwen3.5", slime_source=str(tmp_path))
    job = plan.job(plan.variants[0], plan.heads[0], tmp_path / "r.json")
    data = json.loads(json.dumps(job.to_json()))
    assert data["setup"] == plan.setup.to_json() and data["heads"] == "1/2" and "seed" not in data
    assert stream.StreamJob.from_json(data) == job


def test_a_median_the_user_gave_is_kept_and_checked(capsys):
    argv = ("--device", "cpu", "--backend", "torch", "--max-tokens", "256", "--median-len", "1024")
    assert bench(*argv) == 2
    assert "the median sequence (1024) must lie between --min-len 32 and --max-tokens 256" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"linear_num_key_heads": 0, "linear_num_value_heads": 0}, "positive"),
        ({"linear_num_key_heads": -16, "linear_num_value_heads": -32}, "positive"),
        ({"linear_num_key_heads": 3, "linear_num_value_heads": 4}, "multiple"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_model_head_counts_are_checked_before_any_worker_starts(tmp_path, config, words, capsys, monkeypatch):
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started despite bad heads"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert bench(*SIZES, *CPU_TORCH, "--model", str(path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and str(path) in err[0]


def test_huge_counts_are_refused_at_once_by_the_real_command():
    """The probe's cases, as a user types them: refused in one line, not drawn for minutes first."""
    for extra in (("--steps", "1000000000000"), ("--max-tokens", "100000000000")):
        done = subprocess.run(
            [sys.executable, "-m", "slime_flashqla", "bench", "stream", *CPU_TORCH, *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "must be <=" in done.stderr


def test_skip_unavailable_runs_the_others_and_lists_the_skipped(tmp_path, capsys):
    path = tmp_path / "stream.json"
    argv = (*SIZES, "--device", "cpu", "--variants", "torch,fla-repeat", "--skip-unavailable", "--json", str(path))
    assert stream.main(parse(*argv)) == 0
    summary = json.loads(path.read_text())["summary"]
    ran = [item for item in summary if "skipped" not in item]
    (skipped,) = [item for item in summary if "skipped" in item]
    assert [item["variant"] for item in ran] == ["torch"] and "first_step_s" in ran[0]
    assert skipped["variant"] == "fla-repeat" and skipped["heads"] == "1/2" and skipped["skipped"]
    out = capsys.readouterr().out
    assert "skipped fla-repeat:" in out and "SKIPPED" in out


def test_plain_bench_stream_on_a_cpu_names_the_way_out_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started"))
    assert bench("--device", "cpu") == 2  # the default variants: auto runs, two cannot
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "slime-layer-flashqla, slime-layer-fla cannot run here" in err[0]
    assert "--skip-unavailable" in err[0]


def test_skip_unavailable_with_nothing_left_is_refused(capsys):
    assert bench(*SIZES, "--device", "cpu", "--variants", "fla-repeat", "--skip-unavailable") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no variant can run" in err[0]


def test_a_plot_without_matplotlib_is_refused_before_any_worker_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started"))
    assert bench(*TINY, "--plot", str(tmp_path / "s.png")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed" in err[0]


def test_the_progress_bar_shows_steps_done_and_the_last_step_on_a_terminal():
    from rich.console import Console

    from slime_flashqla.bench.stream_progress import StreamProgress

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with StreamProgress(console, 4) as progress:
        progress.start("16/32 auto")
        progress.step("16/32 auto", 0, 2.5)
        progress.step("16/32 auto", 1, 0.0123)
        progress.note("  16/32 auto: done")
    shown = console.file.getvalue()
    assert "16/32 auto" in shown and "2/4" in shown and "last step 12.3 ms" in shown and "done" in shown


def test_steps_reach_the_parent_while_the_worker_runs(tmp_path):
    """on_step is called during the run, from the worker's progress file, not after it from the result."""
    plan = stream.build_plan(parse(*TINY))
    seen = []
    job = stream.StreamJob(
        variant="torch", level="layer", heads="1/2", steps=3, packs=dataclasses.asdict(plan.packs),
        setup=LayerSetup("cpu", "float32", head_dim=8, hidden_size=16, seed=0), spawned=0.0,
        result=str(tmp_path / "r.json"),
    )  # fmt: skip
    result = stream.run_worker(job, tmp_path / "w.log", 120, None, lambda i, s: seen.append((i, s, time.time())))
    assert [i for i, _, _ in seen] == [0, 1, 2]
    assert [s for _, s, _ in seen] == [step["seconds"] for step in result["steps"]]
    # While it runs: a worker that reports step 0, then goes on only once the parent has seen it
    # (a tiny run like the one above may end within one poll, so its timing proves nothing).
    progress, acknowledged = tmp_path / "w.progress", tmp_path / "acknowledged"
    waiting = textwrap.dedent(
        f"""
        import pathlib, time
        pathlib.Path({str(progress)!r}).write_text("0 0.5\\n")
        flag, deadline = pathlib.Path({str(acknowledged)!r}), time.time() + 60
        while not flag.exists() and time.time() < deadline:
            time.sleep(0.01)
        raise SystemExit(0 if flag.exists() else 3)
        """
    )
    worker = subprocess.Popen([sys.executable, "-c", waiting])
    returncode = stream._wait(worker, 90, ProgressFile(progress), lambda i, s: acknowledged.touch())
    assert returncode == 0  # 3: step 0 reached the parent only after the worker ended


@pytest.mark.parametrize(
    ("option", "name", "words"), [("--plot", "steps", "must end in"), ("--json", "d", "directory")]
)
def test_an_output_path_that_cannot_be_written_is_refused_before_any_worker(tmp_path, option, name, words, capsys,
                                                                          monkeypatch):  # fmt: skip
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started"))
    (tmp_path / "d").mkdir()
    assert bench(*TINY, option, str(tmp_path / name)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_a_bad_preload_setting_is_refused_before_any_worker_starts(capsys, monkeypatch):
    """A bad SLIME_FLASHQLA_PRELOAD is refused in one line, exit 2, before any worker starts (issue 34 ND24)."""
    monkeypatch.setattr(stream, "run_worker", lambda *a: pytest.fail("a worker started"))
    monkeypatch.setenv("SLIME_FLASHQLA_PRELOAD", "maybe")
    assert bench(*TINY) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SLIME_FLASHQLA_PRELOAD='maybe': use 1" in err[0]


LONG = (*TINY[:-1], "--steps", "10000")  # TINY with steps enough to be interrupted mid-run (--plain kept below)


def _stream_workers(parent: int | None = None) -> dict[int, Path]:
    """{pid: its run's temp folder} of bench stream worker processes (children of `parent`, or of this process)."""
    import os

    parent = os.getpid() if parent is None else parent
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    command = handle.read()
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if b"slime_flashqla.bench.stream_worker" in command and ppid == parent:
                found[int(entry)] = Path(command.split(b"\0")[3].decode()).parent
    return found


def _alive(pids) -> list[int]:
    import os

    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


def test_a_failed_variant_keeps_its_log_beside_the_json_and_says_its_last_line(tmp_path, capsys):
    """A failed variant's log is kept beside the JSON, its last lines in the row (issue 34 ND25, issue 35 item 8)."""
    path = tmp_path / "stream.json"
    assert stream.main(parse(*TINY, "--timeout", "1", "--json", str(path))) == 1
    (item,) = json.loads(path.read_text())["summary"]
    kept = tmp_path / "stream.torch-1-2.log"
    assert kept.is_file() and str(kept) in item["error"] and item["log"] == str(kept)
    assert item["log_tail"] == kept.read_text().strip().splitlines()[-20:]
    assert f"log: {kept}" in capsys.readouterr().out


def test_without_json_a_failed_variant_s_log_is_kept_in_a_named_folder(tmp_path, capsys):
    assert stream.main(parse(*TINY, "--timeout", "1")) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  1/2 torch: ERROR timed out"))
    kept = Path(line.split("log: ")[1].rstrip(")"))
    assert kept.is_file() and kept.name == "torch-1-2.log"
    import shutil

    shutil.rmtree(kept.parent)


def test_a_worker_killed_by_sigkill_is_said_to_be_killed_perhaps_for_memory(tmp_path):
    """A worker ended by SIGKILL is said to be killed, perhaps for memory (issue 35 item 8)."""
    import os
    import signal

    plan = stream.build_plan(parse(*LONG))
    job = plan.job(plan.variants[0], plan.heads[0], tmp_path / "r.json")

    def kill_the_worker(index, seconds):
        for pid in _stream_workers():
            os.kill(pid, signal.SIGKILL)

    result = stream.run_worker(job, tmp_path / "w.log", 120, None, kill_the_worker)
    assert "killed by SIGKILL (out of memory?)" in result["error"], result


def test_ctrl_c_keeps_the_steps_run_and_the_summary_marked_incomplete(tmp_path):
    """Ctrl-C keeps the steps already run, with the summary marked incomplete (issue 35 item 11)."""
    import os
    import signal

    path = tmp_path / "sp.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "slime_flashqla", "bench", "stream", *LONG, "--plain", "--json", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    for line in proc.stdout:
        if "step 1/10000" in line:
            break
    time.sleep(1.0)
    workers = _stream_workers(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    report = json.loads(path.read_text())
    assert report["complete"] is False
    steps = report["steps"]
    assert steps and [s["step"] for s in steps] == list(range(len(steps)))
    (item,) = report["summary"]
    assert item["variant"] == "torch" and item["interrupted"] and item["steps_done"] == len(steps)
    assert "interrupted" in err and "incomplete" in out
    assert workers and not _alive(workers) and not any(folder.exists() for folder in workers.values())


def test_sigterm_stops_the_run_and_writes_nothing(tmp_path):
    """SIGTERM (docker stop) ends the run, its worker and its temp folder; no JSON is written (probe case NS1)."""
    import signal

    path = tmp_path / "st.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "slime_flashqla", "bench", "stream", *LONG, "--plain", "--json", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    for line in proc.stdout:
        if "step 1/10000" in line:
            break
    workers = _stream_workers(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err
    assert not path.exists() and workers and not _alive(workers)
    assert not any(folder.exists() for folder in workers.values())


def test_rl_mode_runs_two_no_grad_forwards_then_training_and_splits_the_first_step(tmp_path, capsys):
    """rl mode runs two no-grad forwards (the log-prob passes of slime's actor) before each training step (issue 31)."""
    path = tmp_path / "rl.json"
    assert stream.main(parse(*TINY, "--mode", "rl", "--json", str(path))) == 0
    report = json.loads(path.read_text())
    assert report["settings"]["mode"] == "rl"
    for step in report["steps"]:
        assert len(step["nograd_seconds"]) == 2 and step["train_seconds"] > 0
        assert step["seconds"] == pytest.approx(sum(step["nograd_seconds"]) + step["train_seconds"])
    (item,) = report["summary"]
    first = report["steps"][0]
    assert item["first_step_nograd_s"] == pytest.approx(sum(first["nograd_seconds"]))
    assert item["first_step_train_s"] == pytest.approx(first["train_seconds"])
    assert item["first_step_s"] > item["first_step_nograd_s"] + item["first_step_train_s"]
    out = capsys.readouterr().out
    assert "rl steps (2 no-grad forwards + forward+backward)" in out
    assert "first step" in out and "no-grad" in out


def test_the_default_mode_is_one_training_step_with_no_split():
    plan = stream.build_plan(parse(*TINY))
    assert plan.mode == "train" and plan.job(plan.variants[0], plan.heads[0], "r.json").mode == "train"
    with pytest.raises(SystemExit):
        parse(*TINY, "--mode", "eval")
