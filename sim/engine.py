"""SimPy engine: one forward pass of a Schedule on every rank, op by op.

Per rank there are two processes, as on a GPU: the compute stream runs compute ops in issue
order, each once its inputs exist; the comm stream takes collectives in issue order, waits for
their input, then arrives at the collective's rendezvous. A collective starts when the last
rank of its group arrives (so a late rank delays everyone) and ends for all ranks together.

Interference: while a rank's compute stream and a collective it takes part in run at once,
compute progresses at 1/compute_slowdown of its speed and the collective at 1/comm_slowdown
(a collective runs at the pace of its slowest rank). Rates are re-evaluated whenever a stream
starts or stops, so partial overlap is charged exactly. A rank that blocked on a collective resumes
`wake_s` after it ends, and that wake-up is part of the collective's measured time (Interference).

The engine knows nothing of costs: it takes `op_time(op) -> seconds`, so tests can pin
timelines with hand-written integer costs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from .schedule import COMM, COMPUTE, TOKENS, Op, Schedule
from .trace import Record

_EPS = 1e-15


@dataclass(frozen=True)
class Interference:
    """How a collective in flight and compute on the same rank share it.

    While a collective runs, compute on its ranks is slowed by compute_slowdown; while compute
    runs on any of its ranks, the collective progresses at 1/comm_slowdown. The last wake_s of a
    collective's time is not the collective's own: it is waking the rank that blocked on it (a
    sleeping thread scheduled again, on CPU ~0.7 ms). A rank that was busy computing when the
    collective ended pays nothing, so a blocking schedule costs the collective's full time and one
    that overlaps it saves the wake-up as well (min(wake_s, the collective's time) each)."""

    compute_slowdown: float = 1.0     # factor on compute while a collective runs on the rank
    comm_slowdown: float = 1.0        # factor on a collective while compute runs on any of its ranks
    wake_s: float = 0.0               # the part of a collective's time that wakes a rank blocked on it

    def __post_init__(self) -> None:
        if self.compute_slowdown < 1.0 or self.comm_slowdown < 1.0:
            raise ValueError("slowdown factors must be >= 1")
        if not self.wake_s >= 0.0:
            raise ValueError(f"wake_s must be >= 0, got {self.wake_s}")

    @property
    def active(self) -> bool:
        return self.compute_slowdown > 1.0 or self.comm_slowdown > 1.0 or self.wake_s > 0.0


@dataclass
class StepResult:
    """Timeline of one forward pass."""

    duration_s: float                 # until the last rank finished its last op
    exposed_comm_s: float             # rank 0's compute stream blocked waiting on collectives
    records: list[Record] = field(default_factory=list)
    events: int = 0                   # SimPy events scheduled (engine throughput benchmarks)


class _CountingEnv(simpy.Environment):
    """An Environment that counts the events it schedules."""

    def __init__(self) -> None:
        super().__init__()
        self.n_events = 0

    def schedule(self, event, priority=simpy.core.NORMAL, delay=0) -> None:
        self.n_events += 1
        super().schedule(event, priority, delay)


class _Rank:
    def __init__(self, env: simpy.Environment, rank: int):
        self.rank = rank
        self.values: dict[str, simpy.Event] = {}
        self.comm_queue = simpy.Store(env)
        self.compute_busy = False
        self.comm_busy = False
        self.changed = env.event()    # fires (and is replaced) whenever a stream starts/stops
        self.exposed_s = 0.0
        self.done_s = 0.0
        self.finished = False

    def set_busy(self, env: simpy.Environment, stream: str, busy: bool) -> None:
        setattr(self, f"{stream}_busy", busy)
        old, self.changed = self.changed, env.event()
        old.succeed()


class _Collective:
    """Rendezvous of one collective op across the simulated ranks."""

    def __init__(self, env: simpy.Environment, n: int):
        self.arrived = 0
        self.n = n
        self.done = env.event()
        self.start_s = 0.0


def simulate(schedule: Schedule, op_time: Callable[[Op], float], ranks: int = 1,
             interference: Interference = Interference(), rank_delay_s: tuple[float, ...] = (),
             jitter_s: float = 0.0, seed: int = 0, record: bool = True,
             arrival_mean_s: Callable[[Op], float] | None = None) -> StepResult:
    """Run one forward pass of `schedule` on `ranks` simulated ranks.

    ranks=1 is the representative-rank fast path: with symmetric ranks and no skew or jitter
    every rank's timeline is the same, so one rank gives the exact answer. `rank_delay_s[r]`
    starts rank r late; `jitter_s` adds an exponential delay (that mean) before each rank's
    arrival at each collective; `arrival_mean_s(op)`, when given, is that mean per collective
    instead (the profile's jitter of the collective's scope).
    """
    env = _CountingEnv()
    rs = [_Rank(env, r) for r in range(ranks)]
    colls: dict[str, _Collective] = {}
    records: list[Record] = []
    rng = np.random.default_rng(seed)
    phase = schedule.step.phase
    times = {op.name: op_time(op) for op in schedule.ops}
    for name, t in times.items():
        if not t >= 0:
            raise ValueError(f"op {name}: time must be >= 0, got {t}")

    def event(rank: _Rank, value: str) -> simpy.Event:
        ev = rank.values.get(value)
        if ev is None:
            ev = rank.values[value] = env.event()
        return ev

    def run_for(base_s: float, rate: Callable[[], float], watch: Callable[[], list[simpy.Event]]):
        """Advance `base_s` seconds of work at a rate that may change whenever `watch` fires."""
        remaining = base_s
        if not interference.active:
            if remaining > 0:
                yield env.timeout(remaining)
            return
        while remaining > _EPS:
            r, t0 = rate(), env.now
            timeout = env.timeout(remaining / r)
            yield env.any_of([timeout] + watch())
            if timeout.processed or timeout.triggered and env.now - t0 >= remaining / r - _EPS:
                return
            remaining -= (env.now - t0) * r

    def compute_stream(rank: _Rank):
        if rank.rank < len(rank_delay_s) and rank_delay_s[rank.rank] > 0:
            yield env.timeout(rank_delay_s[rank.rank])
        for op in schedule.ops:
            if op.is_comm:
                rank.comm_queue.put(op)           # issue async; the comm stream takes it from here
                continue
            pending = [v for v in op.inputs if v != TOKENS and not event(rank, v).triggered]
            if pending:
                t0 = env.now
                yield env.all_of([event(rank, v) for v in pending])
                if interference.wake_s > 0:          # it blocked (even for 0 s): it must be woken
                    yield env.timeout(min(interference.wake_s, times[schedule.producer[pending[-1]].name]))
                if env.now > t0:
                    rank.exposed_s += env.now - t0
                    if record:       # named after the collective waited for, as the harness names it
                        awaited = schedule.producer[pending[-1]]
                        records.append(Record(awaited.name, rank.rank, "wait", t0, env.now, phase, awaited.kind))
            start = env.now
            rank.set_busy(env, COMPUTE, True) if interference.active else None
            slow = interference.compute_slowdown
            yield from run_for(times[op.name], lambda: 1.0 / slow if rank.comm_busy else 1.0,
                               lambda: [rank.changed])
            rank.set_busy(env, COMPUTE, False) if interference.active else None
            if record:
                records.append(Record(op.name, rank.rank, COMPUTE, start, env.now, phase, op.kind))
            for v in op.outputs:
                event(rank, v).succeed()
        rank.done_s = env.now
        rank.finished = True

    def comm_stream(rank: _Rank):
        while True:
            op = yield rank.comm_queue.get()
            pending = [event(rank, v) for v in op.inputs if not event(rank, v).triggered]
            if pending:
                yield env.all_of(pending)
            # a collective that reads another's result: the rank waited for that one to issue this one
            # (the comm stream runs them in order, so it always did), and was woken like a compute wait
            comm_in = [schedule.producer[v] for v in op.inputs if v != TOKENS and schedule.producer[v].is_comm]
            if comm_in and interference.wake_s > 0:
                yield env.timeout(min(interference.wake_s, max(times[p.name] for p in comm_in)))
            mean = arrival_mean_s(op) if arrival_mean_s is not None else jitter_s
            if mean > 0:
                yield env.timeout(float(rng.exponential(mean)))
            c = colls.get(op.name)
            if c is None:
                c = colls[op.name] = _Collective(env, ranks)
            c.arrived += 1
            if c.arrived == c.n:
                env.process(drive(op, c))
            yield c.done
            for v in op.outputs:
                event(rank, v).succeed()

    def drive(op: Op, c: _Collective):
        c.start_s = env.now
        for r in rs:
            r.set_busy(env, COMM, True) if interference.active else None
        slow = interference.comm_slowdown
        # the waiter's wake-up is not the collective's own time (Interference)
        yield from run_for(times[op.name] - min(interference.wake_s, times[op.name]),
                           lambda: 1.0 / slow if any(r.compute_busy for r in rs) else 1.0,
                           lambda: [r.changed for r in rs])
        for r in rs:
            r.set_busy(env, COMM, False) if interference.active else None
            if record:
                records.append(Record(op.name, r.rank, COMM, c.start_s, env.now, phase, op.kind))
        c.done.succeed()

    for r in rs:
        env.process(compute_stream(r))
        env.process(comm_stream(r))
    env.run()
    stalled = [r.rank for r in rs if not r.finished]
    if stalled:     # an op waits for a value no op produces in time: a schedule bug, never silent
        raise RuntimeError(f"schedule {schedule.name}: simulation stalled on ranks {stalled}")
    return StepResult(max(r.done_s for r in rs), rs[0].exposed_s,
                      sorted(records, key=lambda x: (x.rank, x.start_s, x.stream)), env.n_events)


# ------------------------------------------------------------------ every rank, without SimPy

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


def compile_schedule(schedule: Schedule, op_time: Callable[[Op], float],
                     interference: Interference = Interference()) -> Compiled:
    """Per-op times and collective reads of `schedule`, as `simulate` would charge them."""
    times = {op.name: op_time(op) for op in schedule.ops}
    for name, t in times.items():
        if not t >= 0:
            raise ValueError(f"op {name}: time must be >= 0, got {t}")
    wake = interference.wake_s
    index: dict[str, int] = {}
    at = {op.name: i for i, op in enumerate(schedule.ops)}
    coll, time_s, reads, comm_wake, names, ops = [], [], [], [], [], []
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
        else:
            coll.append(-1)
            time_s.append(t)
            reads.append(tuple((index[p.name], min(wake, times[p.name])) for p in producers if p.is_comm))
    comm_time = tuple(time_s[at[o.name]] for o in ops)
    # merge each compute op that reads no collective into the one before it: a rank's compute
    # stream runs them back to back at one shared rate, so only their summed time matters
    # (a run of ~5 ops between two collectives becomes one item, ~3x fewer events)
    m_coll, m_time, m_reads = [], [], []
    for k, t, rd in zip(coll, time_s, reads):
        if k < 0 and not rd and m_coll and m_coll[-1] < 0:
            m_time[-1] += t
            continue
        m_coll.append(k)
        m_time.append(t)
        m_reads.append(rd)
    return Compiled(tuple(m_coll), tuple(m_time), tuple(m_reads), tuple(comm_wake), tuple(names), tuple(ops),
                    comm_time)


def simulate_ranks(c: Compiled, ranks: int, interference: Interference = Interference(),
                   delay_s: np.ndarray | None = None) -> tuple[float, float]:
    """(duration_s, rank 0's exposed comm) of one forward pass on every rank: the timeline
    `simulate` computes, by an event heap instead of SimPy processes (~15x faster), for the
    sampled mode that runs a pass thousands of times.

    `delay_s[k, r]`: rank r's arrival delay at collective k (after it is issued and the rank's
    comm stream is free). Same semantics as `simulate` (tests/test_sampled.py holds them to 1e-12):
    a collective starts when its last rank arrives and ends for all together; at most one is in
    flight, since every collective spans every rank and each rank's comm stream is serial; compute
    slows by compute_slowdown while one is in flight, and it by comm_slowdown while any rank
    computes; a rank that blocked on a collective resumes its wake-up after the end. Arrivals are
    not events: only the last one matters (it starts the collective), so each is a max."""
    import heapq
    from itertools import count
    push_, pop_ = heapq.heappush, heapq.heappop
    coll, time_s, reads, comm_wake = c.coll, c.time_s, c.reads, c.comm_wake_s
    last_read = [max(k for k, _ in rd) if rd else -1 for rd in reads]
    n_ops, n_coll = len(coll), len(c.comm_names)
    inter = interference.active
    cslow, mslow = interference.compute_slowdown, interference.comm_slowdown
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

    def arrive(r, k, free_s):
        t = max(issue_s[r][k], free_s) + comm_wake[k] + delays[k][r]
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
                slow = cslow if inter and fl[0] >= 0 else 1.0
                remaining[r], rate[r], since[r] = t, 1.0 / slow, now
                ver[r] += 1
                busy[r] = True
                if inter:
                    if busy_n[0] == 0 and fl[0] >= 0:    # the collective in flight slows from now
                        refly(now, 1.0 / mslow)
                    busy_n[0] += 1
                push_(heap, (now + t * slow, next(seq), 0, r, ver[r]))
                return
            i += 1
        pc[r] = n_ops
        done_s[r] = now
        finished[r] = True

    def reslow(now, slow):
        """A collective started or ended: re-rate every busy rank's compute."""
        for r in range(ranks):
            if busy[r]:
                remaining[r] -= (now - since[r]) * rate[r]
                since[r], rate[r] = now, 1.0 / slow
                ver[r] += 1
                push_(heap, (now + remaining[r] * slow, next(seq), 0, r, ver[r]))

    for r in range(ranks):
        advance(r, 0.0)
    while heap:
        now, _, kind, r, v = pop_(heap)
        if kind == 0:                                    # a compute item ends
            if v != ver[r]:
                continue
            busy[r] = False
            if inter:
                busy_n[0] -= 1
                if busy_n[0] == 0 and fl[0] >= 0:        # the collective speeds up again
                    refly(now, 1.0)
            pc[r] += 1
            advance(r, now)
        elif kind == 1:                                  # collective v starts (its last rank arrived)
            state["free"] = False
            fl[0], fl[1], fl[3], fl[4] = v, c.comm_time_s[v], now, fl[4] + 1
            fl[2] = 1.0 / mslow if inter and busy_n[0] > 0 else 1.0
            if inter and cslow != 1.0:
                reslow(now, cslow)
            push_(heap, (now + fl[1] / fl[2], next(seq), 2, -1, fl[4]))
        elif kind == 2:                                  # the collective in flight ends
            if v != fl[4]:
                continue
            k = fl[0]
            fl[0] = -1
            ends[k] = now
            state["free"] = True
            state["next"] = k + 1
            if inter and cslow != 1.0:
                reslow(now, 1.0)
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
        else:                                            # a blocked rank, woken, resumes
            if r == 0:
                exposed += now - blocked_t0[r]
            advance(r, now)
    stalled = [r for r in range(ranks) if not finished[r]]
    if stalled:
        raise RuntimeError(f"simulation stalled on ranks {stalled}")
    return max(done_s), exposed
