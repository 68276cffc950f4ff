"""PNG of `bench gdn` rows: grouped bars per shape (one bar per variant), a panel per level (row) and mode (column)."""

from __future__ import annotations

import math
from pathlib import Path


def matplotlib_missing() -> str | None:
    """Why no PNG can be drawn here, or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed: pip install matplotlib (or the package's `plot` extra)"
    return None


def save_figure(figure, path, dpi: int) -> None:
    """Publish `figure` at `path` whole, in the format its suffix names (the temp file's suffix says nothing)."""
    from slime_flashqla.files.output_paths import publish_atomically

    fmt = Path(path).suffix.lstrip(".").lower()
    publish_atomically(path, lambda temp: figure.savefig(temp, format=fmt, dpi=dpi))


def _ordered(items) -> list:
    return list(dict.fromkeys(items))


def plot_rows(rows: list[dict], path: str, metric: str = "speedup", title: str = "") -> str | None:
    """Draw measured rows (dicts as in the JSON) to `path`; return why nothing was written, or None."""
    missing = matplotlib_missing()
    if missing:
        return missing
    # A bare Figure on the Agg canvas: no pyplot, no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = [row for row in rows if row["status"] == "ok" and row["median_ms"]]
    if not measured:
        return "no measured rows to plot"
    if metric == "speedup" and not any(row["speedup_vs_fla_repeat"] for row in measured):
        metric = "latency"  # no fla-repeat baseline was measured: latency is all there is to show
    key, ylabel = (
        ("speedup_vs_fla_repeat", "speedup vs fla-repeat (x)") if metric == "speedup" else ("median_ms", "median ms")
    )
    several_heads = len({(row["key_heads"], row["value_heads"]) for row in measured}) > 1
    levels = _ordered(row["level"] for row in measured)
    modes = _ordered(row["mode"] for row in measured)
    variants = _ordered(row["variant"] for row in measured)
    width = 0.8 / len(variants)

    def group_of(row: dict) -> str:
        heads = f"\n{row['key_heads']}/{row['value_heads']}" if several_heads else ""
        return row["shape"] + heads

    groups_all = [group_of(row) for row in measured]
    panel_width = max(5.0, 0.9 * len(set(groups_all)) * max(1.0, len(variants) / 3))
    figure = Figure(figsize=(panel_width * len(modes), 3.8 * len(levels)))
    FigureCanvasAgg(figure)
    grid = figure.subplots(len(levels), len(modes), squeeze=False)
    panels = [(grid[i][j], level, mode) for i, level in enumerate(levels) for j, mode in enumerate(modes)]
    for axis, level, mode in panels:
        members = [row for row in measured if (row["level"], row["mode"]) == (level, mode)]
        groups = _ordered(group_of(row) for row in members)
        values = {(group_of(row), row["variant"]): row[key] for row in members}
        for index, variant in enumerate(variants):
            heights = [values.get((group, variant)) or math.nan for group in groups]
            offsets = [x + (index - (len(variants) - 1) / 2) * width for x in range(len(groups))]
            axis.bar(offsets, heights, width, label=variant)
        if metric == "speedup":
            axis.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xticks(range(len(groups)), groups, fontsize=8)
        axis.set_title(f"{level}, {mode}", fontsize=10)
        axis.set_ylabel(ylabel)
        axis.grid(axis="y", alpha=0.3)
    grid[0][0].legend(fontsize=8, ncols=min(len(variants), 4))
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, path, dpi=120)
    return None
