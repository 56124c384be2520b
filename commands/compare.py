"""`tpsim compare`: the click command of calib/compare.py (run the harness and the simulator on the
same grid; report where the prediction is right), and its summary table."""
from __future__ import annotations

import os
from pathlib import Path

import click

from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES

from tpsim.hw import harness, require_torch
from tpsim.hw.run_config import check_timeout

from tpsim.calib.compare import QUICK_MODELS, run_compare
from tpsim.calib.compare_intervals import interval_note
from tpsim.calib.compare_join import measured_speedup_text, predicted_speedup_text
from tpsim.calib.compare_measure import Point, check_covers
from tpsim.calib.compare_report import drift_note

from tpsim.commands.bounds import check_bounds
from tpsim.commands.console import PhaseBar, compact_table, rich_escape, terminal_console
from tpsim.commands.errors import UserError, ctrl_c_exits_130, user_errors
from tpsim.commands.options import not_empty


@click.command("compare")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cpu for gloo, cuda for nccl.")
@click.option("--nproc", type=int, default=2, show_default=True, help="Ranks to launch (= TP unless --tp).")
@click.option("--quick", is_flag=True, help=f"Small grid ({', '.join(QUICK_MODELS)}; prompt 32, gen 16) "
                                            "and a quick calibration: a few minutes on a 2-core box.")
@click.option("--profile", "profile_arg", default=None, callback=not_empty,
              help="Profile to predict with (built-in or JSON). Default: calibrate this machine first.")
@click.option("--model", "models", multiple=True, callback=not_empty, help="Repeatable.")
@click.option("--tp", "tps", type=int, multiple=True, help="Repeatable; default --nproc.")
@click.option("--batch", "batches", type=int, multiple=True, default=(1,), show_default=True)
@click.option("--prompt", "prompt_len", type=int, default=None, help="Default 32 with --quick, else 128.")
@click.option("--gen", "gen_len", type=int, default=None, help="Default 16 with --quick, else 64.")
@click.option("--schedule", "schedules", multiple=True, callback=not_empty,
              help=f"Repeatable. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--repeats", type=int, default=None,
              help="Measured generations per schedule (default 9: the sign test then gives a 96% interval for the "
                   "median speedup that leaves out both extremes).")
@click.option("--measured", "measured_files", multiple=True, type=click.Path(dir_okay=False), callback=not_empty,
              help="Compare existing `tpsim bench --json` outputs (e.g. from a GPU cluster) instead of running.")
@click.option("--out-dir", default="compare-out", show_default=True, type=click.Path(file_okay=False),
              callback=not_empty,
              help="compare.json, report.md, plots, measured/*.json (reused on rerun), profile.json.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True, help="Per collective / rank timeout.")
@click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
              help="Bench whole compiled passes (`tpsim bench --compile`) and predict the compiled stack.")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None, callback=not_empty,
              help="Bench a Hugging Face snapshot's weights (`tpsim bench --checkpoint`); its config is the model.")
@user_errors
def compare_cmd(backend, device, nproc, quick, profile_arg, models, tps, batches, prompt_len, gen_len, schedules,
                repeats, measured_files, out_dir, timeout_s, compile_, checkpoint=None):
    """Run the harness and the simulator on the same grid and report where the prediction is right."""
    if not measured_files:                  # the harness runs here (and calibration, without --profile)
        require_torch("compare")
    device = device or ("cpu" if backend == "gloo" else "cuda")
    if checkpoint is not None:
        if models:
            raise UserError(f"--checkpoint {checkpoint} runs its own config; drop --model")
        checkpoint = os.path.abspath(checkpoint)
        # names, shapes, dtypes, shards: before anything runs
        harness("tpsim.hw.checkpoint", "compare").open_for(checkpoint, get_model(checkpoint))
        models = (checkpoint,)
    models = tuple(dict.fromkeys(models or (QUICK_MODELS if quick or not measured_files else ())))
    prompt_len = (32 if quick else 128) if prompt_len is None else prompt_len
    gen_len = (16 if quick else 64) if gen_len is None else gen_len
    repeats = 9 if repeats is None else repeats
    schedules = tuple(dict.fromkeys(("standard",) + (schedules or DEFAULT_SCHEDULES)))
    check_bounds({"--nproc": nproc, "--tp": tps, "--batch": batches, "--prompt": prompt_len, "--gen": gen_len,
                  "--repeats": repeats})
    check_timeout(timeout_s, "--timeout-s")
    for m in models:
        get_model(m)
    tps, batches = tuple(dict.fromkeys(tps or (nproc,))), tuple(dict.fromkeys(batches))
    points = [Point(m, tp, b, prompt_len, gen_len) for m in models for tp in tps for b in batches]
    if profile_arg is not None:
        profile = load_profile(profile_arg)
        if not measured_files:             # say so now, not after benchmarking the whole grid
            check_covers(profile, backend, max(p.tp for p in points) if points else 1)
    # Ctrl-C while ranks run (calibration or a point's bench): they are stopped, exit 130 with what is left
    # a rank that failed in the calibration is no user mistake: exit 1 with its report, as `calibrate` (it
    # was a traceback); a point's failed bench is one failed point
    failed = () if measured_files else harness("tpsim.hw.dist", "compare").WorkerFailed
    with ctrl_c_exits_130(), PhaseBar() as bar:      # calibration's groups, each point's bench: one bar
        try:
            result = run_compare(points, schedules, Path(out_dir), profile_arg, backend, device, nproc, quick,
                                 repeats, tuple(measured_files), timeout_s, echo=click.echo, compile=compile_,
                                 checkpoint=checkpoint, progress=bar.update)
        except failed as e:
            raise click.ClickException(str(e)) from None
    _print_summary(result, Path(out_dir))
    if not result["points"]:             # every point failed: a report of nothing is not a success
        raise click.ClickException(f"nothing could be compared: all {len(result['failed'])} point(s) failed "
                                   f"(first: {result['failed'][0]['error'] if result['failed'] else 'none given'})")


