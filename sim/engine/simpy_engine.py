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
With `Interference.coschedule` (GPU profiles, sim/price/coschedule.py) the factors are per pair of
compute op and collective instead, and a collective ready to start first waits on each rank for the
SMs the compute kernel running there holds; a rank whose kernel got its SMs before the group's last
one spins on them until the collective starts, its compute slowed by `spin_slowdown` meanwhile.

Launches (`issue_s`): one Python thread per rank issues the pass's ops in order, compute ops and
collectives alike, and an op cannot start on the GPU before the thread has launched it: issue_k =
issue_{k-1} + issue_s(op_k), from the rank's start (the step's start: the previous step ended in a
sync on its sampled tokens, so every pass restarts the clock; a host lane's per-rank offset,
`rank_delay_s`, starts it late too). The thread never waits on the GPU inside a pass, so it runs
ahead of long kernels and the GPU idles only where it really falls behind (many small kernels). A
compute op starts at max(its stream free, issue_k, its inputs); a collective is handed to the comm
stream at max(the compute ops issued before it done, issue_k). No `issue_s` (graph phases, CPU
devices: sim.price.cost.CostModel.issue_s is 0): the timeline of a pass without launches.

The engine knows nothing of costs: it takes `op_time(op) -> seconds`, so tests can pin
timelines with hand-written integer costs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import simpy

from tpsim.sim.schedule.language import COMM, COMPUTE, TOKENS, Op, Schedule
from tpsim.sim.engine.record import Record

_EPS = 1e-15
LAUNCH = "launch"       # the record stream of an op's launch on the rank's CPU thread (sim.engine.record)


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
    coschedule: object = None         # sim.price.coschedule.CoSchedule: per-kernel SMs and HBM sharing instead
                                      # of the two flat factors (GPU profiles); None: the flat factors

    def __post_init__(self) -> None:
        if self.compute_slowdown < 1.0 or self.comm_slowdown < 1.0:
            raise ValueError("slowdown factors must be >= 1")
        if not self.wake_s >= 0.0:
            raise ValueError(f"wake_s must be >= 0, got {self.wake_s}")

    @property
    def active(self) -> bool:
        return (self.compute_slowdown > 1.0 or self.comm_slowdown > 1.0 or self.wake_s > 0.0
                or self.coschedule is not None)

    def bind(self, schedule, times_s: dict):
        """The co-scheduling hook for one schedule (sim.price.coschedule.Bound), or None without one."""
        return self.coschedule.bind(schedule, times_s) if self.coschedule is not None else None


@dataclass
class StepResult:
    """Timeline of one forward pass."""

    duration_s: float                 # until the last rank finished its last op
    exposed_comm_s: float             # rank 0's compute stream blocked waiting on collectives
    records: list[Record] = field(default_factory=list)
    events: int = 0                   # SimPy events scheduled (engine throughput benchmarks)
    last_held_op: int = -1            # index in schedule.ops of the last op the GPU waited on the CPU
                                      # to launch (the launch chain held it back); -1: none


