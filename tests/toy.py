"""Hand-written integer costs for pinning timelines.

Per layer: attention = qkv 1 + out 1 = 2, MLP = up 2 + down 1 = 3; every other compute op 0;
every collective C (set per test)."""
import pytest

from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.schedule.language import Op, Schedule, build
from tpsim.sim.stack.spec import Stack, Step

STACK = Stack()
ONE_LAYER = ModelSpec("toy-1l", 64, 1, 4, 2, 16, 128, 256)
TWO_LAYERS = ModelSpec("toy-2l", 64, 2, 4, 2, 16, 128, 256)
COMPUTE = {"attn.qkv": 1, "attn.out": 1, "mlp.up": 2, "mlp.down": 1}


def toy_time(c: float):
    def op_time(op):
        if op.is_comm:
            return c
        return COMPUTE.get(op.name.split(".", 1)[-1], 0) if op.layer is not None else 0
    return op_time


def toy_schedule(spec: str, model=TWO_LAYERS, tp: int = 2):
    return build(spec, model, tp, Step.decode(1, 8, 4, 1, STACK), STACK)


def toy_op(name, kind, ins):
    attrs = (("rows", 1), ("width", 1), ("group", 2)) if kind == "all_reduce" else (("m", 1), ("n", 1))
    return Op(name, kind, tuple(ins), (name,), attrs, "fp32", 0)


# A blocking pass: seg0 = 2 -> AR0 -> seg1 = 3 -> AR1 -> seg2 = 1, each all-reduce 4 (14 in all).
TWO_AR_PASS = Schedule("pass", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
    toy_op("seg0", "gemm", ["tokens"]), toy_op("ar0", "all_reduce", ["seg0"]), toy_op("seg1", "gemm", ["ar0"]),
    toy_op("ar1", "all_reduce", ["seg1"]), toy_op("seg2", "gemm", ["ar1"])))
TWO_AR_COST = {"seg0": 2.0, "seg1": 3.0, "seg2": 1.0, "ar0": 4.0, "ar1": 4.0}


def both(sched, cost, inter, ranks=1, host=None):
    """SimPy's result, after checking the rank engine gives the same duration and exposed comm."""
    t = (lambda op: cost[op.name]) if isinstance(cost, dict) else cost
    a = simulate(sched, t, ranks=ranks, interference=inter, host_s=host)
    d, e = simulate_ranks(compile_schedule(sched, t, inter, host_s=host), ranks, inter)
    assert d == pytest.approx(a.duration_s, rel=1e-12, abs=1e-12)
    assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-12)
    return a


def span(res, name, stream="comm"):
    r = next(r for r in res.records if r.op == name and r.stream == stream and r.rank == 0)
    return r.start_s, r.end_s


# Co-scheduling: pre 0 -> [ar reads pre, ready at 1 through a host node] beside k 6 -> tail reads k
# and ar (1 unit)
COSCHED_PASS = Schedule("p", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
    toy_op("pre", "gemm", ["tokens"]), toy_op("ar", "all_reduce", ["pre"]), toy_op("k", "gemm", ["pre"]),
    toy_op("tail", "gemm", ["k", "ar"])))
COSCHED_COST = {"pre": 0.0, "ar": 1.0, "k": 6.0, "tail": 1.0}
AT_1 = lambda op: 1.0   # noqa: E731  (the collective is ready at t = 1, 1 unit into k)


def no_jitter(profile):
    """`profile` without per-rank arrival jitter: one rank is then every rank, so the fast path and brute
    force coincide to the bit (with jitter they agree in expectation: sim/engine/arrival.py)."""
    import dataclasses
    return dataclasses.replace(profile, arrival_jitter={k: dataclasses.replace(v, mean_s=0.0)
                                                        for k, v in profile.arrival_jitter.items()})
