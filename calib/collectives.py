"""Collective latency sweeps: all-reduce / all-gather / reduce-scatter vs message size, per group size.

Sizes follow nccl-tests (docs/sources.md §5): all-reduce and reduce-scatter `bytes` is the full input
buffer, all-gather `bytes` the gathered output -- the convention sim.price.cost prices with.

Timing. Every trial starts after a barrier of the whole world (ranks outside a sub-group wait at
it). GPU eager: CUDA events around `inner` back-to-back calls on the current stream, divided by
`inner`. CPU: each of `inner` blocking calls comes after `gap_s` of compute on every rank, with
no barrier in between -- the way a model runs them (a module's compute, then its all-reduce) --
and perf_counter times the call; the trial's value is their *mean*. Measured so, a call pays
what it pays inside a model: waking the collective's threads after compute, and the ranks'
skew. Back-to-back calls after a barrier cost a third of that on a 2-core box, and the tail
(p90 several times the median) is real: a model's time is a sum of such calls, hence the mean.
GPU graph: the same calls captured
once in a CUDA graph and replayed between events. Per trial the slowest rank's time counts (a
collective ends when its last rank does); the table keeps the median over trials. Sizes are
interleaved within a trial so drift hits all sizes alike.

The NCCL environment (the knobs of docs/sources.md §8 and torch.cuda.nccl.version()) is recorded with
every sweep, because NCCL reads it once at communicator init: each env setting needs its own launch.
"""
from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

from tpsim.sim.engine.sampled import exponential_mean_from_spread

from tpsim.hw import collective_api
from tpsim.hw.model import torch_dtype

from tpsim.calib.plan import legal_size

NCCL_KNOBS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_MAX_NCHANNELS",
              "NCCL_MIN_NCHANNELS", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
              "TORCH_NCCL_HIGH_PRIORITY")


