"""`tpsim stacks`: the --stack presets, each with the engine version line it describes."""
from __future__ import annotations

import click

from tpsim.sim.stack.presets import ALIASES, PRESETS, load_stack

from tpsim.commands.console import compact_table, rich_escape, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.options import not_empty


@click.command("stacks")
@click.option("--show", "show_", metavar="NAME|FILE", default=None, callback=not_empty,
              help="One preset (NAME or NAME@LINE) or stack file: every value, its range and its source.")
@user_errors
def stacks(show_):
    """Serving-stack presets for --stack: the engine version line each describes (NAME@LINE; NAME alone
    is the current line), its host lane and how many of its host terms are ranges."""
    if show_ is not None:
        _show(show_)
        return
    short = {v: k for k, v in ALIASES.items()}
    t = compact_table()
    for col in ("--stack", "describes", "host lane"):
        t.add_column(col, no_wrap=col != "describes", overflow="fold")
    for name, p in PRESETS.items():
        host = p.values.get("host", {})
        active = any(v for k, v in host.items() if k not in ("overlap", "output_hidden"))
        lane = ("overlapped" if host.get("overlap") else "in series") if active else "none"
        if p.ranges:
            lane += f"\n{len(p.ranges)} ranged"
        t.add_row(name + (f"\n= {short[name]}" if name in short else ""), rich_escape(p.engine), lane)
    terminal_console().print(t)
    click.echo("NAME alone names the current line of that engine. A stack file (.json) extends\n"
               "any of them (tpsim profiles import-engine-bench writes one). Values, ranges and\n"
               "sources: tpsim stacks --show NAME")


def _show(name: str) -> None:
    p = load_stack(name)
    t = compact_table(title=rich_escape(f"{p.name}: {p.engine}  ({p.path})"), title_justify="left")
    t.add_column("field", max_width=26, overflow="fold")
    t.add_column("value\n[dim]source[/dim]", overflow="fold")
    rows = [(k, v) for k, v in p.values.items() if k not in ("host", "host_ranges", "ranges", "preset")]
    rows += [(f"host.{k}", v) for k, v in p.values.get("host", {}).items()]
    for field, v in rows:
        span = p.ranges.get(field, p.ranges.get(f"stack.{field}"))
        shown = f"{v:g}" if isinstance(v, float) else str(v)
        if span is not None:
            shown += f" (range {span[0]:g}-{span[1]:g})"
        t.add_row(rich_escape(field), f"{rich_escape(shown)}\n[dim]{rich_escape(p.sources.get(field, ''))}[/dim]")
    terminal_console().print(t)
