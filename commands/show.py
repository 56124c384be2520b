"""`tpsim show`: one layer's ops in issue order with what each waits for."""
from __future__ import annotations

import click

from tpsim.sim.fp8 import model_given
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.price import decode_price
from tpsim.sim.price.cost import CostModel
from tpsim.sim.schedule.language import COMM, SCHEDULE_HELP, build
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import Step, make_stack

from tpsim.commands.bounds import check_sizes
from tpsim.commands.console import compact_table, rich_escape, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.options import (compile_options, not_empty, preset_option, profile_option, stack_given,
                                    stack_options)


@click.command("show")
@click.option("--model", required=True, callback=not_empty,
              help="Model preset (e.g. tiny, llama-3.1-70b) or a config.json.")
@click.option("--schedule", "spec", default="standard", show_default=True, callback=not_empty, help=SCHEDULE_HELP)
@click.option("--tp", type=int, default=2, show_default=True)
@click.option("--layer", type=int, default=None, help="Layer to show (default: layer 1, or the 2nd ladder layer).")
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True)
@click.option("--gen", "gen_len", type=int, default=512, show_default=True)
@profile_option
@compile_options
@stack_options
@preset_option
@user_errors
def show(model, spec, tp, layer, phase, batch, prompt_len, gen_len, profile, stack_name=None, **stack_flags):
    """Print one layer's ops in issue order with what each waits for, to check a schedule by eye.

    For a decode step, also the attention kernel's grid and KV split, as predict prices them."""
    check_sizes(tp, batch, prompt_len, gen_len)
    m = get_model(model)
    # the flags, then the --stack preset, then the profile's stack_defaults (a calibrated CPU profile's fp32,
    # no graphs), then Stack's, as predict assembles it: the ops shown are the ones predict prices for the
    # same flags and profile (their kv_len, dtype, attention kernel)
    prof = load_profile(profile)
    preset = load_stack(stack_name) if stack_name is not None else None
    stack = make_stack(model_given(m, stack_given(**stack_flags)), prof.stack_defaults,
                       preset=preset.values if preset else None).for_model(m.max_context)   # as Workload sets it
    if phase == "decode" and gen_len < 2:
        raise ValueError("a decode step needs --gen >= 2 (the prefill makes token 1); or --phase prefill")
    step = (Step.prefill(batch, prompt_len, gen_len, stack) if phase == "prefill"
            else Step.decode(batch, prompt_len, gen_len, 1, stack))
    s = build(spec, m, tp, step, stack)
    if layer is None:                # a layer the schedule changes: the 2nd ladder layer, an SPD block
        layer = min(m.layers - 1, (s.ladder_layers[0] + 1) if s.ladder_layers else
                    s.spd_layers[0] if s.spd_layers else 1)
    if not 0 <= layer < m.layers:
        raise ValueError(f"--layer must be in 0..{m.layers - 1}")
    idx = [i for i, op in enumerate(s.ops) if op.layer == layer]
    nxt = [i for i, op in enumerate(s.ops) if op.layer == layer + 1]
    lo, hi = idx[0], (nxt[0] if nxt else len(s.ops))
    t = compact_table(title=rich_escape(f"{spec}: ops issued for layer {layer} of {m.name} (TP{tp}, {phase}), "
                                        "in issue order"), title_justify="left")
    # the names keep their width (no_wrap; one op waited for a line); an op's shape goes under its name and
    # wraps at its spaces in the room the other columns leave
    for col in ("#", "op\nshape", "kind", "stream", "waits for"):
        t.add_column(col, justify="right" if col == "#" else "left", no_wrap=col != "op\nshape", overflow="fold")
    awaited = False
    for i in range(lo, hi):
        op = s.ops[i]
        deps = [(d.name + ("*" if d.is_comm and not op.is_comm else "")) for d in s.deps(op)]
        awaited |= any(d.endswith("*") for d in deps)
        shape = " ".join(f"{k}={v}" for k, v in op.attrs)
        t.add_row(str(i), f"{op.name}\n[dim]{rich_escape(shape)}[/dim]" if shape else op.name, op.kind, op.stream,
                  "\n".join(deps) or "-", style="cyan" if op.stream == COMM else None)
    console = terminal_console()
    console.print(t)
    if awaited:
        console.print("*: async, awaited here: this op waits for that comm-stream collective")
    click.echo(f"{len(s.ops)} ops per forward pass, {len(s.collectives)} collectives"
               + (f"; ladder layers {s.ladder_layers[0]}..{s.ladder_layers[-1]}" if s.ladder_layers else "")
               + (f"; SPD blocks {_ranges(s.spd_layers)}" if s.spd_layers else ""))
    for note in s.notes:                    # e.g. token-split falling back, seq-parallel padding
        console.print(rich_escape(f"note: {note}"))          # wrapped at the table's width, as predict's notes
    cost = CostModel(prof, stack)           # the decode attention kernel's grid, as predict prices it
    for op in (s.ops[i] for i in range(lo, hi)):
        for line in decode_price.describe(op, cost, stack.graphs(phase, op.name)):
            console.print(rich_escape(line))


def _ranges(xs) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(out)
