"""Command-line values the benchmarks share: the device, and lower bounds of counts."""

from __future__ import annotations


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


def check_at_least(error: type[Exception], *bounds: tuple[str, float, float]) -> None:
    """Raise `error` for the first (option, value, lowest) whose value is below its lowest."""
    for name, value, low in bounds:
        if value < low:
            raise error(f"{name} must be >= {low}, got {value}")
