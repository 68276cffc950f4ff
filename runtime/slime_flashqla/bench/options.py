"""Command-line values the benchmarks share: the device, and the bounds of counts, sizes and seeds."""

from __future__ import annotations

import math
from pathlib import Path

from slime_flashqla.workload.setup import MAX_SEED, LayerSetup

# The formats --plot writes, by the name's suffix (matplotlib would add `.png` to any other name).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
# Layer sizes a benchmark builds: 8x FLA's largest head size and 16x Qwen3-Next's hidden size.
# Beyond them the inputs, weights or states fail to allocate after the run has started.
MAX_HEAD_DIM = 1024
MAX_HIDDEN_SIZE = 65536


def parse_device(text: str | None, error_type: type[Exception]):
    """The torch.device `--device` names (default: the current CUDA device, else cpu); `error_type` if unusable."""
    import torch

    if text is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(text)
    except RuntimeError as error:
        raise error_type(f"bad --device {text!r}: {error}") from error
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise error_type(f"--device must be cuda, cuda:N or cpu, got {text!r}")
    if not torch.cuda.is_available():
        raise error_type(
            f"--device {text}: no CUDA device here (torch.cuda.is_available() is False); "
            "for a CPU run use --device cpu --variants torch"
        )
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise error_type(f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def layer_setup(args, device) -> LayerSetup:
    """The LayerSetup of the options both benchmarks share, on `device` (a torch.device from parse_device)."""
    return LayerSetup(
        device=str(device),
        dtype=args.dtype or ("bfloat16" if device.type == "cuda" else "float32"),  # bf16 convs are slow on a CPU
        head_dim=args.head_dim,
        hidden_size=args.hidden_size,
        seed=args.seed,
        layer_model=args.layer_model,
        slime_source=args.slime_source,
    )


def check_bounds(error: type[Exception], *bounds: tuple[str, float, float, float | None]) -> None:
    """Raise `error` for the first (option, value, lowest, highest or None) that is not finite or out of range."""
    for name, value, low, high in bounds:
        if isinstance(value, float) and not math.isfinite(value):  # an int is finite, however large
            raise error(f"{name} must be a finite number, got {value}")
        if value < low:
            raise error(f"{name} must be >= {low}, got {value}")
        if high is not None and value > high:
            raise error(f"{name} must be <= {high}, got {value}")


def check_layer_sizes(error: type[Exception], args) -> None:
    """Raise `error` unless --head-dim and --hidden-size lie within their bounds."""
    check_bounds(
        error, ("--head-dim", args.head_dim, 1, MAX_HEAD_DIM), ("--hidden-size", args.hidden_size, 1, MAX_HIDDEN_SIZE)
    )


def device_memory(device) -> tuple[int | None, str]:
    """Bytes free for new work on `device` (a torch.device) and what they are, or None where unknown."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0], f"{device} has"
    return available_memory(), "this machine has"


def available_memory() -> int | None:
    """Bytes of host memory available to new work (/proc/meminfo's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_seed(error: type[Exception], seed: int) -> None:
    """Raise `error` unless `seed` fits torch's generator (0 to 2**64-1)."""
    check_bounds(error, ("--seed", seed, 0, MAX_SEED))


def output_paths(args, error: type[Exception], options: tuple[str, ...]) -> dict[str, Path]:
    """{option: the file it writes} of each output option given, each checked before any work starts."""
    from slime_flashqla.files.output_paths import OutputPathError, check_output_path

    paths = {}
    for option in options:
        value = getattr(args, option, None)
        if value is None:
            continue
        suffixes = PLOT_SUFFIXES if option == "plot" else None
        try:
            paths[option] = check_output_path(value, what=f"--{option}", suffixes=suffixes)
        except OutputPathError as refused:
            raise error(str(refused)) from None
    if "plot" in paths:
        from slime_flashqla.bench.plot import matplotlib_missing

        missing = matplotlib_missing()
        if missing:  # refused before the run: a PNG asked for is written, or nothing runs
            raise error(f"--plot {args.plot}: {missing}")
    return paths


def write_output(path: Path, text: str) -> None:
    """Publish `text` at `path` whole (a temp file renamed onto it), as every benchmark output is written."""
    from slime_flashqla.files.output_paths import publish_atomically

    publish_atomically(path, lambda temp: temp.write_text(text))
