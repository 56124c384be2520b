"""Simulated vs measured: run the harness and the simulator on the same workloads with the same
profile, and show per op and end to end where the prediction is right and where it is wrong.

For each grid point (model, TP, batch) the harness (`hw.bench`) measures every schedule, and the
simulator predicts the same workload with the same profile and the same serving stack. Reported:
predicted vs measured prefill, decode and tokens/s with relative errors; the error of the
predicted *speedup* over standard (what users decide on) and whether its sign (faster or slower
than standard) agrees; and a per-op join of simulated and measured records on (phase, op,
stream), ordered by each op's contribution to the end-to-end error.

Measured JSONs are saved per point as they finish, so a rerun with the same --out-dir skips
finished points; a point that fails is reported and the rest of the grid still runs.

The parts: calib/compare_measure.py (run the harness, rebuild the workload), compare_join.py
(errors, speedups, per-op join), compare_intervals.py (the predicted speedup's interval),
compare_report.py (compare.md, plots, traces), compare_result.py (the compared point and
schedule as dataclasses, and compare.json's format); this module is the command.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click

from tpsim.sim.cli_options import TpsimError, check_bounds, rich_console, rich_escape, rich_table
from tpsim.sim.fileio import MAX_LOG_BYTES, parse_json, read_input_text
from tpsim.sim.model import get_model
from tpsim.sim.profile import ProfileError, load_profile
from tpsim.sim.schedule import DEFAULT_SCHEDULES, KINDS, build
from tpsim.sim.stack import Stack, Step

from tpsim.hw import harness, require_torch
from tpsim.hw.run_config import check_timeout

from tpsim.calib.compare_intervals import interval_note
from tpsim.calib.compare_join import compare_point, measured_speedup_text, predicted_speedup_text, summarize
from tpsim.calib.compare_measure import CompareError, Point, check_covers, measure
from tpsim.calib.compare_report import drift_note, point_timeline, write_point_trace, write_report

QUICK_MODELS = ("toy-512", "toy-1024")


# ------------------------------------------------------------------ the command

def _collective_kinds(points: list[Point], schedules: tuple[str, ...]) -> tuple[str, ...]:
    """all_reduce plus every collective kind the schedules emit on the grid (e.g. reduce_scatter)."""
    used = {"all_reduce"}
    for p in points:
        step = Step.prefill(p.batch, p.prompt_len, p.gen_len, Stack())
        used |= {op.kind for spec in schedules for op in build(spec, get_model(p.model), p.tp, step).collectives}
    return tuple(k for k in KINDS if k in used)


def run_compare(points: list[Point], schedules: tuple[str, ...], out_dir: Path, profile_arg: str | None,
                backend: str, device: str, nproc: int, quick: bool, repeats: int, measured_files: tuple[str, ...],
                timeout_s: float, echo=print, compile: bool = False, checkpoint: str | None = None) -> dict:
    """The comparison, as compare.json holds it (calib.compare_result.comparison_to_dict), but with
    its points typed (ComparedPoint); also written to out_dir (compare.json, report.md, plots, traces)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if profile_arg is None and not measured_files:
        models = tuple(dict.fromkeys(p.model for p in points))
        echo(f"calibrating {backend} on {nproc} ranks for {', '.join(models)} -> {out_dir / 'profile.json'}")
        # a quick calibration measures all-reduce only; also the collectives the schedules use (seq-parallel)
        used = _collective_kinds(points, schedules)
        calibrate = harness("tpsim.calib.run", "compare").calibrate
        calibrate(backend, nproc, models, tuple(sorted({p.tp for p in points})), tuple(sorted({p.batch for p in points})),
                  points[0].prompt_len, points[0].gen_len, quick, out_dir / "profile.json",
                  **({"collectives": used} if quick and used != ("all_reduce",) else {}))
        profile_arg = str(out_dir / "profile.json")
    if profile_arg is None:
        raise CompareError("--measured needs --profile: the profile to predict with")
    profile = load_profile(profile_arg)
    measured_runs: list[tuple[str, dict | Exception]] = []
    for f in measured_files:
        try:
            # the input policy: a regular file (not a symlink to /dev/zero), bounded, named in errors
            measured_runs.append((f, parse_json(read_input_text(f, "measured JSON", MAX_LOG_BYTES), f)))
        except ValueError as e:            # the policy's message names the file (and the line)
            measured_runs.append((f, CompareError(f"cannot read measured JSON: {e}")))
    if not measured_files:
        for i, p in enumerate(points):
            echo(f"[{i + 1}/{len(points)}] bench {p.key} ({len(schedules)} schedules, {repeats} repeats)")
            try:
                measured_runs.append((p.key, measure(p, schedules, out_dir, backend, device, repeats=repeats,
                                                     timeout_s=timeout_s, compile=compile, checkpoint=checkpoint)))
            except Exception as e:          # noqa: BLE001 - a failed point is reported, the grid goes on
                measured_runs.append((p.key, e))
    results, failed, timelines = [], [], {}
    for name, m in measured_runs:
        if isinstance(m, Exception):
            failed.append({"point": name, "error": str(m).splitlines()[0]})
            continue
        try:
            pt = compare_point(m, profile, schedules if not measured_files else None)
            results.append(pt)
            spec = "ladder" if any(s.schedule == "ladder" for s in pt.schedules) else pt.schedules[-1].schedule
            timelines[f"{pt.model}|{pt.tp}|{pt.batch}|{spec}"] = point_timeline(m, spec, None, profile)
            results[-1] = dataclasses.replace(pt, trace=str(write_point_trace(m, profile, out_dir)))
        except (CompareError, ValueError, ProfileError) as e:
            failed.append({"point": name, "error": str(e)})
    result = {"profile": profile.name, "profile_path": profile.source_path, "points": results, "failed": failed,
              "summary": summarize(results), "timelines": timelines}
    write_report(result, out_dir)
    return result


