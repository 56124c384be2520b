"""Measured traces (`tpsim bench --trace`) and measured-beside-simulated traces (`tpsim compare`):
valid Chrome trace JSON, a track per rank and stream, and the same op names as the simulator's."""
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.calib.measured_trace import combine
from tpsim.sim.engine.record import Record


def _check_chrome(trace: dict) -> list[dict]:
    """The Chrome trace event format as chrome://tracing and Perfetto read it; returns the X events."""
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    xs = []
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and e["ts"] >= 0 and e["dur"] >= 0
            xs.append(e)
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index")
    return xs


def test_combine_lays_out_ranks_side_by_side_and_aligns_decode():
    # prefill ends at 3 us (measured) / 4 us (simulated): every decode step starts at 4 * 1.05 us
    meas = {"prefill": [Record("L0.attn.qkv", 1, "compute", 0.0, 3e-6, "prefill", "gemm")],
            "decode": [Record("L0.attn.qkv", 1, "compute", 0.0, 1e-6, "decode", "gemm")]}
    sim = {"prefill": [Record("L0.attn.qkv", 1, "compute", 0.0, 4e-6, "prefill", "gemm"),
                       Record("L0.attn.allreduce", 1, "comm", 1e-6, 2e-6, "prefill", "all_reduce")],
           "decode": [Record("L0.attn.qkv", 1, "compute", 0.5e-6, 1e-6, "decode", "gemm")]}
    tr = combine([("ladder", "measured", meas), ("ladder", "simulated", sim), ("standard", "measured", meas)])
    xs = _check_chrome(json.loads(json.dumps(tr)))
    names = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert names == {2: "ladder rank 1 measured", 3: "ladder rank 1 simulated", 1002: "standard rank 1 measured"}
    dec = sorted((e["pid"], e["ts"]) for e in xs if e["args"]["phase"] == "decode")
    assert dec == [(2, pytest.approx(4.2)), (3, pytest.approx(4.2 + 0.5)), (1002, pytest.approx(4.2))]
    assert {(e["pid"], e["tid"]) for e in xs if e["name"] == "L0.attn.allreduce"} == {(3, 1)}    # comm thread


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("bench")
    r = CliRunner().invoke(main, ["bench", "--model", "tiny", "--tp", "2", "--prompt", "16", "--gen", "3",
                                  "--repeats", "1", "--warmup", "0", "--schedule", "ladder", "--device", "cpu",
                                  "--backend", "gloo", "--out", str(d / "m.json"), "--trace", str(d / "m.trace.json")])
    assert r.exit_code == 0, r.output
    return d


@pytest.mark.hw
@pytest.mark.slow
def test_bench_trace_shares_op_names_with_the_simulated_trace(bench_run, tmp_path):
    meas = json.loads((bench_run / "m.trace.json").read_text())
    xs = _check_chrome(meas)
    procs = {e["args"]["name"] for e in meas["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"standard rank 0 measured", "standard rank 1 measured", "ladder rank 0 measured",
                     "ladder rank 1 measured"}
    threads = {(e["pid"], e["args"]["name"]) for e in meas["traceEvents"] if e["name"] == "thread_name"}
    assert {(0, "compute"), (0, "comm"), (0, "wait"), (1000, "comm")} <= threads
    assert {e["args"]["phase"] for e in xs} == {"prefill", "decode"}
    r = CliRunner().invoke(main, ["trace", "--model", "tiny", "--tp", "2", "--prompt", "16", "--gen", "3",
                                  "--schedule", "ladder", "--out", str(tmp_path / "s.json")])
    assert r.exit_code == 0, r.output
    sim = _check_chrome(json.loads((tmp_path / "s.json").read_text()))
    ladder = {e["name"] for e in xs if e["pid"] // 1000 == 1}
    assert ladder == {e["name"] for e in sim}           # every op of one prefill + one decode step, both sides
    assert "L1.attn.allreduce" in ladder and "L0.mlp.up" in ladder


@pytest.mark.hw
@pytest.mark.slow
def test_compare_writes_measured_beside_simulated_per_point(bench_run, tmp_path):
    # a CPU profile for the fp32 gloo run: h100-sxm with an fp32 peak and a gloo all-reduce table
    # (test values only: this checks the trace's layout, not the prediction)
    prof = {"format": "tpsim-profile", "version": 1, "name": "cpu-test", "extends": "h100-sxm",
            "compute": {"matmul_tflops": {"fp32": {"value": 1.0, "source": "test"}}},
            "collectives": {"tables": [{"collective": "all_reduce", "group": 2, "scope": "node", "mode": "eager",
                                        "impl": "gloo", "bytes": [8, 1 << 20], "time_us": [50.0, 400.0],
                                        "source": "test"}]}}
    (tmp_path / "cpu.json").write_text(json.dumps(prof))
    out = tmp_path / "cmp"
    r = CliRunner().invoke(main, ["compare", "--profile", str(tmp_path / "cpu.json"),
                                  "--measured", str(bench_run / "m.json"), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    (pt,) = json.loads((out / "compare.json").read_text())["points"]
    tr = json.loads(open(pt["trace"]).read())
    xs = _check_chrome(tr)
    procs = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert procs == {0: "standard rank 0 measured", 1: "standard rank 0 simulated", 2: "standard rank 1 measured",
                     3: "standard rank 1 simulated", 1000: "ladder rank 0 measured", 1001: "ladder rank 0 simulated",
                     1002: "ladder rank 1 measured", 1003: "ladder rank 1 simulated"}
    for pid in (0, 1001):
        mine = {e["name"] for e in xs if e["pid"] == pid}
        twin = {e["name"] for e in xs if e["pid"] == pid ^ 1}
        assert mine == twin and len(mine) > 20       # measured and simulated: the same ops, per rank
