"""Tables on the terminal for every command and benchmark: rich where installed, aligned plain text otherwise."""

from __future__ import annotations

import os
import sys


def table_console(plain: bool = False):
    """A rich console as wide as where the output is read, or None for plain rows (asked for, no width, no rich)."""
    if plain:
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    console = Console()
    if console.is_terminal:
        return console
    # Piped: `| head` in a terminal is read at that terminal's width; a log file or CI job has no
    # width at all, and plain rows there stay whole (a rich table would fold every cell).
    width = _width_without_a_terminal()
    return None if width is None else Console(width=width)


def _width_without_a_terminal() -> int | None:
    """$COLUMNS, else the width of the terminal stderr or stdin is still on, else None."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for stream in (sys.stderr, sys.stdin):
        try:
            if stream is not None and stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError):  # closed, or not a real file
            continue
    return None


def print_table(console, title: str, headers, rows) -> None:
    """Print rows under headers on `console` (from table_console), or as aligned plain text where it is None."""
    rows = [[str(cell) for cell in row] for row in rows]
    headers = [str(header) for header in headers]
    if console is None:
        widths = [max(len(x) for x in column) for column in zip(headers, *rows, strict=False)]
        print(title)
        for line in (headers, *rows):
            print("  " + "  ".join(x.ljust(w) for x, w in zip(line, widths, strict=False)).rstrip())
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title))
    # The first column (a configuration key, a variant) stays whole; the others fold.
    widest = max((len(row[0]) for row in rows if row), default=0)
    table.add_column(headers[0], no_wrap=True, min_width=min(widest, 60))
    for header in headers[1:]:
        table.add_column(header, overflow="fold")
    for row in rows:
        # Text, not str: what a cell holds (a path, an archive's field) is never read as rich markup.
        table.add_row(*(Text(cell) for cell in row), style="bold red" if row[:1] == ["WARNING"] else None)
    console.print(table)


def print_rows(title: str, rows, headers=("item", "value")) -> None:
    """Print (name, value) rows as a two-column table: the CLI's reports."""
    print_table(table_console(), title, headers, rows)
