"""The calibration's patterns as transforms of a schedule (sim.schedule.transform): op order and dataflow,
and the timelines the engine gives them on hand-written costs."""
import pytest

from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step
from tpsim.sim.schedule.transform import blocking, local, overlapped
from toy import TWO_AR_COST, TWO_AR_PASS


PASS, COST = TWO_AR_PASS, TWO_AR_COST


def cost(op):
    return op.given_cost_s if op.given_cost_s is not None else COST[op.name]


def names(s):
    return [op.name for op in s.ops]


def test_overlapped_issues_then_waits_for_the_previous():
    over = overlapped(PASS)
    assert names(over) == ["seg0", "ar0", "ar0.standin", "seg1", "ar1", "ar1.standin", "ar0.wait", "seg2", "ar1.wait"]
    seg1 = next(op for op in over.ops if op.name == "seg1")
    assert over.producer[seg1.inputs[0]].name == "ar0.standin"       # the pass goes on without the result
    wait0 = next(op for op in over.ops if op.name == "ar0.wait")
    assert over.producer[wait0.inputs[0]].name == "ar0"               # and only the wait reads it


def test_blocking_waits_at_once_and_local_has_no_collective():
    assert names(blocking(PASS)) == ["seg0", "ar0", "ar0.wait", "ar0.standin", "seg1",
                                     "ar1", "ar1.wait", "ar1.standin", "seg2"]
    loc = local(PASS)
    assert names(loc) == ["seg0", "ar0.standin", "seg1", "ar1.standin", "seg2"] and not loc.collectives
    assert [op.attrs for op in loc.ops if op.kind == "standin"] == [(("rows", 1), ("width", 1), ("cost_ns", 0))] * 2


def test_engine_timelines_of_the_patterns():
    # overlapped with compute slowed 1.5x and the all-reduce 2x while both run, by hand:
    # [0, 2] seg0; AR0 from 2 under seg1 (3 -> 4.5): 2.25 of 4 done at 6.5, the wait does 1.75 more: 8.25;
    # AR1 from 8.25 under seg2 (1 -> 1.5): 0.75 done at 9.75, 3.25 more: 13. Waits 1.75 + 3.25 = 5.
    inter = Interference(1.5, 2.0)
    assert simulate(blocking(PASS), cost, interference=inter).duration_s == pytest.approx(14.0)
    o = simulate(overlapped(PASS), cost, interference=inter)
    assert (o.duration_s, o.exposed_comm_s) == (pytest.approx(13.0), pytest.approx(5.0))
    assert simulate(local(PASS), cost, interference=inter).duration_s == pytest.approx(6.0)


def test_an_all_gather_stands_in_at_its_gathered_width():
    st = Stack(head="vocab-parallel")
    m = get_model("tiny")
    s = build("standard", m, 2, Step.decode(1, 8, 4, 1, st), st)
    (gather,) = [op for op in s.ops if op.kind == "all_gather"]
    (sub,) = [op for op in local(s).ops if op.name == gather.name + ".standin"]
    assert sub.attr("width") == 2 * gather.attr("width") and sub.outputs == gather.outputs
    # blocking/overlapped keep only all-reduces: the gather is a stand-in there too
    assert gather.name not in names(overlapped(s)) and gather.name + ".standin" in names(blocking(s))


def test_standins_of_seq_parallel_collectives_have_their_output_shapes():
    """A row all-gather's stand-in has group x the rows, a reduce-scatter's 1/group of them."""
    from tpsim.sim.model.presets import get_model
    from tpsim.sim.schedule.language import build
    from tpsim.sim.stack.spec import Stack, Step
    from tpsim.sim.schedule.transform import local
    s = local(build("seq-parallel", get_model("toy-512"), 4, Step.decode(2, 8, 4, 1, Stack()), Stack()))
    by = {o.name: dict(o.attrs) for o in s.ops}
    assert by["L0.attn.allgather.standin"] == {"rows": 4, "width": 512, "cost_ns": 0, "dim": 0}
    assert by["L0.attn.reducescatter.standin"] == {"rows": 1, "width": 512, "cost_ns": 0, "dim": 0}
    assert not s.collectives
