"""One variant's stream of training steps in a fresh process: what `bench stream` runs per variant.

`python -m slime_flashqla.bench.stream_worker JOB.json` reads a StreamJob, hooks the compile
log before anything imports a kernel package, builds the variant's layer (or kernel call),
runs one forward+backward per pack of the seeded stream, and writes the per-step seconds and
the compiles/autotunes each step caused to the job's result path.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

from slime_flashqla.workload.setup import LayerSetup

NOGRAD_PASSES = 2  # rl mode: the actor's and the reference model's log-prob passes before training


@dataclass
class StreamJob:
    """Everything one worker process needs (written as JSON by the parent)."""

    variant: str
    level: str  # layer | kernel
    heads: str  # "Hk/Hv"
    steps: int
    packs: dict  # PackDistribution fields
    setup: LayerSetup  # nested in the JSON as LayerSetup.to_json writes it
    spawned: float  # the parent's time.time() just before it started this process
    result: str  # where the worker writes its JSON result
    env: dict = field(default_factory=dict)  # set by the parent for this variant (for the report)
    progress: str = ""  # where the worker appends each finished step (bench/stream_progress.py), if set
    mode: str = "train"  # train: forward+backward; rl: NOGRAD_PASSES forward-only passes, then forward+backward

    def to_json(self) -> dict:
        """The job as a JSON-ready dict, its setup nested (from_json reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> StreamJob:
        """The job a to_json dict describes (LayerSetupError for a bad setup, TypeError for an unknown field)."""
        return cls(**{**data, "setup": LayerSetup.from_json(data["setup"])})


def _events(events) -> list[dict]:
    return [{"kind": event.kind, "name": event.name} for event in events]


def run_job(job: StreamJob) -> dict:
    """Run the job's steps; return the result dict (steps with seconds and compile events)."""
    from slime_flashqla.kernels.compile_log import CompileLog

    log = CompileLog().install()  # before any kernel package is imported
    import torch

    from slime_flashqla.bench.stream_progress import append_step
    from slime_flashqla.bench.variants import VARIANTS, build_layer, kernel_call, kernel_fn, layer_call, random_inputs
    from slime_flashqla.workload.heads import parse_head_config
    from slime_flashqla.workload.packs import PackDistribution

    device = torch.device(job.setup.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    heads = parse_head_config(job.heads)
    variant = VARIANTS[job.variant]
    packs = PackDistribution(**job.packs).packs(job.steps)
    if job.level == "layer":
        layer = build_layer(variant, heads, job.setup)

        def prepare(inputs, backward):
            return layer_call(layer, inputs, backward)
    else:
        fn, _ = kernel_fn(variant, heads)

        def prepare(inputs, backward):
            return kernel_call(fn, inputs, backward)

    nograd_passes = NOGRAD_PASSES if job.mode == "rl" else 0

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    generator = torch.Generator(device=device).manual_seed(job.setup.seed)
    setup_events = log.take()
    steps, first_step_end = [], None
    with open(job.progress, "a") if job.progress else contextlib.nullcontext() as progress:
        for index, lengths in enumerate(packs):
            # A training step's inputs exist before its forward starts: made and settled outside the clock.
            inputs = random_inputs(lengths, heads, job.setup, job.level, generator)
            # The forward-only closure first: the training one marks the inputs as needing grad.
            forward_only, train = prepare(inputs, False), prepare(inputs, True)
            sync()
            if device.type == "cuda":
                base = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            parts = []
            for call in [forward_only] * nograd_passes + [train]:
                start = time.perf_counter()
                call()
                sync()
                parts.append(time.perf_counter() - start)
            seconds = sum(parts)
            peak_mib = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if device.type == "cuda" else None
            if first_step_end is None:
                first_step_end = time.time()
            step = {
                "step": index,
                "tokens": sum(lengths),
                "sequences": len(lengths),
                "seconds": seconds,
                "peak_mib": peak_mib,  # allocated at the step's peak above its start
                "events": _events(log.take()),
            }
            if nograd_passes:
                step["nograd_seconds"], step["train_seconds"] = parts[:-1], parts[-1]
            steps.append(step)
            if progress is not None:
                append_step(progress, index, seconds)
    return {
        "first_step_end": first_step_end,
        "setup_events": _events(setup_events),
        "hooked": log.hooked,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the job named on the command line; write its result (or its error) to the job's result path."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        job = StreamJob.from_json(json.load(handle))
    try:
        result = run_job(job)
        code = 0
    except Exception as error:  # reported by the parent as this variant's one-line failure
        traceback.print_exc()
        text = str(error).strip()
        result = {"error": f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"}
        code = 1
    with open(job.result, "w") as handle:
        json.dump({"job": job.to_json(), **result}, handle)
    return code


if __name__ == "__main__":
    sys.exit(main())
