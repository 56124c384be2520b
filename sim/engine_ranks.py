"""Every rank of a step without SimPy: a schedule compiled once (`compile_schedule`) to per-op
times and collective reads, then run many times with different arrival delays (`simulate_ranks`).
The same semantics as sim/engine.py's SimPy engine (which tests/test_sampled.py checks), fast
enough for the exact mode's many sampled steps.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import count
from typing import Callable

import numpy as np

from .engine import Interference
from .ir import Op, Schedule, TOKENS


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


def compile_schedule(schedule: Schedule, op_time: Callable[[Op], float],
                     interference: Interference = Interference(),
                     host_s: Callable[[Op], float] | None = None) -> Compiled:
    """Per-op times and collective reads of `schedule`, as `simulate` would charge them (with the
    same `host_s` host-node chain). With a coschedule hook every compute op stays its own item
    (its kernels decide when a collective can start beside it and how much each slows)."""
    times = {op.name: op_time(op) for op in schedule.ops}
    for name, t in times.items():
        if not t >= 0:
            raise ValueError(f"op {name}: time must be >= 0, got {t}")
    wake = interference.wake_s
    index: dict[str, int] = {}
    at = {op.name: i for i, op in enumerate(schedule.ops)}
    coll, time_s, reads, comm_wake, names, ops, item_names = [], [], [], [], [], [], []
    for i, op in enumerate(schedule.ops):
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
    m_coll, m_time, m_reads, m_names = [], [], [], []
    for k, t, rd, nm in zip(coll, time_s, reads, item_names):
        if cs is None and k < 0 and not rd and m_coll and m_coll[-1] < 0:
            m_time[-1] += t
            continue
        m_coll.append(k)
        m_time.append(t)
        m_reads.append(rd)
        m_names.append(nm)
    host, ready = [], 0.0
    for o in ops:                     # the host-node chain: cumulative over the collectives that have one
        h = host_s(o) if host_s is not None else 0.0
        ready += max(h, 0.0)
        host.append(ready if h > 0 else 0.0)
    return Compiled(tuple(m_coll), tuple(m_time), tuple(m_reads), tuple(comm_wake), tuple(names), tuple(ops),
                    comm_time, tuple(host) if any(host) else (), tuple(m_names) if cs is not None else (), cs)


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
    collective waiting, and the factors are per pair of compute op and collective.

    `start_s[r]` starts rank r late (its compute stream and its host-node chain), as `simulate`'s
    `rank_delay_s` (sim.host_lane: ranks handed their step inputs at different times)."""
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
    # the collective every comm stream takes next, and whether none is in flight
    state = {"next": 0, "free": True}
    # compute in progress per rank: remaining work, rate, when last updated, version
    remaining = [0.0] * ranks
    rate = [1.0] * ranks
    since = [0.0] * ranks
    ver = [0] * ranks
    busy = [False] * ranks
    blocked_on = [-1] * ranks         # collective a blocked rank waits for
    blocked_wake = [0.0] * ranks
    blocked_t0 = [0.0] * ranks
    exposed = 0.0
    # the collective in flight: index, remaining work, rate, since, version; ranks computing
    fl = [-1, 0.0, 1.0, 0.0, 0]
    busy_n = [0]

    host_ready = c.comm_host_ready_s or (0.0,) * n_coll
    start = [start_s[r] if r < len(start_s) else 0.0 for r in range(ranks)]

    def compute_slow(r, k):
        """Factor on rank r's running item while collective k is in flight."""
        return cs.compute_slowdown(inames[pc[r]], cnames[k]) if cs is not None else cslow

    def comm_rate(k):
        """Collective k's rate given what every rank computes now."""
        if cs is None:
            return 1.0 / mslow if inter and busy_n[0] > 0 else 1.0
        return 1.0 / max((cs.comm_slowdown(cnames[k], inames[pc[r]]) for r in range(ranks) if busy[r]),
                         default=1.0)

    def arrive(r, k, free_s):
        chain = host_ready[k] + start[r] if host_ready[k] > 0 else 0.0     # the chain starts with the rank
        t = max(max(issue_s[r][k], free_s) + comm_wake[k], chain) + delays[k][r]
        if cs is not None:                               # an event: the SMs are looked at then
            push_(heap, (t, next(seq), 4, r, k))
            return
        count_arrival(k, t)

    def count_arrival(k, t):
        if t > latest[k] or arrived[k] == 0:
            latest[k] = t
        arrived[k] += 1
        if arrived[k] == ranks:                          # the last arrival starts it
            push_(heap, (latest[k], next(seq), 1, -1, k))

    def refly(now, new_rate):
        fl[1] -= (now - fl[3]) * fl[2]
        fl[3], fl[2] = now, new_rate
        fl[4] += 1
        push_(heap, (now + fl[1] / new_rate, next(seq), 2, -1, fl[4]))

    def advance(r, now):
        """Run rank r's compute stream from `now` until it blocks, starts a timed item or ends."""
        i = pc[r]
        while i < n_ops:
            k = coll[i]
            if k >= 0:                                   # issue a collective to the comm stream
                issue_s[r][k] = now
                issued[r] = k + 1
                if k == state["next"] and state["free"]:
                    arrive(r, k, 0.0)
                i += 1
                continue
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
                slow = compute_slow(r, fl[0]) if inter and fl[0] >= 0 else 1.0
                remaining[r], rate[r], since[r] = t, 1.0 / slow, now
                ver[r] += 1
                busy[r] = True
                if inter:
                    busy_n[0] += 1
                    if fl[0] >= 0 and comm_rate(fl[0]) != fl[2]:    # the collective in flight slows from now
                        refly(now, comm_rate(fl[0]))
                push_(heap, (now + t * slow, next(seq), 0, r, ver[r]))
                return
            i += 1
        pc[r] = n_ops
        done_s[r] = now
        finished[r] = True

    def reslow(now, k):
        """Collective k started (k >= 0) or the one in flight ended (k < 0): re-rate every busy rank."""
        for r in range(ranks):
            if busy[r]:
                slow = compute_slow(r, k) if k >= 0 else 1.0
                remaining[r] -= (now - since[r]) * rate[r]
                since[r], rate[r] = now, 1.0 / slow
                ver[r] += 1
                push_(heap, (now + remaining[r] * slow, next(seq), 0, r, ver[r]))

    for r in range(ranks):
        advance(r, start[r])
    while heap:
        now, _, kind, r, v = pop_(heap)
        if kind == 0:                                    # a compute item ends
            if v != ver[r]:
                continue
            busy[r] = False
            if inter:
                busy_n[0] -= 1
                if fl[0] >= 0 and comm_rate(fl[0]) != fl[2]:     # the collective speeds up again
                    refly(now, comm_rate(fl[0]))
            pc[r] += 1
            advance(r, now)
        elif kind == 1:                                  # collective v starts (its last rank arrived)
            state["free"] = False
            fl[0], fl[1], fl[3], fl[4] = v, c.comm_time_s[v], now, fl[4] + 1
            fl[2] = comm_rate(v)
            if inter and (cslow != 1.0 or cs is not None):
                reslow(now, v)
            push_(heap, (now + fl[1] / fl[2], next(seq), 2, -1, fl[4]))
        elif kind == 2:                                  # the collective in flight ends
            if v != fl[4]:
                continue
            k = fl[0]
            fl[0] = -1
            ends[k] = now
            state["free"] = True
            state["next"] = k + 1
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
                        push_(heap, (now + blocked_wake[rr], next(seq), 3, rr, 0))
                    else:
                        if rr == 0:
                            exposed += now - blocked_t0[rr]
                        advance(rr, now)
        elif kind == 4:                                  # rank r arrives at collective v (coschedule)
            d = 0.0
            if busy[r]:
                i = pc[r]
                done = time_s[i] - (remaining[r] - (now - since[r]) * rate[r])
                d = cs.delay_s(cnames[v], inames[i], done)
            count_arrival(v, now + d)
        else:                                            # a blocked rank, woken, resumes
            if r == 0:
                exposed += now - blocked_t0[r]
            advance(r, now)
    stalled = [r for r in range(ranks) if not finished[r]]
    if stalled:
        raise RuntimeError(f"simulation stalled on ranks {stalled}")
    return max(done_s), exposed
