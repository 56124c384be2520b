"""tpsim command line: predict, show, trace, profiles, models (simulator; no torch needed);
bench, check, calibrate, compare (harness; need the [hw] extra).

`import cli` imports no torch: the harness commands' modules (hw.commands, calib.commands,
calib.compare) reach the torch side only through `hw.harness`, when a command runs."""
from __future__ import annotations

if not __package__ and __name__ in ("__main__", "__mp_main__"):
    # `python cli.py ...` (or torchrun's `cli.py ...`) in a source checkout: run *this* checkout as
    # the package tpsim, whatever tpsim is installed (a sweep's worker re-runs this as __mp_main__)
    import _checkout
    _checkout.load()
    if __name__ == "__main__":
        from tpsim.cli import main as _main
        _main(prog_name="tpsim")

import contextlib
import math
import sys
from pathlib import Path

import click

from tpsim.sim import sweep as sw
from tpsim.sim.cli_options import (_stderr_console, check_bounds, check_sizes, compile_options, make_workload,
                                   preset_option, rich_console, rich_escape, rich_table, stack_dict, stack_options,
                                   user_errors, workload_options)
from tpsim.sim.fileio import STDOUT, json_text, write_json_atomic, write_text_atomic
from tpsim.sim.lock import check_writable, output_lock
from tpsim.sim.model import MODELS, get_model, valid_tp
from tpsim.sim.model_show import show_model
from tpsim.sim.predict import Simulator, predict as run
from tpsim.sim.profile import builtin_names, describe, load_profile, read_raw
from tpsim.sim.schedule import COMM, DEFAULT_SCHEDULES, SCHEDULE_HELP, ScheduleSpec, build
from tpsim.sim.stack import Step, make_stack
from tpsim.sim.stacks import load_stack
from tpsim.sim.trace import chrome_trace

from tpsim.hw.commands import bench_cmd, check_cmd
from tpsim.hw.spd_plan_cmd import spd_plan_cmd

from tpsim.calib.collective_cmd import collective_cmd
from tpsim.calib.commands import calibrate_cmd
from tpsim.calib.compare import compare_cmd
from tpsim.calib.engine_bench import import_engine_bench_cmd
from tpsim.calib.nccl_import import import_nccl_tests_cmd

MODEL_CHANGE_HELP = ("model change: none = same model and outputs as standard; retrain = a different "
                     "architecture, trained for it; drops syncs = all-reduces skipped, accuracy lost; "
                     "n/a = not a way to run the model.")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="tpsim")
def main():
    """Predict and measure tensor-parallel LLM inference under different compute/communication
    schedules: standard (Megatron), ladder (Ladder Residual), spd (Sync-Point Drop), parallel
    (PaLM-style attention+MLP), upper-bound (no communication)."""


@main.command()
@workload_options
@click.option("--schedule", "schedules", multiple=True, metavar="SPEC",
              help=f"Repeatable. {SCHEDULE_HELP}. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--exact", is_flag=True, help="Simulate every rank with the profile's arrival jitter on sampled steps "
              "and layers: the mean with a 95% confidence interval (seconds, not minutes).")
