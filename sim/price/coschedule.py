"""A collective's kernel beside a compute kernel on one GPU: when it can start, and what each
slows the other by while both run (docs/design.md, "Overlap the GPU allows").

The engines (sim/engine/simpy_engine.py, sim/engine/heap_engine.py) see this module through one hook,
`Interference.coschedule`, bound once per schedule (`CoSchedule.bind`) to questions asked by
op name: `delay_s` (how long a collective ready to start waits for SMs), `compute_slowdown` and
`comm_slowdown` (the factors while both run), `spin_slowdown` (the factor on compute while the
rank's collective kernel waits for the group's other ranks). A profile without the hook keeps its flat
interference factors (CPU/gloo profiles: measured).

Mechanism (each rule with its source; the numbers live in the profile's overlap.gpu section):

- SMs. An NCCL kernel runs one CTA per channel, each on an SM of its own: "NCCL CTAs won't share an
  SM with compute kernels" (NVIDIA/nccl#689, sjeaugey). A compute kernel of `ctas` CTAs, `per_sm`
  resident per SM, runs in W = ceil(ctas / (per_sm * sms)) waves of equal length. While it holds
  the SMs a collective needing c of them waits (NVIDIA/nccl#1431: "the next communication kernel
  will be delayed until the gemm is completed because there are not enough SM resources"):
  * free SMs: its first wave leaves sms - ceil(ctas / per_sm) >= c SMs idle -> it starts at once;
  * default stream priority: the hardware dispatches a kernel's CTAs before a later kernel's, so
    the collective starts when the compute kernel's last wave is dispatched, if that wave leaves c
    SMs idle, else at the kernel's end;
  * "c SMs idle" is counted per GPC where the profile names its GPCs (sim/hardware/gpc.py): NCCL 2.21 on sm90
    launches a grid that divides by 4 as clusters of 4 CTAs, each cluster on 4 idle SMs of one GPC,
    and where a wave leaves its idle SMs is the profile's `idle_sm_placement` ("packed": counted per
    GPU as above; "spread": the busy SMs dealt round-robin over the GPCs); a wave boundary frees
    every SM at once in this model, so the high-priority rule below needs no GPC count;
  * TORCH_NCCL_HIGH_PRIORITY=1 (a high-priority comm stream): pending CTAs of the higher priority
    are dispatched first as SMs free up, so it starts at the next wave boundary (no preemption of
    running CTAs).
  A collective that becomes ready in the same instant as a compute kernel starts finds that
  kernel holding its SMs (a rule: both are launched together; the engines order the compute first).
  At a kernel's end the waiting collective takes its SMs before the next compute kernel.
- Slowdown of a tile-bound kernel (a GEMM whose FLOP time exceeds its byte time): its tiles run in
  waves over the SMs left, ceil(ctas / (per_sm * (sms - c))) instead of W (wave quantization: a
  132-tile GEMM beside a 24-CTA NCCL kernel on H100 takes two waves, "nearly doubled", docs/sources.md
  §7). A memory-bound kernel's grid is fixed too: each CTA moves an equal share of its bytes, a wave
  of w CTAs on s SMs draws min(HBM, s x sm_hbm_gbps), so on the SMs left its waves are re-cut and a
  partial last wave runs on few SMs at their own rate (a 112-CTA kernel beside 24 NCCL CTAs on 132
  SMs: 108 CTAs at HBM's rate, then 4 on 4 SMs). Its factor is that time over its time on all SMs;
  sm_hbm_gbps 0 keeps its pace (the rule before a per-SM rate was sourced).
- HBM sharing (NVIDIA/nccl#1433 "you may not compete for SMs but still compete for memory
  bandwidth"; #1428: a collective's HBM traffic is its link traffic x2 to x3). A kernel demands
  bytes / time of HBM alone, the collective hbm_per_bus_byte x bus bytes / its time; when the sum
  exceeds what HBM delivers (the profile's memory_gbps x its efficiency curve's plateau) both slow
  by sum / that rate (a proportional share).

An op of several kernels (a GEMM and the fused pointwise kernel Inductor charges to it) slows by
its kernels' time-weighted mean factor while a collective runs beside it (exact when the collective
spans the whole op).

A collective is a rendezvous of its ranks' kernels (NCCL 2.21 src/device/prims_simple.h `waitPeer`:
a receiving thread spins on `loadStepValue(connStepPtr)`, the peer's step counter, until the peer's
data has arrived; a sender may run at most NCCL_STEPS = 8 steps ahead of its receiver's consumption,
src/include/device.h; prims_ll.h's readLL likewise spins on each line's flag):
- its transfer begins when its kernel runs on EVERY rank of the group: a rank whose kernel waits for
  SMs behind a GEMM, or whose stream is later, delays the collective on all ranks (the engines: the
  collective starts at its last rank's kernel start). The early rank's first sends into its peer's
  pre-allocated buffer, which the credit window lets through, are not counted (a rule: at most the
  first of a ring all-reduce's 2(p - 1) steps);
- the early ranks' kernels spin meanwhile (NVIDIA/nccl#146, sjeaugey: "those are blocking kernels,
  waiting for other GPUs to launch their NCCL kernels"; #1025: a kernel waiting for its peer spins,
  and a GEMM launched meanwhile "possibly" runs longer): their CTAs are resident and hold their
  SMs ("NCCL CTAs won't share an SM with compute kernels", #689), so compute there runs on sms - c
  SMs with the tile / memory wave rules above (`spin_slowdown`); the spinning moves no HBM bytes (a poll is a
  volatile load of one counter the peer writes, a rule), so HBM sharing does not apply. Ranks that
  reach a collective together (the engines' identical ranks, the fast path's one representative
  rank) never spin: their timelines are exactly those without this rule.
- start skew between ranks: only what the engines are given (the profile's jitter section, a stack's
  host-lane offsets); the fast path's one rank pays the jitter's expected wait as a delay before each
  collective (sim/engine/arrival.py), not as spinning, so on the reference stack's identical ranks
  nothing spins; `--exact` draws the jitter on every rank and the early ones spin.
Thread-block clusters (sim/hardware/gpc.py, its sources there): where the compute kernel's CTAs leave the
idle SMs across GPCs is not documented, so it is a named profile option, not a fact; a GPU check
(issue 25 item 6: %smid of a 112-CTA kernel, then a 4-cluster kernel on a second stream) settles it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tpsim.sim.hardware.schema import GpuSpec

_EPS = 1e-12


@dataclass(frozen=True)
class Kernel:
    """One compute kernel: its share of the op's time, its grid, and its HBM demand."""

    share: float                      # fraction of the op's time (an op's kernels sum to 1)
    ctas: int                         # grid size (CTAs)
    per_sm: int = 1                   # CTAs resident per SM
    tile_bound: bool = False          # time set by waves of tiles (wave quantization applies)
    hbm_gbps: float = 0.0             # its HBM demand alone (bytes / its time)
    hbm_cap_gbps: float = math.inf    # what HBM delivers to all kernels at once


