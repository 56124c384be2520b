"""How `tpsim spd-plan` chooses SPD blocks from measured perplexities, as the SPD paper does
(Sync-Point Drop, ICML 2025: a block's *sensitivity* is the perplexity increase when its attention
all-reduce alone is dropped zero-shot; insensitive blocks are dropped, sensitive ones are handed to
block-to-block distillation), what it costs in time (the simulator), and how it is shown.
Imports no torch: the rank side (hw/spd/plan.py) measures, this module decides and prints.

The budget (`Budget`), one of:
  --max-ppl-increase X%   the chosen set's perplexity may exceed the baseline by X percent of it;
  --max-ppl-increase X    ... by X perplexity points (absolute);
  --blocks K              exactly the K least sensitive blocks, whatever they cost.
Neither given: --max-ppl-increase 1% (a tpsim default, not a number from the paper).

The greedy choice (`choose`): blocks in increasing sensitivity (ties: lower layer first); each is
added to the chosen set and the set's perplexity is *measured* (one more harness pass, spd:SET),
not summed from the solo increases. With a perplexity budget it stops at the first block that is
over the budget on its own or whose addition takes the measured set over it; with --blocks K after
K blocks. A block over the budget on its own is one the paper would hand to distillation
(`distill`); with --blocks there is no perplexity budget and no block is marked.

Finished passes are appended to a partial JSONL file (commands.sweep_grid's checkpoint format, one
{"key", "rows"} line per pass, key = inputs digest / spec) so a killed plan resumes.
"""
from __future__ import annotations

import io
import json
import math
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.predict import Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import make_stack
from tpsim.fileio.checkpoint import read_checkpoint

DEFAULT_INCREASE = "1%"


@dataclass(frozen=True)
class Budget:
    """A perplexity budget (relative fraction or absolute points) or a block count."""

    relative: float | None = None      # 0.01: the set may cost 1% of the baseline perplexity
    absolute: float | None = None      # 0.5: ... 0.5 perplexity points
    blocks: int | None = None

    def limit(self, base_ppl: float) -> float | None:
        """The largest perplexity the chosen set may have (None: a block count, no limit)."""
        if self.relative is not None:
            return base_ppl * (1.0 + self.relative)
        if self.absolute is not None:
            return base_ppl + self.absolute
        return None

    def describe(self) -> str:
        if self.relative is not None:
            return f"perplexity at most +{self.relative * 100:g}% over the baseline"
        if self.absolute is not None:
            return f"perplexity at most +{self.absolute:g} over the baseline"
        return f"the {self.blocks} least sensitive block{'s' * (self.blocks != 1)}"


def parse_budget(max_ppl_increase: str | None, blocks: int | None, layers: int) -> Budget:
    """--max-ppl-increase / --blocks -> Budget; ValueError (one line) for both, or a bad value."""
    if max_ppl_increase is not None and blocks is not None:
        raise ValueError("give one budget: --max-ppl-increase X or --blocks K, not both")
    if blocks is not None:
        # at least 1: 0 chose nothing and printed a 1.000x plan (standard priced against itself)
        if not 1 <= blocks <= layers:
            raise ValueError(f"--blocks must be in 1..{layers} (the model's blocks), got {blocks}")
        return Budget(blocks=blocks)
    text = (max_ppl_increase or DEFAULT_INCREASE).strip()
    rel = text.endswith("%")
    try:
        v = float(text[:-1] if rel else text)
    except ValueError:
        v = float("nan")
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"--max-ppl-increase must be a number >= 0, X% (relative to the baseline) or X "
                         f"(perplexity points), got {max_ppl_increase!r}")
    return Budget(relative=v / 100) if rel else Budget(absolute=v)


def spd_spec(layers) -> str:
    """The schedule spec dropping the attention all-reduce of `layers`: "standard" for none,
    spd:[7] for one (spd:7 would read as a fraction), spd:1,3-5 for more."""
    ls = sorted(set(layers))
    if not ls:
        return "standard"
    parts, lo = [], ls[0]
    for a, b in zip(ls, ls[1:] + [None]):
        if b != a + 1:
            parts.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = b
    body = ",".join(parts)
    return f"spd:[{body}]" if body.isdigit() else f"spd:{body}"


def ranked(solo_ppl: dict[int, float]) -> list[int]:
    """Blocks from the least to the most sensitive (ties: the lower layer first)."""
    return sorted(solo_ppl, key=lambda i: (solo_ppl[i], i))


