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

`simulate` sets up a _Pass (what the ranks share: the clock, the priced ops, the collectives, the
records) and one _Rank per rank, whose methods are its stream processes (compute_stream, comm_stream),
as in SimPy's machine-shop example; each mechanism is one method, named as in the heap engine (the
table in sim/engine/__init__.py).
"""
from __future__ import annotations

from typing import Callable

import simpy

from tpsim.sim.schedule.language import COMM, COMPUTE, TOKENS, Op, Schedule
from tpsim.sim.engine.record import Record
from tpsim.sim.engine.step import Interference, StepResult

_EPS = 1e-15
LAUNCH = "launch"       # the record stream of an op's launch on the rank's CPU thread (sim.engine.record)


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


class _Pass:
    """One forward pass on every rank: what the ranks share (the clock, the priced ops, the records) and
    the mechanisms that span ranks: a collective's rendezvous and its run at its slowest rank's pace."""

    def __init__(self, schedule: Schedule, op_time: Callable[[Op], float], ranks: int, interference: Interference,
                 rank_delay_s: tuple[float, ...], jitter_s: float, seed: int, record: bool,
                 arrival_mean_s: Callable[[Op], float] | None, host_s: Callable[[Op], float] | None,
                 issue_s: Callable[[Op], float] | None, arrival_wait_s: Callable[[Op], float] | None = None):
        self.env = env = simpy.Environment()
        self.schedule, self.phase, self.interference = schedule, schedule.step.phase, interference
        self.rank_delay_s, self.jitter_s = rank_delay_s, jitter_s
        self.arrival_mean_s, self.host_s = arrival_mean_s, host_s
        self.arrival_wait_s = arrival_wait_s
        self.ranks = [_Rank(self, env, r) for r in range(ranks)]
        self.colls: dict[str, _Collective] = {}
        self.record, self.records = record, []
        self.rng = _Draws(seed)
        self.times = {op.name: op_time(op) for op in schedule.ops}
        for name, t in self.times.items():
            if not t >= 0:
                raise ValueError(f"op {name}: time must be >= 0, got {t}")
        self.launch = {op.name: issue_s(op) for op in schedule.ops} if issue_s is not None else None
        self.index = {op.name: i for i, op in enumerate(schedule.ops)} if self.launch is not None else {}
        self.held = -1                                # StepResult.last_held_op
        for name, t in (self.launch or {}).items():
            if not t >= 0:
                raise ValueError(f"op {name}: launch time must be >= 0, got {t}")
        self.cs = interference.bind(schedule, self.times)
        self.active = interference.active
        self.overlapped = False                       # a compute op ran beside a collective (StepResult.apart)

    def run(self) -> StepResult:
        env = self.env
        for r in self.ranks:
            env.process(r.compute_stream())
            env.process(r.comm_stream())
        # env.run(), counting the events as they are processed: each scheduled one is, once (the run ends with none
        # left), so no Python call per event is added to count them as they are scheduled
        events, step = 0, env.step
        try:
            while True:
                step()
                events += 1
        except simpy.core.EmptySchedule:
            pass
        stalled = [r.rank for r in self.ranks if not r.finished]
        if stalled:     # an op waits for a value no op produces in time: a schedule bug, never silent
            raise RuntimeError(f"schedule {self.schedule.name}: simulation stalled on ranks {stalled}")
        return StepResult(max(r.done_s for r in self.ranks), self.ranks[0].exposed_s,
                          sorted(self.records, key=lambda x: (x.rank, x.start_s, x.stream)), events, self.held,
                          self.active and self.cs is None and not self.overlapped)

    def start_delay_s(self, rank: int) -> float:
        """When `rank` starts, from the step's start: the host lane's per-rank offset (sim.stack.host_lane)."""
        return self.rank_delay_s[rank] if rank < len(self.rank_delay_s) else 0.0

    def run_for(self, base_s: float, slowdown: Callable[[], float], watch: Callable[[], list[simpy.Event]],
                rank: _Rank | None = None):
        """Advance `base_s` seconds of work at a rate, 1 / slowdown(), that may change whenever `watch`
        fires (a compute op: its progress kept on `rank`)."""
        env = self.env
        remaining = base_s
        if not self.active:
            if remaining > 0:
                yield env.timeout(remaining)
            return
        while remaining > _EPS:
            r, t0 = 1.0 / slowdown(), env.now
            if rank is not None:
                rank.work = (base_s, remaining, t0, r)
            timeout = env.timeout(remaining / r)
            yield self.first_of([timeout] + watch())
            if timeout.processed or timeout.triggered and env.now - t0 >= remaining / r - _EPS:
                return
            remaining -= (env.now - t0) * r

    def first_of(self, events: list[simpy.Event]) -> simpy.Event:
        """An event triggered when the first of `events` is processed, and whose processing unhooks it from the
        others: SimPy's AnyOf (env.any_of) as run_for uses it -- each trigger and each processing at the same
        point of the event order, so the same timeline -- without building the condition's value, which
        nothing reads (a quarter of the fast path's SimPy events are these)."""
        done = self.env.event()

        def fire(_event) -> None:
            if not done.triggered:
                done.succeed()

        def unhook(_event) -> None:
            for ev in events:
                if ev.callbacks and fire in ev.callbacks:
                    ev.callbacks.remove(fire)
        for ev in events:
            ev.callbacks.append(fire)
        done.callbacks.append(unhook)
        return done

    def rendezvous(self, rank: _Rank, op: Op):
        """`rank`'s kernel of collective `op` is there: the last rank's starts it; an earlier one spins
        (co-scheduling). Done once the collective has ended for all."""
        c = self.colls.get(op.name)
        if c is None:
            c = self.colls[op.name] = _Collective(self.env, len(self.ranks))
        c.arrived += 1
        if c.arrived == c.n:
            self.env.process(self.collective(op, c))
        elif self.cs is not None:     # its kernel holds its SMs, spinning until the last rank's starts
            rank.spin(op)
        yield c.done

    def collective(self, op: Op, c: _Collective):
        """The process of one collective, from its start to its end on every rank."""
        self.start_collective(op, c)
        t = self.times[op.name]      # the waiter's wake-up is not the collective's own time (Interference)
        yield from self.run_for(t - min(self.interference.wake_s, t), lambda: self.comm_slowdown(op),
                                lambda: [r.changed for r in self.ranks])
        self.end_collective(op, c)

    def start_collective(self, op: Op, c: _Collective) -> None:
        c.start_s = self.env.now
        for r in self.ranks:
            self.overlapped = self.overlapped or r.compute_busy
            r.coll, r.spin_on = op.name, None
            r.set_busy(COMM, True) if self.active else None

    def end_collective(self, op: Op, c: _Collective) -> None:
        for r in self.ranks:
            r.set_busy(COMM, False) if self.active else None
            if self.record:
                self.records.append(Record(op.name, r.rank, COMM, c.start_s, self.env.now, self.phase, op.kind))
        c.done.succeed()

    def comm_slowdown(self, op: Op) -> float:
        """Interference: the factor on the collective, its slowest rank's beside the compute running there."""
        cs = self.cs
        if cs is not None:     # the slowest pairing with the compute running on any rank
            return max((cs.comm_slowdown(op.name, r.op) for r in self.ranks if r.compute_busy), default=1.0)
        return self.interference.comm_slowdown if any(r.compute_busy for r in self.ranks) else 1.0


class _Rank:
    """One simulated rank: its two stream processes (compute_stream, comm_stream) and the state they share."""

    def __init__(self, sim: _Pass, env: simpy.Environment, rank: int):
        self.sim, self.env, self.rank = sim, env, rank
        self.start_s = self.host_ready_s = sim.start_delay_s(rank)
        self.ready: set[str] = set()          # the values that exist on this rank
        self.values: dict[str, simpy.Event] = {}   # an event per value an op waited for (value)
        self.comm_queue = simpy.Store(env)
        self.compute_busy = False
        self.comm_busy = False
        self.op: str | None = None     # the compute op running (coschedule: whose SMs a collective waits for)
        self.coll: str | None = None   # the collective in flight on the rank
        self.spin_on: str | None = None   # the collective whose kernel holds SMs here, waiting for the others
        self.work = (0.0, 0.0, 0.0, 1.0)   # the running op's (base, remaining, at time, rate)
        self.changed = env.event()    # fires (and is replaced) whenever a stream starts/stops
        self.exposed_s = 0.0
        self.done_s = 0.0
        self.finished = False

    # -- the compute stream ------------------------------------------------------------------------

    def compute_stream(self):
        """Compute ops in issue order, each once launched and its inputs exist; collectives handed to the
        comm stream as they are issued."""
        env, sim = self.env, self.sim
        if self.start_s > 0:
            yield env.timeout(self.start_s)
        issued = 0.0                              # the rank's launch chain, from its start (module doc)
        chain = sim.launch is not None
        for op in sim.schedule.ops:
            if chain:
                issued = self.launch(op, issued)
            ready = self.start_s + issued         # launched by then (start + 0.0 == start: no chain)
            if op.is_comm:
                self.comm_queue.put((op, ready))  # issue async; the comm stream takes it from here
                continue
            if env.now < ready:
                yield from self.wait_for_launch(op, ready)
            pending = [v for v in op.inputs if v != TOKENS and v not in self.ready]
            if pending:
                yield from self.wait_for_inputs(op, pending)
            start = env.now
            self.op = op.name
            sim.overlapped = sim.overlapped or self.comm_busy
            self.set_busy(COMPUTE, True) if sim.active else None
            yield from sim.run_for(sim.times[op.name], self.compute_slowdown, self.watch, self)
            self.end_compute(op, start)
        self.done_s = env.now
        self.finished = True

    def launch(self, op: Op, issued: float) -> float:
        """The eager launch chain: the rank's Python thread launches `op` after the ops before it;
        returns when it has (seconds from the rank's start). Recorded as the trace's CPU lane."""
        sim = self.sim
        t = sim.launch[op.name]
        if sim.record and t > 0:
            sim.records.append(Record(op.name, self.rank, LAUNCH, self.start_s + issued, self.start_s + issued + t,
                                       sim.phase, op.kind))
        return issued + t

    def wait_for_launch(self, op: Op, ready: float):
        """The GPU waits for the CPU to launch `op`: not launched before `ready`, later than now."""
        self.sim.held = max(self.sim.held, self.sim.index[op.name])
        yield self.env.timeout(ready - self.env.now)

    def wait_for_inputs(self, op: Op, pending: list[str]):
        """Block until `op`'s `pending` inputs exist; a rank that blocked on a collective is woken after it
        ends (Interference.wake_s), and the wait is the rank's exposed communication."""
        env, sim = self.env, self.sim
        t0 = env.now
        yield env.all_of([self.value(v) for v in pending])
        awaited = sim.schedule.producer[pending[-1]]
        yield from self.wake(awaited)
        if env.now > t0:
            self.exposed_s += env.now - t0
            if sim.record:       # named after the collective waited for, as the harness names it
                sim.records.append(Record(awaited.name, self.rank, "wait", t0, env.now, sim.phase, awaited.kind))

    def wake(self, awaited: Op):
        """The rank blocked on `awaited` (even for 0 s): it resumes once woken (Interference.wake_s)."""
        wake = self.sim.interference.wake_s
        if wake > 0:
            yield self.env.timeout(min(wake, self.sim.times[awaited.name]))

    def end_compute(self, op: Op, start_s: float) -> None:
        sim = self.sim
        self.set_busy(COMPUTE, False) if sim.active else None
        if sim.record:
            sim.records.append(Record(op.name, self.rank, COMPUTE, start_s, self.env.now, sim.phase, op.kind))
        for v in op.outputs:
            self.produce(v)

    def compute_slowdown(self) -> float:
        """Interference: the factor on the running compute op, beside the collective in flight or beside
        the kernel of one spinning on its SMs (co-scheduling)."""
        cs = self.sim.cs
        if cs is not None:
            return (cs.compute_slowdown(self.op, self.coll) if self.comm_busy
                    else cs.spin_slowdown(self.op, self.spin_on) if self.spin_on else 1.0)
        return self.sim.interference.compute_slowdown if self.comm_busy else 1.0

    # -- the comm stream ---------------------------------------------------------------------------

    def comm_stream(self):
        """Collectives in issue order: each once launched and its input exists, then the rank's way to the
        rendezvous (host node, arrival delay, SMs), then the rendezvous."""
        env, sim = self.env, self.sim
        while True:
            op, ready = yield self.comm_queue.get()
            if env.now < ready:                   # not launched yet (the rank's launch chain)
                yield from self.wait_for_launch(op, ready)
            pending = [self.value(v) for v in op.inputs if v not in self.ready]
            if pending:
                yield env.all_of(pending)
            # a collective that reads another's result: the rank waited for that one to issue this one
            # (the comm stream runs them in order, so it always did), and was woken like a compute wait
            comm_in = [sim.schedule.producer[v] for v in op.inputs
                       if v != TOKENS and sim.schedule.producer[v].is_comm]
            if comm_in and sim.interference.wake_s > 0:
                yield env.timeout(min(sim.interference.wake_s, max(sim.times[p.name] for p in comm_in)))
            t = self.host_node_ready_s(op)
            if env.now < t:
                yield env.timeout(t - env.now)
            d = self.arrival_delay_s(op)
            if d > 0:
                yield env.timeout(d)
            d = self.sm_wait_s(op)
            if d > 0:
                yield env.timeout(d)
            yield from sim.rendezvous(self, op)
            for v in op.outputs:
                self.produce(v)

    def host_node_ready_s(self, op: Op) -> float:
        """NCCL's host-node chain (`simulate`'s host_s): when the rank's chain of host nodes, from its start,
        has run `op`'s; 0.0 for a collective without one."""
        h = self.sim.host_s(op) if self.sim.host_s is not None else 0.0
        if h > 0:
            self.host_ready_s += h
            return self.host_ready_s
        return 0.0

    def arrival_delay_s(self, op: Op) -> float:
        """The rank's delay before it arrives at collective `op`'s rendezvous, once ready there: an
        exponential draw of the collective's scope's jitter (`simulate`'s arrival_mean_s or jitter_s),
        plus, on the fast path's one rank, the expected lateness of its last peer (`arrival_wait_s`,
        sim/engine/arrival.py: what a rendezvous of n such draws waits on average)."""
        sim = self.sim
        mean = sim.arrival_mean_s(op) if sim.arrival_mean_s is not None else sim.jitter_s
        drawn = sim.rng.exponential(mean) if mean > 0 else 0.0
        wait = sim.arrival_wait_s(op) if sim.arrival_wait_s is not None else 0.0
        return drawn + wait if wait > 0 else drawn

    def sm_wait_s(self, op: Op) -> float:
        """Co-scheduling: how long `op`'s kernel waits for the SMs the running compute kernel holds."""
        cs = self.sim.cs
        if cs is None or not self.compute_busy:
            return 0.0
        return cs.delay_s(op.name, self.op, self.work_done(self.env.now))

    def spin(self, op: Op) -> None:
        """Co-scheduling: the rank's kernel of `op` holds its SMs before the group's last one starts, spinning."""
        self.spin_on = op.name
        self.notify()

    # -- what both streams share -------------------------------------------------------------------

    def value(self, name: str) -> simpy.Event:
        """The event that fires once value `name` exists on this rank (asked by an op that waits for it)."""
        ev = self.values.get(name)
        if ev is None:
            ev = self.values[name] = self.env.event()
        return ev

    def produce(self, name: str) -> None:
        """Value `name` exists now: the ops waiting for it resume. A value no op waits for (it has no event: most
        compute outputs, read by a later op of the same stream) schedules nothing: that event would run nothing
        (as notify's), and such events were a fifth of all (the timelines are the same without them)."""
        self.ready.add(name)
        ev = self.values.get(name)
        if ev is not None:
            ev.succeed()

    def work_done(self, now: float) -> float:
        base, remaining, t0, rate = self.work
        return base - (remaining - (now - t0) * rate)

    def watch(self) -> list[simpy.Event]:
        return [self.changed]

    def set_busy(self, stream: str, busy: bool) -> None:
        if stream == COMPUTE:
            self.compute_busy = busy
        else:
            self.comm_busy = busy
        self.notify()

    def notify(self) -> None:
        """Wake whatever runs at a rate that depends on this rank's streams. Where nothing waits on it
        (no run_for of this rank's compute or of a collective it is in: `changed` has no callback), the
        event stays as it is: firing it would schedule an event that runs nothing."""
        if self.changed.callbacks:
            old, self.changed = self.changed, self.env.event()
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
    return _Pass(schedule, op_time, ranks, interference, rank_delay_s, jitter_s, seed, record,
                 arrival_mean_s, host_s, issue_s, arrival_wait_s).run()
