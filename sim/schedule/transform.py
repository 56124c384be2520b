"""Schedules made from schedules: the patterns calibration runs, on hardware and in the engine.

Each transform takes a built Schedule and returns another, so the same two interpreters run it
(hw.runner on ranks, sim.engine.simpy_engine in the fit) and nothing else has to re-implement a forward pass.
The new ops are two IR kinds that carry their own cost (sim.schedule.language.GIVEN_COST):

  standin  a local value of a collective's output shape, standing in for it: the input itself
           ([rows, width] for an all-reduce), the input tiled to the gathered width or rows
           (all-gather), or its first rows/group rows (reduce-scatter);
  wait     a point in the issue order where a collective's output is awaited, reading nothing else.

  local(s)       every collective replaced by its stand-in: the pass without communication
                 (calibration times compute ops inside such passes);
  blocking(s)    each all-reduce issued and awaited at once, the pass going on with a stand-in of
                 its result; other collectives replaced by stand-ins;
  overlapped(s)  each all-reduce issued where it stands, the pass going on with a stand-in; the
                 previous all-reduce is awaited right after the next is issued, so each is in
                 flight during the next module; the last one is awaited at the end of the pass.

In blocking and overlapped the all-reduce's result is only waited for, never read, so the three
patterns compute the same values (those of `local`) and differ only in communication.
"""
from __future__ import annotations

import dataclasses

from tpsim.sim.schedule.language import Op, Schedule

STANDIN, WAIT = ".standin", ".wait"      # name suffixes of the ops a transform adds


def standin(op: Op, cost_ns: int = 0) -> Op:
    """A compute op writing `op`'s output from `op`'s input, locally, at cost `cost_ns`: an all-gather's
    output is its input tiled to the gathered width (or rows, dim=0), a reduce-scatter's its first
    rows/group rows."""
    rows, width, group = op.attr("rows"), op.attr("width"), op.attr("group")
    by_rows = op.kind == "reduce_scatter" or (op.kind == "all_gather" and op.get("dim", -1) == 0)
    if op.kind == "all_gather":
        rows, width = (rows * group, width) if by_rows else (rows, width * group)
    elif op.kind == "reduce_scatter":
        rows //= group
    dim = (("dim", 0),) if by_rows else ()          # the stand-in changes the rows, not the width
    return Op(op.name + STANDIN, "standin", op.inputs[:1], op.outputs,
              (("rows", rows), ("width", width), ("cost_ns", cost_ns)) + dim, op.dtype, op.layer)


def wait(op: Op) -> Op:
    """An explicit wait for collective `op`'s output (free: the waiting is the engine's/runner's)."""
    return Op(op.name + WAIT, "wait", op.outputs[:1], (op.outputs[0] + WAIT,), (("cost_ns", 0),),
              op.dtype, op.layer)


def _derived(sched: Schedule, suffix: str, ops: list[Op]) -> Schedule:
    return Schedule(f"{sched.name}-{suffix}", sched.model, sched.tp, sched.step, sched.stack, tuple(ops),
                    plan=sched.plan)


def local(sched: Schedule) -> Schedule:
    """`sched` without communication: each collective replaced by its stand-in."""
    return _derived(sched, "local", [standin(op) if op.is_comm else op for op in sched.ops])


def _detached(op: Op) -> Op:
    """The all-reduce writing a value of its own (only a wait reads it)."""
    return dataclasses.replace(op, outputs=(op.outputs[0] + "@ar",))


def blocking(sched: Schedule) -> Schedule:
    """Each all-reduce issued and awaited at once; the pass reads stand-ins of the results."""
    ops: list[Op] = []
    for op in sched.ops:
        if op.kind == "all_reduce":
            ar = _detached(op)
            ops += [ar, wait(ar), standin(op)]
        else:
            ops.append(standin(op) if op.is_comm else op)
    return _derived(sched, "blocking", ops)


def overlapped(sched: Schedule) -> Schedule:
    """Each all-reduce in flight during the next module: issued where it stands, awaited after the
    next one is issued (the last at the end of the pass); the pass reads stand-ins."""
    ops: list[Op] = []
    issued: list[Op] = []
    for op in sched.ops:
        if op.kind != "all_reduce":
            ops.append(standin(op) if op.is_comm else op)
            continue
        ar = _detached(op)
        ops += [ar, standin(op)]
        if issued:
            ops.append(wait(issued[-1]))
        issued.append(ar)
    if issued:
        ops.append(wait(issued[-1]))
    return _derived(sched, "overlapped", ops)
