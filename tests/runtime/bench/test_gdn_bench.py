"""`bench gdn` on the CPU: notation parsing, the whole pipeline through main(), speedup math, unavailable backends."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from slime_flashqla import cli
from slime_flashqla.bench import gdn, gdn_report, report, variants
from slime_flashqla.bench.timing import samples, summarize, warm
from slime_flashqla.gdn import flashqla_runtime_status

# Tiny sizes: the pipeline is what is tested here, not the speed of the torch reference.
TINY = ("--device", "cpu", "--shapes", "16+16", "--heads", "1/2", "--head-dim", "16", "--hidden-size", "32")
TINY_TIMING = ("--iters", "2", "--warmup", "0", "--plain")


def parse(*argv):
    return gdn.build_parser().parse_args(list(argv))


def bench(*argv) -> int:
    """`slime-flashqla bench gdn ARGV` as the CLI runs it: its exit status, bad input one line on stderr."""
    return cli.main(["bench", "gdn", *argv])


def test_defaults_and_opt_in_sets():
    plan = gdn.build_plan(parse("--device", "cpu"))
    assert [s.label for s in plan.shapes] == ["1000+3096", "8192+24576", "1x32768", "8192x4", "1024x8"]
    assert [h.label for h in plan.heads] == ["16/32", "8/16", "4/8", "2/4"]
    assert [v.name for v in plan.variants] == ["fla-repeat", "fla-gva", "flashqla-repeat", "flashqla-gva", "auto"]
    assert plan.modes == ["fwd", "fwd+bwd"] and plan.levels == ["kernel", "layer"]
    assert plan.setup.dtype == "float32" and plan.setup.device == "cpu"  # CPU default; bfloat16 on a GPU
    full = gdn.build_plan(parse("--device", "cpu", "--all-shapes", "--tp-configs", "--variants", "all"))
    assert len(full.shapes) == 9 and "28672+4096" in [s.label for s in full.shapes]
    assert [h.label for h in full.heads][:3] == ["16/64", "16/48", "16/32"] and len(full.heads) == 9
    assert "torch" in [v.name for v in full.variants]
    assert gdn.build_plan(parse("--device", "cpu")).timing == "device"
    assert gdn.build_plan(parse("--device", "cpu", "--timing", "queued")).timing == "queued"
    with pytest.raises(SystemExit):
        parse("--timing", "wallclock")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--variants", "fla,nope"), "unknown variant 'fla', 'nope'"),
        (("--shapes", "8192x"), "bad shape"),
        (("--heads", "3/4"), "multiple"),
        (("--levels", "model"), "unknown level 'model'"),
        (("--modes", "bwd"), "unknown mode 'bwd'"),
        (("--iters", "0"), "--iters must be >= 1"),
        (("--rounds", "0"), "--rounds must be >= 1"),
        (("--heads", "2/4", "--tp-configs"), "not both"),
        (("--shapes", "64", "--all-shapes"), "not both"),
        (("--device", "tpu"), "--device"),
        (("--json", "/nonexistent-dir/x.json"), "does not exist"),
        (("--shapes", "1x100000000000"), "2147483647"),
        (("--shapes", "2x100000000000"), "2147483647"),
        (("--shapes", "1x1048577"), None),  # one long sequence: within the bounds
        (("--shapes", "1x2097152"), None),
        (("--shapes", "1x1000000+1x2147483647"), "2147483647"),
        (("--shapes", "1024x1048577"), "sequences"),
        (("--iters", "1000000000000"), "--iters must be <= 100000"),
        (("--warmup", "1000000000000"), "--warmup must be <= 100000"),
        (("--seed", "100000000000000000000000"), "--seed must be <= 18446744073709551615"),
        (("--seed", "-5"), "--seed must be >= 0"),
        # ND20: no upper bound on heads and sizes; they failed late, as allocation errors
        (("--heads", "1000000000/2000000000"), "at most 1024 value heads"),
        (("--heads", "100000/100000"), "at most 1024 value heads"),
        (("--heads", "1024/1024", "--levels", "kernel", "--shapes", "64"), None),
        (("--head-dim", "1000000"), "--head-dim must be <= 1024"),
        (("--hidden-size", "100000000"), "--hidden-size must be <= 65536"),
        # inputs larger than the memory there is (item 19): refused before any row, not an internal error
        (("--shapes", "2147483647", "--heads", "2/4", "--levels", "kernel", "--variants", "torch"), "GiB available"),
        (
            ("--shapes", "1x100000000", "--hidden-size", "65536", "--levels", "layer", "--variants", "torch"),
            "GiB available",
        ),
    ],
)
def test_bad_input_exits_2_before_running(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(gdn, "run_plan", lambda *a: pytest.fail("ran despite bad input"))
    argv = argv if "--device" in argv else ("--device", "cpu", *argv)
    if message is None:  # accepted: the plan builds (nothing runs)
        gdn.build_plan(parse(*argv))
        return
    assert bench(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_device_without_gpu_is_bad_input(capsys):
    assert bench("--device", "cuda", "--variants", "torch") == 2
    assert "no CUDA device" in capsys.readouterr().err


# ---------------------------------------------------------------- the pipeline


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny end-to-end run through main(), writing JSON, markdown and (with matplotlib) a PNG."""
    out = tmp_path_factory.mktemp("bench")
    paths = {"json": out / "gdn.json", "markdown": out / "gdn.md"}
    if gdn_plot_available():  # --plot without matplotlib is refused before the run (a test below)
        paths["plot"] = out / "gdn.png"
    argv = [*TINY, "--iters", "3", "--warmup", "1", "--plain", "--variants", "torch,torch-repeat"]
    for option, path in paths.items():
        argv += [f"--{option}", str(path)]
    rc = gdn.main(parse(*argv))
    return rc, paths, json.loads(paths["json"].read_text())


