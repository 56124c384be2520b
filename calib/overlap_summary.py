"""Interference factors from measured overlap trials: the torch-free half of calib.overlap.

calib.overlap runs the measurements on ranks (torch); this module turns every rank's trials into
the engine's two factors (compute_slowdown, comm_slowdown), and redraws the trials for their
bootstrap intervals. The fitting maths (here and in calib.overlap_fit) never needs torch.
"""
from __future__ import annotations

import random
import statistics

FACTOR_CAP = 50.0      # a slowdown factor at or above this: no measurable progress, written as the cap


def profile_factor(raw: float) -> float:
    """A measured slowdown factor as a profile writes it: within [1, FACTOR_CAP], 4 decimals."""
    return round(min(FACTOR_CAP, max(1.0, raw)), 4)


def profile_factors(summary: dict) -> dict[str, float]:
    """{compute_slowdown, comm_slowdown} as written into the profile from an overlap summary."""
    return {k: profile_factor(summary.get(k + "_raw", summary[k])) for k in ("compute_slowdown", "comm_slowdown")}


EARLY_S = 20e-6        # a wait this short: the all-reduce had finished within the module it overlapped


def _comm_rate_factor(per_rank: list[dict], comm_alone: float) -> float:
    """k such that the collective progresses at 1/k of its speed while compute runs.

    Per trial and rank: during the compute (c') the collective did b - r of its b seconds of
    work, r being the wait left after the compute: a progress rate of (b - r) / c', at least
    b / c' when it ended within the compute. On an oversubscribed CPU this is bimodal (the
    collective's thread got a core, or it did not), so the *mean* rate is what a sum of many
    overlapped collectives sees: k = 1 / mean(rate)."""
    rates = []
    for r in per_rank:
        for c, w in zip(r["both_compute"], r.get("both_wait", [])):
            done = min(max(comm_alone - w, 0.0), comm_alone)
            rates.append(min(1.0, done / c) if c > 0 else 1.0)
    if not rates:
        return 1.0
    mean = sum(rates) / len(rates)
    return FACTOR_CAP if mean <= 0.02 else max(1.0, 1.0 / mean)


def summarize(per_rank: list[dict]) -> dict:
    """Slowdowns and overlap from every rank's trials (collective: slowest rank per trial)."""
    n = min(len(r["comm"]) for r in per_rank)

    def over(key, agg):
        return [agg(r[key][i] for r in per_rank) for i in range(n)]
    med = statistics.median
    compute_alone, compute_both = med(over("compute", med)), med(over("both_compute", med))
    comm_alone, comm_both = med(over("comm", max)), med(over("both_comm", max))
    total = med(over("both_total", max))
    serial, ideal = compute_alone + comm_alone, max(compute_alone, comm_alone)
    comm_k = _comm_rate_factor(per_rank, comm_alone)
    return {
        "compute_slowdown": compute_both / compute_alone,
        "comm_slowdown": max(comm_k, 0.0),
        "comm_slowdown_direct": comm_both / comm_alone,
        "compute_alone_us": compute_alone * 1e6, "compute_overlapped_us": compute_both * 1e6,
        "comm_alone_us": comm_alone * 1e6, "comm_overlapped_us": comm_both * 1e6,
        "both_total_us": total * 1e6, "serial_us": serial * 1e6,
        "hidden_fraction": min(1.0, max(0.0, (serial - total) / min(compute_alone, comm_alone))),
        "overlaps": total < serial - 0.1 * min(compute_alone, comm_alone),
        "trials": n, "reps": per_rank[0]["reps"], "rows": per_rank[0]["rows"], "ideal_us": ideal * 1e6,
    }



# ------------------------------------------------------------------ CPU: inside the model's own passes

def summarize_passes(per_rank: list[list[dict]]) -> dict:
    """Slowdowns that make the simulator reproduce the measured passes (`measure_in_passes`),
    pooled over the cases measured (per_rank[r][j]: rank r's trials of case j).

    Per case and trial (the mean over ranks), with n all-reduces per pass: C = the pass alone,
    c0 = its compute before the first all-reduce, Tb = blocking, To and Wo = overlapped and its
    waits. The simulator charges a blocking pass C + n*b, so one all-reduce costs b = (Tb - C) / n
    in this context. In the overlapped pass the compute after the first all-reduce (A = C - c0
    alone) took S = To - Wo - c0 with all-reduces in flight: compute_slowdown = S / A. The
    all-reduces got P = n*b - Wo = Tb - C - Wo of their work done during S: comm_slowdown = S / P.
    With both, the simulator's overlapped pass is c0 + S + Wo = To exactly (for one case; pooled,
    the factors are sum(S) / sum(A) and sum(S) / sum(P), weighting each case by its time) --
    provided every all-reduce outlasts the module it overlaps, as it does on a CPU whose cores the
    compute fills. One that finishes early slows only part of the module, which this fit cannot
    see; `done_early` (the share of waits under EARLY_S) says how often that happened.
    Each term is the median over trials of paired (interleaved) differences, which cancels the
    machine's drift between trials."""
    cases = [_case_terms([r[j] for r in per_rank]) for j in range(len(per_rank[0]))]
    total = {k: sum(c[k] for c in cases) for k in ("A", "S", "P")}
    compute_k = total["S"] / total["A"] if total["A"] > 0 else 1.0
    comm_k = total["S"] / total["P"] if total["P"] > 0 else FACTOR_CAP
    return {
        "method": "passes",
        "compute_slowdown": max(1.0, compute_k), "comm_slowdown": min(FACTOR_CAP, max(1.0, comm_k)),
        "compute_slowdown_raw": compute_k, "comm_slowdown_raw": comm_k,
        "overlaps": total["P"] > 0, "trials": min(c["trials"] for c in cases),
        "done_early": max(c["done_early"] for c in cases), "cases": cases,
    }


