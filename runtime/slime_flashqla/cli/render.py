"""Terminal output for the CLI: rich tables where rich is installed, plain text otherwise."""

from __future__ import annotations


def print_table(title: str, rows: list[tuple[str, str]], headers: tuple[str, str] = ("item", "value")) -> None:
    """Print two-column rows as a table."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(k) for k, _ in rows) if rows else 0
        print(title)
        for key, value in rows:
            print(f"  {key:<{width}}  {value}")
        return
    table = Table(title=title, show_lines=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for key, value in rows:
        style = "bold red" if key == "WARNING" else None
        table.add_row(key, value, style=style)
    Console().print(table)
