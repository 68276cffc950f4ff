"""Tables on the terminal for every command and benchmark: rich where installed, aligned plain text otherwise."""

from __future__ import annotations


def table_console(plain: bool = False):
    """A rich console sized for logs, or None for plain text (asked for, or rich missing)."""
    if plain:
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    console = Console()
    # Piped into a log (tee, nohup), rich assumes 80 columns and folds every cell: give the table room.
    return console if console.is_terminal else Console(width=200)


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
