"""The in-pass overlap calibration (calib.overlap_summary.summarize_passes) yields slowdowns under which
the simulator's engine reproduces the measured passes, pinned on hand-computed toy timelines."""
import pytest

from tpsim.calib.overlap_summary import summarize_passes
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.schedule.language import Op, Schedule
from toy import ONE_LAYER, STACK
from tpsim.sim.stack.spec import Step

# A pass with two all-reduces: compute c0 = 2 before the first, 3 between them, 1 after the second
# (C = 6 alone). A blocking all-reduce costs b = 4 here: Tb = 6 + 2 * 4 = 14.
# Overlapped with compute_slowdown 1.5 and comm_slowdown 2, by hand:
#   [0, 2] c0; AR0 from 2 under the 3-unit segment slowed to 4.5 -> done 4.5 / 2 = 2.25 of 4 at 6.5,
#   the wait finishes the other 1.75 at full speed: 8.25. AR1 from 8.25 under the last segment
#   (1 -> 1.5): 0.75 done at 9.75, the wait 3.25 more: 13.0. So To = 13, Wo = 1.75 + 3.25 = 5.
C0, SEG1, SEG2, B = 2.0, 3.0, 1.0, 4.0
ALONE, BLOCKING, OVERLAPPED, WAIT = C0 + SEG1 + SEG2, 14.0, 13.0, 5.0


def rank_trials(drift=(1.0, 1.0, 1.0)):
    # every quantity of trial i scaled by drift[i] (the machine's speed moving between trials)
    def scaled(x):
        return [x * d for d in drift]
    return {"alone": scaled(ALONE), "first": scaled(C0), "blocking": scaled(BLOCKING),
            "overlapped": scaled(OVERLAPPED), "overlapped_wait": scaled(WAIT), "n": 2}


def test_slowdowns_recovered_from_hand_computed_passes():
    s = summarize_passes([[rank_trials()], [rank_trials()]])
    assert s["compute_slowdown"] == pytest.approx(1.5)       # (13 - 5 - 2) / (6 - 2)
    assert s["comm_slowdown"] == pytest.approx(2.0)          # 6 / (14 - 6 - 5)
    case = s["cases"][0]
    assert case["all_reduce_in_context_us"] == pytest.approx(B * 1e6)
    assert s["overlaps"] and case["blocking_over_overlapped"] == pytest.approx(14 / 13)
    assert case["per_trial_s"]["overlapped_wait"] == [WAIT] * 3           # raw points kept beside the fit


def test_paired_medians_survive_one_slow_trial():
    # one trial 3x slower on everything: medians of the paired terms still give the same factors
    s = summarize_passes([[rank_trials((1.0, 1.0, 3.0))], [rank_trials((1.0, 1.0, 3.0))]])
    assert s["compute_slowdown"] == pytest.approx(1.5) and s["comm_slowdown"] == pytest.approx(2.0)


def test_no_progress_and_no_slowdown_are_clamped():
    # overlapped = blocking and compute unslowed: the collective did nothing while compute ran
    r = rank_trials()
    r |= {"overlapped": [BLOCKING] * 3, "overlapped_wait": [BLOCKING - ALONE] * 3}
    s = summarize_passes([[r]])
    assert s["compute_slowdown"] == 1.0 and s["comm_slowdown"] == 50.0 and not s["overlaps"]


def test_cases_pool_weighted_by_their_time():
    # a second case twice as long, whose compute is not slowed (S = A = 8) and whose all-reduces
    # get 8 of their work done during it (Tb = 12 + 16 = 28, Wo = 16 - 8 = 8, To = 2*2 + 8 + 8):
    # pooled compute 1.5*4 + 8 over 4 + 8; comm (6 + 8) / (3 + 8)
    slow = {"alone": [12.0] * 3, "first": [4.0] * 3, "blocking": [28.0] * 3, "overlapped": [20.0] * 3,
            "overlapped_wait": [8.0] * 3, "n": 2}
    s = summarize_passes([[rank_trials(), slow]])
    assert [c["comm_slowdown"] for c in s["cases"]] == pytest.approx([2.0, 1.0])
    assert s["compute_slowdown"] == pytest.approx(14 / 12)
    assert s["comm_slowdown"] == pytest.approx(14 / 11)


def _pattern(overlapped: bool) -> Schedule:
    """The calibration's pass as a schedule: seg0 -> AR0 -> seg1 -> AR1 -> seg2 -> end. Overlapped:
    seg1 does not read AR0 (in flight), seg2 reads it (waited before AR1 is issued); blocking:
    each segment reads the previous all-reduce."""
    def op(name, kind, ins, outs=None):
        return Op(name, kind, tuple(ins), (outs or name,), (("m", 1), ("n", 1)), "fp32", 0)
    ops = [op("seg0", "gemm", ["tokens"]), op("ar0", "all_reduce", ["seg0"]),
           op("seg1", "gemm", ["seg0" if overlapped else "ar0"]), op("ar1", "all_reduce", ["seg1"]),
           op("seg2", "gemm", ["seg1", "ar0"] if overlapped else ["ar1"]), op("end", "add", ["seg2", "ar1"])]
    return Schedule("calib-pattern", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, tuple(ops))


def test_engine_reproduces_the_measured_passes_with_the_fitted_factors():
    s = summarize_passes([[rank_trials()], [rank_trials()]])
    costs = {"seg0": C0, "seg1": SEG1, "seg2": SEG2, "ar0": B, "ar1": B, "end": 0.0}
    inter = Interference(s["compute_slowdown"], s["comm_slowdown"])
    over = simulate(_pattern(True), lambda o: costs[o.name], ranks=2, interference=inter)
    assert over.duration_s == pytest.approx(OVERLAPPED) and over.exposed_comm_s == pytest.approx(WAIT)
    block = simulate(_pattern(False), lambda o: costs[o.name], ranks=2, interference=inter)
    assert block.duration_s == pytest.approx(BLOCKING)


def test_all_reduces_done_before_their_wait_are_counted():
    # 3 trials x 2 ranks, n = 2 all-reduces -> one wait per pass inside it; 3 of the 6 found it done
    a, b = rank_trials() | {"early": [1, 0, 1]}, rank_trials() | {"early": [0, 1, 0]}
    s = summarize_passes([[a], [b]])
    assert s["done_early"] == pytest.approx(0.5) and s["cases"][0]["done_early"] == pytest.approx(0.5)


def test_a_busy_machine_is_said_to_be_noisy():
    """Issue 48 item 7: a loaded box wrote compute x9.67 without a word. Trials whose pass alone varies
    past NOISY_SPREAD (p10..p90 over the median) get a warning; steady trials, or too few, none."""
    from tpsim.calib.overlap_summary import NOISY_SPREAD, noise_note
    steady = summarize_passes([[rank_trials((1.0,) * 10 + (1.1,) * 10)]])
    assert noise_note(steady) is None
    # half the trials at 1x, half at 2x the machine's speed: p10..p90 of alone = 6..12, median 9: 67%
    busy = summarize_passes([[rank_trials((1.0,) * 10 + (2.0,) * 10)]])
    note = noise_note(busy)
    assert note.startswith("noisy: the pass measured alone varied by 67% of its median across 20 trials")
    assert 0.67 > NOISY_SPREAD and noise_note(summarize_passes([[rank_trials((1.0, 3.0, 1.0))]])) is None  # 3 trials