class _Draws:
    """Exponential draws from numpy's generator seeded `seed`, made at the first draw: numpy
    (~0.07 CPU s to import) is loaded only where some jitter is drawn."""

    def __init__(self, seed: int):
        self.seed, self._rng = seed, None

    def exponential(self, mean_s: float) -> float:
        if self._rng is None:
            import numpy as np          # lazy: numpy only where jitter is drawn (see the class)
            self._rng = np.random.default_rng(self.seed)
        return float(self._rng.exponential(mean_s))


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
        self.op: str | None = None     # the compute op running (coschedule: whose SMs a collective waits for)
        self.coll: str | None = None   # the collective in flight on the rank
        self.spin: str | None = None   # the collective whose kernel holds SMs here, waiting for the others
        self.work = (0.0, 0.0, 0.0, 1.0)   # the running op's (base, remaining, at time, rate)
        self.changed = env.event()    # fires (and is replaced) whenever a stream starts/stops
        self.exposed_s = 0.0
        self.done_s = 0.0
        self.finished = False

    def work_done(self, now: float) -> float:
        base, remaining, t0, rate = self.work
        return base - (remaining - (now - t0) * rate)

    def set_busy(self, env: simpy.Environment, stream: str, busy: bool) -> None:
        setattr(self, f"{stream}_busy", busy)
        self.notify(env)

    def notify(self, env: simpy.Environment) -> None:
        """Wake whatever runs at a rate that depends on this rank's streams."""
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
             arrival_mean_s: Callable[[Op], float] | None = None,
             host_s: Callable[[Op], float] | None = None,
             issue_s: Callable[[Op], float] | None = None,
             arrival_wait_s: Callable[[Op], float] | None = None) -> StepResult:
    """Run one forward pass of `schedule` on `ranks` simulated ranks.

    ranks=1 is the representative-rank fast path: with symmetric ranks and no skew or jitter
    every rank's timeline is the same, so one rank gives the exact answer. `rank_delay_s[r]`
    starts rank r late; `jitter_s` adds an exponential delay (that mean) before each rank's
    arrival at each collective; `arrival_mean_s(op)`, when given, is that mean per collective
    instead (the profile's jitter of the collective's scope).

    `host_s(op)`, when given and > 0, is a host task the collective's kernel waits for: NCCL's
    per-collective host node in a captured CUDA graph when the collective crosses the network
    (enqueue.cc hostStreamPlanCallback). Those host nodes form one chain per rank on NCCL's host
    stream, starting at the graph's launch (the rank's start) and waiting for nothing on the GPU,
    so collective k cannot start on a rank before the sum of the host times of collectives 0..k.

    `issue_s(op)`, when given: the CPU seconds to launch each op, chained per rank (module docstring).

    `arrival_wait_s(op)`, when given: a fixed delay before each rank's arrival at that collective, as a
    drawn one would be -- the fast path's expected wait for the last of its peers (sim/engine/arrival.py).
    """
    env = _CountingEnv()
    rs = [_Rank(env, r) for r in range(ranks)]
    colls: dict[str, _Collective] = {}
    records: list[Record] = []
    rng = _Draws(seed)
    phase = schedule.step.phase
    times = {op.name: op_time(op) for op in schedule.ops}
    for name, t in times.items():
        if not t >= 0:
            raise ValueError(f"op {name}: time must be >= 0, got {t}")
    launch = {op.name: issue_s(op) for op in schedule.ops} if issue_s is not None else None
    index = {op.name: i for i, op in enumerate(schedule.ops)} if launch is not None else {}
    held = [-1]                                   # StepResult.last_held_op
    for name, t in (launch or {}).items():
        if not t >= 0:
            raise ValueError(f"op {name}: launch time must be >= 0, got {t}")
    cs = interference.bind(schedule, times)
    active = interference.active

    def event(rank: _Rank, value: str) -> simpy.Event:
        ev = rank.values.get(value)
        if ev is None:
            ev = rank.values[value] = env.event()
        return ev

    def run_for(base_s: float, rate: Callable[[], float], watch: Callable[[], list[simpy.Event]],
                rank: _Rank | None = None):
        """Advance `base_s` seconds of work at a rate that may change whenever `watch` fires (a
        compute op: its progress kept on `rank`)."""
        remaining = base_s
        if not active:
            if remaining > 0:
                yield env.timeout(remaining)
            return
        while remaining > _EPS:
            r, t0 = rate(), env.now
            if rank is not None:
                rank.work = (base_s, remaining, t0, r)
            timeout = env.timeout(remaining / r)
            yield env.any_of([timeout] + watch())
            if timeout.processed or timeout.triggered and env.now - t0 >= remaining / r - _EPS:
                return
            remaining -= (env.now - t0) * r

    def compute_stream(rank: _Rank):
        delay = rank_delay_s[rank.rank] if rank.rank < len(rank_delay_s) else 0.0
        if delay > 0:
            yield env.timeout(delay)
        issued = 0.0                              # the rank's launch chain, from its start (docstring)
        for op in schedule.ops:
            if launch is not None:
                if record and launch[op.name] > 0:    # the Python thread launching it: the trace's CPU lane
                    records.append(Record(op.name, rank.rank, LAUNCH, delay + issued, delay + issued + launch[op.name],
                                          phase, op.kind))
                issued += launch[op.name]
            ready = delay + issued                # launched by then (delay + 0.0 == delay: no chain)
            if op.is_comm:
                rank.comm_queue.put((op, ready))  # issue async; the comm stream takes it from here
                continue
            if env.now < ready:                   # the GPU waits for the CPU to launch it
                held[0] = max(held[0], index[op.name])
                yield env.timeout(ready - env.now)
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
            rank.op = op.name
            rank.set_busy(env, COMPUTE, True) if active else None
            slow = interference.compute_slowdown
            if cs is not None:      # beside the collective in flight, or beside its kernel spinning
                rate = lambda: (1.0 / cs.compute_slowdown(rank.op, rank.coll) if rank.comm_busy  # noqa: E731
                                else 1.0 / cs.spin_slowdown(rank.op, rank.spin) if rank.spin else 1.0)
            else:
                rate = lambda: 1.0 / slow if rank.comm_busy else 1.0  # noqa: E731
            yield from run_for(times[op.name], rate, lambda: [rank.changed], rank)
            rank.set_busy(env, COMPUTE, False) if active else None
            if record:
                records.append(Record(op.name, rank.rank, COMPUTE, start, env.now, phase, op.kind))
            for v in op.outputs:
                event(rank, v).succeed()
        rank.done_s = env.now
        rank.finished = True

    def comm_stream(rank: _Rank):
        host_ready = rank_delay_s[rank.rank] if rank.rank < len(rank_delay_s) else 0.0
        while True:
            op, ready = yield rank.comm_queue.get()
            if env.now < ready:                   # not launched yet (the rank's launch chain)
                held[0] = max(held[0], index[op.name])
                yield env.timeout(ready - env.now)
            pending = [event(rank, v) for v in op.inputs if not event(rank, v).triggered]
            if pending:
                yield env.all_of(pending)
            # a collective that reads another's result: the rank waited for that one to issue this one
            # (the comm stream runs them in order, so it always did), and was woken like a compute wait
            comm_in = [schedule.producer[v] for v in op.inputs if v != TOKENS and schedule.producer[v].is_comm]
            if comm_in and interference.wake_s > 0:
                yield env.timeout(min(interference.wake_s, max(times[p.name] for p in comm_in)))
            h = host_s(op) if host_s is not None else 0.0
            if h > 0:                       # the rank's host-node chain (see the docstring)
                host_ready += h
                if env.now < host_ready:
                    yield env.timeout(host_ready - env.now)
            mean = arrival_mean_s(op) if arrival_mean_s is not None else jitter_s
            if mean > 0:
                yield env.timeout(rng.exponential(mean))
            wait = arrival_wait_s(op) if arrival_wait_s is not None else 0.0
            if wait > 0:                    # the expected lateness of the last peer (the fast path)
                yield env.timeout(wait)
            if cs is not None and rank.compute_busy:     # its kernel waits for the SMs compute holds
                d = cs.delay_s(op.name, rank.op, rank.work_done(env.now))
                if d > 0:
                    yield env.timeout(d)
            c = colls.get(op.name)
            if c is None:
                c = colls[op.name] = _Collective(env, ranks)
            c.arrived += 1
            if c.arrived == c.n:
                env.process(drive(op, c))
            elif cs is not None:          # its kernel holds its SMs, spinning until the last rank's starts
                rank.spin = op.name
                rank.notify(env)
            yield c.done
            for v in op.outputs:
                event(rank, v).succeed()

    def drive(op: Op, c: _Collective):
        c.start_s = env.now
        for r in rs:
            r.coll, r.spin = op.name, None
            r.set_busy(env, COMM, True) if active else None
        slow = interference.comm_slowdown
        if cs is not None:     # the slowest pairing with the compute running on any rank
            rate = lambda: 1.0 / max((cs.comm_slowdown(op.name, r.op) for r in rs if r.compute_busy),  # noqa: E731
                                     default=1.0)
        else:
            rate = lambda: 1.0 / slow if any(r.compute_busy for r in rs) else 1.0  # noqa: E731
        # the waiter's wake-up is not the collective's own time (Interference)
        yield from run_for(times[op.name] - min(interference.wake_s, times[op.name]), rate,
                           lambda: [r.changed for r in rs])
        for r in rs:
            r.set_busy(env, COMM, False) if active else None
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
                      sorted(records, key=lambda x: (x.rank, x.start_s, x.stream)), env.n_events, held[0])
