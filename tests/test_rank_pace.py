"""Ranks on their own cores, and compute points at the slowest rank's pace (a TP pass moves at it)."""
import json
import os
import subprocess
import sys

import pytest

# hw/rank.py is a rank's boot module and imports torch: without the [hw] extra this file is skipped
# whole, so a torch-free `pytest -m "not hw"` still collects (CI runs that in a venv without torch).
pytest.importorskip("torch")
from tpsim.hw.rank import PIN_ENV, core_share  # noqa: E402


def test_equal_contiguous_shares():
    assert core_share([0, 1], 0, 2) == (0,)
    assert core_share([1, 0], 1, 2) == (1,)
    assert core_share(list(range(8)), 1, 2) == (4, 5, 6, 7)
    # uneven: every rank gets the same number, the leftover core stays unused
    assert [core_share(list(range(7)), r, 3) for r in range(3)] == [(0, 1), (2, 3), (4, 5)]
    # a cpuset with holes (a container's): shares follow the sorted available ids
    assert core_share([9, 3, 5, 7], 1, 2) == (7, 9)


def test_no_pinning_with_more_ranks_than_cores():
    assert core_share([0, 1], 0, 4) is None
    assert core_share([0, 1], 3, 2) is None        # a local rank outside the local world


pytestmark_linux = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")


def _pinned_in_subprocess(env_extra: dict, rank: int = 0, world: int = 1) -> list:
    code = ("import json, os, threading; from tpsim.hw.rank import pin_cores; "
            f"c = pin_cores({rank}, {world}); "
            "t = []; th = threading.Thread(target=lambda: t.append(sorted(os.sched_getaffinity(0)))); "
            "th.start(); th.join(); print(json.dumps([c and list(c), sorted(os.sched_getaffinity(0)), t[0]]))")
    env = dict(os.environ) | env_extra
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytestmark_linux
def test_pin_cores_applies_to_the_process_and_its_new_threads():
    here = sorted(os.sched_getaffinity(0))
    cores, main_thread, new_thread = _pinned_in_subprocess({PIN_ENV: "1"})
    assert cores == here            # one local rank gets every available core
    if len(here) >= 2:              # the second of two ranks: the upper half only, in every thread
        cores, main_thread, new_thread = _pinned_in_subprocess({PIN_ENV: "1"}, rank=1, world=2)
        half = here[len(here) // 2:len(here) // 2 * 2]
        assert cores == main_thread == new_thread == half


@pytestmark_linux
def test_pinning_can_be_turned_off():
    cores, _, _ = _pinned_in_subprocess({PIN_ENV: "0"})
    assert cores is None


@pytest.mark.hw
def test_compute_points_take_the_slowest_ranks_median():
    pytest.importorskip("torch")
    from tpsim.calib.compute import _Sample, points
    from tpsim.sim.schedule.language import Op
    op = Op("L0.attn.norm", "rmsnorm", ("x",), ("y",), (("rows", 1), ("width", 8)), "fp32")
    samples = {op.signature: _Sample(op, None, ())}
    # rank 1 is ~10% slower; one outlier on rank 0 does not matter
    per_rank = [{op.signature: [1.0e-4, 1.1e-4, 0.9e-4, 9.0e-4, 1.0e-4]},
                {op.signature: [1.1e-4, 1.2e-4, 1.1e-4, 1.0e-4, 1.1e-4]}]
    (p,) = points(samples, per_rank)
    assert p["time_s"] == pytest.approx(1.1e-4) and p["rank_medians_s"] == [1.0e-4, 1.1e-4]
    assert p["samples"] == 10


@pytest.mark.hw
def test_speed_probe_runs_on_one_thread_and_restores_the_setting():
    torch = pytest.importorskip("torch")
    from tpsim.hw.probe import probe_s
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert probe_s("cpu", reps=3) > 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