def choose(base_ppl: float, solo_ppl: dict[int, float], budget: Budget,
           measure: Callable[[str], float]) -> tuple[list[int], dict[int, float], dict | None]:
    """The greedy choice (module doc): (chosen blocks in the order added, the measured perplexity of
    the set after adding each, the block that stopped it {layer, ppl, why} or None)."""
    limit = budget.limit(base_ppl)
    chosen: list[int] = []
    cum: dict[int, float] = {}
    for i in ranked(solo_ppl):
        if budget.blocks is not None and len(chosen) >= budget.blocks:
            return chosen, cum, None
        if limit is not None and solo_ppl[i] > limit:
            return chosen, cum, {"layer": i, "ppl": solo_ppl[i], "why": "over the budget on its own"}
        p = measure(spd_spec(chosen + [i]))
        if limit is not None and p > limit:
            return chosen, cum, {"layer": i, "ppl": p, "why": "the measured set would exceed the budget"}
        chosen.append(i)
        cum[i] = p
    return chosen, cum, None


def distill(base_ppl: float, solo_ppl: dict[int, float], budget: Budget) -> list[int]:
    """Blocks over the perplexity budget on their own: the paper's candidates for block-to-block
    distillation (none with --blocks, which has no perplexity budget)."""
    limit = budget.limit(base_ppl)
    return [] if limit is None else sorted(i for i, p in solo_ppl.items() if p > limit)


def price(model: ModelSpec, tp: int, profile: str, batch: int, prompt_len: int, gen_len: int, spec: str) -> dict:
    """standard vs `spec` on `profile` (its default stack) for the checkpoint's model at `tp`:
    sim.predict's tokens/s, the speedup and the prefill (time to first token) ratio."""
    prof = load_profile(profile)
    w = Workload(model, tp, prof, batch, prompt_len, gen_len, make_stack({}, prof.stack_defaults))
    preds = predict(w, ["standard"] + ([spec] if spec != "standard" else []), record=False)
    base, p = preds[0], preds[-1]
    return {"profile": prof.name, "tp": tp, "batch": batch, "prompt_len": prompt_len, "gen_len": gen_len,
            "dtype": w.stack.dtype, "schedule": spec, "standard_tokens_per_s": base.tokens_per_s,
            "tokens_per_s": p.tokens_per_s, "speedup": p.speedup, "prefill_speedup": base.prefill_s / p.prefill_s}


# ---------------------------------------------------------------- partial results (resume)

def partial_path(out: str) -> str:
    return f"{out}.partial.jsonl"


def read_partial(path: str | None, digest: str) -> dict[str, dict]:
    """spec -> finished pass {spec, phase, nll, tokens, ppl} of this digest (other digests' lines:
    other inputs, ignored; a torn last line from a kill: ignored)."""
    if not path:
        return {}
    out = {}
    for key, rows in read_checkpoint(path).items():
        d, _, spec = key.partition("/")
        if d == digest and rows and _pass_row(rows[0], spec):
            out[spec] = rows[0]
    return out


def _pass_row(row: dict, spec: str) -> bool:
    """A finished pass as append_partial writes it, for `spec`: a line that says another spec, or holds
    a NaN, negative or missing number, is measured again (issue 48: a resumed row is checked against
    its point, as the sweep's are), not read into the plan."""
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    return (row.get("spec") == spec and row.get("phase") in ("baseline", "solo", "set")
            and num(row.get("nll")) and row["nll"] >= 0 and isinstance(row.get("tokens"), int)
            and not isinstance(row["tokens"], bool) and row["tokens"] > 0 and num(row.get("ppl")) and row["ppl"] > 0)


