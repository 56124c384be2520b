"""Compare: the predicted speedup's interval, from the overlap factors' bootstrap samples that
the calibration kept, and whether a measured speedup is determined at all given its spread."""
from __future__ import annotations

from tpsim.sim.engine.step import Interference
from tpsim.sim.predict import Simulator, Workload

from tpsim.calib.overlap_summary import factor_samples, profile_factors

PREDICTED_INTERVAL = (0.05, 0.95)       # quantiles of the bootstrap: a 90% interval


def overlap_samples(profile) -> list[tuple[float, float, float]]:
    """Bootstrap (compute_slowdown, comm_slowdown, wake_s) triples of the profile's overlap
    calibration: the refits kept by a simulation fit (calib.overlap_fit), else the closed form
    redrawn from the kept trials (calib.overlap_summary.factor_samples, no wake-up); [] when the profile
    kept no trials (GPU, imported or built-in)."""
    groups = (profile.raw or {}).get("raw", {}).get("groups", {})                # the file's raw section
    used = {"compute_slowdown": profile.compute_slowdown, "comm_slowdown": profile.comm_slowdown}
    for g in reversed(list(groups.values())):       # a profile's own groups follow its base's
        sm = g.get("summary", {}) if g.get("kind") == "overlap" else {}
        fit = sm.get("fit")
        if fit and {k: fit[k] for k in used} == used and fit["wake_us"] * 1e-6 == profile.wake_s:
            return [(cs, ks, w_us * 1e-6) for cs, ks, w_us in fit["samples"]]
        if sm and not fit and profile_factors(sm) == used:      # the group whose factors the profile uses
            return [(cs, ks, 0.0) for cs, ks in factor_samples(sm)]
    return []


def speedup_interval(w: Workload, spec: str, samples: list[tuple[float, float, float]]) -> list[float] | None:
    """The predicted speedup's interval from the calibration's own noise: `spec` over standard
    predicted under each bootstrap triple of overlap parameters, its PREDICTED_INTERVAL quantiles.
    None without samples. Schedules that never overlap a collective get a zero-width interval."""
    if not samples:
        return None

    sim = Simulator(w, record=False)     # one: its cost model and built passes serve every sample

    def speedup(cs: float, ks: float, wake_s: float) -> float:
        sim.interference = Interference(cs, ks, wake_s)
        return sim.predict(spec).tokens_per_s / sim.predict("standard").tokens_per_s
    free, worst = speedup(1.0, 1.0, 0.0), speedup(*max(samples))
    if free == worst == speedup(*min(samples)):     # nothing overlaps: the factors change nothing
        return [free, free]
    got = sorted(speedup(*t) for t in samples)
    lo, hi = PREDICTED_INTERVAL
    return [got[round(lo * (len(got) - 1))], got[round(hi * (len(got) - 1))]]


def interval_note(result: dict) -> str:
    """What the measured speedup and its interval are, and how sure (coverage depends on repeats);
    `result`: run_compare's (its points typed, calib.compare_result.ComparedPoint)."""
    paired = [s.measured.speedup_ci_coverage for pt in result["points"] for s in pt.schedules
              if s.measured.speedup_ci is not None]
    cov = [c for c in paired if has_interval(c)]
    one_repeat = len(cov) < len(paired)
    pred = any(s.predicted.speedup_interval is not None for pt in result["points"] for s in pt.schedules)
    if not (paired or pred):
        return ""
    note = (f"meas speedup [lo-hi]: the median per-repeat paired ratio and an at least {min(cov):.0%} confidence "
            "interval for it (sign test over the repeats).") if cov else ""
    if one_repeat:
        note += (" meas speedup of one repeat: that repeat's paired ratio, with no interval (one repeat has "
                 "none; --repeats 5 or more give a 90% one).")
    if pred:
        note += (" pred speedup [lo-hi]: a 90% bootstrap interval over the trials of the profile's overlap "
                 "calibration (the prediction's own noise).")
    note += (" sign 'undetermined': prediction and measurement disagree but one of the intervals contains 1;"
             " 'WRONG': neither does.")
    if cov and min(cov) < 0.9:
        note += (" Fewer than 5 repeats: too few for a 90% interval, so the measurement rarely calls a "
                 "disagreement undetermined.")
    return note.strip()


def has_interval(coverage: float | None) -> bool:
    """A measured speedup's interval says something: hw.bench.median_ci of one repeat is that
    ratio alone, [x, x] with coverage 0."""
    return bool(coverage)


def speedup_undetermined(spread: dict) -> bool:
    """True when the measurement cannot tell the speedup's side of 1: the median's confidence
    interval over the per-repeat paired ratios (hw.bench.median_ci, sign test) contains 1.
    Measured JSONs written before that interval existed fall back to the interquartile range."""
    if not spread:
        return False
    lo, hi = (spread["ci_lo"], spread["ci_hi"]) if "ci_lo" in spread else (spread.get("p25", 1), spread.get("p75", 1))
    return lo <= 1.0 <= hi