@click.option("--exhaustive", is_flag=True, help="Brute force: every rank, layer and decode step with jitter "
              "(minutes for big models; for checking --exact).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@user_errors
def predict(schedules, exact, exhaustive, as_json, **kw):
    """Predict prefill time, decode time, tokens/s and speedup over standard TP per schedule.

    Each schedule also says what it asks of the model (model_change): none (standard, token-split,
    seq-parallel: the same model and outputs), retrain (ladder, parallel: a different architecture
    that must be trained), drops syncs (spd: the trained model with all-reduces skipped, some
    accuracy lost), n/a (upper-bound: no communication, a speed ceiling only)."""
    if exact and exhaustive:
        raise ValueError("--exact and --exhaustive are two ways to simulate the jitter (sampled or brute force); "
                         "choose one")
    w = make_workload(**kw)
    schedules = list(schedules) or list(DEFAULT_SCHEDULES)
    if exhaustive:  # every rank, layer and decode step: minutes for big models, so show progress
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn  # lazy: rich, ~30 ms
        passes = len(set(schedules) | {"standard"}) * w.gen_len
        with Progress("exhaustive", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True,
                      disable=not sys.stderr.isatty(), console=_stderr_console()) as bar:
            task = bar.add_task("exhaustive", total=passes)
            preds = run(w, schedules, mode="brute", record=False, progress=lambda: bar.advance(task))
    else:
        preds = run(w, schedules, record=False, mode="sampled" if exact else "fast")
    out = {"model": w.model.name, "tp": w.tp, "profile": w.profile.name, "batch": w.batch,
           "prompt_len": w.prompt_len, "gen_len": w.gen_len, "stack": stack_dict(w.stack, kw.get("stack_name")),
           "schedules": [p.to_dict() for p in preds]}
    jitter_note = None
    if exact or exhaustive:
        out["mode"] = "sampled" if exact else "brute"
        out["jitter"] = {k: {"dist": j.dist, "mean_us": j.mean_s * 1e6, "source": j.source}
                         for k, j in w.profile.arrival_jitter.items()}
        scopes = ["node"] + (["net"] if w.nodes > 1 else [])
        jitter_note = "arrival jitter per rank and collective: " + "; ".join(
            f"{k} {w.profile.arrival_jitter[k].dist} mean {w.profile.arrival_jitter[k].mean_s * 1e6:g} us "
            f"({w.profile.arrival_jitter[k].source})" for k in scopes)
        if all(w.profile.arrival_jitter[k].mean_s == 0 for k in scopes):
            jitter_note += ". Zero: the profile has no skew measurement, so none is simulated (= the fast path)"
    if as_json:
        click.echo(json_text(out))               # never a bare NaN (invalid JSON)
        return
    # user text (an HF folder's name, a profile's name and sources) is printed as text, never as markup
    t = rich_table(title=f"{rich_escape(w.model.name)}  TP{w.tp} ({w.nodes} node{'s' * (w.nodes > 1)})  "
                         f"profile {rich_escape(w.profile.name)}  "
                    f"batch {w.batch}  prompt {w.prompt_len}  gen {w.gen_len}  {w.stack.dtype}",
              title_justify="left")
    for col in ("schedule", "prefill ms", "decode ms", "ms/token", "tokens/s", "speedup", "exposed comm ms",
                "model change"):
        t.add_column(col, justify="left" if col in ("schedule", "model change") else "right",
                     min_width=max(len(p.schedule) for p in preds) if col == "schedule" else None)
    sampled = bool(exact)
    if sampled:
        t.add_column("tokens/s 95% CI", justify="right")
    for p in preds:
        per_tok = f"{p.decode_s / (w.gen_len - 1) * 1e3:.3f}" if w.gen_len > 1 else "-"   # no decode step: no NaN
        row = [p.schedule, f"{p.prefill_s * 1e3:.1f}", f"{p.decode_s * 1e3:.1f}", per_tok,
               f"{p.tokens_per_s:.1f}", f"{p.speedup:.3f}x", f"{p.exposed_comm_s * 1e3:.1f}", p.model_change]
        if sampled:
            d = p.to_dict()
            row.append(f"±{d['tokens_per_s_ci95']:.2f} (n={d['samples']['decode']})")
        t.add_row(*row)
    console = rich_console(width=max(112, rich_console().width))
    src = f" (values and sources: {load_stack(kw['stack_name']).path})" if kw.get("stack_name") else ""
    console.print(f"stack: {w.stack.describe()}{src}", style="dim")
    console.print(t)
    for p in preds:
        for note in p.notes:
            console.print(rich_escape(f"{p.schedule}: {note}"))
    if jitter_note:
        console.print(rich_escape(jitter_note), style="dim")
    console.print("ms/token: one decode step.  exposed comm: time the compute stream waited for collectives "
                  "(prefill + all decode steps).  speedup: tokens/s over standard.  " + MODEL_CHANGE_HELP, style="dim")


@main.command()
@click.option("--model", "models", multiple=True, required=True,
              help="Model preset or Hugging Face config.json (or its folder); repeatable.")
@click.option("--tp", "tps", type=int, multiple=True, required=True, help="TP degree; repeatable.")
@click.option("--batch", "batches", type=int, multiple=True, default=(1,), show_default=True, help="Repeatable.")
@click.option("--profile", "profiles_", multiple=True, default=("h100-sxm",), show_default=True,
              help="Profile name or JSON path; repeatable.")
@click.option("--schedule", "schedules", multiple=True, metavar="SPEC",
              help=f"Repeatable (standard is always included). Default: {' '.join(DEFAULT_SCHEDULES[1:])}.")
@click.option("--bw-scale", "bw_scales", type=float, multiple=True, default=(1.0,), show_default=True,
              help="What-if: interconnect bandwidth times this; repeatable.")
@click.option("--lat-scale", "lat_scales", type=float, multiple=True, default=(1.0,), show_default=True,
              help="What-if: collective latency times this; repeatable.")
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True)
@click.option("--gen", "gen_len", type=int, default=512, show_default=True)
@click.option("--jobs", type=int, default=1, show_default=True, help="Worker processes.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="CSV to write (a .json beside it holds the same rows). A sweep killed midway "
                   "resumes from OUT.partial.jsonl when rerun with the same --out. - prints the CSV "
                   "(no .json twin, no checkpoint).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG of speedups: heatmaps over TP (or lines over --bw-scale when swept).")
