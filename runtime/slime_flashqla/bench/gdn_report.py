"""The tables and the markdown report of `bench gdn`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slime_flashqla.bench.report import markdown_table, rate, ratio
from slime_flashqla.gdn.names import AUTO

if TYPE_CHECKING:
    from slime_flashqla.bench.gdn_rows import Plan, Row


TABLE_HEADERS = (
    "level",
    "shape",
    "tokens",
    "Hk/Hv",
    "mode",
    "variant",
    "median ms",
    "host ms",
    "peak MiB",
    "tokens/s",
    "vs fla-repeat",
    "vs fastest",
    "note",
)


def _row_note(row: Row) -> str:
    parts = []
    if row.status == "error":
        parts.append(f"ERROR {row.reason}")
    if row.host_bound_rounds:
        parts.append(f"host-bound in {row.host_bound_rounds} round(s): those samples include host time")
    if row.variant == AUTO:
        parts.append(f"auto -> {row.auto_backend or '?'}")
    if row.note:
        parts.append(row.note)
    return "; ".join(parts)


def table_cells(rows: list[Row]) -> list[list[str]]:
    """The result table as strings (measured and failed rows; skipped ones go to skipped_cells)."""
    cells = []
    for row in rows:
        if row.status == "skipped":
            continue
        cells.append(
            [
                row.level,
                row.shape,
                str(row.tokens),
                row.heads,
                row.mode,
                row.variant,
                "-" if row.median_ms is None else f"{row.median_ms:.3f}",
                "-" if row.host_ms is None else f"{row.host_ms:.3f}",
                "-" if row.peak_mib is None else f"{row.peak_mib:.0f}",
                rate(row.tokens_per_s),
                ratio(row.speedup_vs_fla_repeat),
                ratio(row.speedup_vs_fastest),
                _row_note(row),
            ]
        )
    return cells


def skipped_cells(rows: list[Row]) -> list[list[str]]:
    """One line per skipped (variant, mode) with its reason."""
    seen = {}
    for row in rows:
        if row.status == "skipped":
            seen.setdefault((row.variant, row.mode), row.reason)
    return [[variant, mode, reason] for (variant, mode), reason in seen.items()]


AUTO_HEADERS = (
    "level",
    "shape",
    "Hk/Hv",
    "mode",
    "auto picked",
    "fastest",
    "auto / fastest",
    "within 3%",
    "host auto / fastest",
)


def auto_cells(summary: list[dict]) -> list[list[str]]:
    """The auto-vs-fastest table as strings."""
    return [
        [
            item["level"],
            item["shape"],
            item["heads"],
            item["mode"],
            str(item["auto_backend"]),
            item["fastest_variant"],
            f"{item['auto_vs_fastest']:.3f}",
            "yes" if item["within_target"] else "NO",
            "-" if item.get("auto_host_vs_fastest") is None else f"{item['auto_host_vs_fastest']:.3f}",
        ]
        for item in summary
    ]


def _timing_sentence(plan: Plan) -> str:
    if plan.setup.device_type != "cuda":
        return "host clock (perf_counter) per call."
    if plan.timing == "device":
        return (
            "device time per call from CUDA events, with the calls queued behind a spin kernel so that no "
            "sample contains host time; host ms = the host's time to issue one call."
        )
    return "CUDA events around calls issued at the host's pace (queued timing)."


def markdown_report(rows: list[Row], summary: list[dict], env: dict, plan: Plan) -> str:
    """The tables as markdown, headed by the GPU, versions, date and command."""
    packages = ", ".join(f"{name} {version or 'not installed'}" for name, version in env["packages"].items())
    where = env["gpu"] or f"CPU ({env['cpu']})"
    setup = plan.setup
    lines = [
        f"### GDN benchmark: {where}, {env['date']}",
        "",
        f"torch {env['torch']} (CUDA {env['torch_cuda']}), {packages}; {setup.dtype}, K = V = {setup.head_dim}, "
        f"layer hidden {setup.hidden_size}; median of {plan.iters} calls after {plan.warmup} warm-up calls, "
        f"in {plan.rounds_used} rounds that interleave the variants of a shape; {_timing_sentence(plan)}",
        "",
        f"Command: `{env['command']}`",
        "",
        *markdown_table(TABLE_HEADERS, table_cells(rows)),
    ]
    if summary:
        hits = sum(item["within_target"] for item in summary)
        lines += [
            "",
            f"`auto` vs the fastest other variant: within 3% in {hits} of {len(summary)} groups.",
            "",
            *markdown_table(AUTO_HEADERS, auto_cells(summary)),
        ]
    skipped = skipped_cells(rows)
    if skipped:
        lines += ["", "Skipped (cannot run here):", "", *markdown_table(("variant", "mode", "reason"), skipped)]
    return "\n".join(lines) + "\n"