@dataclass(frozen=True)
class Comm:
    """A collective's kernel: CTAs (= NCCL channels) and HBM demand alone."""

    ctas: int
    hbm_gbps: float = 0.0


def waves(ctas: int, per_sm: int, sms: int) -> int:
    return max(1, math.ceil(ctas / (per_sm * sms)))


def start_delay_s(k: Kernel, time_s: float, elapsed_s: float, c: int, gpu: GpuSpec) -> float:
    """Seconds a collective needing `c` SMs waits when it becomes ready `elapsed_s` into kernel `k`
    (alone-time `time_s`), by the rules of the module docstring."""
    if elapsed_s >= time_s - _EPS or c <= 0:
        return 0.0
    sms = gpu.sms
    if gpu.room(c, min(sms, math.ceil(k.ctas / k.per_sm))):      # its first wave leaves room
        return 0.0
    w = waves(k.ctas, k.per_sm, sms)
    wave_s = time_s / w
    if gpu.high_priority:          # the next CTA retirement (a kernel just launched: its first wave's end)
        n = max(1, math.ceil(elapsed_s / wave_s - _EPS))
        return max(min(n * wave_s, time_s) - elapsed_s, 0.0)
    last = k.ctas - (w - 1) * k.per_sm * sms                     # CTAs of the last wave
    if w > 1 and gpu.room(c, math.ceil(last / k.per_sm)):
        return max((w - 1) * wave_s - elapsed_s, 0.0)
    return time_s - elapsed_s


def memory_waves_s(k: Kernel, sms: int, sm_gbps: float) -> float:
    """Seconds per byte-of-kernel (x its bytes) of memory-bound kernel `k` on `sms` SMs: its equal-share
    CTAs in waves of per_sm x sms, each wave at min(HBM, its SMs x sm_gbps) (module docstring)."""
    per_wave = k.per_sm * sms
    full, rest = divmod(k.ctas, per_wave)
    t = full * per_wave / k.ctas / min(k.hbm_cap_gbps, sms * sm_gbps)
    if rest:
        t += rest / k.ctas / min(k.hbm_cap_gbps, math.ceil(rest / k.per_sm) * sm_gbps)
    return t