@click.option("--plot-view", type=click.Choice(["speedup", "no-retraining"]), default="speedup", show_default=True,
              help="no-retraining: per batch size, the best schedule that keeps the model (standard, "
                   "token-split, seq-parallel) against ladder / parallel / spd.")
@compile_options
@stack_options
@preset_option
@user_errors
def sweep(models, tps, batches, profiles_, schedules, bw_scales, lat_scales, prompt_len, gen_len, jobs,
          out_path, plot_path, plot_view, stack_name, **stack_flags):
    """What-if grid from the simulator alone: models x TP x batch x profile x link scaling -> CSV (+ plot)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn  # lazy: rich, ~30 ms
    check_bounds({"--jobs": jobs, "--tp": tps, "--batch": batches, "--prompt": prompt_len, "--gen": gen_len})
    if jobs > sw.max_jobs():                 # more processes than cores only add start-up and memory
        click.echo(f"--jobs {jobs} capped at {sw.max_jobs()} (the cores this process may use)", err=True)
        jobs = sw.max_jobs()
    for name, vs in (("--bw-scale", bw_scales), ("--lat-scale", lat_scales)):
        for v in vs:
            if not (math.isfinite(v) and 1e-6 <= v <= 1e6):
                raise ValueError(f"{name} must be a finite number in [1e-6, 1e6], got {v}")
    check_writable(out_path, stdout_ok=True)
    if plot_path:
        check_writable(plot_path, "--plot")
    for p in profiles_:
        load_profile(p)                       # a bad profile fails before any work
    for m in models:
        get_model(m)
    # each point's profile fills the stack fields the flags and the --stack preset leave unset
    # (sim.sweep.run_point: flag > preset > profile stack_defaults > Stack's, as predict)
    preset = load_stack(stack_name).values if stack_name else None
    stack = make_stack(_stack_given(**stack_flags), preset=preset)
    scheds = tuple(dict.fromkeys(("standard",) + (schedules or DEFAULT_SCHEDULES[1:])))
    for spec in scheds:
        ScheduleSpec.parse(spec)              # a bad spec fails before any work
    points = sw.grid(models, tps, batches, profiles_, prompt_len, gen_len, bw_scales, lat_scales)
    to_stdout = out_path == STDOUT            # the CSV printed: no twin, no checkpoint, no lock
    checkpoint = None if to_stdout else f"{out_path}.partial.jsonl"
    json_path = Path(out_path).with_suffix(".json")
    if json_path == Path(out_path):
        json_path = Path(f"{out_path}.json")
    if not to_stdout:
        check_writable(json_path)             # the twin obeys the same policy as --out
    with (contextlib.nullcontext() if to_stdout else output_lock(out_path, "sweep")):
        with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), transient=True, disable=not sys.stderr.isatty()) as bar:
            task = bar.add_task("sweep", total=len(points))
            rows = sw.sweep(points, scheds, stack=stack, jobs=jobs, checkpoint=checkpoint,
                            progress=lambda done, total: bar.update(task, completed=done), preset=preset)
        write_text_atomic(out_path, sw.to_csv(rows))
        if not to_stdout:
            write_json_atomic(json_path, rows)
            Path(checkpoint).unlink(missing_ok=True)
    failed = [r["error"] for r in rows if r["error"]]
    click.echo(f"wrote {'stdout' if to_stdout else f'{out_path} (and {json_path})'}: {len(points)} points, "
               f"{len(rows)} rows"
               + (f"; {len(failed)} point(s) could not run (see the error column), e.g. {failed[0]}" if failed else ""),
               err=to_stdout)
    if plot_path:
        sw.plot(rows, plot_path, plot_view)
        click.echo(f"wrote {plot_path}")


@main.command()
@click.option("--model", required=True, help="Model preset (e.g. tiny, llama-3.1-70b) or a config.json.")
@click.option("--schedule", "spec", default="standard", show_default=True, help=SCHEDULE_HELP)
@click.option("--tp", type=int, default=2, show_default=True)
@click.option("--layer", type=int, default=None, help="Layer to show (default: layer 1, or the 2nd ladder layer).")
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True)
@click.option("--gen", "gen_len", type=int, default=512, show_default=True)
@compile_options
@stack_options
@user_errors
def show(model, spec, tp, layer, phase, batch, prompt_len, gen_len, **stack_flags):
    """Print one layer's ops in issue order with what each waits for, to check a schedule by eye."""
    check_sizes(tp, batch, prompt_len, gen_len)
    m = get_model(model)
    stack = make_stack(_stack_given(**stack_flags))       # no profile: Stack's defaults under the flags
    if phase == "decode" and gen_len < 2:
        raise ValueError("a decode step needs --gen >= 2 (the prefill makes token 1); or --phase prefill")
    step = (Step.prefill(batch, prompt_len, gen_len, stack) if phase == "prefill"
            else Step.decode(batch, prompt_len, gen_len, 1, stack))
    s = build(spec, m, tp, step, stack)
    if layer is None:
        layer = min(m.layers - 1, (s.ladder_layers[0] + 1) if s.ladder_layers else 1)
    if not 0 <= layer < m.layers:
        raise ValueError(f"--layer must be in 0..{m.layers - 1}")
    idx = [i for i, op in enumerate(s.ops) if op.layer == layer]
    nxt = [i for i, op in enumerate(s.ops) if op.layer == layer + 1]
    lo, hi = idx[0], (nxt[0] if nxt else len(s.ops))
    t = rich_table(title=rich_escape(f"{spec}: ops issued for layer {layer} of {m.name} (TP{tp}, {phase}), in issue order"),
              title_justify="left")
    for col in ("#", "op", "kind", "stream", "waits for", "shape"):
        t.add_column(col)
    for i in range(lo, hi):
        op = s.ops[i]
        deps = [(d.name + (" (async, awaited here)" if d.is_comm and not op.is_comm else "")) for d in s.deps(op)]
        shape = " ".join(f"{k}={v}" for k, v in op.attrs)
        t.add_row(str(i), op.name, op.kind, op.stream, ", ".join(deps) or "-", shape,
                  style="cyan" if op.stream == COMM else None)
    rich_console(width=160).print(t)
    click.echo(f"{len(s.ops)} ops per forward pass, {len(s.collectives)} collectives"
               + (f"; ladder layers {s.ladder_layers[0]}..{s.ladder_layers[-1]}" if s.ladder_layers else "")
               + (f"; SPD blocks {_ranges(s.spd_layers)}" if s.spd_layers else ""))
    for note in s.notes:                    # e.g. token-split falling back, seq-parallel padding
        click.echo(f"note: {note}")