def test_tiny_run_rows(tiny_run):
    rc, _, report = tiny_run
    assert rc == 0 and report["complete"] is True
    rows = report["rows"]
    # 2 levels x 1 shape x 1 head config x 2 modes x 2 variants
    assert len(rows) == 8
    assert {(r["level"], r["mode"], r["variant"]) for r in rows} == {
        (level, mode, variant)
        for level in ("kernel", "layer")
        for mode in ("fwd", "fwd+bwd")
        for variant in ("torch", "torch-repeat")
    }
    for row in rows:
        assert row["status"] == "ok", row
        assert row["median_ms"] > 0 and row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["iters"] == 3 and row["warmup"] == 1 and row["timer"] == "perf_counter"
        assert row["host_ms"] is None and row["host_bound_rounds"] == 0  # the host clock is the only one here
        assert row["tokens"] == 32 and row["lengths"] == [16, 16]
        assert row["tokens_per_s"] == pytest.approx(32 / (row["median_ms"] / 1e3))
        assert row["gva"] == (row["variant"] == "torch")
        assert row["speedup_vs_fla_repeat"] is None  # no fla-repeat row in this run
        assert 0 < row["speedup_vs_fastest"] <= 1.0
    for level in ("kernel", "layer"):
        for mode in ("fwd", "fwd+bwd"):
            group = [r for r in rows if r["level"] == level and r["mode"] == mode]
            assert max(r["speedup_vs_fastest"] for r in group) == 1.0


def test_tiny_run_environment_and_settings(tiny_run):
    _, _, report = tiny_run
    env, settings = report["environment"], report["settings"]
    assert env["torch"] == torch.__version__ and env["device"] == "cpu" and env["gpu"] is None
    assert set(env["packages"]) == {"triton", "fla", "flash_qla", "tilelang"}
    assert env["command"] and env["date"]
    assert settings["shapes"] == {"16+16": [16, 16]} and settings["heads"] == ["1/2"]
    assert settings["iters"] == 3 and settings["variants"] == ["torch", "torch-repeat"]
    assert settings["timing"] == "perf_counter"
    assert report["auto"] == []  # no auto variant asked for


def test_tiny_run_markdown(tiny_run):
    _, paths, report = tiny_run
    text = paths["markdown"].read_text()
    assert text.startswith("### GDN benchmark: CPU")
    assert "| level | shape | tokens | Hk/Hv | mode | variant | median ms |" in text
    table_lines = [line for line in text.splitlines() if line.startswith("| kernel") or line.startswith("| layer")]
    assert len(table_lines) == 8
    first = report["rows"][0]
    assert f"{first['median_ms']:.3f}" in text


