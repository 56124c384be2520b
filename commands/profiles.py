"""`tpsim profiles`: list the built-in hardware profiles, show one, import measurements into one."""
from __future__ import annotations

import click

from tpsim.sim.hardware.profile import builtin_names, describe, load_profile, read_raw

from tpsim.commands.console import compact_table, rich_escape, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.lazy import LazyGroup
from tpsim.commands.options import not_empty

# the import commands read measurement files (calib.imports): loaded when one runs
IMPORTS = {
    "import-nccl-tests": ("tpsim.commands.import_nccl_tests:import_nccl_tests_cmd",
                          "Import nccl-tests outputs (all_reduce_perf etc.; text or -J JSON) as measured collective "
                          "tables: one per (collective, group, mode), in a profile that extends a base profile."),
    "import-engine-bench": ("tpsim.commands.import_engine_bench:import_engine_bench_cmd",
                            "Fit a deployment's host step terms from its engine benchmarks (`vllm bench latency "
                            "--output-json`, SGLang bench_one_batch) at two or more TP degrees into a stack file: "
                            "FILE[:tp=N,batch=B,...]."),
}


@click.group("profiles", cls=LazyGroup, lazy_commands=IMPORTS)
def profiles():
    """List built-in hardware profiles or show one with the source of every number."""


@profiles.command("list")
@user_errors
def profiles_list():
    """Built-in profiles and what they describe."""
    t = compact_table()
    for col in ("name", "GPUs/\nnode", "description"):                   # the description wraps to fit
        t.add_column(col, justify="right" if col == "GPUs/\nnode" else "left", no_wrap=col != "description",
                     overflow="fold")
    for name in builtin_names():
        p = load_profile(name)
        t.add_row(name, str(p.gpus_per_node), rich_escape(p.description))     # text, not markup
    terminal_console().print(t)


FIELD_WIDTH = 26


def field_lines(field: str, width: int = FIELD_WIDTH) -> str:
    """A dotted field name in lines of at most `width`, each broken after a dot (later lines indented)."""
    lines = [""]
    for part in field.split("."):
        part = part if lines == [""] else "." + part
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append(" " + part)
        else:
            lines[-1] += part
    return "\n".join(lines)


@profiles.command("show")
@click.argument("name", callback=not_empty)
@user_errors
def profiles_show(name):
    """Every value of profile NAME (or a JSON path) with where it came from."""
    p = load_profile(name)
    _, path = read_raw(name)
    t = compact_table(title=rich_escape(f"{p.name}: {p.description}  ({path})"), title_justify="left")  # text, not markup
    # a field past 26 characters (most are shorter; the longest is 37) wraps after one of its dots, never
    # inside a name (`collectives.custom_allredu` / `ce.sglang` was how it folded; the longest name between
    # dots is 28); its source (up to a thousand characters) goes under its value, in the room the field
    # leaves, and wraps at its spaces
    rows = describe(name)[2:]                            # name and description are in the title
    width = max([FIELD_WIDTH] + [len(part) + 1 for f, _, _ in rows for part in f.split(".")])
    t.add_column("field", max_width=width, overflow="fold")
    t.add_column("value\n[dim]source[/dim]", overflow="fold")
    for field, value, source in rows:
        t.add_row(rich_escape(field_lines(field, width)),
                  f"{rich_escape(value)}\n[dim]{rich_escape(source)}[/dim]")  # text, not markup
    terminal_console().print(t)