def _print_summary(result: dict, out_dir: Path) -> None:
    # one space between columns (not two): with an 'undetermined' sign the 8 columns need 79
    t = compact_table(title=f"simulated vs measured (profile {rich_escape(result['profile'])})", title_justify="left",
                      padding=0, show_edge=False)
    # two-line headers; a speedup's interval goes under it, a long point label wraps at its spaces
    # the point column wraps at spaces, never below its longest word: a table too wide for the terminal would
    # otherwise shrink it to 2 columns and fold 'toy-1024' into 4 lines
    word_len = max((len(w) for pt in result["points"] for w in pt.label.split()), default=5)
    for col in ("point", "schedule", "meas\ntokens\n/s", "pred\ntokens\n/s", "err", "meas\nspeedup", "pred\nspeedup",
                "sign"):
        t.add_column(col, justify="left" if col in ("point", "schedule") else "right", no_wrap=col != "point",
                     overflow="fold", min_width=word_len if col == "point" else None)
    for pt in result["points"]:
        for s in pt.schedules:
            t.add_row(rich_escape(pt.label), rich_escape(s.schedule), f"{s.measured.tokens_per_s:.1f}",
                      f"{s.predicted.tokens_per_s:.1f}", f"{s.err.tokens_per_s:+.1%}",
                      rich_escape(measured_speedup_text(s).replace(" ", "\n")),
                      rich_escape(predicted_speedup_text(s).replace(" ", "\n")), s.sign)
    c = terminal_console()
    if result["points"]:                 # nothing compared: no empty table above the failures
        c.print(t)
    for spec, s in result["summary"].items():
        why = [f"{n} with the measured interval containing 1" for n in [s["sign_mismatches_within_noise"]] if n]
        why += [f"{n} with only the predicted interval containing 1"
                for n in [s.get("sign_mismatches_prediction_uncertain", 0)] if n]
        # standard's speedup is 1 by definition on both sides: its sign is no result to count (a README
        # summed 10/10 signs over 5 schedules x 2 points, standard's two among them)
        sign = ("speedup 1 by definition" if spec == "standard" else f"speedup sign {s['sign_matches']}/{s['points']}"
                + (f" (undetermined: {'; '.join(why)})" if why else ""))
        c.print(rich_escape(f"{spec:12} median |err| tokens/s {s['median_abs_err_tokens_per_s']:.1%}  {sign}"))
    for note in (interval_note(result), drift_note(result)):
        if note:
            c.print(rich_escape(note))
    for pt in result["points"]:
        if pt.missing_schedules:
            c.print(f"[yellow]not measured[/yellow] {rich_escape(pt.label)}: {rich_escape(', '.join(pt.missing_schedules))}")
        for note in pt.notes:         # the simulator prices another all-reduce kernel than the run's
            c.print(f"[yellow]not priced as run[/yellow] {rich_escape(pt.label)}: {rich_escape(note)}")
    for f in result["failed"]:
        # a measured file's own text (its name, a field it holds) is printed as text, never as markup:
        # '[/]' in one was a MarkupError traceback (found by bench/fuzz_cli.py --seed 2, issue 48)
        c.print(f"[red]failed[/red] {rich_escape(str(f['point']))}: {rich_escape(str(f['error']))}")
    # what this run wrote, and only that (a failed run named traces it never wrote)
    wrote = [f"{what}: {p}" for what, p in (("report", out_dir / "report.md"), ("data", out_dir / "compare.json"))
             if p.is_file()]
    traces = sorted({str(Path(pt.trace).parent) for pt in result["points"] if pt.trace})
    wrote += [f"traces (measured beside simulated; ui.perfetto.dev): {', '.join(traces)}"] if traces else []
    if wrote:
        c.print("  ".join(wrote))
