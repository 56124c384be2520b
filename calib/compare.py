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
schedule as dataclasses, and compare.json's format); this module runs the grid (`run_compare`);
the command is commands/compare.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from tpsim.fileio.policy import MAX_LOG_BYTES, parse_json, read_input_text
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import ProfileError, load_profile
from tpsim.sim.schedule.language import KINDS, build
from tpsim.sim.stack.spec import Stack, Step

from tpsim.hw import harness

from tpsim.calib.compare_join import compare_point, summarize
from tpsim.calib.compare_measure import CompareError, Point, measure, saved_path, saved_run
from tpsim.calib.compare_report import point_timeline, write_point_trace, write_report

QUICK_MODELS = ("toy-512", "toy-1024")


def _collective_kinds(points: list[Point], schedules: tuple[str, ...]) -> tuple[str, ...]:
    """all_reduce plus every collective kind the schedules emit on the grid (e.g. reduce_scatter)."""
    used = {"all_reduce"}
    for p in points:
        step = Step.prefill(p.batch, p.prompt_len, p.gen_len, Stack())
        # an async-TP ring step (shift) is priced on a CPU profile as a step of its all-gather (async_tp.py)
        used |= {"all_gather" if op.kind == "shift" else op.kind
                 for spec in schedules for op in build(spec, get_model(p.model), p.tp, step).collectives}
    return tuple(k for k in KINDS if k in used)


def run_compare(points: list[Point], schedules: tuple[str, ...], out_dir: Path, profile_arg: str | None,
                backend: str, device: str, nproc: int, quick: bool, repeats: int, measured_files: tuple[str, ...],
                timeout_s: float, echo=print, compile: bool = False, checkpoint: str | None = None,
                progress=None) -> dict:
    """The comparison, as compare.json holds it (calib.compare_result.comparison_to_dict), but with
    its points typed (ComparedPoint); also written to out_dir (compare.json, report.md, plots, traces).
    `progress(what, done, total)` hears from the calibration (groups) and each point's bench (rank 0's
    progress marks): the command's progress bar."""
    report = progress or (lambda what, done, total: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    if profile_arg is None and not measured_files:
        models = tuple(dict.fromkeys(p.model for p in points))
        echo(f"calibrating {backend} on {nproc} ranks for {', '.join(models)} -> {out_dir / 'profile.json'}")
        # a quick calibration measures all-reduce only; also the collectives the schedules use (seq-parallel)
        used = _collective_kinds(points, schedules)
        calibrate = harness("tpsim.calib.run", "compare").calibrate
        calibrate(backend, nproc, models, tuple(sorted({p.tp for p in points})), tuple(sorted({p.batch for p in points})),
                  points[0].prompt_len, points[0].gen_len, quick, out_dir / "profile.json",
                  progress=lambda done, total, _name: report("calibrating: groups", done, total),
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
            msg = str(e)                   # an unreadable file's message already starts so; a parse error's not
            measured_runs.append((f, CompareError(msg if msg.startswith("cannot read measured JSON")
                                                  else f"cannot read measured JSON: {msg}")))
    if not measured_files:
        for i, p in enumerate(points):
            saved = saved_run(p, schedules, out_dir, backend, device, repeats, compile)
            if saved is not None:          # not run again: say so, and where its numbers come from
                echo(f"[{i + 1}/{len(points)}] reuse {p.key}: {saved_path(p, out_dir)} from an earlier run "
                     f"(same schedules, {repeats} repeats)")
                measured_runs.append((p.key, saved))
                continue
            echo(f"[{i + 1}/{len(points)}] bench {p.key} ({len(schedules)} schedules, {repeats} repeats)")
            try:
                what = f"bench {i + 1}/{len(points)} {p.key}"
                measured_runs.append((p.key, measure(p, schedules, out_dir, backend, device, repeats=repeats,
                                                     timeout_s=timeout_s, compile=compile, checkpoint=checkpoint,
                                                     progress=lambda done, total, what=what: report(what, done, total))))
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
