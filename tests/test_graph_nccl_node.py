"""collectives.graph_nccl_node_us: NCCL's graph-mixing record node per captured NCCL collective.

Its value comes from a public NCCL_GRAPH_MIXING_SUPPORT=1 vs 0 ablation (sim/hardware/profiles/_data/
nccl-graph-mixing-ablation-jacobi.csv); it is priced on every NCCL collective of a compiled CUDA-graph
step (sim/price/comm/collective.py) and on every call of an nccl-tests -G loop (sim/price/comm/timing.py).
"""
import csv
import dataclasses
from pathlib import Path

import pytest

from tpsim.sim.price.comm.timing import HostCosts, LoopTime, Timing, loop_time
from tpsim.sim.price.cost import CostModel
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack

DATA = Path(__file__).resolve().parent.parent / "sim" / "hardware" / "profiles" / "_data" / "nccl-graph-mixing-ablation-jacobi.csv"


def _fastest(gpu: str, nx: int, n: int, mixing: int) -> float:
    rows = [r for r in csv.DictReader(line for line in DATA.read_text().splitlines() if not line.startswith("#"))
            if (r["gpu"], int(r["nx"]), int(r["num_gpus"]), int(r["nccl_graph_mixing"])) == (gpu, nx, n, mixing)]
    assert len(rows) == 5                       # 5 reps per arm
    return min(float(r["runtime_s"]) for r in rows)


def test_profile_values_are_the_ablation_by_hand():
    """H100, nx=128, 5000 iterations, fastest of 5 reps: 4 GPUs 0.119574 s (mixing on) vs 0.114078 s
    (off) -> 1.0992 us per launch; 8 GPUs 0.142252 vs 0.134690 -> 1.5124 us; median 1.3058 -> 1.31 us.
    H200: 4 GPUs 0.137079 vs 0.135608 -> 0.2942 us; 8 GPUs 0.138147 vs 0.135530 -> 0.5234 us -> 0.41 us."""
    assert (_fastest("H100", 128, 4, 1), _fastest("H100", 128, 4, 0)) == (0.119574, 0.114078)
    assert (_fastest("H100", 128, 8, 1), _fastest("H100", 128, 8, 0)) == (0.142252, 0.134690)
    assert (_fastest("H200", 128, 4, 1), _fastest("H200", 128, 4, 0)) == (0.137079, 0.135608)
    assert (_fastest("H200", 128, 8, 1), _fastest("H200", 128, 8, 0)) == (0.138147, 0.135530)
    assert load_profile("h100-sxm").graph_nccl_node_s == pytest.approx(1.31e-6)
    assert load_profile("h100-sxm-p2p-off").graph_nccl_node_s == pytest.approx(1.31e-6)   # transport-independent
    assert load_profile("h200-sxm").graph_nccl_node_s == pytest.approx(0.41e-6)
    # no measurement on these GPUs: the median of the four arms, (0.5234 + 1.0992) / 2 = 0.8113 -> 0.81 us,
    # ranged from the lowest arm (0.29) to the profile's graph-replay floor (A100 2.48 us, L40S 1.68 us)
    for name, floor in (("a100-sxm", 2.48), ("a100-sxm-p2p-off", 2.48), ("l40s-pcie", 1.68)):
        p = load_profile(name)
        assert p.graph_nccl_node_s == pytest.approx(0.81e-6)
        assert p.ranges["collectives.graph_nccl_node_us"] == (0.29, floor)
        assert floor == pytest.approx(p.launch_s["graph"] * 1e6)


def test_graph_step_pays_it_on_nccl_only():
    """h100-sxm, 16 KiB all-reduce over 8 ranks: the table's bare kernel 16.69 us + NCCL's record node
    1.31 = 18.00 us in a compiled graph step (no copy: graph_extra_us 0, Inductor writes the GEMM's
    output where all_reduce_ reduces it in place). A profile whose stack does copy (graph_extra_us
    2.49, one graph-replayed kernel) pays 20.49 us. An eager call reads the eager table (20.70 us)
    and pays neither; the custom all-reduce's own graph table (5.31 us) is no NCCL launch and pays
    neither."""
    prof = load_profile("h100-sxm")
    nccl = CostModel(prof, Stack())
    t, path = nccl.price("all_reduce", 16384, 8, "graph")
    assert t == pytest.approx(18.00e-6) and path == "table+graph_nccl_node"
    copying = CostModel(dataclasses.replace(prof, graph_extra_s=2.49e-6), Stack())
    t, path = copying.price("all_reduce", 16384, 8, "graph")
    assert t == pytest.approx(20.49e-6) and path == "table+graph_extra+graph_nccl_node"
    assert nccl.price("all_reduce", 16384, 8, "eager") == (pytest.approx(20.70e-6), "table")
    assert CostModel(prof, Stack(collective="custom")).price("all_reduce", 16384, 8, "graph") == \
        (pytest.approx(5.31e-6), "table")
    assert nccl.price("all_reduce", 16384, 1, "graph") == (0.0, "local")    # nothing launched