def append_partial(path: str, digest: str, row: dict) -> None:
    """One finished pass, flushed and fsynced at once (a kill right after keeps it)."""
    with open(path, "a") as f:
        if f.tell() and not Path(path).read_bytes().endswith(b"\n"):
            f.write("\n")                           # seal a torn last line before appending
        f.write(json.dumps({"key": f"{digest}/{row['spec']}", "rows": [row]}) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------- output

def format_plan(r: dict) -> str:
    """The per-block table, the chosen spd:LIST and its price, as text."""
    from rich.console import Console      # lazy: rich takes ~30 ms to import; only the launcher prints
    from rich.markup import escape        # lazy: rich (as Console)
    from rich.table import Table          # lazy: rich (as Console)
    # the checkpoint's path is text, not markup ('[/]' in a folder's name was a MarkupError)
    t = Table(title=escape(f"spd-plan {r['model']}  TP {r['tp']}  {r['backend']}/{r['device']}  {r['dtype']}  "
                           f"{r['windows']} x {r['seq_len']} tokens ({r['tokens_how']})"), title_justify="left")
    for col in ("layer", "ppl alone", "sensitivity", "rank", "chosen", "cumulative ppl"):
        t.add_column(col, justify="right" if col != "chosen" else "left", overflow="fold")   # wraps, never cut
    for b in r["blocks"]:
        mark = (f"#{b['order'] + 1}" if b["chosen"] else "distill" if b["distill"]
                else "stopped" if r.get("stopped_at") and r["stopped_at"]["layer"] == b["layer"] else "")
        cum = "-" if b["cumulative_ppl"] is None else f"{b['cumulative_ppl']:.4f}"
        t.add_row(str(b["layer"]), f"{b['ppl']:.4f}", f"{b['sensitivity']:+.4f} ({b['sensitivity_pct']:+.2f}%)",
                  str(b["rank"]), mark, cum)
    buf = io.StringIO()
    con = Console(file=buf, width=80, no_color=True, highlight=False)   # 80: fits a terminal (or a log) as is
    con.print(t)
    base, fin = r["baseline_ppl"], r["final_ppl"]
    lines = [buf.getvalue().rstrip(),
             f"baseline (standard) perplexity {base:.4f}; budget: {r['budget']}",
             f"chosen: {r['schedule']}  ({len(r['chosen'])} of {r['layers']} blocks, in the order added: "
             f"{', '.join(map(str, r['chosen'])) or 'none'})",
             f"measured perplexity of the chosen set {fin:.4f} ({(fin / base - 1) * 100:+.2f}%)"]
    if r.get("stopped_at"):
        s = r["stopped_at"]
        lines.append(f"stopped at layer {s['layer']}: {s['why']} (ppl {s['ppl']:.4f})")
    if r["distill"]:
        lines.append(f"to distill (over the budget on their own, the paper's block-to-block distillation): "
                     f"{', '.join(map(str, r['distill']))}")
    p = r.get("price")
    if p:
        lines.append(f"priced on {p['profile']} (TP {p['tp']}, batch {p['batch']}, prompt {p['prompt_len']}, "
                     f"gen {p['gen_len']}, {p['dtype']}): standard {p['standard_tokens_per_s']:.1f} tok/s, "
                     f"{p['schedule']} {p['tokens_per_s']:.1f} tok/s: {p['speedup']:.3f}x faster (prefill "
                     f"{p['prefill_speedup']:.3f}x) at {(fin / base - 1) * 100:+.2f}% perplexity")
    if r.get("resumed"):
        lines.append(f"resumed: {r['resumed']} of {r['passes']} passes read back from {r['partial']}")
    lines.append("sensitivities only mean something on trained weights (random weights give noise)")
    # the prose under the table at the table's 80 columns, broken at spaces (the priced line ran to 160)
    return "\n".join([lines[0]] + [w for line in lines[1:] for w in textwrap.wrap(
        line, 80, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)])


def plot_sensitivity(r: dict, path: str) -> None:
    """A bar per layer: its perplexity increase alone (%), chosen blocks, distill blocks, the budget."""
    import matplotlib                      # lazy: matplotlib is slow to import; only --plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt        # lazy: as above
    blocks = r["blocks"]
    colors = ["tab:green" if b["chosen"] else "tab:red" if b["distill"] else "tab:gray" for b in blocks]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.25 * len(blocks)), 3.5))
    ax.bar([b["layer"] for b in blocks], [b["sensitivity_pct"] for b in blocks], color=colors)
    limit = r.get("limit_ppl")
    if limit is not None:
        ax.axhline((limit / r["baseline_ppl"] - 1) * 100, color="black", lw=0.8, ls="--", label="budget")
        ax.legend(loc="upper left")
    if len(blocks) <= 48:                  # integer layer ticks (matplotlib would put bars at 0.5 steps)
        ax.set_xticks([b["layer"] for b in blocks])
    ax.set_xlabel("layer")
    ax.set_ylabel("perplexity increase alone (%)")
    ax.set_title(f"{r['model']} TP {r['tp']}: SPD sensitivity (green chosen, red distill)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")       # as commands.sweep_grid.plot writes its figures
    plt.close(fig)


def make_progress():
    """The bar over the passes (stderr, hidden when stderr is no terminal); `show_progress` moves it."""
    from rich.console import Console      # lazy: rich, ~30 ms
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn  # lazy: rich, ~30 ms
    return Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), transient=True, disable=not sys.stderr.isatty(),
                    console=Console(stderr=True))


def show_progress(bar, tasks: dict, rows: dict[str, dict], layers: int, budget: Budget) -> None:
    """Move the bar to the finished passes `rows` (spec -> row): the baseline and per-block passes
    (1 + layers), then the measured sets (at most --blocks K, or every block)."""
    if "solo" not in tasks:
        tasks["solo"] = bar.add_task("baseline + one pass per block", total=1 + layers)
    solo = sum(1 for r in rows.values() if r["phase"] in ("baseline", "solo"))
    bar.update(tasks["solo"], completed=solo)
    sets = sum(1 for r in rows.values() if r["phase"] == "set")
    if sets and "set" not in tasks:
        most = budget.blocks if budget.blocks is not None else layers
        tasks["set"] = bar.add_task("greedy sets, measured", total=most)
    if "set" in tasks:
        bar.update(tasks["set"], completed=sets)
