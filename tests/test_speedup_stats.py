"""The statistics behind "does the measured speedup have a sign": a distribution-free interval for
the median of the per-repeat paired ratios (sign test), and compare's three-way verdict."""
import pytest

pytest.importorskip("torch")

from calib.compare import _sign, speedup_undetermined  # noqa: E402
from hw.bench import _spread, median_ci  # noqa: E402


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
    assert _sign({"sign_match": True, "measured_speedup_within_noise": True}) == "ok"
    assert _sign({"sign_match": False, "measured_speedup_within_noise": True}) == "undetermined"
    assert _sign({"sign_match": False, "measured_speedup_within_noise": False}) == "WRONG"
