"""Compare, step 2: join one point's measured run with its prediction: end-to-end errors, the
speedup over standard and its sign, and per-op records joined on (phase, op, stream), as
calib.compare_result's ComparedPoint."""
from __future__ import annotations

import statistics

from tpsim.sim.predict import Prediction, Simulator

from tpsim.calib.compare_intervals import has_interval, overlap_samples, speedup_interval, speedup_undetermined
from tpsim.calib.compare_measure import (CompareError, check_measured, check_profile_covers, collective_notes,
                                        machine_drift, workload_of)
from tpsim.calib.compare_result import (ComparedPoint, MeasuredSide, OpRow, PredictedSide, RelErrors, ScheduleResult,
                                        sign_verdict)

def _rel(pred: float, meas: float) -> float:
    return (pred - meas) / meas if meas else float("nan")


def op_join(measured_records: list[dict], pred: Prediction, gen_len: int) -> list[OpRow]:
    """Per (phase, op, stream): measured median duration over ranks vs simulated duration, and the
    op's contribution to the end-to-end error (x1 for prefill, x(gen-1) for decode)."""
    meas: dict[tuple, list[float]] = {}
    for r in measured_records:
        meas.setdefault((r["phase"], r["op"], r["stream"]), []).append(r["end_s"] - r["start_s"])
    sim: dict[tuple, float] = {}
    for res in (pred.prefill, pred.decode):
        for r in (res.records if res else []):
            if r.rank == 0 and r.stream != "launch":     # the harness does not time the CPU's launches
                sim[(r.phase, r.op, r.stream)] = sim.get((r.phase, r.op, r.stream), 0.0) + r.dur_s
    rows = []
    for key in sorted(set(meas) | set(sim)):
        phase, op, stream = key
        m = statistics.median(meas[key]) if key in meas else 0.0
        s = sim.get(key, 0.0)
        times = 1 if phase == "prefill" else max(gen_len - 1, 0)
        rows.append(OpRow(phase, op, stream, m, s, _rel(s, m) if m else None, (s - m) * times))
    rows.sort(key=lambda r: -abs(r.contribution_s))
    return rows


def speedup_sign(s: dict) -> str:
    """The sign verdict of one schedule's compare.json entry (`ScheduleResult.sign` of a typed one);
    an entry without the predicted interval's verdict counts it as False."""
    return sign_verdict(s["sign_match"], s["measured_speedup_within_noise"],
                        bool(s.get("predicted_speedup_within_noise")))


def predicted_speedup_text(s: ScheduleResult) -> str:
    iv = s.predicted.speedup_interval
    return f"{s.predicted.speedup:.3f}" + (f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv else "")


def measured_speedup_text(s: ScheduleResult) -> str:
    ci = s.measured.speedup_ci
    shown = ci and has_interval(s.measured.speedup_ci_coverage)      # one repeat: no interval to show
    return f"{s.measured.speedup:.3f}" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if shown else "")


def compare_point(measured: dict, profile, schedules: tuple[str, ...] | None = None) -> ComparedPoint:
    """Predicted vs measured for every schedule of one measured run."""
    check_measured(measured)
    w = workload_of(measured, profile)
    check_profile_covers(w, (measured.get("env") or {}).get("backend", "nccl"))
    rows_m = {r["schedule"]: r for r in measured["schedules"]}
    wanted = [s for s in (schedules or rows_m) if s in rows_m]
    if "standard" not in rows_m:
        raise CompareError("measured JSON has no standard run: speedups need it")
    missing = [s for s in (schedules or ()) if s not in rows_m]
    sim = Simulator(w, record=True)
    base = sim.predict("standard")
    samples = overlap_samples(profile)
    out = []
    for spec in dict.fromkeys(["standard", *wanted]):
        p = base if spec == "standard" else sim.predict(spec)
        p.speedup = p.tokens_per_s / base.tokens_per_s
        m = rows_m[spec]
        sp = m.get("spread", {}).get("speedup", {})
        noise = spec != "standard" and speedup_undetermined(sp)
        # The measured speedup: the median of the per-repeat paired ratios (the repeats are
        # interleaved, so pairing cancels drift) when the run has them, the one its interval is
        # about; else tokens/s over standard's.
        paired = "ci_lo" in sp and spec != "standard"
        meas_speedup = sp["median"] if paired else m["speedup"]
        iv = speedup_interval(w, spec, samples) if spec != "standard" else None
        out.append(ScheduleResult(
            schedule=spec,
            measured=MeasuredSide(*(m[k] for k in ("prefill_s", "decode_s", "tokens_per_s", "exposed_comm_s")),
                                  speedup=meas_speedup, speedup_of_medians=m["speedup"],
                                  speedup_ci=(sp["ci_lo"], sp["ci_hi"]) if paired else None,
                                  speedup_ci_coverage=sp["ci_coverage"] if paired else None),
            predicted=PredictedSide(p.to_dict(), tuple(iv) if iv else None),
            err=RelErrors(*(_rel(getattr(p, k), m[k]) for k in ("prefill_s", "decode_s", "tokens_per_s"))),
            speedup_err=p.speedup - meas_speedup,
            sign_match=spec == "standard" or (p.speedup >= 1.0) == (meas_speedup >= 1.0),
            measured_speedup_within_noise=noise,
            predicted_speedup_within_noise=bool(iv and iv[0] <= 1.0 <= iv[1]),
            ops=tuple(op_join(m.get("records", []), p, w.gen_len)),
        ))
    return ComparedPoint(w.model.name, w.tp, w.batch, w.prompt_len, w.gen_len, profile.name, tuple(missing),
                         tuple(out), machine_drift(measured, profile), measured.get("env", {}),
                         notes=collective_notes(measured, sim, [s.schedule for s in out]))


def summarize(points: list[ComparedPoint]) -> dict:
    """Median |error| of tokens/s and |speedup error| per schedule, and sign agreement."""
    by: dict[str, list[ScheduleResult]] = {}
    for pt in points:
        for s in pt.schedules:
            by.setdefault(s.schedule, []).append(s)
    out = {}
    for spec, xs in by.items():
        out[spec] = {"points": len(xs),
                     "median_abs_err_tokens_per_s": statistics.median(abs(x.err.tokens_per_s) for x in xs),
                     "median_abs_err_prefill_s": statistics.median(abs(x.err.prefill_s) for x in xs),
                     "median_abs_err_decode_s": statistics.median(abs(x.err.decode_s) for x in xs),
                     "median_abs_speedup_err": statistics.median(abs(x.speedup_err) for x in xs),
                     "sign_matches": sum(x.sign_match for x in xs),
                     "sign_mismatches_within_noise": sum((not x.sign_match) and x.measured_speedup_within_noise
                                                         for x in xs),
                     # the measurement is sure of its side of 1, the prediction's own interval is not
                     "sign_mismatches_prediction_uncertain": sum(
                         (not x.sign_match) and not x.measured_speedup_within_noise
                         and x.predicted_speedup_within_noise for x in xs)}
    return out