def sm_factor(k: Kernel, c: int, gpu: GpuSpec) -> float:
    """Kernel `k`'s slowdown on the SMs `c` NCCL CTAs leave it (the wave rules of the module docstring)."""
    if k.tile_bound and gpu.sms > c:
        return waves(k.ctas, k.per_sm, gpu.sms - c) / waves(k.ctas, k.per_sm, gpu.sms)
    if gpu.sm_hbm_gbps > 0 and gpu.sms > c > 0 and math.isfinite(k.hbm_cap_gbps):
        return memory_waves_s(k, gpu.sms - c, gpu.sm_hbm_gbps) / memory_waves_s(k, gpu.sms, gpu.sm_hbm_gbps)
    return 1.0


def pair_factors(k: Kernel, comm: Comm, gpu: GpuSpec) -> tuple[float, float]:
    """(compute factor, collective factor) while kernel `k` and `comm` run at once."""
    sm = sm_factor(k, comm.ctas, gpu)
    hbm = max(1.0, (k.hbm_gbps + comm.hbm_gbps) / k.hbm_cap_gbps) if k.hbm_cap_gbps > 0 else 1.0
    return max(sm, hbm), hbm


class CoSchedule:
    """The engines' hook (Interference.coschedule). `kernels(sched, op)` gives a compute op's
    kernels (shares summing to 1; () for an op that runs none), `comm(sched, op)` a collective's."""

    def __init__(self, gpu: GpuSpec, kernels: Callable, comm: Callable):
        self.gpu, self._kernels, self._comm = gpu, kernels, comm
        self.last: Bound | None = None

    def bind(self, sched, times_s: dict[str, float]) -> "Bound":
        """The hook for one schedule, its ops timed as the engine times them (`times_s` by op name);
        kept as `last` (bench/breakdown.py reads what it was asked)."""
        self.last = Bound(self, sched, times_s)
        return self.last


class Bound:
    """Answers by op name for one schedule; caches every answer (schedules repeat their ops)."""

    def __init__(self, cs: CoSchedule, sched, times_s: dict[str, float]):
        self.cs, self.sched, self.times = cs, sched, times_s
        self.ops = {op.name: op for op in sched.ops}
        self._k: dict = {}
        self._c: dict = {}
        self._f: dict = {}
        self.delays: dict[str, list] = {}   # collective -> [seconds waited in all, times it waited] (bounded:
                                            # a compiled schedule is run thousands of times in sampled mode)

    def kernels(self, name: str) -> tuple:
        k = self._k.get(name)
        if k is None:
            k = self._k[name] = tuple(self.cs._kernels(self.sched, self.ops[name]))
        return k

    def comm(self, name: str) -> Comm:
        c = self._c.get(name)
        if c is None:
            c = self._c[name] = self.cs._comm(self.sched, self.ops[name])
        return c

    def delay_s(self, comm: str, compute: str, elapsed_s: float) -> float:
        """How long collective `comm`, ready now, waits for SMs: `elapsed_s` of work into `compute`."""
        t = self.times[compute]
        at = 0.0
        d = 0.0
        for k in self.kernels(compute):
            kt = k.share * t
            if elapsed_s < at + kt - _EPS:
                d = start_delay_s(k, kt, elapsed_s - at, self.comm(comm).ctas, self.cs.gpu)
                break
            at += kt
        if d > 0:
            acc = self.delays.setdefault(comm, [0.0, 0])
            acc[0] += d
            acc[1] += 1
        return d

    def _factors(self, compute: str, comm: str) -> tuple[float, float]:
        key = (compute, comm)
        f = self._f.get(key)
        if f is None:
            ks = self.kernels(compute)
            c = self.comm(comm)
            total = sum(k.share for k in ks)
            if total <= 0:
                f = (1.0, 1.0)
            else:
                pf = [(k.share, pair_factors(k, c, self.cs.gpu)) for k in ks]
                f = (sum(s * a for s, (a, _) in pf) / total, sum(s * b for s, (_, b) in pf) / total)
            self._f[key] = f
        return f

    def compute_slowdown(self, compute: str, comm: str) -> float:
        return self._factors(compute, comm)[0]

    def spin_slowdown(self, compute: str, comm: str) -> float:
        """Factor on compute op `compute` while collective `comm`'s kernel spins beside it, waiting for
        the group's other ranks: its CTAs hold their SMs and move no HBM bytes (module docstring)."""
        key = (compute, comm, "spin")
        f = self._f.get(key)
        if f is None:
            ks = self.kernels(compute)
            c = self.comm(comm).ctas
            total = sum(k.share for k in ks)
            f = self._f[key] = sum(k.share * sm_factor(k, c, self.cs.gpu) for k in ks) / total if total > 0 else 1.0
        return f

    def comm_slowdown(self, comm: str, compute: str) -> float:
        return self._factors(compute, comm)[1]
