"""`tpsim models`: the model presets, or one model's shapes and per-rank shards."""
from __future__ import annotations

import click

from tpsim.sim.model.presets import MODELS, get_model, valid_tp
from tpsim.commands.model_show import show_model

from tpsim.commands.console import compact_table, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.options import not_empty


@click.command("models")
@click.option("--show", "show_", metavar="NAME|PATH", default=None, callback=not_empty,
              help="One model (a preset, or a Hugging Face config.json or its folder): shapes, "
                   "variant features and the per-rank shard at every valid TP degree.")
@user_errors
def models(show_):
    """Model presets with their shapes and valid TP degrees (any Llama-family config.json works
    wherever a model name is accepted)."""
    if show_ is not None:
        click.echo(show_model(get_model(show_)))
        return
    # 10 columns in 80: one space between columns, a two-line header, the TP list folded at a comma
    t = compact_table(padding=(0, 0))
    for col in ("name", "params", "layers", "hidden", "heads", "kv", "head\ndim", "ffn", "vocab", "TP\n<= 16"):
        t.add_column(col, justify="left" if col in ("name", "TP\n<= 16") else "right", no_wrap=True)
    for m in MODELS.values():
        n = m.param_count()
        t.add_row(m.name, f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M", str(m.layers), str(m.hidden),
                  str(m.heads), str(m.kv_heads), str(m.head_dim), str(m.ffn), str(m.vocab),
                  _fold_at_commas(list(map(str, valid_tp(m, 16))), TP_WIDTH))
    terminal_console().print(t)
    click.echo("TP: valid degrees up to 16 (they divide the heads; all: models --show NAME)")


TP_WIDTH = 10            # "1,2,4,8,16": the TP column of most models on one line


def _fold_at_commas(items: list[str], width: int) -> str:
    """`items` joined by commas, a line break after the comma where the next item would pass `width`
    (rich folds a long cell only at a space or mid-word)."""
    lines = [items[0]]
    for x in items[1:]:
        if len(lines[-1]) + 1 + len(x) > width:
            lines[-1] += ","
            lines.append(x)
        else:
            lines[-1] += "," + x
    return "\n".join(lines)
