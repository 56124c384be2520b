"""Timelines pinned on toy integer costs (tests/toy.py): attention 2, MLP 3, collective C."""
import pytest

from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from toy import ONE_LAYER, toy_schedule, toy_time


def run(spec, c, model=None, **kw):
    s = toy_schedule(spec, model) if model else toy_schedule(spec)
    return simulate(s, toy_time(c), **kw)


def comm_span(res, name, rank=0):
    r = next(r for r in res.records if r.op == name and r.stream == "comm" and r.rank == rank)
    return r.start_s, r.end_s


@pytest.mark.parametrize("c", [1, 4])
def test_standard_exposes_every_all_reduce(c):
    # 2 layers x (attn 2 + AR c + mlp 3 + AR c): nothing overlaps
    res = run("standard", c)
    assert res.duration_s == 2 * (5 + 2 * c)
    assert res.exposed_comm_s == 4 * c
    assert comm_span(res, "L0.attn.allreduce") == (2, 2 + c)
    assert comm_span(res, "L1.mlp.allreduce") == (2 * (5 + 2 * c) - c, 2 * (5 + 2 * c))


def test_ladder_hides_all_reduce_behind_longer_next_module():
    # C=1: a0 [2,3] under mlp0 [2,5]; m0 [5,6] under attn1 [5,7]; a1 [7,8] under mlp1 [7,10];
    # m1 [10,11] has nothing after it: only the last MLP all-reduce is exposed.
    res = run("ladder", 1)
    assert res.duration_s == 11
    assert res.exposed_comm_s == 1
    assert [comm_span(res, f"L{i}.{m}.allreduce") for i in (0, 1) for m in ("attn", "mlp")] == \
        [(2, 3), (5, 6), (7, 8), (10, 11)]


def test_ladder_exposes_the_rest_when_comm_is_longer():
    # C=4: a0 [2,6] (mlp0 [2,5] hides 3 of 4), m0 [6,10], attn1 [6,8], a1 [10,14], mlp1 [10,13],
    # m1 [14,18]. Exposed: 1 + 2 + 1 + 4 = 8 = 18 - 10 of compute.
    res = run("ladder", 4)
    assert res.duration_s == 18
    assert res.exposed_comm_s == 8
    assert comm_span(res, "L1.mlp.allreduce") == (14, 18)


@pytest.mark.parametrize("c", [0.5, 1, 2, 3, 3.5, 5, 8])
def test_one_layer_ladder_exposure_is_comm_minus_next_compute(c):
    # attn 2 -> a0 overlaps mlp 3 -> m0 after both: exposed = max(0, c - 3) + c (the last AR)
    res = run("ladder", c, model=ONE_LAYER)
    assert res.duration_s == pytest.approx(5 + max(0, c - 3) + c)
    assert res.exposed_comm_s == pytest.approx(max(0, c - 3) + c)


def test_last_layer_all_reduces_are_exposed():
    # the last MLP all-reduce always waits in full; the last attention all-reduce only
    # hides behind the last MLP (3 units)
    res = run("ladder", 5, model=ONE_LAYER)
    a0, m0 = comm_span(res, "L0.attn.allreduce"), comm_span(res, "L0.mlp.allreduce")
    assert a0 == (2, 7) and m0 == (7, 12) and res.duration_s == 12


def test_spd_zero_equals_standard_and_spd_one_does_one_all_reduce_per_block():
    assert toy_schedule("spd:0").ops == toy_schedule("standard").ops
    res = run("spd:1", 4)
    assert len([r for r in res.records if r.stream == "comm"]) == 2
    assert res.duration_s == 2 * (5 + 4)        # attn 2, mlp 3 (reads X + P_r locally), one AR
    assert run("spd:[1]", 4).duration_s == (5 + 8) + (5 + 4)


def test_parallel_does_one_all_reduce_per_layer():
    res = run("parallel", 4)
    assert [r.op for r in res.records if r.stream == "comm"] == ["L0.allreduce", "L1.allreduce"]
    assert res.duration_s == 2 * (2 + 3 + 4)


