"""Exact in distribution: the mean step time under per-rank arrival jitter, by sampling.

With jitter, ranks differ, so the fast path's one representative rank no longer holds; but
decode steps (and the prefill) are independent draws given the profile's jitter, and the layers
of a run are exchangeable in steady state (every collective ends for all ranks at once, so skew
does not build up across layers). So instead of every rank x every layer x every decode step
(the brute-force mode), each *sample* simulates every rank, with freshly drawn arrival delays,
on the fast path's compressed plans:

    X = T(short) + sum_j extra_j / K_j * (T(short with run j + K_j layers) - T(short))

where `short` has WARM_LAYERS layers of each run (as the fast path), K_j = min(extra_j,
WINDOW_LAYERS) and extra_j = layers of run j beyond the short plan. The same formula with no
jitter on one rank is Z, the fast path's own value (the rank engine reproduces SimPy to 1e-12),
so a sample's jitter cost is D = X - Z and the estimate is fast + mean(D): zero jitter gives the
fast path exactly. Samples are drawn in batches until the 95% confidence half-width of the mean
step time is within `rel_tol` of it (or MAX_SAMPLES). Sample draws share their first rows
between the plans (common random numbers), which cancels the shared layers' noise in the
differences. Decode positions, when steps differ (kv "filled"), are drawn uniformly per sample.

Spread: the standard deviation of one step's time, var(T(short)) + sum_j extra_j/K_j *
var(T(long_j) - T(short)): K-layer blocks taken as independent (they resynchronise at each
collective's end); an approximation, stated as such.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tpsim.sim.engine.compiled import Compiled, compile_schedule
from tpsim.sim.engine.heap_engine import simulate_ranks
from tpsim.sim.engine.estimate import REL_TOL, Estimate
from tpsim.sim.schedule.language import Schedule, build_plan, plan_of, runs
from tpsim.sim.stack.spec import Step

WINDOW_LAYERS = 8         # layers added to a run per sample to measure its steady per-layer period
SAMPLE_BATCH = 8          # samples drawn between two checks of the confidence interval
MIN_SAMPLES = 32          # also what the spread (a variance) is estimated from
MIN_SAMPLES_PREFILL = 8   # one prefill: only its mean matters (no spread is reported for it)
MAX_SAMPLES = 256
Z95 = 1.959963984540054


@dataclass(frozen=True)
class _Config:
    compiled: Compiled
    mean_s: np.ndarray        # [n_collectives] mean arrival delay of each collective (its scope's)
    z_s: float                # its time with no jitter (one rank; plus the host lane's stagger)


def t_quantile(n: int) -> float:
    """Two-sided 95% Student-t quantile for n samples (n - 1 degrees of freedom), by the
    Cornish-Fisher expansion around the normal quantile: within 0.2% of the exact value from 5
    degrees of freedom up (2.5706 -> 2.5678), 3e-4 at 7, exact in the limit. No scipy: a cold `tpsim predict
    --exact` would spend more importing scipy.stats than sampling."""
    if n < 2:
        return math.inf
    v, z = n - 1, Z95
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3))


def exponential_mean_from_spread(offsets_s: list[list[float]]) -> tuple[float, int]:
    """Maximum-likelihood mean of iid exponential per-rank delays from measured arrival spreads.

    offsets_s: per collective call, every rank's arrival time minus the first rank's (one 0).
    With iid exponential delays, the other ranks' lags behind the first are again iid
    exponential with the same mean (memorylessness), so the estimate is their sum over their
    count, sum / (n_calls * (ranks - 1)). Returns (mean_s, lags used)."""
    total, count = 0.0, 0
    for call in offsets_s:
        if len(call) < 2:
            continue
        lo = min(call)
        total += sum(x - lo for x in call)
        count += len(call) - 1
    if count == 0:
        raise ValueError("arrival spread needs calls with at least 2 ranks")
    return total / count, count


class Sampler:
    """The jitter's cost per step of one workload's schedules, every rank simulated.

    op_time(op, phase, schedule) prices an op (the schedule: compiled layers are priced per layer); scope_of(op) names the scope ("node"/"net") whose jitter a
    collective draws; jitter maps scope -> profile.ArrivalJitter."""

    def __init__(self, model, tp: int, stack, op_time: Callable, interference, jitter: dict,
                 scope_of: Callable, ranks: int, warm_layers: int, seed: int = 0, rel_tol: float = REL_TOL,
                 max_samples: int = MAX_SAMPLES, host_time: Callable | None = None,
                 start_s: tuple[float, ...] = (), issue_time: Callable | None = None):
        self.model, self.tp, self.stack, self.op_time = model, tp, stack, op_time
        # per-rank start offsets of the stack's host lane (sim.stack.host_lane): every draw starts each rank
        # there, so the jitter's cost is measured over the staggered pass (the stagger itself excluded)
        self.start_s = tuple(start_s[:ranks])
        self.host_time = host_time          # (op, phase) -> NCCL graph host node seconds, or None
        self.issue_time = issue_time        # (op, phase, schedule) -> CPU launch seconds (engine issue_s), or None
        self.interference, self.jitter, self.scope_of = interference, jitter, scope_of
        self.ranks, self.warm = ranks, warm_layers
        self.rel_tol, self.max_samples = rel_tol, max_samples
        self.rng = np.random.default_rng(seed)
        self._configs: dict = {}
        self._harmonic = float(np.sum(1.0 / np.arange(1, ranks + 1)))     # E[max of `ranks` Exp(1)]

    @property
    def jitter_free(self) -> bool:
        return all(j.mean_s == 0 for j in self.jitter.values())

    def _schedule(self, spec: str, counts: list[int], rs, step: Step) -> Schedule:
        plan = tuple(k for (k, _, _), n in zip(rs, counts) for _ in range(n))
        model = self.model.truncated(len(plan)) if len(plan) < self.model.layers else self.model
        return build_plan(spec, plan, model, self.tp, step, self.stack)

    def configs(self, spec: str, step: Step) -> tuple[list[_Config], list[float]]:
        """The short plan, then one plan per run with K layers added, and each one's coefficient."""
        key = (spec, step)
        if key not in self._configs:
            rs = runs(plan_of(spec, self.model.layers))
            short = [min(end - first, self.warm) for _, first, end in rs]
            plans, coefs = [short], []
            for j, (_, first, end) in enumerate(rs):
                extra = (end - first) - short[j]
                if extra > 0:
                    k = min(extra, WINDOW_LAYERS)
                    plans.append(short[:j] + [short[j] + k] + short[j + 1:])
                    coefs.append(extra / k)
            out = []
            for counts in plans:
                sched = self._schedule(spec, counts, rs, step)
                host = (lambda op: self.host_time(op, step.phase)) if self.host_time is not None else None
                issue = ((lambda op, sched=sched: self.issue_time(op, step.phase, sched))
                         if self.issue_time is not None else None)
                c = compile_schedule(sched, lambda op, sched=sched: self.op_time(op, step.phase, sched),
                                     self.interference, host, issue)
                mean = np.array([self.jitter[self.scope_of(op)].mean_s for op in c.comm_ops])
                stagger = max(self.start_s, default=0.0)     # the staggered jitter-free pass (sim.stack.host_lane)
                out.append(_Config(c, mean, simulate_ranks(c, 1, self.interference)[0] + stagger))
            self._configs[key] = (out, coefs)
        return self._configs[key]

    def _draw(self, spec: str, step: Step) -> tuple[float, float, float, list[float]]:
        """One sample: (D = X - Z, its control variate C, T(short) - Z(short), [T(long_j) - T(short)]).

        C is the same combination of sum_k (max_r delay[k, r] - E[max]) over each plan's collectives:
        a blocking collective starts exactly max_r delay after the jitter-free time, so C tracks
        most of D's noise and has a known mean, 0 (E[max of R iid exponentials] = mean * H_R)."""
        cfgs, coefs = self.configs(spec, step)
        n = max(len(c.compiled.comm_names) for c in cfgs)
        e = self.rng.standard_exponential((n, self.ranks))      # [collective, rank], shared rows
        top = e.max(axis=1) - self._harmonic                     # [collective]: max_r - E[max_r]
        d, cv = [], []
        for c in cfgs:
            m = len(c.mean_s)
            delays = e[:m] * c.mean_s[:, None]
            d.append(simulate_ranks(c.compiled, self.ranks, self.interference, delays, self.start_s)[0] - c.z_s)
            cv.append(float(top[:m] @ c.mean_s))
        incs = [d[j + 1] - d[0] for j in range(len(coefs))]
        x = d[0] + sum(cj * i for cj, i in zip(coefs, incs))
        cx = cv[0] + sum(cj * (cv[j + 1] - cv[0]) for j, cj in enumerate(coefs))
        return x, cx, d[0], incs

    def estimate(self, spec: str, step_for: Callable[[int], Step], step_s: Callable[[Step], float],
                 min_samples: int = MIN_SAMPLES) -> Estimate:
        """The jitter's mean cost per step, sampled until its 95% half-width is within rel_tol of the
        mean step time. step_for(i): the step of sample i (a decode position); step_s(step): its
        jitter-free time (to state the tolerance against)."""
        if self.jitter_free or not any(c.mean_s.any() for c in self.configs(spec, step_for(0))[0]):
            return Estimate.zero()          # no collective, or none in a scope with jitter
        ds, cs, shorts, incs, scale = [], [], [], [], []
        while True:
            for _ in range(SAMPLE_BATCH):
                step = step_for(len(ds))
                d, c, s, inc = self._draw(spec, step)
                ds.append(d)
                cs.append(c)
                shorts.append(s)
                incs.append(inc)
                scale.append(step_s(step))
            n = len(ds)
            mean, half = control_variate_mean(np.array(ds), np.array(cs))
            if n >= min_samples and (half <= self.rel_tol * (float(np.mean(scale)) + mean) or n >= self.max_samples):
                break
        _, coefs = self.configs(spec, step_for(0))
        var = float(np.var(shorts, ddof=1)) + sum(
            cj * float(np.var([x[j] for x in incs], ddof=1)) for j, cj in enumerate(coefs))
        return Estimate(mean, half, math.sqrt(max(var, 0.0)), n)


def control_variate_mean(d: np.ndarray, c: np.ndarray) -> tuple[float, float]:
    """(mean of d, 95% half-width) using c (known mean 0) as a control variate: d - b*c with b the
    least-squares slope, whose residuals give the interval (one degree of freedom spent on b)."""
    n = len(d)
    vc = float(np.var(c, ddof=1)) if n > 1 else 0.0
    b = float(np.cov(d, c, ddof=1)[0, 1] / vc) if vc > 0 else 0.0
    adj = d - b * c
    dof = n - 1 if vc == 0 else n - 2
    if dof < 1:
        return float(np.mean(adj)), math.inf
    resid = adj - adj.mean()
    sd = math.sqrt(float(resid @ resid) / dof)
    return float(adj.mean()), t_quantile(dof + 1) * sd / math.sqrt(n)
