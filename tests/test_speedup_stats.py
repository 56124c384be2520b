"""The statistics behind "does the measured speedup have a sign": a distribution-free interval for
the median of the per-repeat paired ratios (sign test), the predicted speedup's bootstrap interval
over the overlap calibration's trials, and compare's three-way verdict."""
import pytest

pytest.importorskip("torch")         # hw.bench (median_ci) imports torch
pytestmark = pytest.mark.hw

from tpsim.calib.compare_intervals import speedup_interval, speedup_undetermined  # noqa: E402
from tpsim.calib.compare_join import speedup_sign  # noqa: E402
from tpsim.calib.overlap_summary import factor_samples, summarize_passes  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Simulator, Workload  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.hw.bench import _spread, median_ci  # noqa: E402


def test_median_ci_order_statistics_by_hand():
    # n = 5: only [min, max] reaches 90%: coverage 1 - 2/32 = 0.9375
    assert median_ci([5, 1, 4, 2, 3]) == (1, 5, pytest.approx(0.9375))
    # n = 9: [x(2), x(8)], coverage 1 - 2 * (1 + 9) / 512 = 0.9609...
    lo, hi, cov = median_ci([9, 1, 8, 2, 7, 3, 6, 4, 5])
    assert (lo, hi) == (2, 8) and cov == pytest.approx(1 - 20 / 512)
    # n = 13 at 90%: [x(4), x(10)], coverage 1 - 2 * (1 + 13 + 78 + 286) / 8192
    lo, hi, cov = median_ci(list(range(1, 14)))
    assert (lo, hi) == (4, 10) and cov == pytest.approx(1 - 2 * 378 / 8192)
    # too few samples: the widest interval, with its true (low) coverage
    assert median_ci([2.0, 1.0]) == (1.0, 2.0, 0.5)


def test_one_outlier_does_not_move_the_interval_at_nine_repeats():
    xs = [1.05, 1.06, 1.07, 1.08, 1.09, 1.10, 1.11, 1.12, 0.40]   # one descheduled repeat
    s = _spread(xs)
    assert s["ci_lo"] == 1.05 and s["ci_hi"] == 1.11
    assert not speedup_undetermined(s)               # ladder measurably faster despite the outlier
    assert speedup_undetermined(_spread([0.9, 1.2, 1.05, 0.97, 1.1]))


def test_old_measurements_fall_back_to_the_quartiles():
    assert speedup_undetermined({"p25": 0.95, "p75": 1.05})
    assert not speedup_undetermined({"p25": 1.01, "p75": 1.05})
    assert not speedup_undetermined({})


def test_verdicts():
    assert speedup_sign({"sign_match": True, "measured_speedup_within_noise": True}) == "ok"
    assert speedup_sign({"sign_match": False, "measured_speedup_within_noise": True}) == "undetermined"
    assert speedup_sign({"sign_match": False, "measured_speedup_within_noise": False}) == "WRONG"
    # the measurement is sure, the prediction's own interval is not
    assert speedup_sign({"sign_match": False, "measured_speedup_within_noise": False,
                  "predicted_speedup_within_noise": True}) == "undetermined"


def _trials(alone, first, blocking, overlapped, wait, n=3):
    return {"alone": [alone] * n, "first": [first] * n, "blocking": [blocking] * n,
            "overlapped": [overlapped] * n, "overlapped_wait": [wait] * n, "n": 2}


def test_bootstrap_of_identical_trials_is_the_point_fit():
    # every trial alike (tests/test_overlap_fit.py's hand timeline): every redraw gives 1.5 and 2
    s = summarize_passes([[_trials(6.0, 2.0, 14.0, 13.0, 5.0)]])
    pairs = factor_samples(s, n=20)
    assert len(pairs) == 20 and all(p == pytest.approx((1.5, 2.0)) for p in pairs)
    assert factor_samples({"method": "gemm"}) == [] and factor_samples(s | {"cases": [{}]}) == []


def test_predicted_interval_spans_the_factor_pairs():
    w = Workload(get_model("llama-3.1-8b"), 8, load_profile("h100-sxm"), prompt_len=64, gen_len=8)

    def speedup(spec, cs, ks):
        import dataclasses
        sim = Simulator(dataclasses.replace(w, profile=dataclasses.replace(w.profile, compute_slowdown=cs,
                                                                           comm_slowdown=ks, coschedule=None)),
                        record=False)
        return sim.predict(spec).tokens_per_s / sim.predict("standard").tokens_per_s
    pairs = [(1.0, 1.0, 0.0)] * 10 + [(3.0, 50.0, 0.0)] * 10
    lo, hi = speedup_interval(w, "ladder", pairs)
    assert (lo, hi) == (pytest.approx(speedup("ladder", 3.0, 50.0)), pytest.approx(speedup("ladder", 1.0, 1.0)))
    assert lo < hi                                  # interference costs ladder its overlap
    lo, hi = speedup_interval(w, "parallel", pairs)  # parallel never overlaps a collective: no spread
    assert lo == pytest.approx(hi)
    assert speedup_interval(w, "ladder", []) is None
