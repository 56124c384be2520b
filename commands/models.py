"""`tpsim models`: the model presets, or one model's shapes and per-rank shards."""
from __future__ import annotations

import click

from tpsim.sim.model import MODELS, get_model, valid_tp
from tpsim.sim.model_show import show_model

from tpsim.commands.console import rich_console, rich_table
from tpsim.commands.errors import user_errors


@click.command("models")
@click.option("--show", "show_", metavar="NAME|PATH", default=None,
              help="One model (a preset, or a Hugging Face config.json or its folder): shapes, "
                   "variant features and the per-rank shard at every valid TP degree.")
@user_errors
def models(show_):
    """Model presets with their shapes and valid TP degrees (any Llama-family config.json works
    wherever a model name is accepted)."""
    if show_:
        click.echo(show_model(get_model(show_)))
        return
    t = rich_table()
    for col in ("name", "params", "layers", "hidden", "heads", "kv", "head_dim", "ffn", "vocab", "TP"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for m in MODELS.values():
        n = m.param_count()
        t.add_row(m.name, f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M", str(m.layers), str(m.hidden),
                  str(m.heads), str(m.kv_heads), str(m.head_dim), str(m.ffn), str(m.vocab),
                  ",".join(map(str, valid_tp(m, 16))))
    rich_console(width=140).print(t)