@click.command("compare")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cpu for gloo, cuda for nccl.")
@click.option("--nproc", type=int, default=2, show_default=True, help="Ranks to launch (= TP unless --tp).")
@click.option("--quick", is_flag=True, help=f"Small grid ({', '.join(QUICK_MODELS)}; prompt 32, gen 16) "
                                            "and a quick calibration: a few minutes on a 2-core box.")
@click.option("--profile", "profile_arg", default=None,
              help="Profile to predict with (built-in or JSON). Default: calibrate this machine first.")
@click.option("--model", "models", multiple=True, help="Repeatable.")
@click.option("--tp", "tps", type=int, multiple=True, help="Repeatable; default --nproc.")
@click.option("--batch", "batches", type=int, multiple=True, default=(1,), show_default=True)
@click.option("--prompt", "prompt_len", type=int, default=None, help="Default 32 with --quick, else 128.")
@click.option("--gen", "gen_len", type=int, default=None, help="Default 16 with --quick, else 64.")
@click.option("--schedule", "schedules", multiple=True, help=f"Repeatable. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--repeats", type=int, default=None,
              help="Measured generations per schedule (default 9: the sign test then gives a 96% interval for the "
                   "median speedup that leaves out both extremes).")
@click.option("--measured", "measured_files", multiple=True, type=click.Path(dir_okay=False),
              help="Compare existing `tpsim bench --json` outputs (e.g. from a GPU cluster) instead of running.")
@click.option("--out-dir", default="compare-out", show_default=True, type=click.Path(file_okay=False),
              help="compare.json, report.md, plots, measured/*.json (reused on rerun), profile.json.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True, help="Per collective / rank timeout.")
@click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
              help="Bench whole compiled passes (`tpsim bench --compile`) and predict the compiled stack.")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None,
              help="Bench a Hugging Face snapshot's weights (`tpsim bench --checkpoint`); its config is the model.")
