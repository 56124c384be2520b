"""`tpsim predict`: prefill, decode, tokens/s and speedup per schedule, from the simulator alone."""
from __future__ import annotations


import click

from tpsim.fileio.policy import json_text
from tpsim.sim import baseline
from tpsim.sim.bounds import BOUNDS
from tpsim.sim.engine import arrival
from tpsim.sim.predict import Simulator, predict as run
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES, SCHEDULE_HELP
from tpsim.sim.sensitivity import check as sensitivity
from tpsim.sim.stack.presets import load_stack

from tpsim.commands.console import compact_table, field_lines, progress_bar, rich_escape, terminal_console
from tpsim.commands.errors import UserError, user_errors
from tpsim.commands.options import make_workload, not_empty, stack_dict, workload_options


MODEL_CHANGE_HELP = ("model change: none = same model and outputs as standard; retrain = a different "
                     "architecture, trained for it; drops syncs = all-reduces skipped, accuracy lost; "
                     "n/a = not a way to run the model.")


def note_lines(preds) -> list[str]:
    """Each prediction's notes as `schedule: note` lines; a note every schedule has (a stack's
    fallback, a profile's limit) is printed once, first, as `all schedules: note`."""
    shared = set(preds[0].notes).intersection(*(p.notes for p in preds[1:])) if len(preds) > 1 else set()
    out = [f"all schedules: {n}" for n in dict.fromkeys(n for p in preds for n in p.notes if n in shared)]
    return out + [f"{p.schedule}: {n}" for p in preds for n in p.notes if n not in shared]


def interval_table(preds, sens):
    """Each schedule's tokens/s and speedup at the ends of the ranges their sources give (a table of
    its own under predict's: in its columns the intervals would push the table past 80 columns)."""
    t = compact_table(show_edge=False)       # right under predict's table: no blank line between them
    for col in ("schedule", "tokens/s interval", "speedup interval"):
        t.add_column(col, justify="left" if col == "schedule" else "right",
                     min_width=max(len(p.schedule) for p in preds) if col == "schedule" else None)
    for p in preds:
        iv = sens.intervals.get(p.schedule)
        if iv is None:
            continue
        (tlo, thi), (slo, shi) = iv["tokens_per_s"], iv["speedup"]
        speed = f"{slo:.3f}x" if round(slo, 3) == round(shi, 3) else f"{slo:.3f} - {shi:.3f}x"
        t.add_row(p.schedule, f"{tlo:.1f} - {thi:.1f}", speed)
    return t


def interval_notes(stack, sens) -> list[str]:
    """The term that dominates the intervals, and what calibrating the stack would narrow (item 7 of
    issue 44: a stack whose host terms are ranges is uncalibrated)."""
    out = [n] if (n := sens.interval_note()) else []
    if stack.host_ranges and "standard" in sens.intervals:
        lo, hi = sens.intervals["standard"]["tokens_per_s"]
        plo, phi = sens.profile_only["standard"]
        base = sens.base["standard"]
        head = (f"uncalibrated: stack {stack.preset} has {len(stack.host_ranges)} host terms given as ranges "
                f"(engine code, measurements of its host path); ")
        if (hi - lo) - (phi - plo) < 1e-3 * base:
            out.append(head + "here they hide under the pass, so calibrating them (tpsim profiles "
                              "import-engine-bench) would not narrow this answer")
        else:
            out.append(head + f"fitting them to your own engine runs (tpsim profiles import-engine-bench) replaces "
                              f"them, and standard's {lo:.1f}-{hi:.1f} tokens/s ({(hi - lo) / base * 100:.0f}% wide) "
                              f"keeps only the profile's share ({(phi - plo) / base * 100:.0f}% here)")
    return out


def _check_exhaustive(passes: int, w) -> None:
    """--exhaustive's work, estimated before any of it runs: schedules x steps x layers x ranks
    rank-layer steps, refused past the bounds table's entry (405B TP128 with a long --gen would run
    for days; the default 8B TP8 took 135 s)."""
    steps = passes * w.model.layers * w.tp
    b = BOUNDS["exhaustive_steps"]
    if steps > b.hi:
        raise UserError(f"--exhaustive would simulate {passes // w.gen_len} schedules x {w.gen_len} steps x "
                        f"{w.model.layers} layers x {w.tp} ranks = {steps:,} rank-layer steps, more than "
                        f"{b.hi:,} ({b.why}); use --exact (sampled steps and layers, held to --exhaustive by "
                        f"tests/test_fast_exact.py), a smaller --gen or the first K layers (--model NAME[:K])")


