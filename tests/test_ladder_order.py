"""The ladder's launch order as PyTorch 2.5's Inductor emits it for the reference harness
(hw/derive/inductor_overlap.py, tests/test_inductor_overlap.py) runs the same timeline as tpsim's plan.

Inductor (2.5 passes): ... mlp_i, wait(a_i), issue m_i, attn.add, attn_{i+1}, wait(m_i), issue a_{i+1} ...
tpsim's plan:           ... mlp_i, issue m_i, attn.add (waits a_i), attn_{i+1}, issue a_{i+1}, mlp.add (waits m_i) ...
The windows hold the same compute; only where the compute stream blocks before the next issue
differs, and a comm stream that runs collectives in issue order starts each one at the same time
either way. Toy costs (tests/toy.py): attention 2, MLP 3, collective C."""
import pytest

from tpsim.sim.engine.step import Interference
from tpsim.sim.schedule.language import Schedule
from tpsim.sim.schedule.transform import wait
from toy import both, span, toy_schedule, toy_time


def inductor_order(s: Schedule) -> Schedule:
    """`s` with an explicit wait for each all-reduce right before the next one is issued."""
    ops, last = [], None
    for op in s.ops:
        if op.is_comm:
            if last is not None:
                ops.append(wait(last))
            last = op
        ops.append(op)
    return Schedule(f"{s.name}-inductor", s.model, s.tp, s.step, s.stack, tuple(ops), plan=s.plan)


ARS = [f"L{i}.{m}.allreduce" for i in (0, 1) for m in ("attn", "mlp")]


def test_inductor_order_is_tpsims_timeline_when_comm_is_longer():
    # C=4, both orders: attn0 [0,2]; a0 [2,6]; mlp0 [2,5]; blocked 5-6 (Inductor: at wait(a0), tpsim: at
    # attn.add0); m0 [6,10]; attn1 [6,8]; blocked 8-10 (wait(m0) / mlp.add0); a1 [10,14]; mlp1 [10,13];
    # blocked 13-14; m1 [14,18]; blocked 14-18 at the last mlp.add. Exposed 1 + 2 + 1 + 4 = 8.
    plan = toy_schedule("ladder")
    a, b = both(plan, toy_time(4), Interference()), both(inductor_order(plan), toy_time(4), Interference())
    assert [span(a, n) for n in ARS] == [span(b, n) for n in ARS] == [(2, 6), (6, 10), (10, 14), (14, 18)]
    assert a.duration_s == b.duration_s == 18
    assert a.exposed_comm_s == b.exposed_comm_s == 8


def test_inductor_order_is_tpsims_timeline_when_compute_is_longer():
    # C=1: a0 [2,3] under mlp0 [2,5]; wait(a0) at 5 costs nothing; m0 [5,6] under attn1 [5,7]; a1 [7,8]
    # under mlp1 [7,10]; m1 [10,11] exposed: 11, exposed 1, both orders
    plan = toy_schedule("ladder")
    a, b = both(plan, toy_time(1), Interference()), both(inductor_order(plan), toy_time(1), Interference())
    assert [span(a, n) for n in ARS] == [span(b, n) for n in ARS] == [(2, 3), (5, 6), (7, 8), (10, 11)]
    assert a.duration_s == b.duration_s == 11 and a.exposed_comm_s == b.exposed_comm_s == 1


@pytest.mark.parametrize("c", [1, 2.5, 4])
def test_the_same_under_interference(c):
    # compute x2 while a collective runs, the collective x1.5 while compute runs: the same
    # overlaps, so the same slowed timeline
    inter = Interference(compute_slowdown=2.0, comm_slowdown=1.5)
    plan = toy_schedule("ladder")
    a, b = both(plan, toy_time(c), inter), both(inductor_order(plan), toy_time(c), inter)
    assert [t for n in ARS for t in span(a, n)] == pytest.approx([t for n in ARS for t in span(b, n)])
    assert a.duration_s == pytest.approx(b.duration_s)
    assert a.exposed_comm_s == pytest.approx(b.exposed_comm_s)
