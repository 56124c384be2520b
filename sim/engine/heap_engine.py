"""Every rank of a step without SimPy: a schedule compiled once (sim/engine/compiled.py
`compile_schedule`) to per-op times and collective reads, then run many times with different
arrival delays (`simulate_ranks`).
The same semantics as sim/engine/simpy_engine.py's SimPy engine (which tests/test_sampled.py checks), fast
enough for the exact mode's many sampled steps.

A run is a _Pass: an event heap over one RankState record per rank, one handler per event kind (Event),
and each mechanism one method, named as in the SimPy engine (the table in sim/engine/__init__.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from heapq import heappop, heappush
from itertools import count
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from tpsim.sim.engine.compiled import Compiled, compile_schedule  # noqa: F401  (the engine's input, re-exported)
from tpsim.sim.engine.step import Interference


class Event(IntEnum):
    """What a heap entry (time_s, seq, kind, rank, value) of `simulate_ranks` says happens, and the
    handler of _Pass that runs it. `rank` is the RankState (None for a collective's events)."""

    COMPUTE_END = 0     # end_compute: the rank's running compute item ends; value: its version when pushed
    COLL_START = 1      # start_collective: collective `value` starts (its last rank arrived)
    COLL_END = 2        # end_collective: the collective in flight ends; value: its version when pushed
    WAKE = 3            # wake: a rank blocked on a collective resumes after its wake-up
    ARRIVE = 4          # arrive: the rank's kernel of collective `value` is ready (under a coschedule hook only)
    RESIDENT = 5        # resident: that kernel got its SMs (under a coschedule hook only)
    LAUNCHED = 6        # launched: the rank's launch chain reaches its next item (only with Compiled.ready_s)


# the kinds as plain ints (an IntEnum member is slower to push and to index with)
COMPUTE_END, COLL_START, COLL_END, WAKE, ARRIVE, RESIDENT, LAUNCHED = (int(e) for e in Event)


@dataclass(slots=True)
class RankState:
    """One rank's streams: where its compute stream is, its running item's progress, what it blocks on."""

    rank: int
    start_s: float                  # when it starts (start_delay_s): its compute, host-node and launch chains
    issued_s: list[float]           # per collective: when its compute stream issued it
    pc: int = 0                     # next item of the compute stream (the running one while busy)
    issued: int = 0                 # collectives issued so far
    remaining: float = 0.0          # the running item's work left at `since_s`, in seconds at rate 1
    rate: float = 1.0               # its work per second now (1 / its slowdown)
    since_s: float = 0.0            # when `remaining` was last brought up to date
    version: int = 0                # bumped at every start and re-rate: an older COMPUTE_END is stale
    busy: bool = False              # running a compute item
    blocked_on: int = -1            # the collective a blocked compute stream waits for; -1: none
    blocked_wake_s: float = 0.0     # its wake-up once that collective ends
    blocked_t0_s: float = 0.0       # since when it blocks
    spinning: int = -1              # the collective whose kernel holds the rank's SMs before it starts
    done_s: float = 0.0
    finished: bool = False


@dataclass(slots=True)
class _InFlight:
    """The collective in flight: at most one, since every collective spans every rank and each
    rank's comm stream is serial."""

    k: int = -1                 # its index (issue order); -1: none in flight
    remaining: float = 0.0      # its work left at `since_s`, in seconds at rate 1
    rate: float = 1.0           # work per second now (1 / its slowdown)
    since_s: float = 0.0        # when `remaining` was last brought up to date
    version: int = 0            # bumped at every start and re-rate: an older COLL_END is stale


class _Pass:
    """One run of a compiled pass on every rank: the event heap, the ranks' records, the collectives'
    state; one handler per event kind (Event) and one method per mechanism (sim/engine/__init__.py)."""

    def __init__(self, c: Compiled, ranks: int, interference: Interference, delay_s, start_s: tuple[float, ...]):
        self.c = c
        self.coll, self.time_s, self.reads, self.comm_wake = c.coll, c.time_s, c.reads, c.comm_wake_s
        self.last_read = [max(k for k, _ in rd) if rd else -1 for rd in c.reads]
        self.n_ops, self.n_coll, self.n_ranks = len(c.coll), len(c.comm_names), ranks
        n_coll = self.n_coll
        self.inter = interference.active
        self.cslow, self.mslow = interference.compute_slowdown, interference.comm_slowdown
        self.cs, self.inames, self.cnames = c.cosched, c.names, c.comm_names
        self.delays = delay_s.tolist() if delay_s is not None else [[0.0] * ranks for _ in range(n_coll)]
        self.heap: list = []
        self.seq = count()
        self.ends = [-1.0] * n_coll       # end of each collective once it has ended
        self.arrived = [0] * n_coll
        self.latest = [0.0] * n_coll      # latest arrival so far
        self.exposed_s = 0.0              # rank 0's compute stream blocked on collectives
        self.fl = _InFlight()
        self.next_k = 0                   # the collective every comm stream takes next
        self.busy_ranks = 0               # ranks running a compute item now (counted under interference only)
        self.ready_s = c.ready_s
        self.comm_ready = [0.0] * n_coll  # per collective: its launch, from the rank's start
        for i, k in enumerate(c.coll):
            if k >= 0 and c.ready_s:
                self.comm_ready[k] = c.ready_s[i]
        self.host_ready = c.comm_host_ready_s or (0.0,) * n_coll
        self.ranks = [RankState(r, self.start_delay_s(start_s, r), [0.0] * n_coll) for r in range(ranks)]

    def run(self) -> tuple[float, float]:
        for rk in self.ranks:
            self.compute_stream(rk, rk.start_s)
        handlers = (self.end_compute, self.start_collective, self.end_collective, self.wake, self.arrive,
                    self.resident, self.launched)      # by Event value
        heap, end_compute = self.heap, self.end_compute
        while heap:
            now, _, kind, rk, v = heappop(heap)
            if kind == COMPUTE_END:                      # the commonest kind, and most of them stale (rerate)
                if v == rk.version:
                    end_compute(now, rk, v)
            else:
                handlers[kind](now, rk, v)
        stalled = [rk.rank for rk in self.ranks if not rk.finished]
        if stalled:
            raise RuntimeError(f"simulation stalled on ranks {stalled}")
        return max(rk.done_s for rk in self.ranks), self.exposed_s

    def start_delay_s(self, start_s: tuple[float, ...], rank: int) -> float:
        """When `rank` starts, from the step's start: the host lane's per-rank offset (sim.stack.host_lane)."""
        return start_s[rank] if rank < len(start_s) else 0.0

    # -- the compute stream ------------------------------------------------------------------------

    def compute_stream(self, rk: RankState, now: float) -> None:
        """Run the rank's compute stream from `now` until it blocks, starts a timed item or ends; the
        collectives it issues go to its comm stream."""
        coll, time_s, last_read, ends, ready_s = self.coll, self.time_s, self.last_read, self.ends, self.ready_s
        i, n_ops = rk.pc, self.n_ops
        while i < n_ops:
            k = coll[i]
            if k >= 0:                                   # issue a collective to the comm stream
                rk.issued_s[k] = now
                rk.issued = k + 1
                if k == self.next_k and self.fl.k < 0:   # its comm stream is free
                    self.comm_stream(rk, k, 0.0)
                i += 1
                continue
            if ready_s and rk.start_s + ready_s[i] > now:   # not launched yet: the GPU idles until then
                self.wait_for_launch(rk, i)
                return
            lk = last_read[i]
            if lk >= 0 and ends[lk] < 0:                 # collectives end in order: this one is the last
                self.wait_for_inputs(rk, i, lk, now)
                return
            t = time_s[i]
            if t > 0:                                    # start it (end_compute ends it)
                rk.pc = i
                slow = self.compute_slowdown(rk)
                rk.remaining, rk.rate, rk.since_s = t, 1.0 / slow, now
                rk.version += 1
                rk.busy = True
                if self.inter:
                    self.busy_ranks += 1
                    fl = self.fl
                    if fl.k >= 0:
                        rate = 1.0 / self.comm_slowdown(fl.k)
                        if rate != fl.rate:                  # the collective in flight slows from now
                            self.refly(now, rate)
                heappush(self.heap, (now + t * slow, next(self.seq), COMPUTE_END, rk, rk.version))
                return
            i += 1
        rk.pc = n_ops
        rk.done_s = now
        rk.finished = True

    def wait_for_launch(self, rk: RankState, i: int) -> None:
        """The eager launch chain: item i is not launched yet, the GPU idles until it is (LAUNCHED)."""
        rk.pc = i
        heappush(self.heap, (rk.start_s + self.ready_s[i], next(self.seq), LAUNCHED, rk, 0))

    def launched(self, now: float, rk: RankState, _v) -> None:
        self.compute_stream(rk, now)

    def wait_for_inputs(self, rk: RankState, i: int, lk: int, now: float) -> None:
        """Item i reads collective lk, not ended yet: the rank blocks, to be woken after it (wake)."""
        pend = [w for kk, w in self.reads[i] if self.ends[kk] < 0]
        rk.pc = i
        rk.blocked_on = lk
        rk.blocked_wake_s = pend[-1]
        rk.blocked_t0_s = now

    def wake(self, now: float, rk: RankState, _v) -> None:
        """A blocked rank, woken, resumes; its wait is rank 0's exposed communication."""
        if rk.rank == 0:
            self.exposed_s += now - rk.blocked_t0_s
        self.compute_stream(rk, now)

    def end_compute(self, now: float, rk: RankState, version: int) -> None:
        """The rank's running item ends (`run` drops a COMPUTE_END whose version is stale)."""
        rk.busy = False
        if self.inter:
            self.busy_ranks -= 1
            fl = self.fl
            if fl.k >= 0:
                rate = 1.0 / self.comm_slowdown(fl.k)
                if rate != fl.rate:                      # the collective speeds up again
                    self.refly(now, rate)
        rk.pc += 1
        self.compute_stream(rk, now)

    def compute_slowdown(self, rk: RankState) -> float:
        """Interference: the factor on the rank's running item now, beside the collective in flight or
        beside its kernel of one spinning on its SMs (co-scheduling)."""
        if self.inter and self.fl.k >= 0:
            return self.slowdown_beside(rk, self.fl.k)
        return self.cs.spin_slowdown(self.inames[rk.pc], self.cnames[rk.spinning]) if rk.spinning >= 0 else 1.0

    def slowdown_beside(self, rk: RankState, k: int) -> float:
        """The factor on the rank's running item while collective k is in flight."""
        return self.cs.compute_slowdown(self.inames[rk.pc], self.cnames[k]) if self.cs is not None else self.cslow

    def rerate(self, rk: RankState, now: float, slow: float) -> None:
        rk.remaining -= (now - rk.since_s) * rk.rate
        rk.since_s, rk.rate = now, 1.0 / slow
        rk.version += 1
        heappush(self.heap, (now + rk.remaining * slow, next(self.seq), COMPUTE_END, rk, rk.version))

    def reslow(self, now: float, k: int) -> None:
        """Collective k started (k >= 0) or the one in flight ended (k < 0): re-rate every busy rank."""
        for rk in self.ranks:
            if rk.busy:
                self.rerate(rk, now, self.slowdown_beside(rk, k) if k >= 0 else 1.0)

    # -- the comm stream and the rendezvous -----------------------------------------------------------

    def comm_stream(self, rk: RankState, k: int, free_s: float) -> None:
        """The rank's comm stream takes collective k (issued, and the stream free since `free_s`): once
        launched, woken if it reads a collective, its host node run and its arrival delay passed, the
        rank arrives at the rendezvous (under a coschedule hook: its kernel is ready, ARRIVE)."""
        handed = max(rk.issued_s[k], free_s)
        if self.ready_s and rk.start_s + self.comm_ready[k] > handed:    # its launch (wait_for_launch)
            handed = rk.start_s + self.comm_ready[k]
        t = max(handed + self.comm_wake[k], self.host_node_ready_s(rk, k)) + self.arrival_delay_s(rk, k)
        if self.cs is not None:                          # an event: the SMs are looked at then
            heappush(self.heap, (t, next(self.seq), ARRIVE, rk, k))
            return
        self.rendezvous(rk, k, t)

    def host_node_ready_s(self, rk: RankState, k: int) -> float:
        """NCCL's host-node chain (Compiled.comm_host_ready_s): when the rank's chain, from its start, has
        run collective k's host node; 0.0 for a collective without one."""
        h = self.host_ready[k]
        return h + rk.start_s if h > 0 else 0.0

    def arrival_delay_s(self, rk: RankState, k: int) -> float:
        """The rank's delay before it arrives at collective k's rendezvous, once ready there
        (`simulate_ranks`'s delay_s: the sampled mode's jitter draws)."""
        return self.delays[k][rk.rank]

    def arrive(self, now: float, rk: RankState, k: int) -> None:
        """The rank's kernel of collective k is ready (co-scheduling): it waits for SMs, then is resident."""
        d = self.sm_wait_s(rk, k, now)
        if d > 0:                                        # its kernel gets the SMs later
            heappush(self.heap, (now + d, next(self.seq), RESIDENT, rk, k))
        else:
            self.rendezvous(rk, k, now)

    def sm_wait_s(self, rk: RankState, k: int, now: float) -> float:
        """Co-scheduling: how long collective k's kernel waits for the SMs the running compute item holds."""
        if not rk.busy:
            return 0.0
        i = rk.pc
        done = self.time_s[i] - (rk.remaining - (now - rk.since_s) * rk.rate)
        return self.cs.delay_s(self.cnames[k], self.inames[i], done)

    def resident(self, now: float, rk: RankState, k: int) -> None:
        self.rendezvous(rk, k, now)

    def rendezvous(self, rk: RankState, k: int, t: float) -> None:
        """The rank arrives at collective k at `t`: the last arrival starts it (COLL_START at the latest
        arrival); an earlier one spins under a coschedule hook (its arrivals are events: t is now)."""
        if t > self.latest[k] or self.arrived[k] == 0:
            self.latest[k] = t
        self.arrived[k] += 1
        if self.arrived[k] == self.n_ranks:              # the last arrival starts it
            heappush(self.heap, (self.latest[k], next(self.seq), COLL_START, None, k))
        elif self.cs is not None:
            self.spin(rk, k, t)

    def spin(self, rk: RankState, k: int, now: float) -> None:
        """Co-scheduling: the rank's kernel of k holds its SMs before the last one starts, slowing its compute."""
        rk.spinning = k
        if rk.busy and self.compute_slowdown(rk) != 1.0:          # (nothing in flight: it ran at rate 1)
            self.rerate(rk, now, self.compute_slowdown(rk))

    def start_collective(self, now: float, _rk, k: int) -> None:
        for rk in self.ranks:
            rk.spinning = -1                             # no kernel spins once the collective runs
        fl = self.fl
        fl.k, fl.remaining, fl.since_s, fl.version = k, self.c.comm_time_s[k], now, fl.version + 1
        fl.rate = 1.0 / self.comm_slowdown(k)
        if self.inter and (self.cslow != 1.0 or self.cs is not None):
            self.reslow(now, k)
        heappush(self.heap, (now + fl.remaining / fl.rate, next(self.seq), COLL_END, None, fl.version))

    def end_collective(self, now: float, _rk, version: int) -> None:
        fl = self.fl
        if version != fl.version:
            return
        k = fl.k
        fl.k = -1                                        # the comm streams are free
        self.ends[k] = now
        self.next_k = k + 1
        if self.inter and (self.cslow != 1.0 or self.cs is not None):
            self.reslow(now, -1)
        if k + 1 < self.n_coll:
            for rk in self.ranks:
                if rk.issued > k + 1:
                    self.comm_stream(rk, k + 1, now)
        for rk in self.ranks:
            if rk.blocked_on == k:
                rk.blocked_on = -1
                if rk.blocked_wake_s > 0:
                    heappush(self.heap, (now + rk.blocked_wake_s, next(self.seq), WAKE, rk, 0))
                else:
                    self.wake(now, rk, 0)

    def comm_slowdown(self, k: int) -> float:
        """Interference: the factor on collective k given what every rank computes now (its slowest rank's)."""
        cs = self.cs
        if cs is None:
            return self.mslow if self.inter and self.busy_ranks > 0 else 1.0
        return max((cs.comm_slowdown(self.cnames[k], self.inames[rk.pc]) for rk in self.ranks if rk.busy),
                   default=1.0)

    def refly(self, now: float, new_rate: float) -> None:
        """The collective in flight changes pace from `now`."""
        fl = self.fl
        fl.remaining -= (now - fl.since_s) * fl.rate
        fl.since_s, fl.rate = now, new_rate
        fl.version += 1
        heappush(self.heap, (now + fl.remaining / new_rate, next(self.seq), COLL_END, None, fl.version))


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
    return _Pass(c, ranks, interference, delay_s, start_s).run()
