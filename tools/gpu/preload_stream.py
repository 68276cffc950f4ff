"""The kernel preload on a GPU: what it changes in a `bench stream` run, and when it finishes.

Two commands, after `slime-flashqla warmup` of the head configurations:

- `python3 tools/gpu/preload_stream.py report off.json on.json ...` reads `bench stream --json`
  files and prints, per file, variant and heads: the first step, the steady median, the worst
  step after step 0 (seconds above the median, and which step), `stall_s`, and the compiles and
  autotunes after step 0. The target: no step after the first more than 0.5 s above the median.
- `python3 tools/gpu/preload_stream.py timeline --heads 16/32,2/8 --modes on,calls --steps 20`
  runs `bench stream`'s own worker (`run_job`: an `auto` layer, the seeded RL-like stream) in a
  fresh process per heads and SLIME_FLASHQLA_PRELOAD mode, and adds what the preload did:
  specialisations loaded, from recorded programs or rebuilt, its seconds, when it finished
  against the end of step 0, and the summed seconds of its program filing and kernel loads.

On a CPU (`--device cpu`) the timeline runs as a smoke test with the `torch` backend.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

TARGET_S = 0.5  # no step after the first more than this above the median


def worst_step(steps: list[dict]) -> tuple[float, int, float]:
    """(seconds above the median of steps 1.., that step's index, the median) over steps after step 0."""
    later = [step for step in steps if step["step"] > 0]
    median = statistics.median(step["seconds"] for step in later)
    worst = max(later, key=lambda step: step["seconds"])
    return worst["seconds"] - median, worst["step"], median


def report(paths: list[str]) -> int:
    """Print the stall table of `bench stream --json` files; 1 when a stream misses the target."""
    missed = False
    columns = ["run", "heads", "variant", "first step s", "median ms", "worst step - median s (step)", "stall s"]
    print("| " + " | ".join([*columns, "compiles/autotunes after 0"]) + " |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in paths:
        data = json.loads(Path(path).read_text())
        for item in data["summary"]:
            if "error" in item:
                print(f"| {Path(path).stem} | {item['heads']} | {item['variant']} | ERROR {item['error']} | | | | |")
                missed = True
                continue
            mine = [s for s in data["steps"] if s["heads"] == item["heads"] and s["variant"] == item["variant"]]
            excess, index, median = worst_step(mine)
            missed |= excess > TARGET_S
            print(
                f"| {Path(path).stem} | {item['heads']} | {item['variant']} | {item['first_step_s']:.2f} | "
                f"{median * 1e3:.2f} | {excess:.2f} ({index}) | {item['stall_s']:.2f} | "
                f"{item['compiles_after_warmup']}/{item['autotunes_after_warmup']} |"
            )
    return 1 if missed else 0


def child(job_path: str) -> int:
    """Run one stream job in this process, then write its steps with what the preload did."""
    from slime_flashqla.bench.stream import summarize
    from slime_flashqla.bench.stream_worker import StreamJob, run_job

    job = StreamJob.from_json(json.loads(Path(job_path).read_text()))
    result = {"job": job.to_json(), **run_job(job)}
    from slime_flashqla.kernels import preload

    preloads = []
    for preloader in preload._preloaders.values():
        done = preloader.wait(300)
        item = asdict(preloader.result) | {"done": done}
        item["finished_after_step0_s"] = item["finished"] - result["first_step_end"] if done else None
        item["prepare_s"] = sum(t[1] for t in item["timings"])
        item["load_s"] = sum(t[2] for t in item["timings"])
        preloads.append(item)
    summary = summarize(result)
    excess, index, _ = worst_step(result["steps"])
    out = {"summary": summary, "worst_excess_s": excess, "worst_step": index, "preloads": preloads}
    Path(job.result).write_text(json.dumps(out))
    return 0


def timeline(args) -> int:
    """Run the stream worker per heads and mode in fresh processes; print one line each."""
    from slime_flashqla.bench.stream import build_parser, build_plan

    argv = ["--steps", str(args.steps), "--heads", args.heads, "--backend", "auto" if args.device != "cpu" else "torch"]
    if args.device == "cpu":
        argv += [
            "--device",
            "cpu",
            "--max-tokens",
            "256",
            "--median-len",
            "48",
            "--head-dim",
            "16",
            "--hidden-size",
            "32",
        ]
    plan = build_plan(build_parser().parse_args(argv))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for heads in plan.heads:
            for mode in args.modes.split(","):
                result = Path(tmp) / f"{mode}-{heads.key_heads}-{heads.value_heads}.json"
                job = plan.job(plan.variants[0], heads, result)
                job.spawned = time.time()
                job_path = Path(job.result).with_suffix(".job.json")
                job_path.write_text(json.dumps(job.to_json()))
                env = {**os.environ, "SLIME_FLASHQLA_PRELOAD": mode, "PYTHONUNBUFFERED": "1"}
                done = subprocess.run([sys.executable, __file__, "_child", str(job_path)], env=env, timeout=900)
                if done.returncode:
                    print(f"{heads.label} {mode}: the child exited with {done.returncode}")
                    rows.append({"heads": heads.label, "mode": mode, "error": done.returncode})
                    continue
                row = {"heads": heads.label, "mode": mode, **json.loads(Path(job.result).read_text())}
                rows.append(row)
                s = row["summary"]
                line = (
                    f"{heads.label} SLIME_FLASHQLA_PRELOAD={mode}: first step {s['first_step_s']:.2f} s, median "
                    f"{s['steady_median_s'] * 1e3:.2f} ms, worst step {row['worst_excess_s']:.2f} s above it "
                    f"(step {row['worst_step']}), stall {s['stall_s']:.2f} s, "
                    f"{s['compiles_after_warmup']}/{s['autotunes_after_warmup']} compiles/autotunes after step 0"
                )
                for p in row["preloads"]:
                    after = p["finished_after_step0_s"]
                    line += (
                        f"; preload {p['label']}: {p['loaded']} loaded ({p['programs']} programs filed, "
                        f"{p['present']} already there, {len(p['skipped'])} skipped) in {p['seconds']:.2f} s, "
                        f"filing {p['prepare_s']:.2f} s + loads {p['load_s']:.2f} s, finished "
                        f"{'-' if after is None else f'{after:+.2f}'} s after step 0 ends"
                        + (f", {p['note']}" if p["note"] else "")
                    )
                print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    """`report FILE...`, `timeline [options]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        return child(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    reporting = commands.add_parser("report", help="the stall table of bench stream --json files")
    reporting.add_argument("paths", nargs="+")
    running = commands.add_parser("timeline", help="stream steps with what the preload did, per mode")
    running.add_argument("--heads", default="16/32,2/8")
    running.add_argument("--modes", default="on,calls", help="SLIME_FLASHQLA_PRELOAD values, comma list")
    running.add_argument("--steps", type=int, default=20)
    running.add_argument("--device", default="cuda")
    running.add_argument("--json")
    args = parser.parse_args(argv)
    return report(args.paths) if args.command == "report" else timeline(args)


if __name__ == "__main__":
    sys.exit(main())