def compare_cmd(backend, device, nproc, quick, profile_arg, models, tps, batches, prompt_len, gen_len, schedules,
                repeats, measured_files, out_dir, timeout_s, compile_, checkpoint=None):
    """Run the harness and the simulator on the same grid and report where the prediction is right."""
    if not measured_files:                  # the harness runs here (and calibration, without --profile)
        require_torch("compare")
    device = device or ("cpu" if backend == "gloo" else "cuda")
    if checkpoint:
        if models:
            raise TpsimError(f"--checkpoint {checkpoint} runs its own config; drop --model")
        checkpoint = os.path.abspath(checkpoint)
        try:                               # names, shapes, dtypes, shards: before anything runs
            harness("tpsim.hw.checkpoint", "compare").open_for(checkpoint, get_model(checkpoint))
        except ValueError as e:
            raise TpsimError(str(e)) from None
        models = (checkpoint,)
    models = tuple(dict.fromkeys(models or (QUICK_MODELS if quick or not measured_files else ())))
    prompt_len = (32 if quick else 128) if prompt_len is None else prompt_len
    gen_len = (16 if quick else 64) if gen_len is None else gen_len
    repeats = 9 if repeats is None else repeats
    schedules = tuple(dict.fromkeys(("standard",) + (schedules or DEFAULT_SCHEDULES)))
    try:
        check_bounds({"--nproc": nproc, "--tp": tps, "--batch": batches, "--prompt": prompt_len, "--gen": gen_len,
                      "--repeats": repeats})
        check_timeout(timeout_s, "--timeout-s")
        for m in models:
            get_model(m)
        tps, batches = tuple(dict.fromkeys(tps or (nproc,))), tuple(dict.fromkeys(batches))
        points = [Point(m, tp, b, prompt_len, gen_len) for m in models for tp in tps for b in batches]
        if profile_arg:
            profile = load_profile(profile_arg)
            if not measured_files:             # say so now, not after benchmarking the whole grid
                check_covers(profile, backend, max(p.tp for p in points) if points else 1)
        result = run_compare(points, schedules, Path(out_dir), profile_arg, backend, device, nproc, quick, repeats,
                             tuple(measured_files), timeout_s, echo=click.echo, compile=compile_,
                             checkpoint=checkpoint)
    except (ValueError, ProfileError) as e:
        raise TpsimError(str(e)) from None
    _print_summary(result, Path(out_dir))
    if not result["points"]:             # every point failed: a report of nothing is not a success
        raise click.ClickException(f"nothing could be compared: all {len(result['failed'])} point(s) failed "
                                   f"(first: {result['failed'][0]['error'] if result['failed'] else 'none given'})")


def _print_summary(result: dict, out_dir: Path) -> None:
    t = rich_table(title=f"simulated vs measured (profile {result['profile']})", title_justify="left")
    for col in ("point", "schedule", "meas tok/s", "pred tok/s", "err", "meas speedup", "pred speedup", "sign"):
        t.add_column(col, justify="left" if col in ("point", "schedule") else "right")
    for pt in result["points"]:
        for s in pt.schedules:
            t.add_row(pt.label, s.schedule, f"{s.measured.tokens_per_s:.1f}", f"{s.predicted.tokens_per_s:.1f}",
                      f"{s.err.tokens_per_s:+.1%}", rich_escape(measured_speedup_text(s)),
                      rich_escape(predicted_speedup_text(s)), s.sign)
    c = rich_console(width=120)
    c.print(t)
    for spec, s in result["summary"].items():
        why = [f"{n} with the measured interval containing 1" for n in [s["sign_mismatches_within_noise"]] if n]
        why += [f"{n} with only the predicted interval containing 1"
                for n in [s.get("sign_mismatches_prediction_uncertain", 0)] if n]
        c.print(f"{spec:12} median |err| tokens/s {s['median_abs_err_tokens_per_s']:.1%}  "
                f"speedup sign {s['sign_matches']}/{s['points']}" + (f" (undetermined: {'; '.join(why)})" if why else ""))
    for note in (interval_note(result), drift_note(result)):
        if note:
            c.print(rich_escape(note))
    for pt in result["points"]:
        if pt.missing_schedules:
            c.print(f"[yellow]not measured[/yellow] {pt.label}: {', '.join(pt.missing_schedules)}")
    for f in result["failed"]:
        c.print(f"[red]failed[/red] {f['point']}: {f['error']}")
    c.print(f"report: {out_dir / 'report.md'}  data: {out_dir / 'compare.json'}  traces (measured beside "
            f"simulated; ui.perfetto.dev): {out_dir / 'traces'}")
