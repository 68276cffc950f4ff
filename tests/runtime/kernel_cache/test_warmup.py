"""`slime-flashqla warmup`: argument checks, the done markers, and one compile shared by concurrent processes.

The kernels here are the `torch` backend's (nothing to compile), so the locking, marker
and parallel machinery is what runs for real; the FlashQLA compile itself is a GPU test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from slime_flashqla.workload.heads import HeadConfig, parse_head_config
from slime_flashqla.workload.models import model_heads, split_for_tp

WARMUP_CPU = (sys.executable, "-m", "slime_flashqla", "warmup", "--device", "cpu", "--backends", "torch")


def warmup(tmp_path, *args, check=True):
    cmd = [*WARMUP_CPU, "--cache-dir", str(tmp_path / "cache"), "--lengths", "40+30", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=check)


def test_heads_parsing_and_tp_split():
    assert parse_head_config("16/32") == HeadConfig(16, 32)
    assert split_for_tp(model_heads("qwen3-next-80b-a3b"), 8) == HeadConfig(2, 4)
    assert split_for_tp(model_heads("qwen3.5-397b-a17b"), 2) == HeadConfig(8, 32)
    for bad in ("16", "16/30", "a/b", "0/4"):
        with pytest.raises(ValueError, match=r"Hk/Hv|multiple"):
            parse_head_config(bad)
    with pytest.raises(ValueError, match="does not divide"):
        split_for_tp(HeadConfig(16, 48), 32)
    with pytest.raises(ValueError, match="unknown model"):
        model_heads("qwen9")


def test_model_heads_from_a_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"text_config": {"linear_num_key_heads": 16, "linear_num_value_heads": 48}}))
    assert model_heads(str(path)) == HeadConfig(16, 48)


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
    """Issue 25 D5, D12, D16: --json was written only after every compile, --jobs 0 was accepted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    assert says in refusal(warmup(tmp_path, "--heads", "2/4", *args, check=False))
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def test_jobs_never_exceed_the_configurations(tmp_path):
    """Issue 25 D16: --jobs 30 with one configuration started 30 worker processes."""
    done = warmup(tmp_path, "--heads", "2/4", "--jobs", "30", "--json", str(tmp_path / "r.json"))
    assert done.stdout.startswith(f"warming 1 configuration(s) into {tmp_path / 'cache'} with 1 job(s)")
    assert [r["status"] for r in json.loads((tmp_path / "r.json").read_text())["results"]] == ["compiled"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")
def test_without_a_gpu_warmup_refuses_up_front(tmp_path):
    """Issue 25 D17, issue 24 item 3: every configuration failed with 'Torch not compiled with CUDA'."""
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "warmup", "--heads", "1/1", "--backends", "torch",
         "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = refusal(done)
    assert "no CUDA GPU is visible" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()


def test_the_table_keeps_configuration_names_whole(tmp_path):
    """Issue 24 item 3: the results table folded a configuration name mid-word."""
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
    """Issue 34 ND24: `warmup --backends torch` ran rc 0 without a word about SLIME_FLASHQLA_PRELOAD=maybe."""
    monkeypatch.setenv("SLIME_FLASHQLA_PRELOAD", "maybe")
    line = refusal(warmup(tmp_path, "--heads", "2/4", check=False))
    assert "SLIME_FLASHQLA_PRELOAD='maybe': use 1" in line
    assert not (tmp_path / "cache" / "slime-flashqla-locks").exists()