def test_upper_bound_has_no_communication():
    res = run("upper-bound", 4)
    assert not [r for r in res.records if r.stream == "comm"]
    assert res.duration_s == 10 and res.exposed_comm_s == 0


def test_interference_slows_both_sides():
    # one-layer ladder, C=1, compute x2 and comm x1.5 while both run:
    # a0 runs [2, 3.5] at 1/1.5 speed; mlp0 does 0.75 units by 3.5 at half speed, the other
    # 2.25 at full speed -> ends 5.75; m0 [5.75, 6.75] alone.
    inter = Interference(compute_slowdown=2.0, comm_slowdown=1.5)
    res = run("ladder", 1, model=ONE_LAYER, interference=inter)
    assert comm_span(res, "L0.attn.allreduce") == pytest.approx((2, 3.5))
    mlp_down = next(r for r in res.records if r.op == "L0.mlp.down")
    assert mlp_down.end_s == pytest.approx(5.75)
    assert res.duration_s == pytest.approx(6.75)
    assert run("ladder", 1, model=ONE_LAYER).duration_s == 6       # and without interference


def test_interference_does_not_touch_serialized_standard():
    inter = Interference(2.0, 2.0)
    assert run("standard", 4, interference=inter).duration_s == run("standard", 4).duration_s


def test_a_pass_where_no_compute_runs_beside_a_collective_says_so():
    """StepResult.apart: flat factors applied and no compute op beside a collective, so the pass is
    the same at any flat factors (sim/sensitivity.py reruns none of it). Standard serializes every
    all-reduce: apart, 2 x (5 + 2 x 4) = 26 at any factors. The one-layer ladder at C=1 runs its
    attention all-reduce beside the MLP: not apart. Without factors (nothing applied): not said."""
    a, b = (run("standard", 4, interference=Interference(*f)) for f in ((2.0, 1.5), (1.3, 1.1, 0.5)))
    assert a.apart and a.duration_s == 26 and b.apart and b.duration_s == 26
    assert not run("ladder", 1, model=ONE_LAYER, interference=Interference(2.0, 1.5)).apart
    assert not run("standard", 4).apart


@pytest.mark.parametrize("spec, waits", [("upper-bound", 8), ("standard", 8 + 4)])
def test_a_stream_change_nothing_waits_on_schedules_no_event(spec, waits):
    """Under flat factors each timed op runs as a wait for its end or for a change of its rate: one
    SimPy condition event more than without factors per such op (8 compute ops of non-zero time, and
    standard's 4 all-reduces). A stream's start or stop with no such wait on its rank (a serialized
    pass: never) fires nothing: it would schedule an event that runs nothing (before: 48 more in
    upper-bound, 56 in standard). The timelines are those without factors (nothing overlaps)."""
    s = toy_schedule(spec)
    a, b = simulate(s, toy_time(4), interference=Interference(2.0, 1.5)), simulate(s, toy_time(4))
    assert a.events == b.events + waits and a.duration_s == b.duration_s


def test_late_rank_delays_the_collective_for_all():
    # rank 1 starts 3 late: every rank's first all-reduce starts at 3 + 2 = 5
    res = run("standard", 1, model=ONE_LAYER, ranks=2, rank_delay_s=(0, 3))
    assert comm_span(res, "L0.attn.allreduce", rank=0) == (5, 6)
    assert comm_span(res, "L0.attn.allreduce", rank=1) == (5, 6)
    assert res.exposed_comm_s == 3 + 1 + 1      # rank 0 waits for rank 1, then for both ARs
    assert res.duration_s == 3 + 2 + 1 + 3 + 1


def test_all_ranks_equal_representative_rank_without_skew():
    for spec in ("standard", "ladder", "spd:0.5", "parallel"):
        one = run(spec, 2.5)
        four = run(spec, 2.5, ranks=4)
        assert four.duration_s == one.duration_s and four.exposed_comm_s == one.exposed_comm_s


def test_jitter_only_delays():
    base = run("standard", 1, ranks=4).duration_s
    jit = run("standard", 1, ranks=4, jitter_s=0.5, seed=3).duration_s
    assert jit > base
