"""rich, for the commands that print tables and progress bars, imported at first use: ~30 ms that
`--help`, `--json` and the commands that print no table do not pay at every start."""
from __future__ import annotations


def rich_console(**kw):
    """A rich Console (kw: width, stderr, ...)."""
    from rich.console import Console      # lazy: rich takes ~30 ms to import; only printing needs it
    return Console(**kw)


def rich_table(**kw):
    """A rich Table (kw: title, title_justify, ...)."""
    from rich.table import Table          # lazy: rich (see rich_console)
    return Table(**kw)


def rich_escape(text: str) -> str:
    """`text` with its [brackets] escaped, printed as is by rich."""
    from rich.markup import escape        # lazy: rich (see rich_console)
    return escape(text)


def stderr_console():
    return rich_console(stderr=True)


def progress_bar(*columns: str, **kw):
    """A rich Progress with a bar, done/total and the time remaining after `columns` (kw: transient,
    disable, console)."""
    # lazy: rich (see rich_console); only a long run draws a bar
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
    return Progress(*columns, BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), **kw)