def _stack_given(compile_, compile_prefill, compile_decode, decode_graphs, prefill_graphs, **flags) -> dict:
    """The stack flags (compile_options + stack_options) as make_stack's `given`; None = not given."""
    return dict(flags, compile=compile_, compile_prefill=compile_prefill, compile_decode=compile_decode,
                decode_graphs=decode_graphs, prefill_graphs=prefill_graphs)


def _ranges(xs) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(out)


@main.command()
@workload_options
@click.option("--schedule", "spec", default="ladder", show_default=True, help=SCHEDULE_HELP)
@click.option("--ranks", type=int, default=None, help="Ranks to simulate and show (default: all TP ranks).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Trace JSON to write (- for stdout).")
@user_errors
def trace(spec, ranks, out_path, **kw):
    """Write a Chrome/Perfetto trace of one prefill and one decode step (a track per rank and stream)."""
    check_writable(out_path, stdout_ok=True)       # `--out -`: the trace on stdout, the summary on stderr
    w = make_workload(**kw)
    ranks = w.tp if ranks is None else ranks
    if not 1 <= ranks <= w.tp:
        raise ValueError(f"--ranks must be in 1..{w.tp}")
    sim = Simulator(w, exact=True, record=True, ranks=ranks)
    records, offset = [], 0.0
    steps = [w.prefill_step()] + ([w.decode_step(1)] if w.gen_len > 1 else [])
    summary = []
    for step in steps:
        res = sim.step(spec, step)
        records += [r.__class__(r.op, r.rank, r.stream, r.start_s + offset, r.end_s + offset, r.phase, r.kind)
                    for r in res.records]
        notes = w.schedule(spec, step).notes
        summary.append(f"{step.phase} {res.duration_s * 1e3:.3f} ms (exposed comm {res.exposed_comm_s * 1e3:.3f} ms)"
                       + "".join(f" [{n}]" for n in notes))
        offset += res.duration_s
    write_json_atomic(out_path, chrome_trace(records, label=spec))
    click.echo(f"wrote {'stdout' if out_path == STDOUT else out_path}: {len(records)} events, {ranks} rank(s); "
               + "; ".join(summary) + ". Open it in ui.perfetto.dev or chrome://tracing.", err=out_path == STDOUT)


