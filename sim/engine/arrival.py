"""Rank arrival at a collective, in expectation: what the fast path adds to each collective.

A collective starts when its last rank arrives. The profile's `jitter.arrival` draws each rank's
delay before each collective independently (`ArrivalJitter`: exponential, mean m per scope), and
the sampled mode (`--exact`, sim/engine/sampled.py) and the brute-force mode simulate those draws on
every rank. The fast path simulates one representative rank, so it cannot draw; it adds the
expected wait instead, E[max of the n ranks' delays] = m * H_n for exponential delays (H_n the
n-th harmonic number: the expected maximum of n iid Exp(1)), to each collective's time.

Exact in expectation for every collective the ranks block on: with identical ranks they reach it at
the same time t, it starts at t + max_r d_r and ends for all of them together (so nothing carries to
the next one), and the step's time is a sum of such terms: its mean adds m * H_n per collective
(tests/test_sampled.py holds the fast path to `--exact` there). A collective that overlaps compute
(ladder's, in flight during the next module) costs max(compute, comm + wait) where it is exposed;
E[max(a, b + W)] >= max(a, b + E[W]) (Jensen), so there the fast path is a lower bound on the mean,
equal where the wait is always hidden or always exposed; `--exact` samples it.

The per-step spread of the ranks' starts (the host lane's hand-off order and per-rank host time,
sim/stack/host_lane.py) is a separate term: both paths place each rank's start there already.
"""
from __future__ import annotations


def harmonic(n: int) -> float:
    """H_n = 1 + 1/2 + ... + 1/n (0 for n < 1)."""
    return sum(1.0 / k for k in range(1, n + 1))


def expected_wait_s(dist: str, mean_s: float, ranks: int) -> float:
    """Expected delay of the last of `ranks` iid per-rank arrivals (a collective over one rank waits
    for nobody: 0)."""
    if ranks < 2 or mean_s == 0.0:
        return 0.0
    if dist != "exponential":
        raise ValueError(f"no expected maximum for arrival jitter {dist!r} (exponential only)")
    return mean_s * harmonic(ranks)



def workload_wait_s(profile, tp: int, nodes: int, comm_group: int | None = None) -> tuple[float, object]:
    """(the expected wait of a TP collective, the jitter it comes from) for a workload: its scope's
    jitter (net once the group spans nodes), over the ranks the collectives span."""
    j = profile.arrival_jitter["net" if nodes > 1 else "node"]
    return expected_wait_s(j.dist, j.mean_s, comm_group or tp), j