@click.command("predict")
@workload_options
@click.option("--schedule", "schedules", multiple=True, metavar="SPEC", callback=not_empty,
              help=f"Repeatable. {SCHEDULE_HELP}. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--exact", is_flag=True, help="Simulate every rank with the profile's arrival jitter on sampled steps "
              "and layers: the mean with a 95% confidence interval (seconds, not minutes).")
@click.option("--exhaustive", is_flag=True, help="Brute force: every rank, layer and decode step with jitter "
              "(minutes for big models; for checking --exact).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@user_errors
def predict(schedules, exact, exhaustive, as_json, **kw):
    """Predict prefill time, decode time, tokens/s and speedup over standard TP per schedule.

    Where the profile gives a number only as its source's range (a "range" beside its value), the
    schedules are rerun at the range's ends; an order of two schedules that reverses there is noted
    under the table ("order not settled by the sources") and listed in --json under sensitivity.

    Each schedule also says what it asks of the model (model_change): none (standard, token-split,
    seq-parallel: the same model and outputs), retrain (ladder, parallel: a different architecture
    that must be trained), drops syncs (spd: the trained model with all-reduces skipped, some
    accuracy lost; spd:0, which drops none, is none), n/a (upper-bound: no communication, the standard
    layer's speed ceiling; a schedule whose layer has fewer kernels can beat it, parallel on the eager
    stack)."""
    if exact and exhaustive:
        raise ValueError("--exact and --exhaustive are two ways to simulate the jitter (sampled or brute force); "
                         "choose one")
    w = make_workload(**kw)
    schedules = list(dict.fromkeys(schedules)) or list(DEFAULT_SCHEDULES)     # a schedule given twice: one row
    if exhaustive:  # every rank, layer and decode step: minutes for big models, so show progress
        passes = len(set(schedules) | {"standard"}) * w.gen_len
        _check_exhaustive(passes, w)
        with progress_bar("exhaustive") as bar:
            task = bar.add_task("exhaustive", total=passes)
            preds = run(w, schedules, mode="brute", record=False, progress=lambda: bar.advance(task))
    else:
        preds = run(w, schedules, record=False, mode="sampled" if exact else "fast")
    out = {"model": w.model.name, "tp": w.tp, "profile": w.profile.name, "batch": w.batch,
           "prompt_len": w.prompt_len, "gen_len": w.gen_len,
           # where the ranks sit and what the collectives span (--gpus-per-node, --comm-group)
           "gpus_per_node": w.gpus_per_node or w.profile.gpus_per_node, "nodes": w.nodes,
           "comm_group": w.comm_group or w.tp,
           "stack": stack_dict(w.stack, kw["stack_name"]),
           "schedules": [p.to_dict() for p in preds]}
    # the number a user weighs against retraining: the best way to run the same model, and each model
    # change's gain over it (sim/baseline.py); only where a schedule that changes the model is predicted
    best = None
    if any(p.model_change in ("retrain", "drops syncs") for p in preds):
        # the fast path's own predictions and simulator (its prices, its built passes) are reused; a sampled
        # or brute-force run's carry jitter: simulate anew
        fast = not (exact or exhaustive)
        reuse = {p.schedule: p for p in preds} if fast else {}
        best = baseline.best_free(preds[0].simulator if fast else Simulator(w, record=False), reuse)
        out["best_free"] = best.to_dict()
        for p, row in zip(preds, out["schedules"]):
            g = baseline.gain(p, best)
            if g is not None:
                row["gain_over_best_free"] = g
    # the profile's and the stack's numbers whose sources give a range, at their ends: each schedule's
    # interval, and does the order of the schedules hold?
    sens = sensitivity(w, schedules, preds)
    out["sensitivity"] = sens.to_dict()
    for d in out["schedules"]:
        if d["schedule"] in sens.intervals:
            d["tokens_per_s_range"] = list(sens.intervals[d["schedule"]]["tokens_per_s"])
            d["speedup_range"] = list(sens.intervals[d["schedule"]]["speedup"])
    jitter_note, no_jitter = None, True
    if not (exact or exhaustive):
        # what the fast path added before each collective: the expected wait for its last rank
        wait_s, j = arrival.workload_wait_s(w.profile, w.tp, w.nodes, w.comm_group)
        out["arrival_wait_us"] = wait_s * 1e6
        if wait_s > 0:
            jitter_note = (f"each collective waits {wait_s * 1e6:.2f} us on average for the last of its "
                           f"{w.comm_group or w.tp} ranks (profile jitter.arrival: {j.dist}, mean {j.mean_s * 1e6:g} us "
                           f"per rank; --exact draws it per rank)")
    if exact or exhaustive:
        out["mode"] = "sampled" if exact else "brute"
        out["jitter"] = {k: {"dist": j.dist, "mean_us": j.mean_s * 1e6, "source": j.source}
                         for k, j in w.profile.arrival_jitter.items()}
        scopes = ["node"] + (["net"] if w.nodes > 1 else [])
        jit = {k: w.profile.arrival_jitter[k] for k in scopes}
        no_jitter = all(j.mean_s == 0 for j in jit.values())
        if no_jitter:     # the sources' long why once, where the profile keeps it (it was printed per scope)
            jitter_note = (f"arrival jitter per rank and collective: none: profile {w.profile.name} has no skew "
                           f"measurement at {' or '.join(scopes)} collectives (why: tpsim profiles show "
                           f"{w.profile.name}), so none is simulated (= the fast path)")
        else:             # the values, and where their sources are kept (a source is a paragraph: --json has it)
            jitter_note = ("arrival jitter per rank and collective: " + "; ".join(
                f"{k} {j.dist} mean {j.mean_s * 1e6:g} us" for k, j in jit.items())
                + f" (sources: tpsim profiles show {w.profile.name})")
    if as_json:
        click.echo(json_text(out))               # never a bare NaN (invalid JSON)
        return
    # user text (an HF folder's name, a profile's name and sources) is printed as text, never as markup
    t = compact_table(title=f"{rich_escape(w.model.name)}  TP{w.tp} ({w.nodes} node{'s' * (w.nodes > 1)})  "
                         f"profile {rich_escape(w.profile.name)}\n"
                    f"batch {w.batch}  prompt {w.prompt_len}  gen {w.gen_len}  {w.stack.precision}",
              title_justify="left")
    # two-line headers: the widest cell, not the header, sets each column's width (fits 80 columns)
    sampled = bool(exact) and not no_jitter       # without jitter every sample is the same: no interval
    for col in ("schedule", "prefill\nms", "decode\nms", "ms/\ntoken", "tokens\n/s", "speedup", "exposed\ncomm ms",
                "model\nchange"):
        t.add_column(col, justify="left" if col in ("schedule", "model\nchange") else "right",
                     min_width=max(len(p.schedule) for p in preds) if col == "schedule" else None,
                     no_wrap=col == "model\nchange")
    for p in preds:
        per_tok = f"{p.decode_s / (w.gen_len - 1) * 1e3:.3f}" if w.gen_len > 1 else "-"   # no decode step: no NaN
        row = [p.schedule, f"{p.prefill_s * 1e3:.1f}", f"{p.decode_s * 1e3:.1f}", per_tok,
               f"{p.tokens_per_s:.1f}", f"{p.speedup:.3f}x", f"{p.exposed_comm_s * 1e3:.1f}", p.model_change]
        t.add_row(*row)
    console = terminal_console()
    src = f" (values and sources: {load_stack(kw['stack_name']).path})" if kw["stack_name"] is not None else ""
    # a header of fields: broken between them, not inside one ("static\nKV")
    console.print(rich_escape(field_lines(f"stack: {w.stack.describe()}{src}", console.width)), style="dim")
    console.print(t)
    if sens.intervals:
        console.print(interval_table(preds, sens))
        console.print()
    if best is not None:
        console.print(rich_escape(baseline.line(preds, best)))        # wrapped at the table's width
    for line in note_lines(preds) + sens.notes() + interval_notes(w.stack, sens):
        console.print(rich_escape(line))
    if jitter_note:
        if sampled:     # the intervals on a line of their own: a table column would not fit 80 columns
            jitter_note += ". tokens/s 95% CI: " + ", ".join(
                f"{p.schedule} ±{p.to_dict()['tokens_per_s_ci95']:.2f} (n={p.to_dict()['samples']['decode']})"
                for p in preds)
        console.print(rich_escape(jitter_note), style="dim")
    console.print("ms/token: one decode step.  exposed comm: time the compute stream waited for collectives "
                  "(prefill + all decode steps).  speedup: tokens/s over standard.  " + MODEL_CHANGE_HELP, style="dim")
