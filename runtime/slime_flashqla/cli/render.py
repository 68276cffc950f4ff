"""Terminal output for the CLI: rich tables where rich is installed, plain text otherwise."""

from __future__ import annotations


def print_table(title: str, rows: list[tuple[str, str]], headers: tuple[str, str] = ("item", "value")) -> None:
    """Print two-column rows as a table."""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        width = max(len(k) for k, _ in rows) if rows else 0
        print(title)
        for key, value in rows:
            print(f"  {key:<{width}}  {value}")
        return
    table = Table(title=Text(title), show_lines=False)
    # The first column (names such as a warm-up configuration key) stays whole; values fold.
    widest = max((len(str(key)) for key, _ in rows), default=0)
    table.add_column(headers[0], no_wrap=True, min_width=min(widest, 60))
    table.add_column(headers[1], overflow="fold")
    for key, value in rows:
        style = "bold red" if key == "WARNING" else None
        # Text, not str: what a row holds (an archive's fields, a path) is never read as rich markup.
        table.add_row(Text(str(key)), Text(str(value)), style=style)
    Console().print(table)