@main.group()
def profiles():
    """List built-in hardware profiles or show one with the source of every number."""


@profiles.command("list")
@user_errors
def profiles_list():
    """Built-in profiles and what they describe."""
    t = rich_table()
    for col in ("name", "GPUs/node", "description"):
        t.add_column(col)
    for name in builtin_names():
        p = load_profile(name)
        t.add_row(name, str(p.gpus_per_node), rich_escape(p.description))     # text, not markup
    rich_console(width=140).print(t)


@profiles.command("show")
@click.argument("name")
@user_errors
def profiles_show(name):
    """Every value of profile NAME (or a JSON path) with where it came from."""
    p = load_profile(name)
    _, path = read_raw(name)
    t = rich_table(title=rich_escape(f"{p.name}: {p.description}  ({path})"), title_justify="left")   # text, not markup
    for col in ("field", "value", "source"):
        t.add_column(col, overflow="fold")
    for field, value, source in describe(name)[2:]:      # name and description are in the title
        t.add_row(*map(rich_escape, (field, value, source)))
    rich_console(width=180).print(t)


profiles.add_command(import_nccl_tests_cmd)
profiles.add_command(import_engine_bench_cmd)


@main.command()
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


# the harness commands need torch only when they run (hw.harness); collective is pure Python
for _cmd in (bench_cmd, check_cmd, spd_plan_cmd, calibrate_cmd, compare_cmd, collective_cmd):
    main.add_command(_cmd)


if __name__ == "__main__":          # `python -m tpsim.cli` (installed); a checkout's `python cli.py` ran above
    main(prog_name="tpsim")
