"""`slime-flashqla check`: the doctor report, then a GDN layer forward+backward on the best backend."""

from __future__ import annotations

import dataclasses
import json

from slime_flashqla.gdn.names import AUTO, BACKENDS
from slime_flashqla.terminal import print_rows


def register(subparsers) -> None:
    """Add the `check` subcommand."""
    parser = subparsers.add_parser(
        "check", help="doctor report + one GDN layer forward/backward (and kernel parity on a GPU)"
    )
    parser.add_argument("--backend", default=AUTO, choices=BACKENDS, help=f"GDN backend (default {AUTO})")
    parser.add_argument("--json", action="store_true", help="print the doctor report and the check's result as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Print the doctor table and the layer check (or both as JSON); return 1 when the check fails."""
    import logging

    from slime_flashqla.cli.doctor import report_rows
    from slime_flashqla.diagnostics.check import run_check
    from slime_flashqla.diagnostics.report import collect_report

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # on stderr: stdout stays JSON
    report = collect_report()
    if not args.json:
        print_rows("slime-flashqla doctor", report_rows(report))
    result = run_check(args.backend)
    verdict = "OK" if result.ok else "FAILED"
    if args.json:
        check = {**dataclasses.asdict(result), "ok": result.ok, "result": verdict}
        print(json.dumps({"doctor": report, "check": check}, indent=2))
        return 0 if result.ok else 1
    # On the CPU nothing compiles (no Triton, no TileLang): the first call is just the first call.
    first = "first call" if result.device == "cpu" else "first call, incl. compile or cache load"
    rows = [
        ("backend", result.backend),
        ("why", result.reason),
        ("device", result.device),
        ("layer", result.shape),
        (f"forward ({first})", f"{result.forward_ms:.1f} ms"),
        (f"backward ({first})", f"{result.backward_ms:.1f} ms"),
    ]
    rows += [(f"parity vs torch: {key}", f"{err:.2e}") for key, err in result.parity.items()]
    rows += [("PROBLEM", problem) for problem in result.problems]
    rows.append(("result", verdict))
    print_rows("slime-flashqla check", rows)
    return 0 if result.ok else 1
