"""Every rank of a step without SimPy: a schedule compiled once (`compile_schedule`) to per-op
times and collective reads, then run many times with different arrival delays (`simulate_ranks`).
The same semantics as sim/engine/simpy_engine.py's SimPy engine (which tests/test_sampled.py checks), fast
enough for the exact mode's many sampled steps.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import IntEnum
from itertools import count
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

from tpsim.sim.engine.simpy_engine import Interference
from tpsim.sim.schedule.ir import Op, Schedule, TOKENS


@dataclass(frozen=True)
class Compiled:
    """A schedule reduced to what the rank engine needs: per op, its time and which collectives it
    reads. Built once per schedule and run many times with different arrival delays."""

    coll: tuple[int, ...]             # per item: its collective index (issue order), or -1 for compute
    time_s: tuple[float, ...]         # per item: seconds (compute ops that read no collective are merged
                                      # into the item before them; a collective: its own time, no wake-up)
    reads: tuple[tuple[tuple[int, float], ...], ...]   # per compute item: (collective read, wake after it)
    comm_wake_s: tuple[float, ...]    # per collective: wake-up before issuing it (it reads a collective)
    comm_names: tuple[str, ...]       # per collective: its op name
    comm_ops: tuple[Op, ...]          # per collective: the op (its scope picks the jitter)
    comm_time_s: tuple[float, ...]    # per collective: its own time (the wake-up excluded)
    comm_host_ready_s: tuple[float, ...] = ()   # per collective: end of its host node in the rank's
                                      # host-node chain (engine.simulate's host_s), from the step's start
    names: tuple[str, ...] = ()       # per item: its op name (kept, unmerged, with a coschedule hook)
    cosched: object = None            # the interference's coschedule hook bound to the schedule (or None)
    ready_s: tuple[float, ...] = ()   # per item: when the rank's launch chain (engine.simulate's issue_s)
                                      # has launched it, from the rank's start; () without launches


def compile_schedule(schedule: Schedule, op_time: Callable[[Op], float],
                     interference: Interference = Interference(),
                     host_s: Callable[[Op], float] | None = None,
                     issue_s: Callable[[Op], float] | None = None) -> Compiled:
    """Per-op times and collective reads of `schedule`, as `simulate` would charge them (with the
    same `host_s` host-node chain and `issue_s` launch chain). With a coschedule hook every compute
    op stays its own item (its kernels decide when a collective can start beside it and how much
    each slows); a compute op that takes launch time stays its own item too (it may wait for its
    launch)."""
    times = {op.name: op_time(op) for op in schedule.ops}
    for name, t in times.items():
        if not t >= 0:
            raise ValueError(f"op {name}: time must be >= 0, got {t}")
    wake = interference.wake_s
    index: dict[str, int] = {}
    at = {op.name: i for i, op in enumerate(schedule.ops)}
    coll, time_s, reads, comm_wake, names, ops, item_names = [], [], [], [], [], [], []
    launched, issued = [], 0.0        # per op: launched by (from the rank's start), as simulate sums it
    for i, op in enumerate(schedule.ops):
        if issue_s is not None:
            t = issue_s(op)
            if not t >= 0:
                raise ValueError(f"op {op.name}: launch time must be >= 0, got {t}")
            issued += t
        launched.append(issued)
        producers = [schedule.producer[v] for v in op.inputs if v != TOKENS]
        # the rank engine assumes every input is produced earlier in issue order (so a comm op's
        # inputs exist once it is issued and the comm stream is free); a schedule that breaks it
        # would stall in `simulate` too
        if any(at[p.name] >= i for p in producers):
            raise ValueError(f"schedule {schedule.name}: op {op.name} reads a value produced later")
        t = times[op.name]
        if op.is_comm:
            k = len(names)
            index[op.name] = k
            coll.append(k)
            time_s.append(t - min(wake, t))
            comm_in = [times[p.name] for p in producers if p.is_comm]
            comm_wake.append(min(wake, max(comm_in)) if comm_in and wake > 0 else 0.0)
            names.append(op.name)
            ops.append(op)
            reads.append(())
            item_names.append(op.name)
        else:
            coll.append(-1)
            time_s.append(t)
            item_names.append(op.name)
            reads.append(tuple((index[p.name], min(wake, times[p.name])) for p in producers if p.is_comm))
    comm_time = tuple(time_s[at[o.name]] for o in ops)
    # merge each compute op that reads no collective into the one before it: a rank's compute
    # stream runs them back to back at one shared rate, so only their summed time matters
    # (a run of ~5 ops between two collectives becomes one item, ~3x fewer events)
    cs = interference.bind(schedule, times)
    # (an op launched later than the one before it may wait for its launch: not merged)
    m_coll, m_time, m_reads, m_names, m_ready = [], [], [], [], []
    for i, (k, t, rd, nm) in enumerate(zip(coll, time_s, reads, item_names)):
        if cs is None and k < 0 and not rd and m_coll and m_coll[-1] < 0 and launched[i] == launched[i - 1]:
            m_time[-1] += t
            continue
        m_coll.append(k)
        m_time.append(t)
        m_reads.append(rd)
        m_names.append(nm)
        m_ready.append(launched[i])
    host, ready = [], 0.0
    for o in ops:                     # the host-node chain: cumulative over the collectives that have one
        h = host_s(o) if host_s is not None else 0.0
        ready += max(h, 0.0)
        host.append(ready if h > 0 else 0.0)
    return Compiled(tuple(m_coll), tuple(m_time), tuple(m_reads), tuple(comm_wake), tuple(names), tuple(ops),
                    comm_time, tuple(host) if any(host) else (), tuple(m_names) if cs is not None else (), cs,
                    tuple(m_ready) if issued > 0 else ())


class Event(IntEnum):
    """What a heap entry (time_s, seq, kind, rank, value) of `simulate_ranks` says happens. The
    engine compares plain ints bound to locals from these values (an IntEnum member compares
    slower than an int in the event loop)."""

    COMPUTE_END = 0     # rank's running compute item ends; value: the rank's version when pushed
    COLL_START = 1      # collective `value` starts (its last rank arrived); rank -1
    COLL_END = 2        # the collective in flight ends; value: its version when pushed; rank -1
    WAKE = 3            # a rank blocked on a collective resumes after its wake-up; value 0
    ARRIVE = 4          # rank arrives at collective `value` (only under a coschedule hook)
    RESIDENT = 5        # rank's kernel of collective `value` got its SMs (only under a coschedule hook)
    LAUNCHED = 6        # the rank's launch chain reaches its next item (only with Compiled.ready_s); value 0


@dataclass(slots=True)
class _InFlight:
    """The collective in flight: at most one, since every collective spans every rank and each
    rank's comm stream is serial."""

    k: int = -1                 # its index (issue order); -1: none in flight
    remaining: float = 0.0      # its work left at `since_s`, in seconds at rate 1
    rate: float = 1.0           # work per second now (1 / its slowdown)
    since_s: float = 0.0        # when `remaining` was last brought up to date
    version: int = 0            # bumped at every start and re-rate: an older COLL_END is stale


