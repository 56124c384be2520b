"""Overlap parameters fitted by simulating the calibration's own passes (calib.overlap_fit),
pinned on hand-computed timelines, and the engine's wake-up of a rank blocked on a collective."""
import pytest

from tpsim.calib.overlap_fit import fit, pass_ratios
from tpsim.sim.engine.step import Interference
from tpsim.sim.schedule.language import Schedule
from tpsim.sim.stack.spec import Step
from toy import ONE_LAYER, STACK, TWO_AR_COST, TWO_AR_PASS, toy_op, toy_schedule, toy_time


BLOCKING, COST = TWO_AR_PASS, TWO_AR_COST


def cost(op):
    return COST[op.name]


def test_pass_ratios_on_the_hand_timeline():
    # s = 1.5, k = 2, no wake-up (tests/test_overlap_fit.py by hand): To = 13, Wo = 5
    r, w = pass_ratios(BLOCKING, cost, Interference(1.5, 2.0))
    assert (r, w) == (pytest.approx(14 / 13), pytest.approx(5 / 13))
    # wake-up 1 of each all-reduce's 4: work 3. AR0 from 2 under seg1 (3 -> 4.5): 2.25 of 3 done at
    # 6.5; the wait ends at 7.25, waking at 8.25 (wait 1.75). AR1 runs from 7.25, at full speed
    # while the rank wakes (1 done at 8.25), then under seg2 (1 -> 1.5): 0.75 more at 9.75; the
    # last wait ends at 11 + 1 wake = 12 (wait 2.25). Blocking still costs 2 + 4 + 3 + 4 + 1 = 14.
    r, w = pass_ratios(BLOCKING, cost, Interference(1.5, 2.0, wake_s=1.0))
    assert (r, w) == (pytest.approx(14 / 12), pytest.approx(4 / 12))


def test_wake_up_leaves_blocking_schedules_unchanged_and_helps_overlap():
    from tpsim.sim.engine.simpy_engine import simulate
    for spec in ("standard", "parallel", "spd:1"):
        base = simulate(toy_schedule(spec), toy_time(4), interference=Interference(1.5, 2.0)).duration_s
        woke = simulate(toy_schedule(spec), toy_time(4), interference=Interference(1.5, 2.0, wake_s=1.0)).duration_s
        assert woke == pytest.approx(base)
    lad = [simulate(toy_schedule("ladder"), toy_time(4), interference=Interference(1.5, 2.0, wake_s=w)).duration_s
           for w in (0.0, 1.0)]
    assert lad[1] < lad[0]
    # a wake-up longer than a collective costs no more than the collective
    assert simulate(toy_schedule("standard"), toy_time(0.5), interference=Interference(wake_s=9.0)).duration_s == \
        pytest.approx(simulate(toy_schedule("standard"), toy_time(0.5)).duration_s)


def test_fit_recovers_known_parameters_from_two_cases():
    # targets made by the engine itself under known parameters, on two passes whose modules are
    # short (toy ladder of 2 layers, collective 4) and long (collective 1.5) against the collective
    truth = Interference(1.8, 2.5, wake_s=0.7)
    cases = []
    for c in (4.0, 1.5):
        sched, t = toy_schedule("standard"), toy_time(c)
        cases.append((sched, t, pass_ratios(sched, t, truth)))
    got, resid = fit(cases, Interference(1.2, 1.5, 0.2), max_evals=600)
    assert resid < 1e-6
    for sched, t, target in cases:                     # reproduces what was measured
        assert pass_ratios(sched, t, got) == pytest.approx(target, rel=1e-3)
    assert got.wake_s == pytest.approx(0.7, rel=0.05)


def test_a_collective_blocked_on_a_collective_pays_the_wake_too():
    # seg0 = 2 -> ar0 (4) -> ar1 reads ar0 (4) -> seg2 = 1: blocking costs 11 whatever the wake-up
    chain = Schedule("chain", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
        toy_op("seg0", "gemm", ["tokens"]), toy_op("ar0", "all_reduce", ["seg0"]), toy_op("ar1", "all_reduce", ["ar0"]),
        toy_op("seg2", "gemm", ["ar1"])))
    from tpsim.sim.engine.simpy_engine import simulate
    costs = {"seg0": 2.0, "ar0": 4.0, "ar1": 4.0, "seg2": 1.0}
    for w in (0.0, 1.0, 3.0):
        assert simulate(chain, lambda op: costs[op.name], interference=Interference(wake_s=w)).duration_s == \
            pytest.approx(11.0)


def test_fitted_wake_is_capped_at_the_longest_all_reduce():
    # passes the engine made with a wake-up as long as every all-reduce: any larger one fits as well,
    # so the fit must not wander off to a huge value
    sched, t = toy_schedule("standard"), toy_time(1.5)
    target = pass_ratios(sched, t, Interference(1.2, 2.0, wake_s=1.5))
    got, _ = fit([(sched, t, target)], Interference(1.2, 2.0, 1.0))
    assert got.wake_s <= 1.5 + 1e-12