def test_tiny_run_png(tiny_run):
    pytest.importorskip("matplotlib")
    _, paths, _ = tiny_run
    data = paths["plot"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plain_output_without_rich(tmp_path, capsys, monkeypatch):
    for name in ("rich", "rich.console", "rich.progress", "rich.table"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    argv = ("--device", "cpu", "--shapes", "16+16", "--heads", "1/2", "--head-dim", "16", "--hidden-size", "32")
    argv += ("--iters", "2", "--warmup", "0", "--variants", "torch", "--levels", "kernel", "--modes", "fwd")
    assert gdn.main(parse(*argv)) == 0
    captured = capsys.readouterr()
    assert "[1/1] kernel 16+16 1/2 fwd torch:" in captured.out
    assert "median ms" in captured.out and "tokens/s" in captured.out


def test_a_plot_without_matplotlib_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """A PNG that cannot be drawn is refused up front (exit 2), not reported after the whole run (exit 0)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(gdn, "run_plan", lambda *a: pytest.fail("ran although the PNG cannot be drawn"))
    png = tmp_path / "gdn.png"
    assert bench(*TINY, *TINY_TIMING, "--variants", "torch", "--plot", str(png)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib is not installed" in err[0] and "`plot` extra" in err[0]
    assert not png.exists()


def test_the_documented_cpu_command_runs(capsys):
    """The documented CPU smoke command at its default K = V = 128, kernel forward only (kept fast for CI)."""
    argv = ("--device", "cpu", "--variants", "torch", "--shapes", "64+64", "--heads", "2/4", "--iters", "3")
    assert gdn.main(parse(*argv, "--warmup", "1", "--levels", "kernel", "--modes", "fwd", "--plain")) == 0
    assert "kernel  64+64" in capsys.readouterr().out


def test_a_failing_row_is_reported_and_exits_1(tmp_path, monkeypatch):
    def broken(variant, heads):
        def fn(*args, **kwargs):
            raise RuntimeError("kernel exploded\nsecond line")

        return fn, fn

    monkeypatch.setattr(gdn, "kernel_fn", broken)
    path = tmp_path / "gdn.json"
    argv = (*TINY, *TINY_TIMING, "--variants", "torch", "--levels", "kernel", "--json", str(path))
    assert gdn.main(parse(*argv)) == 1
    rows = json.loads(path.read_text())["rows"]
    assert [r["status"] for r in rows] == ["error", "error"]
    assert rows[0]["reason"] == "RuntimeError: kernel exploded" and rows[0]["median_ms"] is None


def test_rows_reach_the_json_while_the_run_goes_on(tmp_path, monkeypatch):
    """A run killed midway (a time limit) leaves the rows measured so far, marked incomplete."""

    def first_row_then_killed(plan, problems, progress):
        progress(row(("kernel", "16+16", "fwd"), "torch", 1.5))
        raise KeyboardInterrupt

    monkeypatch.setattr(gdn, "run_plan", first_row_then_killed)
    path = tmp_path / "gdn.json"
    with pytest.raises(KeyboardInterrupt):
        gdn.main(parse(*TINY, *TINY_TIMING, "--variants", "torch", "--json", str(path)))
    report = json.loads(path.read_text())
    assert report["complete"] is False and [r["median_ms"] for r in report["rows"]] == [1.5]


def test_a_layer_that_cannot_be_built_is_a_failed_row(tmp_path, monkeypatch):
    def no_memory(variant, heads, setup):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(gdn, "build_layer", no_memory)
    path = tmp_path / "gdn.json"
    argv = (*TINY, *TINY_TIMING, "--variants", "torch", "--levels", "layer", "--modes", "fwd", "--json", str(path))
    assert gdn.main(parse(*argv)) == 1
    (only,) = json.loads(path.read_text())["rows"]
    assert only["status"] == "error" and only["reason"] == "RuntimeError: out of memory"


# ---------------------------------------------------------------- what is compared


def test_variants_of_a_group_share_inputs_and_weights():
    """repeat and GVA layers get identical weights and inputs, so they must compute the same output."""
    plan = gdn.build_plan(parse(*TINY))
    shape, heads = plan.shapes[0], plan.heads[0]
    inputs = variants.random_inputs(shape.lengths, heads, plan.setup, "layer")
    again = variants.random_inputs(shape.lengths, heads, plan.setup, "layer")
    assert torch.equal(inputs["x"], again["x"]) and inputs["x"].std() > 0.5
    gva = variants.build_layer(variants.VARIANTS["torch"], heads, plan.setup)
    repeat = variants.build_layer(variants.VARIANTS["torch-repeat"], heads, plan.setup)
    with torch.no_grad():
        a = gva(inputs["x"], cu_seqlens=inputs["cu_seqlens"])
        b = repeat(inputs["x"], cu_seqlens=inputs["cu_seqlens"])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    kernel = variants.random_inputs(shape.lengths, heads, plan.setup, "kernel")
    assert kernel["q"].shape == (1, 32, 1, 16) and kernel["v"].shape == (1, 32, 2, 16)
    assert (kernel["g"] < 0).all() and ((kernel["beta"] > 0) & (kernel["beta"] < 1)).all()


def test_repeat_variant_hands_the_kernel_hv_heads():
    seen = []

    def kernel(q, k, v, **kwargs):
        seen.append((q.shape[2], k.shape[2], v.shape[2]))
        return v, None

    q, v = torch.randn(1, 8, 2, 4), torch.randn(1, 8, 8, 4)
    variants.repeating(kernel, 4)(q, q, v, g=None)
    assert seen == [(8, 8, 8)]


def row(group_key, variant, ms, backend=None, auto_backend=None, status="ok"):
    level, shape, mode = group_key
    return gdn.Row(
        level=level,
        shape=shape,
        lengths=[1],
        tokens=4096,
        key_heads=16,
        value_heads=32,
        mode=mode,
        variant=variant,
        backend=backend or variant.split("-")[0],
        gva="repeat" not in variant,
        status=status,
        median_ms=ms,
        auto_backend=auto_backend,
    )


def test_speedup_math_on_a_constructed_result_set():
    a, b, c = ("kernel", "1x8192", "fwd+bwd"), ("layer", "1x8192", "fwd+bwd"), ("kernel", "1x8192", "fwd")
    rows = [
        row(a, "fla-repeat", 10.0),
        row(a, "fla-gva", 8.0),
        row(a, "flashqla-repeat", 5.0),
        row(a, "flashqla-gva", 4.0),
        row(a, "auto", 4.1, backend="auto", auto_backend="flashqla"),
        row(a, "torch", None, status="skipped"),
        row(b, "fla-gva", 4.0),
        row(b, "flashqla-gva", 5.0),
        row(b, "auto", 5.0, backend="auto", auto_backend="flashqla"),
        # auto passes q/k grouped, but repeating them was the faster form of its backend
        row(c, "flashqla-repeat", 1.0),
        row(c, "flashqla-gva", 2.0),
        row(c, "auto", 2.0, backend="auto", auto_backend="flashqla"),
    ]
    gdn.add_speedups(rows)
    by = {(r.level, r.variant): r for r in rows if r.mode == "fwd+bwd"}
    assert by[("kernel", "fla-repeat")].speedup_vs_fla_repeat == pytest.approx(1.0)
    assert by[("kernel", "fla-gva")].speedup_vs_fla_repeat == pytest.approx(1.25)
    assert by[("kernel", "flashqla-gva")].speedup_vs_fla_repeat == pytest.approx(2.5)
    assert by[("kernel", "flashqla-gva")].speedup_vs_fastest == pytest.approx(1.0)
    assert by[("kernel", "fla-repeat")].speedup_vs_fastest == pytest.approx(0.4)
    assert by[("kernel", "auto")].speedup_vs_fastest == pytest.approx(4.0 / 4.1)
    assert by[("kernel", "torch")].speedup_vs_fastest is None  # skipped rows get no numbers
    # The layer group has no fla-repeat row: no baseline speedup, but a fastest one.
    assert by[("layer", "fla-gva")].speedup_vs_fla_repeat is None
    assert by[("layer", "flashqla-gva")].speedup_vs_fastest == pytest.approx(0.8)

    summary = {item["level"]: item for item in gdn.auto_summary(rows) if item["mode"] == "fwd+bwd"}
    assert summary["kernel"]["fastest_variant"] == "flashqla-gva"
    assert summary["kernel"]["auto_vs_fastest"] == pytest.approx(1.025)
    assert summary["kernel"]["within_target"] and summary["kernel"]["picked_fastest_backend"]
    assert summary["kernel"]["picked_fastest_variant"]
    assert summary["layer"]["fastest_variant"] == "fla-gva"
    assert summary["layer"]["auto_vs_fastest"] == pytest.approx(1.25)
    assert not summary["layer"]["within_target"] and not summary["layer"]["picked_fastest_backend"]
    cells = gdn_report.auto_cells(list(summary.values()))
    assert cells[0][-3:] == ["1.025", "yes", "-"] and cells[1][-3:] == ["1.250", "NO", "-"]  # no host times
    by[("kernel", "auto")].host_ms, by[("kernel", "flashqla-gva")].host_ms = 0.33, 0.30
    (timed,) = [item for item in gdn.auto_summary(rows) if item["mode"] == "fwd+bwd" and item["level"] == "kernel"]
    assert timed["auto_host_vs_fastest"] == pytest.approx(1.1)
    assert gdn_report.auto_cells([timed])[0][-1] == "1.100"
    (repeated,) = [item for item in gdn.auto_summary(rows) if item["mode"] == "fwd"]
    assert repeated["picked_fastest_backend"] and not repeated["picked_fastest_variant"]
    assert repeated["auto_vs_fastest"] == pytest.approx(2.0)
    assert gdn_report.auto_cells([repeated])[0][4] == "flashqla"


def test_cpu_timer_takes_the_median_of_the_timed_calls():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    cpu = torch.device("cpu")
    warm(fn, cpu, 2)
    timing = summarize(samples(fn, cpu, 5), cpu, warmup=2)
    assert len(calls) == 7
    assert timing.iters == 5 and timing.timer == "perf_counter"
    assert 2.0 <= timing.min_ms <= timing.median_ms <= timing.max_ms


@pytest.mark.parametrize(
    ("iters", "rounds", "sizes"),
    [(30, 5, [6] * 5), (7, 3, [3, 2, 2]), (2, 5, [1, 1]), (5, 1, [5])],
)
def test_timed_calls_split_over_rounds_add_up(iters, rounds, sizes):
    assert gdn.round_sizes(iters, rounds) == sizes


def test_rounds_interleave_the_variants_in_a_rotating_order_and_survive_a_failing_one():
    plan = gdn.build_plan(parse(*TINY, "--iters", "6", "--rounds", "3", "--warmup", "0"))
    log, b_calls = [], []

    def call(name):
        def fn():
            if name == "b":
                b_calls.append(1)
                if len(b_calls) == 3:  # b's first call of round 2
                    raise RuntimeError("CUDA error: an illegal memory access\nsecond line")
            log.append(name)

        return fn

    group = ("kernel", "1x8192", "fwd")
    rows = {name: row(group, name, None) for name in "abc"}
    gdn._time_group([(rows[name], call(name)) for name in "abc"], plan)
    # round 1: a b c; round 2 starts one later (b c a) and b fails at once; round 3: the two left, a c
    assert log == ["a", "a", "b", "b", "c", "c", "c", "c", "a", "a", "a", "a", "c", "c"]
    assert rows["b"].status == "error" and rows["b"].reason == "RuntimeError: CUDA error: an illegal memory access"
    assert rows["b"].median_ms is None
    assert rows["a"].iters == rows["c"].iters == 6 and rows["a"].timer == "perf_counter"
    assert rows["a"].median_ms is not None and rows["a"].tokens_per_s > 0


# ---------------------------------------------------------------- unavailable backends


def test_flashqla_on_the_cpu_exits_2_with_the_reason(capsys, monkeypatch):
    monkeypatch.setattr(gdn, "run_plan", lambda *a: pytest.fail("ran although flashqla is unavailable"))
    assert bench(*TINY, "--variants", "flashqla-gva,torch") == 2
    err = capsys.readouterr().err
    assert "flashqla-gva (fwd)" in err and "flashqla-gva (fwd+bwd)" in err and "--skip-unavailable" in err
    assert "torch (" not in err
    status = flashqla_runtime_status(None, backward=False)
    if not status.ok:  # a CPU-only machine: the reason is FlashQLA's runtime check, word for word
        assert status.reason in err
    else:
        assert "CUDA tensors" in err


def test_fla_on_the_cpu_is_unavailable_too(capsys):
    assert bench(*TINY, "--variants", "fla-repeat") == 2
    err = capsys.readouterr().err
    assert "fla-repeat (fwd)" in err
    assert "flash-linear-attention" in err or "CUDA" in err


def test_skip_unavailable_lists_skipped_variants(tmp_path, capsys):
    path, markdown = tmp_path / "gdn.json", tmp_path / "gdn.md"
    argv = (*TINY, *TINY_TIMING, "--levels", "kernel", "--variants", "fla-repeat,flashqla-gva,torch,auto")
    assert gdn.main(parse(*argv, "--skip-unavailable", "--json", str(path), "--markdown", str(markdown))) == 0
    out = capsys.readouterr().out
    assert "skipped variants" in out and "flashqla-gva" in out
    rows = json.loads(path.read_text())["rows"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert {(r["variant"], r["mode"]) for r in skipped} == {
        (v, m) for v in ("fla-repeat", "flashqla-gva") for m in ("fwd", "fwd+bwd")
    }
    assert all(r["reason"] and r["median_ms"] is None for r in skipped)
    ran = [r for r in rows if r["status"] == "ok"]
    assert {r["variant"] for r in ran} == {"torch", "auto"}
    autos = [r for r in ran if r["variant"] == "auto"]
    assert len(autos) == 2 and all(r["auto_backend"] == "torch" and "auto_repeat_qk" not in r for r in autos)
    report = json.loads(path.read_text())
    assert {item["mode"] for item in report["auto"]} == {"fwd", "fwd+bwd"}
    assert all(item["fastest_variant"] == "torch" for item in report["auto"])
    text = markdown.read_text()
    assert "Skipped (cannot run here):" in text and "| flashqla-gva | fwd |" in text
    assert "auto -> torch" in text


def test_skip_unavailable_with_nothing_left_exits_2(capsys):
    assert bench(*TINY, "--variants", "flashqla-gva", "--skip-unavailable") == 2
    assert "no variant can run" in capsys.readouterr().err


def test_dry_run_prints_the_plan_and_autos_choice(capsys):
    assert gdn.main(parse(*TINY, "--variants", "torch,auto", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "plan: 8 rows" in out and "auto 1/2 fwd+bwd -> torch" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine where the default variants cannot run")
def test_dry_run_prints_the_plan_where_a_default_variant_cannot_run(capsys, monkeypatch):
    """`--dry-run` prints the plan, and then refuses the variants this machine cannot run (issue 35 item 9)."""
    monkeypatch.setattr(gdn, "run_plan", lambda *a: pytest.fail("a dry run ran"))
    assert bench("--dry-run") == 2
    captured = capsys.readouterr()
    assert "plan: 400 rows" in captured.out
    assert "cannot run here: flashqla-gva (fwd):" in captured.out and "auto 16/32 fwd -> torch" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "these variants cannot run on this machine" in err[0] and "--skip-unavailable" in err[0]


def test_module_runs_standalone():
    helped = subprocess.run(
        [sys.executable, "-m", "slime_flashqla.bench.gdn", "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0 and "--skip-unavailable" in helped.stdout and "--tp-configs" in helped.stdout


def test_baseline_columns_through_main(tmp_path, monkeypatch):
    """With a measured fla-repeat row (the torch kernel standing in for FLA), every row is compared with it."""
    monkeypatch.setitem(variants.VARIANTS, "fla-repeat", variants.Variant("fla-repeat", "torch", True, "stand-in"))
    path, png = tmp_path / "gdn.json", tmp_path / "gdn.png"
    argv = (*TINY, *TINY_TIMING, "--variants", "fla-repeat,auto", "--levels", "kernel", "--modes", "fwd")
    plot = ("--plot", str(png)) if gdn_plot_available() else ()
    assert gdn.main(parse(*argv, "--json", str(path), *plot)) == 0
    report = json.loads(path.read_text())
    rows = {r["variant"]: r for r in report["rows"]}
    base, auto = rows["fla-repeat"], rows["auto"]
    assert base["gva"] is False and auto["gva"] is True
    assert base["speedup_vs_fla_repeat"] == pytest.approx(1.0)
    assert auto["speedup_vs_fla_repeat"] == pytest.approx(base["median_ms"] / auto["median_ms"])
    (summary,) = report["auto"]
    assert summary["fastest_variant"] == "fla-repeat" and summary["auto_backend"] == "torch"
    assert summary["auto_vs_fastest"] == pytest.approx(auto["median_ms"] / base["median_ms"])
    assert summary["within_target"] == (summary["auto_vs_fastest"] <= 1.03)
    if gdn_plot_available():
        assert png.read_bytes()[:4] == b"\x89PNG"


def gdn_plot_available() -> bool:
    from slime_flashqla.bench.plot import matplotlib_missing

    return matplotlib_missing() is None


def test_command_line_names_the_module_of_a_dash_m_run(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/x/slime_flashqla/bench/gdn.py", "--shapes", "1x32768", "--json", "a b.json"])
    expected = "python -m slime_flashqla.bench.gdn --shapes 1x32768 --json 'a b.json'"
    assert report.command_line("slime_flashqla.bench.gdn") == expected
    monkeypatch.setattr(sys, "argv", ["/usr/bin/slime-flashqla", "bench", "gdn", "--plain"])
    assert report.command_line("slime_flashqla.bench.gdn") == "/usr/bin/slime-flashqla bench gdn --plain"


@pytest.mark.parametrize(
    ("option", "name", "words"),
    [
        ("--plot", "out", "the name must end in .png, .svg, .pdf"),  # matplotlib would write out.png
        ("--plot", "x.png.", "the name must end in"),
        ("--plot", "out.txt", "the name must end in"),
        ("--json", "a-directory", "is a directory"),
        ("--markdown", "a-directory", "is a directory"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, option, name, words, capsys,
                                                                        monkeypatch):  # fmt: skip
    """A typo in an output path must not cost the run's results (issue 25 D5, D15)."""
    monkeypatch.setattr(gdn, "run_plan", lambda *a: pytest.fail("ran despite an unwritable output path"))
    (tmp_path / "a-directory").mkdir()
    assert bench(*TINY, *TINY_TIMING, "--variants", "torch", option, str(tmp_path / name)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].startswith(f"slime-flashqla bench gdn: {option} ")


def test_progress_is_plain_lines_where_stdout_is_not_a_terminal(capsys, monkeypatch):
    """Where stdout is not a terminal, progress is plain lines, as bench stream prints them (issue 35 item 10)."""
    monkeypatch.setenv("COLUMNS", "120")  # a width, still no terminal (`| tee log` in a terminal)
    argv = (*TINY, "--iters", "2", "--warmup", "0", "--variants", "torch", "--levels", "kernel", "--modes", "fwd")
    assert gdn.main(parse(*argv)) == 0
    assert "[1/1] kernel 16+16 1/2 fwd torch:" in capsys.readouterr().out


def test_inputs_that_do_not_fit_are_error_rows_not_an_internal_error(tmp_path):
    """Inputs that fail to allocate are error rows, and the run goes on (issue 35 item 19).

    The process may map 6 GiB; the inputs (about 8 GiB) fit in the memory the machine has, so they pass
    the check up front and fail to allocate, as they would where another process took the memory meanwhile.
    """
    import resource

    from slime_flashqla.bench.options import available_memory

    tokens = 1_400_000  # q, k, v, g, beta and the gradient of 2/4 heads, K = V = 128, float32: ~8.4 GiB
    if (available_memory() or 0) < 12 * 2**30:
        pytest.skip("needs 12 GiB of available memory for the inputs to pass the check up front")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    argv = ["--device", "cpu", "--variants", "torch,torch-repeat", "--levels", "kernel", "--modes", "fwd",
            "--shapes", str(tokens), "--heads", "2/4", "--iters", "1", "--warmup", "0", "--plain"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "bench", "gdn", *argv],
        capture_output=True, text=True, timeout=300, preexec_fn=limit,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == ["bench gdn: 2 row(s) failed; see the ERROR notes"], done.stderr
    errors = [line for line in done.stdout.splitlines() if "ERROR" in line and "allocate" in line]
    assert len(errors) == 2 and all("building the inputs" in line for line in errors), done.stdout


def test_the_plot_format_follows_the_name(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    svg = tmp_path / "gdn.svg"
    argv = (*TINY, *TINY_TIMING, "--variants", "torch", "--levels", "kernel", "--modes", "fwd", "--plot", str(svg))
    assert gdn.main(parse(*argv)) == 0
    assert svg.read_text().lstrip().startswith("<?xml") and f"wrote {svg}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["gdn.svg"]  # no temp file left beside it
