"""`slime-flashqla doctor`: what this node can run, as a table or JSON."""

from __future__ import annotations

import json

from slime_flashqla.gdn.backends.auto import in_auto_order
from slime_flashqla.terminal import print_rows

# The backends a package of their own can be missing for (the torch reference never is).
REQUIRABLE = tuple(backend.name for backend in in_auto_order() if backend.module)


def register(subparsers) -> None:
    """Add the `doctor` subcommand."""
    parser = subparsers.add_parser("doctor", help="report torch, CUDA, GPU and which GDN backends can run")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--require",
        choices=REQUIRABLE,
        action="append",
        default=[],
        help="exit non-zero unless this backend is usable for training and no setting is refused (repeatable)",
    )
    parser.set_defaults(func=run)


def report_rows(report: dict) -> list[tuple[str, str]]:
    """The doctor report as (item, value) rows."""
    from slime_flashqla.integrations.slime.report import slime_rows
    from slime_flashqla.kernels.fingerprint import describe

    gpus = "; ".join(f"{g['index']}: {g['name']} (SM {g['capability']})" for g in report["gpus"]) or "none"
    rows = [
        ("slime-flashqla", report["slime_flashqla"]),
        ("python / platform", f"{report['python']} / {report['platform']}"),
        ("torch", report["torch"]),
        ("torch CUDA build", report["torch_cuda"] or "none (CPU build)"),
        ("CUDA available", str(report["cuda_available"])),
        ("driver", _driver(report)),
        ("GPUs", gpus),
    ]
    rows += [(f"package {name}", version or "not installed") for name, version in report["packages"].items()]
    rows += [
        (f"backend {name}", ("usable: " if info["available"] else "unusable: ") + info["reason"])
        for name, info in report["backends"].items()
    ]
    rows += [row for backend in in_auto_order() for row in backend.report_rows(report)]
    rows += [
        ("'auto' runs", f"{report['auto']['backend']}: {report['auto']['reason']}"),
        ("TileLang kernel cache", report["tilelang_cache_dir"]),
        ("kernel preload", report["kernel_preload"]),
        ("kernel fingerprint", describe(report["kernel_fingerprint"])),
    ]
    rows += slime_rows(report["slime"])
    rows += [("WARNING", warning) for warning in report["warnings"]]
    rows += [("NOTE", note) for note in report.get("notes", [])]
    return rows


def _driver(report: dict) -> str:
    """The driver row: its version and the CUDA it supports, or why neither is known."""
    if not report["cuda_available"]:
        return "none found: no CUDA device is visible to torch"
    version = report["driver"] or "version unknown (nvidia-smi did not answer)"
    return f"{version}, supports CUDA {report['driver_cuda']}" if report["driver_cuda"] else version


def unmet_requirements(report: dict, required: list[str]) -> list[str]:
    """Messages for each required backend this node cannot use for training, and each refused setting."""
    if not required:
        return []
    problems = [backend.requirement_problem(report) for backend in in_auto_order() if backend.name in required]
    return [problem for problem in problems if problem] + report["setting_problems"]


def run(args) -> int:
    """Print the report; return 1 when a --require is not met (the reasons on stderr, where a job log keeps them)."""
    import sys

    from slime_flashqla.diagnostics.report import collect_report

    report = collect_report()
    problems = unmet_requirements(report, args.require)
    if args.json:
        print(json.dumps({**report, "unmet_requirements": problems}, indent=2))
    else:
        print_rows("slime-flashqla doctor", report_rows(report))
    sys.stdout.flush()  # the table first, then the verdict, where both go to one terminal
    for problem in problems:
        print(f"REQUIREMENT NOT MET: {problem}", file=sys.stderr)
    return 1 if problems else 0
