"""The heap engine's input (sim/engine/heap_engine.py): a schedule compiled once (`compile_schedule`) to
per-item times, collective reads and the per-rank chains (launches, NCCL host nodes), then run many
times with different arrival delays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tpsim.sim.engine.step import Interference
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