def _case_terms(per_rank: list[dict]) -> dict:
    """One case's paired medians (seconds) and its own factors, as `summarize_passes` explains."""
    n_trials = min(len(r["alone"]) for r in per_rank)
    n = per_rank[0]["n"]
    keys = ("alone", "first", "blocking", "overlapped", "overlapped_wait")
    rows = [{k: sum(r[k][i] for r in per_rank) / len(per_rank) for k in keys} for i in range(n_trials)]
    med = statistics.median
    a = med(r["alone"] - r["first"] for r in rows)
    s = med(r["overlapped"] - r["overlapped_wait"] - r["first"] for r in rows)
    p = med(r["blocking"] - r["alone"] - r["overlapped_wait"] for r in rows)
    return {
        "what": per_rank[0].get("what", ""), **({"case": per_rank[0]["case"]} if "case" in per_rank[0] else {}),
        "A": a, "S": s, "P": p, "trials": n_trials, "all_reduces": n,
        "compute_slowdown": s / a if a > 0 else 1.0, "comm_slowdown": s / p if p > 0 else None,     # None: no progress at all
        "all_reduce_in_context_us": med((r["blocking"] - r["alone"]) / n for r in rows) * 1e6,
        **{f"{k}_us": med(r[k] for r in rows) * 1e6 for k in keys},
        "blocking_over_overlapped": med(r["blocking"] / r["overlapped"] for r in rows),
        # waits that found their all-reduce done (the first all-reduce has no wait before it)
        "done_early": (sum(sum(r.get("early", [0] * n_trials)[:n_trials]) for r in per_rank)
                       / (len(per_rank) * n_trials * max(1, n - 1))),
        # the raw points behind the medians (s, mean over ranks, one entry per trial)
        "per_trial_s": {k: [round(r[k], 9) for r in rows] for k in keys},
    }


# the passes' own time varying more than this across trials (p10..p90 over the median): the machine was
# busy while it measured. The same pass repeated on cores of its own takes about the same time; the
# factors come from differences of such passes, so another job's load lands in them (issue 48: a loaded
# 2-core box wrote compute x9.67 where docs/calibrate.md's run shows x2.86)
NOISY_SPREAD = 0.5


def noise_note(summary: dict) -> str | None:
    """A warning when an in-pass overlap summary's trials say the machine was busy (NOISY_SPREAD),
    naming the spread; None when they do not, or there are no kept trials (a GPU or older calibration)."""
    spreads = []
    for c in summary.get("cases") or []:
        alone = sorted((c.get("per_trial_s") or {}).get("alone") or [])
        if len(alone) >= 10 and statistics.median(alone) > 0:
            q = statistics.quantiles(alone, n=10)
            spreads.append(((q[-1] - q[0]) / statistics.median(alone), len(alone)))
    if not spreads or max(s for s, _ in spreads) <= NOISY_SPREAD:
        return None
    spread, n = max(spreads)
    return (f"noisy: the pass measured alone varied by {spread:.0%} of its median across {n} trials (p10..p90), "
            f"so the overlap factors hold the machine's load (another job on its cores?); calibrate again on an "
            f"idle machine")


def redraw_trials(case: dict, rng) -> dict[str, list[float]]:
    """One bootstrap draw of an in-pass case's kept trials (`per_trial_s`): as many trials as it
    has, with replacement, each trial's values kept together (they are paired)."""
    rows = case["per_trial_s"]
    m = len(rows["alone"])
    idx = [rng.randrange(m) for _ in range(m)]
    return {k: [v[i] for i in idx] for k, v in rows.items()}


def factor_samples(summary: dict, n: int = 200, seed: int = 0) -> list[tuple[float, float]]:
    """Bootstrap (compute_slowdown, comm_slowdown) pairs from an in-pass summary's kept trials:
    each sample redraws every case's trials with replacement and pools them as `summarize_passes`
    does. [] when the summary has no trials to draw from (a GPU or imported profile)."""
    cases = summary.get("cases") or []
    if summary.get("method") != "passes" or not cases or not all("per_trial_s" in c for c in cases):
        return []
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        drawn = [redraw_trials(c, rng) | {"n": c["all_reduces"]} for c in cases]
        s = summarize_passes([drawn])
        out.append((s["compute_slowdown"], s["comm_slowdown"]))
    return out
