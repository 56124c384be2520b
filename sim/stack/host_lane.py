"""A serving engine's host lane: the CPU work of one engine step around the GPU's forward pass.

One engine step (a prefill, or one decode step of the whole batch) on TP ranks 0..N-1:

    scheduler   schedule_s + schedule_per_seq_s * batch          (the engine's scheduler process)
    hand-off    handoff_s + handoff_per_seq_s * batch, only when N > 1 (N worker processes)  (vLLM:
                SchedulerOutput through the shared-memory MessageQueue,
                vllm/distributed/device_communicators/shm_broadcast.py, out and the reply back)
                rank r reads it r * handoff_per_rank_s after rank 0 (polling/wake-up order), and
                tree_hops(r) * handoff_tree_hop_s after it when the hand-off is a binomial-tree host
                broadcast (gloo's; SGLang's broadcast_pyobj over the TP CPU group each scheduler
                step): see tree_hops; readers that sleep between polls (vLLM V0 <= 0.6.3:
                time.sleep(1e-7), which Linux's timer slack stretches to ~50 us) wake within
                handoff_wake_s of the write: see wake_offsets
                step_broadcasts GPU-side broadcasts of the step's input tensors before the pass (vLLM
                V0's broadcast_tensor_dict: one eager NCCL broadcast per tensor), each priced by the
                profile as the caller says (`broadcast_s`): serial before the pass, N > 1 only
    spread      rank_spread_s: the spread (standard deviation) of each rank's own host time per step
                (wake-up, input preparation, launch); the pass starts when the last of N ranks is
                ready, expected E[max of N] * rank_spread_s after the mean rank (_normal_order_stats)
    worker      prepare_s + prepare_per_seq_s * batch + launch_s  (each rank, in parallel: build
                the input tensors, then launch the kernels or replay the CUDA graph; the kernels'
                own launches stay in the pass: sim.price.cost's graph floor, or the eager launch chain
                sim.engine.simpy_engine runs from each rank's start, so the lane and the chain never both count one)
    GPU         the pass (sim.engine.simpy_engine); rank r starts it at lead_s + offsets_s[r]
    output      output_s + output_per_seq_s * batch              (sample / update the requests)

All these place the ranks at different starts, so they reach the pass's first collective at different
times and the last one sets the pace: the stagger grows with N (linearly for the polling order, as
floor(log2 N) hops for a tree broadcast, as W (N-1)/N for a wake-up window, as E[max of N standard
normals] ~ sqrt(2 ln N) for the spread). TP_DEPENDENT names the terms that act only at N > 1 or grow
with N (sim/silent_zeros.py holds every preset to a value or a code proof for each).

In series (`overlap` False: vLLM's default scheduler) a step lasts
    lead_s + gpu_s + post_s,
gpu_s being the pass with the ranks' staggered starts (a late rank delays everyone at the first
collective); with `output_hidden` (vLLM V0's async output processing: step j's outputs are processed
while step j+1's pass runs) the output work hides under the pass: lead_s + max(gpu_s, post_s).
Overlapped (vLLM V1 async scheduling, SGLang's overlap scheduler, TensorRT-LLM's overlap
scheduler) the host prepares step j+1 while the GPU runs step j, so inputs are ready before the GPU is
free and the stagger is hidden unless the host is the bottleneck:
    max(gpu_s_without_stagger, lead_s + max(offsets_s) + post_s).

The engine sim knows nothing of this: the offsets reach it as per-rank start delays (sim.engine.simpy_engine's
`rank_delay_s`, sim.engine.heap_engine' `start_s`; NCCL's graph host-node chain starts from them too), and
`step_s` composes the lane with the pass's time. Every constant comes from a stack preset
(sim/stack/presets/*) with its source, or from `tpsim profiles import-engine-bench`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache

from tpsim.sim.bounds import check_time


@dataclass(frozen=True)
class HostStep:
    """The host work of one engine step (seconds); all zero = no host lane (the reference harness:
    one Python process per rank, whose launches sim.price.cost already prices)."""

    schedule_s: float = 0.0           # scheduler, per step
    schedule_per_seq_s: float = 0.0   # scheduler, per running sequence
    handoff_s: float = 0.0            # step inputs to the N worker processes (N > 1 only)
    handoff_per_rank_s: float = 0.0   # rank r receives them r * this after rank 0
    handoff_tree_hop_s: float = 0.0   # binomial-tree broadcast: rank r receives tree_hops(r) hops after rank 0
    rank_spread_s: float = 0.0        # std dev of each rank's host time per step (N > 1: the last rank sets the pace)
    prepare_s: float = 0.0            # each worker builds its input tensors, per step
    prepare_per_seq_s: float = 0.0    # ... per sequence
    launch_s: float = 0.0             # each worker's launch call / graph replay, beyond the kernels' floor
    output_s: float = 0.0             # sampling + request update after the pass, per step
    output_per_seq_s: float = 0.0     # ... per sequence
    overlap: bool = False             # the host prepares the next step while the GPU runs this one
    handoff_per_seq_s: float = 0.0    # the hand-off's growth with the batch (its payload), N > 1 only
    handoff_wake_s: float = 0.0       # sleeping readers wake within this window of the write (wake_offsets)
    step_broadcasts: int = 0          # GPU-side broadcasts of the step's inputs before the pass, N > 1 only
    output_hidden: bool = False       # in series: step j's output work runs during step j+1's pass

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in FLAGS:
                if not isinstance(v, bool):
                    raise ValueError(f"host.{f.name} must be true or false, got {v!r}")
            elif f.name in COUNTS:
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 64:
                    raise ValueError(f"host.{f.name} must be a count 0..64, got {v!r}")
            else:               # finite and bounded (sim/bounds.py): 1e308 s divided tokens/s by zero
                check_time("host_step", v, f"host.{f.name}")

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name not in FLAGS)


# the switches of a lane (not amounts of time) and its counts (not seconds): no range, no fit
FLAGS = ("overlap", "output_hidden")
COUNTS = ("step_broadcasts",)
# The terms that cost nothing at TP 1 or grow with N (the module doc): each preset gives them a value
# and a range from evidence, or a source that starts "code:" citing the code that proves the work absent
# (sim/silent_zeros.py, tests/test_silent_zeros.py). The other terms are the same work at any N.
TP_DEPENDENT = ("handoff_s", "handoff_per_seq_s", "handoff_per_rank_s", "handoff_tree_hop_s", "handoff_wake_s",
                "rank_spread_s", "step_broadcasts")


@dataclass(frozen=True)
class Lane:
    """One step's host lane on N ranks: when each rank can start the pass, and the work after it."""

    lead_s: float                     # step start -> rank 0 starts the pass
    offsets_s: tuple[float, ...]      # per rank: its start after rank 0's (rank 0: 0)
    post_s: float                     # after the pass's end

    @property
    def stagger_s(self) -> float:
        return max(self.offsets_s)

    @property
    def host_s(self) -> float:
        """The lane's own length per step (what bounds an overlapped step)."""
        return self.lead_s + self.stagger_s + self.post_s