def nccl_env() -> dict:
    """The NCCL knobs set in this process's environment and the NCCL version torch links."""
    env = {k: os.environ[k] for k in NCCL_KNOBS if k in os.environ}
    try:
        v = torch.cuda.nccl.version() if torch.cuda.is_available() else None
        env["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else v
    except (AttributeError, RuntimeError):
        env["nccl_version"] = None
    env["torch"] = torch.__version__
    return env


class _Call:
    """One collective on preallocated buffers; `run()` issues it (blocking on CPU)."""

    def __init__(self, collective: str, nbytes: int, group_size: int, pg, dtype: torch.dtype, device):
        elem = torch.tensor([], dtype=dtype).element_size()
        n = nbytes // elem
        self.collective = collective
        if collective == "all_reduce":
            self.buf = torch.ones(n, dtype=dtype, device=device)                      # [n] in and out
            self.run = lambda: dist.all_reduce(self.buf, group=pg)
        elif collective == "all_gather":
            self.inp = torch.ones(n // group_size, dtype=dtype, device=device)        # [n/g] -> [n]
            self.buf = torch.empty(n, dtype=dtype, device=device)
            self.run = lambda: collective_api.all_gather(self.buf, self.inp, group=pg)
        elif collective == "reduce_scatter":
            self.inp = torch.ones(n, dtype=dtype, device=device)                      # [n] -> [n/g]
            self.buf = torch.empty(n // group_size, dtype=dtype, device=device)
            self.run = lambda: collective_api.reduce_scatter(self.buf, self.inp, group=pg)
        else:
            raise ValueError(f"unknown collective {collective!r}")


CPU_GAP_S = 0.5e-3      # compute between two collectives on CPU, like a module between all-reduces


def busy(s: float, a: torch.Tensor, w: torch.Tensor) -> None:
    """Compute (a small GEMM in a loop) for about `s` seconds on this rank's thread."""
    t = time.perf_counter()
    while time.perf_counter() - t < s:
        a @ w


def sweep(collective: str, sizes: list[int], group_size: int, *, mode: str, dtype: str, device: str,
          trials: int, warmup: int = 2, inner: int = 10, world_barrier=None,
          gap_s: float = CPU_GAP_S) -> dict[int, list[float]]:
    """This rank's seconds per call of `collective` for each size over ranks 0..group_size-1.

    Every rank of the world must call this (sub-group creation and barriers are collective);
    ranks outside the group return {}. Sizes must already be legal (`legal_size`)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if not 1 <= group_size <= world:
        raise ValueError(f"group size {group_size} outside 1..{world}")
    pg = subgroup(group_size)
    inside = rank < group_size
    barrier = world_barrier or dist.barrier
    td = torch_dtype(dtype)
    cuda = device.startswith("cuda")
    calls = {b: _Call(collective, b, group_size, pg, td, device) for b in sizes} if inside else {}
    graphs = {}
    if inside:
        for c in calls.values():
            for _ in range(warmup):
                c.run()
        if cuda:
            torch.cuda.synchronize()
        if mode == "graph":
            graphs = {b: _capture(c, inner) for b, c in calls.items()}
    times: dict[int, list[float]] = {b: [] for b in calls}
    a, w = torch.randn(4, 256), torch.randn(256, 256)
    for t in range(trials):
        order = sizes[t % len(sizes):] + sizes[:t % len(sizes)]    # rotate: interleave sizes over trials
        for b in order:
            barrier()
            if not inside:
                continue
            reps = inner_for(b, inner)
            if not cuda:
                per = []
                for _ in range(reps):
                    busy(gap_s, a, w)
                    s = time.perf_counter()
                    calls[b].run()
                    per.append(time.perf_counter() - s)
                times[b].append(statistics.fmean(per))
                continue
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            if mode == "graph":
                graphs[b].replay()
            else:
                for _ in range(reps):
                    calls[b].run()
            e1.record()
            e1.synchronize()
            times[b].append(e0.elapsed_time(e1) / 1e3 / (inner if mode == "graph" else reps))
    barrier()
    return times


_SUBGROUPS: dict[int, object] = {}


def subgroup(size: int):
    """The process group of ranks 0..size-1 (None = the world). new_group is collective: every rank
    creates every sub-group, in the same order, once per process."""
    if size == dist.get_world_size():
        return None
    if size not in _SUBGROUPS:
        _SUBGROUPS[size] = dist.new_group(ranks=list(range(size)))
    return _SUBGROUPS[size]


def inner_for(nbytes: int, inner: int) -> int:
    """Back-to-back calls per trial: `inner` up to 256 KiB, fewer for large messages (time-bound)."""
    return max(1, min(inner, (inner << 18) // max(nbytes, 1)))


def _capture(call: _Call, inner: int):
    """`inner` back-to-back calls captured in one CUDA graph (the communicator already exists:
    warm-up calls ran before, as capture needs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call.run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            call.run()
    # the first replay uploads the graph to the device (PyTorch's CUDAGraph::instantiate does not call
    # cudaGraphUpload): one untimed replay, so every timed trial is a warm replay as in a decode loop
    # (nccl-tests -G 1 times exactly that upload: docs/collectives-reference.md)
    g.replay()
    torch.cuda.synchronize()
    return g


def max_over_ranks(per_rank: list[dict[int, list[float]]]) -> dict[int, list[float]]:
    """Per size and trial, the slowest rank's time (ranks outside the group sent {})."""
    ranks = [r for r in per_rank if r]
    out = {}
    for b in ranks[0]:
        out[b] = [max(r[b][i] for r in ranks) for i in range(min(len(r[b]) for r in ranks))]
    return out


def points(collective: str, group: int, mode: str, impl: str, per_trial: dict[int, list[float]]) -> list[dict]:
    """Raw points: one per size, the median over trials of the per-trial max over ranks."""
    return [{"collective": collective, "group": group, "mode": mode, "impl": impl, "bytes": b,
             "time_us": round(statistics.median(ts) * 1e6, 3), "trials": len(ts),
             "p10_us": round(_q(ts, 0.1) * 1e6, 3), "p90_us": round(_q(ts, 0.9) * 1e6, 3)}
            for b, ts in sorted(per_trial.items())]


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


# ------------------------------------------------------------------ arrival spread (jitter)

ARRIVAL_BYTES = 64 * 1024       # a decode-sized all-reduce: short, so the wait dominates its time
ARRIVAL_CALLS = 200


def arrival_waits(group_size: int, *, dtype: str, device: str, calls: int = ARRIVAL_CALLS,
                  nbytes: int = ARRIVAL_BYTES, gap_s: float = CPU_GAP_S, world_barrier=None) -> list[float]:
    """This rank's seconds inside each of `calls` all-reduces over ranks 0..group_size-1, each after
    the same compute on every rank and no barrier in between (barrier-free, as a model runs them).

    A collective ends for all ranks together, so a rank's time inside it is (common end - its own
    arrival): the spread of these times across ranks is the spread of arrivals, measured with each
    rank's own clock only (no clock sync across nodes). GPU: CUDA events around the collective on
    the stream, after a GEMM; CPU: perf_counter around the blocking call after `gap_s` of compute.
    Every rank of the world must call this; ranks outside the group return []."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if not 2 <= group_size <= world:
        raise ValueError(f"arrival spread needs a group of 2..{world} ranks, got {group_size}")
    pg = subgroup(group_size)
    barrier = world_barrier or dist.barrier
    barrier()
    if rank >= group_size:
        barrier()
        return []
    td = torch_dtype(dtype)
    cuda = device.startswith("cuda")
    call = _Call("all_reduce", legal_size("all_reduce", nbytes, group_size, torch.tensor([], dtype=td).element_size()),
                 group_size, pg, td, device)
    a = torch.randn(4, 256) if not cuda else torch.randn(256, 4096, dtype=td, device=device)   # [m, k]
    w = torch.randn(256, 256) if not cuda else torch.randn(4096, 4096, dtype=td, device=device)  # [k, n]
    for _ in range(3):
        call.run()
    waits = []
    for _ in range(calls):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a @ w                                    # the module's compute, then its collective
            e0.record()
            call.run()
            e1.record()
            e1.synchronize()
            waits.append(e0.elapsed_time(e1) / 1e3)
        else:
            busy(gap_s, a, w)
            s = time.perf_counter()
            call.run()
            waits.append(time.perf_counter() - s)
    barrier()
    return waits


def arrival_offsets(per_rank: list[list[float]]) -> list[list[float]]:
    """Per call, each rank's arrival minus the first arrival: max wait - its wait (ranks outside the
    group sent [])."""
    ranks = [r for r in per_rank if r]
    n = min(len(r) for r in ranks)
    return [[max(r[i] for r in ranks) - r[i] for r in ranks] for i in range(n)]


def arrival_summary(per_rank: list[list[float]]) -> dict:
    """The exponential per-rank delay the spread implies (sim.engine.sampled.exponential_mean_from_spread),
    with the spread's quantiles for the record."""
    offsets = arrival_offsets(per_rank)
    mean_s, lags = exponential_mean_from_spread(offsets)
    spread = sorted(max(c) for c in offsets)
    return {"mean_us": round(mean_s * 1e6, 3), "lags": lags, "calls": len(offsets), "ranks": len(offsets[0]),
            "spread_p50_us": round(spread[len(spread) // 2] * 1e6, 3),
            "spread_p90_us": round(spread[int(0.9 * (len(spread) - 1))] * 1e6, 3)}
