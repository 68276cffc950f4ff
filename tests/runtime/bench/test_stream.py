"""`bench stream` on the CPU: a real worker process per variant, the JSON and plot, bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slime_flashqla.bench import stream
from slime_flashqla.bench.packs import PackDistribution

TINY = (
    "--device", "cpu", "--backend", "torch", "--steps", "3", "--max-tokens", "96", "--median-len", "40",
    "--min-len", "8", "--head-dim", "8", "--hidden-size", "16", "--heads", "1/2", "--plain",
)  # fmt: skip


def parse(*argv):
    return stream.build_parser().parse_args(list(argv))


def test_a_stream_runs_every_pack_in_a_fresh_process_and_reports_it(tmp_path, capsys):
    path, png = tmp_path / "stream.json", tmp_path / "stream.png"
    assert stream.main(parse(*TINY, "--heads", "1/2,2/4", "--json", str(path), "--plot", str(png))) == 0
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
    if _matplotlib():
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
        ((*CPU_TORCH, "--heads", "3/4"), "multiple of the key heads"),
        ((*CPU_TORCH, "--model", "qwen3-next-80b-a3b", "--tp", "3"), "TP=3 does not divide"),
        ((*CPU_TORCH, "--max-tokens", "4", "--min-len", "8"), "below the shortest sequence"),
        ((*CPU_TORCH, "--json", "/no/such/dir/x.json"), "does not exist"),
        (("--device", "cpu", "--variants", "fla-repeat"), "fla-repeat cannot run here"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_worker_starts(argv, words, capsys):
    assert stream.main(parse(*SIZES, *argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].startswith("bench stream: ")


def test_asking_for_cuda_without_a_gpu_is_one_line(capsys):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert stream.main(parse(*SIZES, "--device", "cuda", "--backend", "auto")) == 2
    assert "no CUDA device here" in capsys.readouterr().err


def test_the_cli_lists_bench_stream():
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "bench", "stream", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "--max-tokens" in done.stdout and "--level" in done.stdout
