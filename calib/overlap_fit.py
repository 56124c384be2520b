"""Overlap parameters fitted by simulation (CPU in-pass calibration).

calib.overlap.measure_in_passes times each case's standard decode pass three ways: alone, with
blocking all-reduces, and with each all-reduce in flight during the next module. This module finds
the engine's Interference (compute_slowdown s, comm_slowdown k, wake_s w) under which the engine,
costing every op from the profile itself, reproduces two measured ratios of every case:

    blocking / overlapped pass time       (what an overlapping schedule gains)
    overlapped waits / overlapped time    (how much of it is still spent waiting)

Why simulate instead of the closed form (`summarize_passes`): the closed form is exact only while
each all-reduce outlasts the module it overlaps, and on this 2-core VM 50-70% finish inside it.
And it has no wake-up: a gloo all-reduce costs ~1.5 ms to a rank that blocks on it but ~0.5 ms
when issued back to back, because a rank that sleeps in wait() must be scheduled again. Measured
over 5 pinned calibrations of toy-512 and toy-1024, the closed form put the overlapped passes at
1.11-1.19x (toy-512) where they measured 1.30-1.40x; no (s, k) pair reproduces both models, while
(s, k, w) with w ~0.7 ms reproduces both ratios within 1-2%.

The fit is least squares in log space (Nelder-Mead from the closed form's values). Its noise
comes from a bootstrap over the kept trials: `n` resamples, each refitted (warm start), kept in
the profile so `tpsim compare` can give a predicted speedup its interval without refitting.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
import random
import statistics
from typing import Callable

import numpy as np
from scipy.optimize import minimize

from tpsim.sim.schedule import transform
from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import Op, Schedule, build
from tpsim.sim.stack.spec import Step, make_stack

from tpsim.calib.overlap_summary import FACTOR_CAP, redraw_trials

def case_descriptor(case, model) -> dict:
    """What the fit needs to rebuild a case's pass: `model` is the one the pass ran (maybe truncated)."""
    return {"model": case.model.name, "layers": model.layers, "tp": case.tp, "batch": case.batch,
            "prompt_len": case.prompt_len, "gen_len": case.gen_len, "stack": dataclasses.asdict(case.stack)}


def decode_schedule(desc: dict) -> Schedule:
    """The standard decode pass the case's calibration ran, from its descriptor."""
    model = get_model(desc["model"])
    if desc["layers"] < model.layers:
        model = model.truncated(desc["layers"])
    st = make_stack(desc["stack"])
    return build("standard", model, desc["tp"], Step.decode(desc["batch"], desc["prompt_len"], desc["gen_len"], 1, st), st)


@dataclass(frozen=True)
class Patterns:
    """A case's two calibration patterns (sim.schedule.transform.blocking and .overlapped of its standard
    pass), built and priced once: a fit evaluates them hundreds of times with only the
    Interference varying, so each evaluation is two runs of the rank engine and nothing more."""

    blocking: Schedule
    overlapped: Schedule
    times_s: dict            # op name -> seconds, for the ops of both patterns

    @classmethod
    def of(cls, sched: Schedule, op_time: Callable[[Op], float]) -> "Patterns":
        """`op_time` prices the schedule's own ops; the stand-ins and waits the patterns add carry
        their own cost (zero)."""
        blocking, overlapped = transform.blocking(sched), transform.overlapped(sched)
        times = {op.name: (op_time(op) if op.given_cost_s is None else op.given_cost_s)
                 for pattern in (blocking, overlapped) for op in pattern.ops}
        return cls(blocking, overlapped, times)

    def ratios(self, inter: Interference) -> tuple[float, float]:
        """(blocking / overlapped pass time, overlapped waits / overlapped time) under `inter`."""
        def run(sched: Schedule) -> tuple[float, float]:
            return simulate_ranks(compile_schedule(sched, lambda op: self.times_s[op.name], inter), 1, inter)
        blocking_s, _ = run(self.blocking)
        overlapped_s, waits_s = run(self.overlapped)
        return blocking_s / overlapped_s, waits_s / overlapped_s


def pass_ratios(sched: Schedule, op_time: Callable[[Op], float], inter: Interference) -> tuple[float, float]:
    """(blocking / overlapped pass time, overlapped waits / overlapped time) under `inter`: the
    engine runs the very patterns calib.overlap ran on the ranks (Patterns)."""
    return Patterns.of(sched, op_time).ratios(inter)


def targets(case: dict, rows: dict | None = None) -> tuple[float, float]:
    """The measured (blocking / overlapped, overlapped waits / overlapped) of a case: medians of
    the per-trial values (`rows`: the case's per_trial_s, or a bootstrap draw of it)."""
    rows = rows or case["per_trial_s"]
    med = statistics.median
    ratio = med(b / o for b, o in zip(rows["blocking"], rows["overlapped"]))
    return ratio, med(w / o for w, o in zip(rows["overlapped_wait"], rows["overlapped"]))


