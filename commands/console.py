"""rich, for the commands that print tables and progress bars, imported at first use: ~30 ms that
`--help`, `--json` and the commands that print no table do not pay at every start."""
from __future__ import annotations

import sys
import textwrap

import click


def rich_console(**kw):
    """A rich Console (kw: width, stderr, ...)."""
    from rich.console import Console      # lazy: rich takes ~30 ms to import; only printing needs it
    return Console(**kw)


MAX_WIDTH = 100          # on a wide terminal too: a table a reader takes in at one glance


def terminal_console(**kw):
    """A rich Console as wide as the terminal, at most MAX_WIDTH (80 when the output is not a
    terminal), for a table laid out to fit it (`predict`'s). rich pads every line of a table to the
    console's width; the padding is cut (TrimmedLines), so a line ends with its last character."""
    from rich.console import Console      # lazy: rich (see rich_console)
    stream = sys.stderr if kw.pop("stderr", False) else sys.stdout
    return Console(width=min(MAX_WIDTH, Console().width), file=TrimmedLines(stream), **kw)


class TrimmedLines:
    """A text stream that writes each line to `stream` without its trailing spaces (a line is kept
    until its newline, or until flush). Whether it is a terminal is the stream's answer, so rich's
    colours and width follow the real output."""

    def __init__(self, stream):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending.rstrip(" "))
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


def echo_wrapped(text: str, err: bool = False) -> None:
    """A line of prose (a `wrote ...` summary, a note under a table) wrapped at the width a table gets
    (terminal_console: the terminal's, at most MAX_WIDTH; 80 when not a terminal), at its spaces, never
    inside a word or a path; later lines indented 2 more than the first. Every line a command prints
    fits its terminal (issue 48: lines of 252 and 398 characters), but an `Error:` line: one line, whatever
    its length."""
    width = min(MAX_WIDTH, rich_console().width)
    for line in text.splitlines() or [""]:
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        click.echo(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False) if len(line) > width else line, err=err)


def field_lines(text: str, width: int, sep: str = ", ") -> str:
    """A header of `sep`-separated fields (predict's `stack:` line) in lines of at most `width`, broken
    between fields only (later lines indented by 4), as bench's caption wraps (hw/report.py)."""
    fields = text.split(sep)
    lines = [fields[0]]
    for f in fields[1:]:
        if len(lines[-1]) + len(sep) + len(f) <= width:
            lines[-1] += sep + f
        else:
            lines[-1] += sep.rstrip()
            lines.append("    " + f)
    return "\n".join(lines)


def compact_table(**kw):
    """A rich Table with light rules and no vertical lines or edge padding: about 2 columns per
    column of the table fewer than rich's default box, what lets predict's 8 columns fit 80."""
    from rich import box                  # lazy: rich (see rich_console)
    return rich_table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, **kw)


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
    """The one progress bar of every phase that can take more than a few seconds (predict --exhaustive,
    sweep, calibrate, bench, compare's calibration and benches): a rich Progress with `columns`, a bar,
    done/total, the time spent and the time remaining. It draws on stderr, so stdout keeps only the
    result (a table, `--json`, `sweep --out -`'s CSV), is cleared when done (transient), and is off
    where stderr is not a terminal (a log, a pipe, CI). kw overrides those (console, transient, disable)."""
    # lazy: rich (see rich_console); only a long run draws a bar
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn
    kw.setdefault("console", stderr_console())
    kw.setdefault("transient", True)
    kw.setdefault("disable", not sys.stderr.isatty())
    return Progress(*columns, BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), **kw)


class PhaseBar:
    """progress_bar for work whose progress is reported from elsewhere, phase by phase (the ranks' beat
    files, a calibration's state file): `update(what, done, total)`. The bar appears at the first
    report, so a command refused before any work draws none; a context manager, it is cleared at
    the end. Off where stderr is not a terminal."""

    def __init__(self):
        self.bar = self.task = None

    def __enter__(self) -> "PhaseBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, what: str, done: int, total: int | None = None) -> None:
        if self.bar is None:
            if not sys.stderr.isatty():
                return
            self.bar = progress_bar("{task.description}")
            self.bar.start()
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, description=what, completed=done, total=total)
