"""A click group whose commands are imported when one runs (click's documented lazy-loading
pattern): each command costs only what it imports, so `tpsim predict` never loads the sweep's
machinery, the calibration or the harness's modules, and `tpsim --help` loads none of them.

Each entry is name -> ("module:attribute", short help). The short help is stored beside the
path so that `--help` lists every command without importing it; tests/test_cli.py holds each
stored line equal to the command's own. A help section may be lazy too (`lazy_sections`: title ->
"module:function" returning its (term, text) rows, imported only when the help is printed: the
schedule registry's list in `tpsim --help`)."""
from __future__ import annotations

import atexit
import gc
import importlib

import click

from tpsim.fileio.policy import CONTROL, control_problem, printable


class LazyGroup(click.Group):
    """click.Group plus `lazy_commands`: {name: ("module:attr", short help)}."""

    def __init__(self, *args, lazy_commands: dict[str, tuple[str, str]] | None = None,
                 lazy_sections: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        self.lazy_sections = dict(lazy_sections or {})

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click.Group's, then each lazy section, its rows read now (module doc)."""
        super().format_help_text(ctx, formatter)
        for title, path in self.lazy_sections.items():
            module, _, attr = path.partition(":")
            rows = getattr(importlib.import_module(module), attr)()
            with formatter.section(title):
                formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Every argument is plain text (fileio/policy.py control_problem, the rule JSON inputs follow):
        tpsim prints its arguments (a --model folder's name heads predict's table), so an escape
        sequence in one would reach the terminal raw."""
        for i, a in enumerate(args):
            bad = control_problem(a)
            if bad:
                # lazy: the refusal only; `import tpsim.cli` loads the command table alone (tests/test_imports.py)
                from tpsim.commands.errors import refused
                at = max(0, control_char_at(a) - 40)     # the argument around its first control character
                shown = ("..." if at else "") + printable(a[at:at + 60]) + ("..." if len(a) > at + 60 else "")
                raise refused(f"argument {i + 1} ('{shown}') {bad}")
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            self.add_command(load(self.lazy_commands[cmd_name][0]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click.Group's, but a command not yet imported shows its stored short help."""
        names = [n for n in self.list_commands(ctx)
                 if n in self.lazy_commands or not self.commands[n].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
            else:
                # a stand-in holding the stored line: click shortens it as it would the command's own
                stand_in = click.Command(name, help=self.lazy_commands[name][1])
                rows.append((name, stand_in.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def control_char_at(text: str) -> int:
    """Where the first control character of `text` is (0 when none)."""
    m = CONTROL.search(text)
    return m.start() if m else 0


def load(path: str) -> click.Command:
    """"module:attr" -> that click command (the module imported now)."""
    module, _, attr = path.partition(":")
    # the command's modules (the simulator's) live as long as the process: the cyclic collector would
    # rescan each of their objects at every collection while they load and while the command runs (a gen-2
    # collection alone took ~0.015 CPU s of `tpsim predict`'s 0.34). They load with it off (an import makes
    # little garbage), then are set aside for good (gc.freeze): collections see only what the command makes
    collecting = gc.isenabled()
    gc.disable()
    try:
        cmd = getattr(importlib.import_module(module), attr)
    finally:
        if collecting:
            gc.enable()
    gc.freeze()
    # what the command makes from here on (the profile, its tables and caches) lives to the end of the process as
    # well: the interpreter's collections at exit would scan it once more (~0.01 CPU s of `tpsim predict`), to
    # finalize nothing (the writers close their files). Set aside too, then: at exit (registered once)
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    if not isinstance(cmd, click.Command):
        raise TypeError(f"{path} is not a click command")
    return cmd