def _params(x, wake_cap_s: float = math.inf) -> Interference:
    cap = math.log(FACTOR_CAP - 1)
    return Interference(1 + math.exp(min(x[0], cap)), 1 + math.exp(min(x[1], cap)),
                        min(wake_cap_s, math.exp(min(x[2], 20.0)) * 1e-3))


def _start(s0: float, k0: float, w0_s: float) -> list[float]:
    return [math.log(max(s0 - 1, 1e-3)), math.log(max(k0 - 1, 1e-3)), math.log(max(w0_s, 1e-6) * 1e3)]


def fit(cases: list[tuple[Schedule, Callable[[Op], float], tuple[float, float]]], start: Interference,
        max_evals: int = 300) -> tuple[Interference, float]:
    """The Interference minimizing sum over cases of (log ratio error)^2 + (wait share error)^2,
    and that residual. `cases`: (standard decode schedule, op costs, measured targets)."""
    return fit_patterns([(Patterns.of(sched, op_time), target) for sched, op_time, target in cases], start, max_evals)


def fit_patterns(cases: list[tuple[Patterns, tuple[float, float]]], start: Interference,
                 max_evals: int = 300) -> tuple[Interference, float]:
    """`fit` over cases whose patterns are built already (the bootstrap refits reuse them)."""
    # a wake-up longer than every all-reduce changes nothing more (min(w, t)): cap it there, so the
    # loss has no flat direction towards a meaningless huge value
    wake_cap = max(pat.times_s[op.name] for pat, _ in cases for op in pat.blocking.ops if op.kind == "all_reduce")

    def loss(x) -> float:
        inter = _params(x, wake_cap)
        err = 0.0
        for pat, (ratio, wait) in cases:
            r, wshare = pat.ratios(inter)
            err += math.log(r / ratio) ** 2 + (wshare - wait) ** 2
        return err
    x0 = np.array(_start(start.compute_slowdown, start.comm_slowdown, min(start.wake_s, wake_cap)))
    simplex = np.vstack([x0] + [x0 + 0.3 * np.eye(3)[i] for i in range(3)])     # fixed steps in log space
    res = minimize(loss, x0, method="Nelder-Mead",
                   options={"xatol": 1e-3, "fatol": 1e-9, "maxfev": max_evals, "initial_simplex": simplex})
    return _params(res.x, wake_cap), float(res.fun)


def fit_profile_overlap(profile, summary: dict, n_boot: int = 30, seed: int = 0) -> dict | None:
    """Fit (s, k, w) for a profile from its in-pass overlap summary; None when the summary has no
    case descriptors (older calibrations, GPU). Returns the values, each case's measured and
    fitted ratios, the residual and `n_boot` bootstrap triples [s, k, w_us]."""
    cases = summary.get("cases") or []
    if summary.get("method") != "passes" or not cases or not all("case" in c for c in cases):
        return None
    scheds, costs = [], []
    for c in cases:
        sched = decode_schedule(c["case"])
        cost = CostModel(profile, sched.stack)
        scheds.append(sched)
        costs.append(lambda op, cost=cost: cost.comm_s(op, "decode") if op.is_comm else cost.compute_s(op, "decode"))
    start = Interference(max(1.0, min(FACTOR_CAP, summary.get("compute_slowdown", 1.0))),
                         max(1.0, min(FACTOR_CAP, summary.get("comm_slowdown", 1.0))), 2e-4)
    measured = [targets(c) for c in cases]
    patterns = [Patterns.of(s, c) for s, c in zip(scheds, costs)]          # built once, for every refit
    best, resid = fit_patterns(list(zip(patterns, measured)), start)
    rng = random.Random(seed)
    boot = []
    for _ in range(n_boot):
        drawn = [targets(c, redraw_trials(c, rng)) for c in cases]
        b, _ = fit_patterns(list(zip(patterns, drawn)), best, max_evals=80)
        boot.append([round(b.compute_slowdown, 4), round(b.comm_slowdown, 4), round(b.wake_s * 1e6, 2)])
    fitted = [pat.ratios(best) for pat in patterns]
    return {"compute_slowdown": round(best.compute_slowdown, 4), "comm_slowdown": round(best.comm_slowdown, 4),
            "wake_us": round(best.wake_s * 1e6, 2), "residual": resid,
            "cases": [{"what": c["what"], "measured": [round(m[0], 4), round(m[1], 4)],
                       "fitted": [round(f[0], 4), round(f[1], 4)]} for c, m, f in zip(cases, measured, fitted)],
            "samples": boot}
