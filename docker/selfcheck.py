"""Short start-up report of an image: driver, GPUs, and which GDN backend `auto` picks and why."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

IMAGES_DIR = Path(__file__).resolve().parent / "images"


def image_note(variant: str, images_dir: Path = IMAGES_DIR) -> str | None:
    """The `note` of docker/images/<variant>/image.toml (what to know about that image), if any."""
    settings = images_dir / variant / "image.toml"
    return tomllib.loads(settings.read_text()).get("note") if settings.is_file() else None


def summary_lines(report: dict, variant: str, note: str | None = None) -> list[str]:
    """The self-check lines for a doctor report; `note` ({support} filled in) follows the FlashQLA line."""
    gpus = ", ".join(f"{g['name']} (SM {g['capability']})" for g in report["gpus"]) or "none visible"
    torch_cuda = report["torch_cuda"] or "CPU build"
    lines = [
        f"[slime-flashqla] image {variant}: torch {report['torch']} (CUDA {torch_cuda}),"
        f" driver {report['driver'] or 'none'}, GPUs: {gpus}",
        f"[slime-flashqla] auto -> {report['auto']['backend']}: {report['auto']['reason']}",
        "[slime-flashqla] FlashQLA training: "
        + ("OK" if report["flashqla"]["ok"] else f"no ({report['flashqla']['reason']})"),
    ]
    if note:
        lines.append("[slime-flashqla] " + note.format(support=report["flashqla"]["support"]))
    lines += [f"[slime-flashqla] WARNING: {w}" for w in report["warnings"]]
    return lines


def main() -> int:
    """Print the self-check; a failure to collect the report is itself reported, not raised."""
    variant = os.environ.get("SLIME_FLASHQLA_IMAGE", "unknown")
    try:
        from slime_flashqla.diagnostics.report import collect_report

        report = collect_report()
        note = image_note(variant)
    except Exception as exc:  # the report must never stop the container's command
        print(f"[slime-flashqla] self-check failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary_lines(report, variant, note)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
