"""sim/price/comm/timing.py: what a benchmark loop measures, on hand-computed values; the importer's
'nGpus' reading; `tpsim collective --compare` on a real one-thread-four-GPU nccl-tests output."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.calib.imports import read_nccl_tests
from tpsim.cli import main
from tpsim.sim.price.comm.timing import KINDS, HostCosts, LoopTime, Timing, loop_time
from tpsim.sim.hardware.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "nccl_tests"
RAW = ROOT / "bench" / "data" / "raw"
HOST = HostCosts(eager_launch_s=8.81e-6)          # h100-sxm compute.launch_us.eager


def test_host_costs_come_from_the_profile():
    assert HostCosts.from_profile(load_profile("h100-sxm")).eager_launch_s == pytest.approx(8.81e-6)


def test_loops_that_measure_the_device_time():
    """Back to back with one GPU per thread, and -G 10 batches (4 graphs of 50 calls, each launched 10
    times) with a profile that leaves graph_nccl_node unset, time the kernel: 9.31 us in, 9.31 us out,
    nothing added to the path (-G with the node: tests/test_graph_nccl_node.py)."""
    for t in (Timing("back_to_back_stream"), Timing("graph_replay_batched", 4, 50, 10), Timing("unstated")):
        assert loop_time(9.31e-6, t, HOST) == LoopTime(9.31e-6, "")


def test_a_single_graph_launch_is_its_upload_and_stays_unpriced():
    """-G 1: nccl-tests starts the timer, then launches each fresh graph once with no cudaGraphUpload
    before, so every sample holds the upload; the same graphs launched twice or more are priced."""
    one = loop_time(9.31e-6, Timing("graph_replay_batched", 4, 50, 1), HOST)
    assert one.time_s == pytest.approx(9.31e-6) and one.path == "+first-launch?"
    assert "nccl-tests -G 1" in one.unpriced and "one thread launching all 4" in one.unpriced
    solo = loop_time(9.31e-6, Timing("graph_replay_batched", 1, 20, 1), HOST)
    assert "freshly instantiated graph of 20 captured calls" in solo.unpriced and "one thread" not in solo.unpriced
    assert loop_time(9.31e-6, Timing("graph_replay_batched", 1, 20, 2), HOST).unpriced is None
    with pytest.raises(ValueError, match="graph_launches"):
        Timing("graph_replay_batched", 1, 20, 0)


def test_one_thread_driving_n_gpus_is_priced_only_where_the_device_covers_n_launches():
    """-g 4: 4 x 8.81 = 35.24 us. A 42.16 us kernel (4 MiB at 4 ranks) covers four launches even at
    the upper bound: priced as device. A 27.66 us kernel (2 MiB) may be the host loop: unpriced,
    time left at the device time, the path says so."""
    g4 = Timing("single_thread_n_gpus", 4)
    assert loop_time(42.16e-6, g4, HOST) == LoopTime(42.16e-6, "")
    assert loop_time(35.24e-6, g4, HOST).unpriced is None                     # the bound itself is device-bound
    lt = loop_time(27.66e-6, g4, HOST)
    assert lt.time_s == pytest.approx(27.66e-6) and lt.path == "+host-floor?(g4)"
    assert "nccl-tests -g 4" in lt.unpriced and "35.2 us" in lt.unpriced
    # eight GPUs on one thread: 8 x 8.81 = 70.48 us
    assert loop_time(70.0e-6, Timing("single_thread_n_gpus", 8), HOST).unpriced is not None
    assert loop_time(70.5e-6, Timing("single_thread_n_gpus", 8), HOST).unpriced is None


def test_eager_sync_per_call_adds_one_eager_launch():
    """torch: events around one dist.all_reduce, synchronize each call: 9.31 (kernel, 1 KiB at 4
    ranks) + 8.81 (one eager launch) = 18.12 us -- not + eager_extra (4.42)."""
    lt = loop_time(9.31e-6, Timing("eager_sync_per_call"), HOST)
    assert lt.time_s == pytest.approx(18.12e-6) and lt.path == "+eager_launch" and lt.unpriced is None


def test_graph_replay_per_call_has_no_sourced_price():
    lt = loop_time(9.31e-6, Timing("graph_replay_per_call"), HOST)
    assert lt.time_s == pytest.approx(9.31e-6) and lt.path == "+graph_launch?"
    assert "cudaGraphLaunch" in lt.unpriced


@pytest.mark.parametrize("kind,gpus", [("nope", 1), ("single_thread_n_gpus", 1), ("back_to_back_stream", 4),
                                       ("eager_sync_per_call", 2), ("graph_replay_per_call", 8)])
def test_bad_timings_are_refused(kind, gpus):
    with pytest.raises(ValueError):
        Timing(kind, gpus)


def test_every_kind_is_handled():
    for k in KINDS:
        g = 2 if k == "single_thread_n_gpus" else 1
        assert isinstance(loop_time(1e-3, Timing(k, g), HOST), LoopTime)


def test_importer_reads_gpus_per_thread():
    assert read_nccl_tests(FIX / "ar_v2_12.txt").gpus_per_thread == 8        # 'nThread 1 nGpus 8'
    assert read_nccl_tests(FIX / "ar_mpi.txt").gpus_per_thread == 1          # mpirun, one GPU per process
    t = read_nccl_tests(RAW / "ncb-4xh100-all_reduce-graph1.txt")
    assert (t.gpus_per_thread, t.mode) == (4, "graph")


def _collective(*args):
    return CliRunner().invoke(main, ["collective", *args])


def test_compare_marks_the_host_floor_of_a_one_thread_four_gpu_file():
    """nccl-collectives-bench 4x H100 (-g 4): the 19 sizes up to 2 MiB, priced under 35.24 us, carry
    +host-floor?(g4); from 4 MiB (41.81 us) the rows are plain table rows."""
    r = _collective("--group", "4", "--mode", "nccl", "--compare", str(RAW / "ncb-4xh100-all_reduce.txt"), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    timing = out["compare"]["timing"]
    assert (timing["kind"], timing["gpus_per_thread"]) == ("single_thread_n_gpus", 4)
    assert timing["unpriced_sizes"] == [8 << k for k in range(19)]           # 8 B .. 2 MiB
    assert "host" in timing["unpriced_reason"] and timing["graph_launches"] == 0
    rows = {row["bytes"]: row for row in out["rows"]}
    assert rows[2 << 20]["path"] == "table+host-floor?(g4)" and rows[4 << 20]["path"] == "table"
    assert rows[2 << 20]["time_us"] == pytest.approx(27.51, abs=0.01)     # the device time, not a floor
    assert timing["median_abs_error_pct_priced"] < 5.0
    text = _collective("--group", "4", "--mode", "nccl", "--compare", str(RAW / "ncb-4xh100-all_reduce.txt"))
    assert "warning:" in text.output and "nccl-tests -g 4" in text.output and "19 sizes marked" in text.output


def test_compare_one_gpu_per_process_file_has_no_warning():
    r = _collective("--group", "4", "--mode", "nccl", "--compare", str(FIX / "ar_mpi.txt"), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert "timing" not in out["compare"] and all("host-floor" not in row["path"] for row in out["rows"])