@dataclass(slots=True)
class _Counters:
    """Counts shared by every rank's stream."""

    next_k: int = 0             # the collective every comm stream takes next
    busy_ranks: int = 0         # ranks running a compute item now (counted under interference only)


def simulate_ranks(c: Compiled, ranks: int, interference: Interference = Interference(),
                   delay_s: np.ndarray | None = None, start_s: tuple[float, ...] = ()) -> tuple[float, float]:
    """(duration_s, rank 0's exposed comm) of one forward pass on every rank: the timeline
    `simulate` computes, by an event heap instead of SimPy processes (~15x faster), for the
    sampled mode that runs a pass thousands of times.

    `delay_s[k, r]`: rank r's arrival delay at collective k (after it is issued and the rank's
    comm stream is free). Same semantics as `simulate` (tests/test_sampled.py holds them to 1e-12):
    a collective starts when its last rank arrives and ends for all together; at most one is in
    flight, since every collective spans every rank and each rank's comm stream is serial; compute
    slows by compute_slowdown while one is in flight, and it by comm_slowdown while any rank
    computes; a rank that blocked on a collective resumes its wake-up after the end. Arrivals are
    not events: only the last one matters (it starts the collective), so each is a max -- except
    under the schedule's coschedule hook (`c.cosched`, bound by compile_schedule): then each arrival
    is an event, at which the rank's running compute kernel decides how long its SMs keep the
    collective waiting, and the factors are per pair of compute op and collective; a rank whose kernel
    got its SMs (RESIDENT) before the last one spins on them, its compute slowed by `spin_slowdown`
    until the collective starts.

    `start_s[r]` starts rank r late (its compute stream, its host-node chain and its launch chain), as
    `simulate`'s `rank_delay_s` (sim.stack.host_lane: ranks handed their step inputs at different times).
    With `c.ready_s` an item starts no earlier than the rank's launch chain has launched it (an idle
    wait, LAUNCHED), and a collective is handed to the comm stream no earlier than its launch."""
    push_, pop_ = heapq.heappush, heapq.heappop
    coll, time_s, reads, comm_wake = c.coll, c.time_s, c.reads, c.comm_wake_s
    last_read = [max(k for k, _ in rd) if rd else -1 for rd in reads]
    n_ops, n_coll = len(coll), len(c.comm_names)
    inter = interference.active
    cslow, mslow = interference.compute_slowdown, interference.comm_slowdown
    cs, inames, cnames = c.cosched, c.names, c.comm_names
    delays = delay_s.tolist() if delay_s is not None else [[0.0] * ranks for _ in range(n_coll)]
    heap: list = []
    seq = count()
    pc = [0] * ranks                  # next item of each rank's compute stream
    issued = [0] * ranks              # collectives issued by each rank
    issue_s = [[0.0] * n_coll for _ in range(ranks)]
    done_s = [0.0] * ranks
    finished = [False] * ranks
    ends = [-1.0] * n_coll            # end of each collective once it has ended
    arrived = [0] * n_coll
    latest = [0.0] * n_coll           # latest arrival so far
    # compute in progress per rank: remaining work, rate, when last updated, version
    remaining = [0.0] * ranks
    rate = [1.0] * ranks
    since = [0.0] * ranks
    ver = [0] * ranks
    busy = [False] * ranks
    blocked_on = [-1] * ranks         # collective a blocked rank waits for
    spinning = [-1] * ranks           # collective whose kernel holds the rank's SMs before it starts
    blocked_wake = [0.0] * ranks
    blocked_t0 = [0.0] * ranks
    exposed = 0.0
    fl = _InFlight()
    counts = _Counters()
    COMPUTE_END, COLL_START, COLL_END, WAKE, ARRIVE, RESIDENT, LAUNCHED = (int(e) for e in Event)
    ready_s = c.ready_s
    comm_ready = [0.0] * n_coll       # per collective: its launch, from the rank's start
    for i, k in enumerate(coll):
        if k >= 0 and ready_s:
            comm_ready[k] = ready_s[i]

    host_ready = c.comm_host_ready_s or (0.0,) * n_coll
    start = [start_s[r] if r < len(start_s) else 0.0 for r in range(ranks)]

    def compute_slow(r, k):
        """Factor on rank r's running item while collective k is in flight."""
        return cs.compute_slowdown(inames[pc[r]], cnames[k]) if cs is not None else cslow

    def now_slow(r):
        """Factor on rank r's running item now: beside the collective in flight, or its spinning kernel."""
        if inter and fl.k >= 0:
            return compute_slow(r, fl.k)
        return cs.spin_slowdown(inames[pc[r]], cnames[spinning[r]]) if spinning[r] >= 0 else 1.0

    def rerate(r, now, slow):
        remaining[r] -= (now - since[r]) * rate[r]
        since[r], rate[r] = now, 1.0 / slow
        ver[r] += 1
        push_(heap, (now + remaining[r] * slow, next(seq), COMPUTE_END, r, ver[r]))

    def comm_rate(k):
        """Collective k's rate given what every rank computes now."""
        if cs is None:
            return 1.0 / mslow if inter and counts.busy_ranks > 0 else 1.0
        return 1.0 / max((cs.comm_slowdown(cnames[k], inames[pc[r]]) for r in range(ranks) if busy[r]),
                         default=1.0)

    def arrive(r, k, free_s):
        chain = host_ready[k] + start[r] if host_ready[k] > 0 else 0.0     # the chain starts with the rank
        handed = max(issue_s[r][k], free_s)
        if ready_s and start[r] + comm_ready[k] > handed:     # its launch (the rank's launch chain)
            handed = start[r] + comm_ready[k]
        t = max(handed + comm_wake[k], chain) + delays[k][r]
        if cs is not None:                               # an event: the SMs are looked at then
            push_(heap, (t, next(seq), ARRIVE, r, k))
            return
        count_arrival(k, t)

    def count_arrival(k, t):
        if t > latest[k] or arrived[k] == 0:
            latest[k] = t
        arrived[k] += 1
        if arrived[k] == ranks:                          # the last arrival starts it
            push_(heap, (latest[k], next(seq), COLL_START, -1, k))

    def refly(now, new_rate):
        fl.remaining -= (now - fl.since_s) * fl.rate
        fl.since_s, fl.rate = now, new_rate
        fl.version += 1
        push_(heap, (now + fl.remaining / new_rate, next(seq), COLL_END, -1, fl.version))

    def advance(r, now):
        """Run rank r's compute stream from `now` until it blocks, starts a timed item or ends."""
        i = pc[r]
        while i < n_ops:
            k = coll[i]
            if k >= 0:                                   # issue a collective to the comm stream
                issue_s[r][k] = now
                issued[r] = k + 1
                if k == counts.next_k and fl.k < 0:       # its comm stream is free
                    arrive(r, k, 0.0)
                i += 1
                continue
            if ready_s and start[r] + ready_s[i] > now:  # not launched yet: the GPU idles until then
                pc[r] = i
                push_(heap, (start[r] + ready_s[i], next(seq), LAUNCHED, r, 0))
                return
            lk = last_read[i]
            if lk >= 0 and ends[lk] < 0:                 # collectives end in order: this one is the last
                pend = [w for kk, w in reads[i] if ends[kk] < 0]
                pc[r] = i
                blocked_on[r] = lk
                blocked_wake[r] = pend[-1]
                blocked_t0[r] = now
                return
            t = time_s[i]
            if t > 0:
                pc[r] = i
                slow = now_slow(r)
                remaining[r], rate[r], since[r] = t, 1.0 / slow, now
                ver[r] += 1
                busy[r] = True
                if inter:
                    counts.busy_ranks += 1
                    if fl.k >= 0 and comm_rate(fl.k) != fl.rate:    # the collective in flight slows from now
                        refly(now, comm_rate(fl.k))
                push_(heap, (now + t * slow, next(seq), COMPUTE_END, r, ver[r]))
                return
            i += 1
        pc[r] = n_ops
        done_s[r] = now
        finished[r] = True

    def reslow(now, k):
        """Collective k started (k >= 0) or the one in flight ended (k < 0): re-rate every busy rank."""
        for r in range(ranks):
            if busy[r]:
                rerate(r, now, compute_slow(r, k) if k >= 0 else 1.0)

    def resident(r, k, now):
        """Rank r's kernel of collective k holds its SMs from `now`: the last one starts it, an earlier
        one spins, slowing the rank's running compute (under a coschedule hook only)."""
        count_arrival(k, now)
        if arrived[k] < ranks:
            spinning[r] = k
            if busy[r] and now_slow(r) != 1.0:          # (nothing in flight: it ran at rate 1)
                rerate(r, now, now_slow(r))

    for r in range(ranks):
        advance(r, start[r])
    while heap:
        now, _, kind, r, v = pop_(heap)
        if kind == COMPUTE_END:
            if v != ver[r]:
                continue
            busy[r] = False
            if inter:
                counts.busy_ranks -= 1
                if fl.k >= 0 and comm_rate(fl.k) != fl.rate:     # the collective speeds up again
                    refly(now, comm_rate(fl.k))
            pc[r] += 1
            advance(r, now)
        elif kind == COLL_START:
            spinning[:] = [-1] * ranks                   # no kernel spins once the collective runs
            fl.k, fl.remaining, fl.since_s, fl.version = v, c.comm_time_s[v], now, fl.version + 1
            fl.rate = comm_rate(v)
            if inter and (cslow != 1.0 or cs is not None):
                reslow(now, v)
            push_(heap, (now + fl.remaining / fl.rate, next(seq), COLL_END, -1, fl.version))
        elif kind == COLL_END:
            if v != fl.version:
                continue
            k = fl.k
            fl.k = -1                                    # the comm streams are free
            ends[k] = now
            counts.next_k = k + 1
            if inter and (cslow != 1.0 or cs is not None):
                reslow(now, -1)
            if k + 1 < n_coll:
                for rr in range(ranks):
                    if issued[rr] > k + 1:
                        arrive(rr, k + 1, now)
            for rr in range(ranks):
                if blocked_on[rr] == k:
                    blocked_on[rr] = -1
                    if blocked_wake[rr] > 0:
                        push_(heap, (now + blocked_wake[rr], next(seq), WAKE, rr, 0))
                    else:
                        if rr == 0:
                            exposed += now - blocked_t0[rr]
                        advance(rr, now)
        elif kind == ARRIVE:                             # (under a coschedule hook only)
            d = 0.0
            if busy[r]:
                i = pc[r]
                done = time_s[i] - (remaining[r] - (now - since[r]) * rate[r])
                d = cs.delay_s(cnames[v], inames[i], done)
            if d > 0:                                    # its kernel gets the SMs later
                push_(heap, (now + d, next(seq), RESIDENT, r, v))
            else:
                resident(r, v, now)
        elif kind == RESIDENT:
            resident(r, v, now)
        elif kind == LAUNCHED:
            advance(r, now)
        else:                                            # WAKE: a blocked rank, woken, resumes
            if r == 0:
                exposed += now - blocked_t0[r]
            advance(r, now)
    stalled = [r for r in range(ranks) if not finished[r]]
    if stalled:
        raise RuntimeError(f"simulation stalled on ranks {stalled}")
    return max(done_s), exposed
