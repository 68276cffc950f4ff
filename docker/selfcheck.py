"""Short start-up report of an image: driver, GPUs, and which GDN backend `auto` picks and why."""

from __future__ import annotations

import os
import sys

# Printed by the GB10 image, with what the flash-qla release runs (doctor's support line):
# flash-qla 0.1.3 cannot be imported on SM121, so the image trains and runs GDN with FLA.
GB10_NOTE = (
    "GB10 image: train and run with --qwen-gdn-backend fla; FlashQLA support: {support}"
    " (flash-qla is installed only with --build-arg INSTALL_FLASHQLA=1)"
)


def summary_lines(report: dict, variant: str) -> list[str]:
    """The self-check lines for a doctor report."""
    gpus = ", ".join(f"{g['name']} (SM {g['capability']})" for g in report["gpus"]) or "none visible"
    torch_cuda = report["torch_cuda"] or "CPU build"
    lines = [
        f"[slime-flashqla] image {variant}: torch {report['torch']} (CUDA {torch_cuda}),"
        f" driver {report['driver'] or 'none'}, GPUs: {gpus}",
        f"[slime-flashqla] auto -> {report['auto']['backend']}: {report['auto']['reason']}",
        "[slime-flashqla] FlashQLA training: "
        + ("OK" if report["flashqla"]["ok"] else f"no ({report['flashqla']['reason']})"),
    ]
    if variant == "gb10":
        lines.append("[slime-flashqla] " + GB10_NOTE.format(support=report["flashqla"]["support"]))
    lines += [f"[slime-flashqla] WARNING: {w}" for w in report["warnings"]]
    return lines


def main() -> int:
    """Print the self-check; a failure to collect the report is itself reported, not raised."""
    variant = os.environ.get("SLIME_FLASHQLA_IMAGE", "unknown")
    try:
        from slime_flashqla.diagnostics.report import collect_report

        report = collect_report()
    except Exception as exc:  # the report must never stop the container's command
        print(f"[slime-flashqla] self-check failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary_lines(report, variant)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
