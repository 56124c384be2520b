"""Service-level objectives: bounds on TTFT, TPOT and E2E at a percentile, and the highest request rate at
which a schedule meets them.

An SLO holds at a rate when, for every bound given, that percentile of the metric over the run's
requests is at most the bound (p99 TTFT <= 2 s and p99 TPOT <= 100 ms: the question "how many requests
per second at a TTFT p99 of X and a TPOT p99 of Y"). Goodput is vLLM's: the requests that meet every
bound, per second (metrics.py).

The highest rate: the same requests (lengths and a fixed seed's arrival pattern, only scaled in time:
traffic.py) simulated at rates found by bisection. From a start rate, doubling while the SLO holds (or
halving while it does not) brackets the boundary; then the bracket [lo passes, hi fails] is halved at
its geometric middle until hi / lo - 1 <= rel_tol (2% by default). The answer is lo: a rate the SLO was
seen to hold at, within rel_tol of one where it failed. Latency is assumed to grow with the rate (it
does past the knee; below it, batching can make a slightly higher rate no worse, which bisection does
not look for). When even MIN_RATE fails -- requests then run alone -- no rate meets the SLO: SloUnmet
says so with what that rate achieved (the best there is).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tpsim.sim.serve.metrics import Summary

SLO_METRICS = ("ttft", "tpot", "e2e")
MIN_RATE = 1e-3            # req/s: slow enough that requests do not meet (their runs take seconds)
MAX_RATE = 1e6


class SloUnmet(ValueError):
    """No rate meets the SLO; the message gives the best achievable."""


def parse_slo(items) -> dict[str, float]:
    """['ttft=2s', 'tpot=100ms', 'e2e:30000'] -> {metric: seconds}; a bare number is ms (vLLM's --goodput)."""
    out = {}
    for item in items:
        m = re.fullmatch(r"\s*(\w+)\s*[=:]\s*([0-9.eE+-]+)\s*(ms|s)?\s*", item)
        if not m or m.group(1).lower() not in SLO_METRICS:
            raise ValueError(f"--slo {item!r}: write METRIC=VALUE with METRIC one of {', '.join(SLO_METRICS)} and "
                             f"VALUE in ms or s (e.g. ttft=2s, tpot=100ms; a bare number is ms)")
        try:
            v = float(m.group(2))
        except ValueError:
            v = float("nan")
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"--slo {item!r}: the bound must be a positive number")
        out[m.group(1).lower()] = v * (1.0 if m.group(3) == "s" else 1e-3)
    return out


def describe(slo: dict[str, float], percentile: float) -> str:
    return " and ".join(f"p{percentile:g} {k.upper()} <= {v * 1e3:g} ms" for k, v in slo.items())


def meets(s: Summary, slo: dict[str, float], percentile: float) -> bool:
    return all(value_at(s, k, percentile) <= bound for k, bound in slo.items())


def value_at(s: Summary, metric: str, percentile: float) -> float:
    v = getattr(s, metric)
    return float(np.percentile(v, percentile)) if len(v) else 0.0


@dataclass
class Sweep:
    """A bisection's result: the highest rate seen to meet the SLO (`rate`), the lowest seen to fail
    (`fail_rate`), and every rate simulated with its summary."""

    rate: float
    fail_rate: float
    points: dict = field(default_factory=dict)      # rate -> Summary


def max_rate(run_at: Callable[[float], Summary], slo: dict[str, float], percentile: float = 99.0,
             start: float = 1.0, rel_tol: float = 0.02, max_runs: int = 60) -> Sweep:
    """The highest rate meeting `slo` (the module doc). `run_at(rate)` simulates the fixed requests."""
    if not slo:
        raise ValueError("a rate sweep needs an SLO: give --slo, e.g. --slo ttft=2s --slo tpot=100ms")
    if not 0 < rel_tol < 1:
        raise ValueError(f"the sweep's tolerance must be in (0, 1), got {rel_tol}")
    points: dict[float, Summary] = {}

    def ok(rate: float) -> bool:
        if len(points) >= max_runs:
            raise RuntimeError(f"the rate sweep did not settle in {max_runs} runs")
        points[rate] = run_at(rate)
        return meets(points[rate], slo, percentile)

    rate = min(max(start, MIN_RATE), MAX_RATE)
    if ok(rate):
        lo, hi = rate, None
        while hi is None:
            rate = lo * 2
            if rate > MAX_RATE:
                return Sweep(lo, math.inf, points)
            lo, hi = (rate, None) if ok(rate) else (lo, rate)
    else:
        lo, hi = None, rate
        while lo is None:
            rate = hi / 2
            if rate < MIN_RATE:
                s = points[hi]
                best = ", ".join(f"p{percentile:g} {k.upper()} {value_at(s, k, percentile) * 1e3:.1f} ms"
                                 for k in slo)
                raise SloUnmet(f"no rate meets the SLO ({describe(slo, percentile)}): even at {hi:g} req/s, where "
                               f"requests run alone, the best achievable is {best}")
            lo, hi = (rate, hi) if ok(rate) else (None, rate)
    while hi / lo - 1 > rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return Sweep(lo, hi, points)