def test_nccl_tests_graph_loop_pays_it_every_call():
    """nccl-tests -G k -g 4 (50 calls captured per graph): every call's kernel waits on the previous
    call's record node: 9.31 us kernel + 1.31 = 10.62 us. A profile without the constant adds nothing."""
    host = HostCosts.from_profile(load_profile("h100-sxm"))
    assert host == HostCosts(eager_launch_s=pytest.approx(8.81e-6), graph_nccl_node_s=pytest.approx(1.31e-6))
    lt = loop_time(9.31e-6, Timing("graph_replay_batched", 4, 50, graph_launches=10), host)
    assert lt.time_s == pytest.approx(10.62e-6) and lt.path == "+graph_nccl_node" and lt.unpriced is None
    assert loop_time(9.31e-6, Timing("graph_replay_batched", 4, 50, 10), HostCosts(8.81e-6)) == LoopTime(9.31e-6, "")
    # -G 1: the one timed launch is the fresh graph's first, which uploads it: shown, kept unpriced
    lt = loop_time(9.31e-6, Timing("graph_replay_batched", 4, 50, graph_launches=1), host)
    assert lt.time_s == pytest.approx(10.62e-6) and lt.path == "+graph_nccl_node+first-launch?"
    assert "first launch of 4 freshly instantiated graphs of 50 captured calls" in lt.unpriced
    # stream launches pay no capture nodes
    assert loop_time(9.31e-6, Timing("back_to_back_stream"), host) == LoopTime(9.31e-6, "")
    # one replay per timed call: the node is shown in the time, the graph launch keeps the point unpriced
    lt = loop_time(9.31e-6, Timing("graph_replay_per_call"), host)
    assert lt.time_s == pytest.approx(10.62e-6) and lt.path == "+graph_nccl_node+graph_launch?"
    assert lt.unpriced is not None


def test_nccl_mode_table_strips_both_graph_additions():
    """`tpsim collective --mode nccl` prices the bare kernel: graph price minus copy (0) minus node."""
    from tpsim.commands.collective_table import collective_rows
    prof = load_profile("h100-sxm")
    (bare,) = collective_rows(prof, "all_reduce", 8, "nccl", (16384,))
    (graph,) = collective_rows(prof, "all_reduce", 8, "graph", (16384,))
    assert bare.path == "table" and bare.time_us == pytest.approx(16.69)
    assert graph.time_us - bare.time_us == pytest.approx(0.0 + 1.31)


def test_calibrated_graph_tables_already_hold_it(tmp_path):
    """tpsim calibrate times graph mode as calls captured back to back in one CUDA graph, each paying
    the record node: a calibration extending h100-sxm writes graph_nccl_node_us 0 so the base's 1.31 us
    is not charged twice (the base's graph_extra, 0: no copy kernel, stays)."""
    import json
    from types import SimpleNamespace

    from tpsim.calib.fit import build_profile
    pts = [{"collective": "all_reduce", "group": 2, "mode": m, "impl": "nccl", "bytes": b, "time_us": t}
           for m in ("graph", "eager") for b, t in ((1024, 10.0), (1 << 20, 40.0), (16 << 20, 200.0))]
    cfg = SimpleNamespace(impl_of=lambda r: "nccl", backend="nccl", name="mine", out="mine.json", quick=True,
                          extends="h100-sxm", trials={"collectives": 3, "compute": 3, "overlap": 3}, device="cuda",
                          dtype="fp16", fingerprint=lambda: {})
    prof = build_profile(cfg, {"c": {"kind": "collectives", "points": pts, "finished_at": "2026-11-30T00:00"}}, 2)
    assert prof["collectives"]["graph_nccl_node_us"]["value"] == 0.0
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(prof))
    loaded = load_profile(str(f))
    assert (loaded.graph_nccl_node_s, loaded.graph_extra_s) == (0.0, 0.0)


def test_compare_on_a_graph_file_adds_the_node_once():
    """`tpsim collective --compare` on the -G 1 -g 4 file: --mode nccl rows are the bare kernel + the node
    (8 B: 9.46 + 1.31 = 10.77 us); --mode graph rows already carry it (node 1.31 over the kernel, no
    copy) and get no second one."""
    import json

    from click.testing import CliRunner

    from tpsim.cli import main
    raw = str(Path(__file__).resolve().parent.parent / "bench" / "data" / "raw" / "ncb-4xh100-all_reduce-graph1.txt")
    out = {}
    for mode in ("nccl", "graph"):
        r = CliRunner().invoke(main, ["collective", "--group", "4", "--mode", mode, "--bytes", "8", "--compare", raw,
                                      "--json"])
        assert r.exit_code == 0, r.output
        out[mode] = json.loads(r.output)
    (n,), (g,) = out["nccl"]["rows"], out["graph"]["rows"]
    assert out["nccl"]["compare"]["timing"]["kind"] == "graph_replay_batched"
    assert n["path"] == "table+graph_nccl_node+first-launch?" and n["time_us"] == pytest.approx(10.77, abs=0.01)
    assert g["path"] == "table+graph_nccl_node+first-launch?"
    assert g["time_us"] == pytest.approx(10.77, abs=0.01)
    # -G 1: every size is the first launch of a fresh graph, so none is priced
    assert out["nccl"]["compare"]["timing"]["graph_launches"] == 1
    assert out["nccl"]["compare"]["timing"]["unpriced_sizes"] == [8]