@lru_cache(maxsize=64)
def _normal_order_stats(n: int) -> tuple[float, ...]:
    """E[Z_(k:n)], k = 1..n: the expected k-th smallest of n independent standard normals, by the
    trapezoid rule over [-10, 10] (step 1e-3) of x * n!/((k-1)!(n-k)!) * F^(k-1) (1-F)^(n-k) f.
    n = 2: -+1/sqrt(pi) = -+0.5642; n = 4: -+1.0294, -+0.2970; n = 8: max 1.4236 (the published
    tables of normal order statistics, e.g. Harter 1961). The grid's F, 1-F, f and weight x are
    made once for every k, and the k below the median are the negatives of those above it
    (E[Z_(k:n)] = -E[Z_(n+1-k:n)]): the sum is taken for the upper half and the median alone."""
    xs = [i * 1e-3 - 10.0 for i in range(20001)]
    last = len(xs) - 1
    grid = []                          # per point: (trapezoid weight x x, F, 1 - F, f), as each k's sum reads them
    for j, x in enumerate(xs):
        F = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        f = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        w = 0.5 if j in (0, last) else 1.0
        grid.append((w * x, F, 1.0 - F, f))
    upper = {}
    for k in range(n // 2 + 1, n + 1):      # the median (odd n) and above
        c = math.comb(n - 1, k - 1) * n
        tot = 0.0
        for wx, F, G, f in grid:
            tot += wx * c * F ** (k - 1) * G ** (n - k) * f
        upper[k] = tot * 1e-3
    return tuple(upper[k] if k in upper else -upper[n + 1 - k] for k in range(1, n + 1))


def tree_hops(rank: int) -> int:
    """Sequential hops from rank 0 to `rank` in gloo's binomial-tree broadcast (gloo/broadcast.cc,
    root 0): in round i (i = 0 .. log2ceil(N)-1) every rank below 2^i that holds the data sends it to
    rank + 2^i, so rank r receives in round (highest set bit of r) from its parent, r less that bit.
    A sender posts its sends without waiting for them ("Send operations can complete asynchronously";
    only recvs block before the next round), so the root's sends to 1, 2, 4, ... leave back to back
    and the data crosses one hop per set bit of r: popcount(r) hops (rank 3: 0->1->3, 2; rank 4:
    0->4, 1; rank 7: 0->1->3->7, 3). The last of N = 2^k ranks is k hops late; N = 6 ranks: 2."""
    return bin(rank).count("1")


def spread_offsets(n: int, spread_s: float) -> tuple[float, ...]:
    """Per-rank start delays from the ranks' host-time spread: rank r (of n) is placed at the
    expected r+1-th order statistic above the mean, spread_s * max(0, E[Z_(r+1:n)]) (a rank readier
    than the mean waits at the mean: the lead terms are each rank's mean host time). The last rank
    comes E[max of n] * spread_s late, which is what a step waits for at its first collective."""
    if n < 2 or spread_s == 0.0:
        return (0.0,) * n
    return tuple(spread_s * max(0.0, e) for e in _normal_order_stats(n))


def wake_offsets(n: int, window_s: float) -> tuple[float, ...]:
    """Per-rank start delays of readers that sleep between polls of the step's message: rank 0
    writes it (vLLM V0's driver worker), ranks 1..n-1 each wake at an independent uniform time in
    [0, window_s) after the write (vllm/distributed/device_communicators/shm_broadcast.py@v0.6.3.post1:
    time.sleep(RINGBUFFER_SLEEP_INTERVAL = 1e-7) per poll, which the kernel's 50 us timer slack
    stretches; vllm-project/vllm#9994). Rank r is placed at the expected r-th smallest of n-1 such
    uniforms, window_s * r / n, so the last comes window_s (n-1)/n late: 1/2, 3/4, 7/8 of the
    window at n = 2, 4, 8."""
    if n < 2 or window_s == 0.0:
        return (0.0,) * n
    return tuple(window_s * r / n for r in range(n))


def lane(h: HostStep, tp: int, batch: int, broadcast_s: float = 0.0) -> Lane:
    """The lane of one step of `batch` sequences on `tp` ranks (one process, no hand-off, at tp 1).
    `broadcast_s`: the time of one of the step's GPU-side input broadcasts on `tp` ranks (the
    caller prices it from its profile; h.step_broadcasts of them run, one after another, before
    the pass). A rank's offset sums its hand-off order (polling, wake-up and tree) and its place in
    the spread: the last rank is the latest in each (an upper bound on E[max] of the sum; exact
    when only one of them is non-zero)."""
    handoff = (h.handoff_s + h.handoff_per_seq_s * batch + h.step_broadcasts * broadcast_s) if tp > 1 else 0.0
    lead = (h.schedule_s + h.schedule_per_seq_s * batch + handoff
            + h.prepare_s + h.prepare_per_seq_s * batch + h.launch_s)
    if tp < 2:
        return Lane(lead, (0.0,), h.output_s + h.output_per_seq_s * batch)
    spread = spread_offsets(tp, h.rank_spread_s)
    wake = wake_offsets(tp, h.handoff_wake_s)
    offsets = tuple(r * h.handoff_per_rank_s + tree_hops(r) * h.handoff_tree_hop_s + wake[r] + spread[r]
                    for r in range(tp))
    return Lane(lead, offsets, h.output_s + h.output_per_seq_s * batch)


def step_s(h: HostStep, ln: Lane, gpu_s: float, gpu_staggered_s: float | None = None) -> float:
    """One engine step's time. gpu_s: the pass with every rank starting together; gpu_staggered_s:
    the pass with the lane's per-rank offsets (None: gpu_s + the stagger, which is exact for
    symmetric ranks: after the first collective, which waits for the last rank, they run in step)."""
    staggered = gpu_s + ln.stagger_s if gpu_staggered_s is None else gpu_staggered_s
    if not h.overlap:
        if h.output_hidden:          # the previous step's outputs are processed during this pass
            return ln.lead_s + max(staggered, ln.post_s)
        return ln.lead_s + staggered + ln.post_s
    return max(gpu_s, ln.host_s)
