"""`tpsim collective`: prices, paths, --compare against nccl-tests output, and its errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.commands.collective_table import busbw_factor, collective_rows, parse_size
from tpsim.sim.hardware.profile import load_profile

FIX = Path(__file__).parent / "fixtures" / "nccl_tests"


def run(*args):
    return CliRunner().invoke(main, ["collective", *args])


def as_json(*args):
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_json_rows_priced_from_the_shm_mechanism():
    """h100-sxm-p2p-off, 4 ranks (one socket: one NCCL node), 8 B: NCCL's tuner picks Ring LL (its PCI
    constants: 6.6 + 6 x 1.0 < NVLS 25 us), and the ring pays 6 SHM steps of 3.54 us: 6.6 + 21.24 +
    offset (-0.92) = 26.92 us; a compiled graph step adds NCCL's graph-mixing record node (1.31 us, as
    h100-sxm: independent of the transport) and no copy (graph_extra_us 0: Inductor writes the GEMM's
    output where the in-place all_reduce_ reduces it, hw/inductor_overlap.all_reduce_producers)."""
    bare = as_json("--profile", "h100-sxm-p2p-off", "--group", "4", "--bytes", "8", "--mode", "nccl")
    assert set(bare) == {"profile", "collective", "group", "mode", "rows", "nccl"}
    assert (bare["profile"], bare["collective"], bare["group"], bare["mode"]) == \
        ("h100-sxm-p2p-off", "all_reduce", 4, "nccl")
    assert bare["nccl"]["nnodes"] == 1 and bare["nccl"]["picks"] == ["ring/ll"]
    (row,) = bare["rows"]
    assert set(row) == {"bytes", "time_us", "busbw_gbps", "path"}
    assert row["path"] == "topology:ring/ll"
    assert row["time_us"] == pytest.approx(6.6 + 6 * 3.54 - 0.92, abs=0.01)
    # busbw = bytes / time * 2(n-1)/n, in GB/s
    assert row["busbw_gbps"] == pytest.approx(round(8 / (row["time_us"] * 1e-6) / 1e9 * 6 / 4, 3), abs=1e-3)
    (g,) = as_json("--profile", "h100-sxm-p2p-off", "--group", "4", "--bytes", "8")["rows"]
    assert g["path"] == "topology:ring/ll+graph_nccl_node"
    assert g["time_us"] == pytest.approx(row["time_us"] + 1.31, abs=0.01)
    # P2P on: no NCCL-node line (every box is one NCCL node)
    assert "nccl" not in as_json("--group", "8", "--bytes", "8", "--mode", "nccl")


def test_p2p_off_tp8_shows_two_nccl_nodes_and_the_pick():
    """h100-sxm-p2p-off TP8: two 4-GPU NCCL nodes (cross-socket pairs over NET/IB), so NVLS is off;
    at 8 B the tuner picks Tree LL (tuner 6.8 + 2 x (3 x 1.0 + 1 x 5.0) = 22.8 us < Ring LL
    6.6 + 10 x 1.0 + 4 x 2.7 = 27.4), which really costs 6.8 + 2 x (3 x 3.54 + 5.0) - 0.92 = 37.12 us."""
    out = as_json("--profile", "h100-sxm-p2p-off", "--group", "8", "--bytes", "8", "--mode", "nccl")
    assert out["nccl"]["nnodes"] == 2 and out["nccl"]["ranks_per_node"] == [4, 4]
    assert out["nccl"]["picks"] == ["tree/ll"] and "NET/IB" in out["nccl"]["why"]
    assert out["rows"][0]["time_us"] == pytest.approx(6.8 + 2 * (3 * 3.54 + 5.0) - 0.92, abs=0.01)
    r = run("--profile", "h100-sxm-p2p-off", "--group", "8", "--bytes", "8", "--mode", "nccl")
    assert r.exit_code == 0 and "NCCL nNodes 2" in r.output and "tree/ll" in r.output
    flat = " ".join(r.output.split())                            # the title may wrap in a narrow console
    assert "8 ranks (1 node; NCCL sees 2)" in flat               # the title says the box and NCCL's split
    r4 = run("--profile", "h100-sxm-p2p-off", "--group", "4", "--bytes", "8", "--mode", "nccl")
    assert "4 ranks (1 node)" in " ".join(r4.output.split()) and "NCCL sees" not in r4.output     # one socket: one NCCL node


def test_table_path_and_size_units():
    """A measured size reads the table; beyond its largest size the derived bandwidth extends it;
    eager without an eager table adds eager_extra (4.42 us on h100-sxm) to the graph table."""
    prof = load_profile("h100-sxm")
    t4 = next(t for t in prof.collective_tables if (t.collective, t.group, t.mode, t.impl) ==
              ("all_reduce", 4, "graph", "nccl"))
    rows = as_json("--group", "4", "--mode", "nccl", "--bytes", str(int(t4.bytes[2])), "--bytes", "1G")["rows"]
    assert rows[0]["path"] == "table" and rows[0]["time_us"] == pytest.approx(t4.time_s[2] * 1e6, abs=1e-3)
    assert rows[1]["bytes"] == 1 << 30 and rows[1]["path"] == "table>derived"
    (e,) = as_json("--group", "4", "--mode", "eager", "--bytes", str(int(t4.bytes[2])))["rows"]
    assert e["path"] == "table(graph)+eager_extra"
    assert e["time_us"] == pytest.approx(t4.time_s[2] * 1e6 + 4.42, abs=1e-3)
    assert parse_size("16K") == 16384 and parse_size("1M") == 1 << 20 and parse_size("4096") == 4096
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)


def test_cross_node_group_and_table_output():
    r = run("--group", "16", "--bytes", "16K")
    assert r.exit_code == 0, r.output
    assert "2 nodes" in r.output and "node-correction(g8)" in r.output
    # 4 GPUs per node: the same 8 ranks span two nodes and cost more than one node of 8
    one = as_json("--group", "8", "--bytes", "16K", "--mode", "nccl")["rows"][0]["time_us"]
    two = as_json("--group", "8", "--bytes", "16K", "--mode", "nccl", "--gpus-per-node", "4")["rows"][0]["time_us"]
    assert two > one


def test_compare_adds_measured_time_and_error(tmp_path):
    """ar_v2_13.txt: 4 ranks of H100, out-of-place times 12.31 ... 41.50 us at 8 B ... 1 MiB."""
    out = as_json("--group", "4", "--mode", "nccl", "--compare", str(FIX / "ar_v2_13.txt"))
    rows = out["rows"]
    assert [r["bytes"] for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 1048576]
    assert rows[0]["measured_us"] == 12.31 and rows[-1]["measured_us"] == 41.50
    for r in rows:
        assert r["error_pct"] == pytest.approx(100 * (r["time_us"] - r["measured_us"]) / r["measured_us"], abs=0.01)
    errs = sorted(abs(r["error_pct"]) for r in rows)
    assert out["compare"]["median_abs_error_pct"] == pytest.approx((errs[4] + errs[5]) / 2, abs=0.01)
    # the table form names the sizes the file lacks with '-'
    r = run("--group", "4", "--mode", "nccl", "--compare", str(FIX / "ar_v2_13.txt"), "--bytes", "8", "--bytes", "3M")
    assert r.exit_code == 0 and "median |error| over 1 sizes" in r.output


@pytest.mark.parametrize("args, msg", [
    (("--group", "8", "--op", "all_to_all"), "Invalid value for '--op'"),
    (("--group", "1"), "group (--group) must be at least 2 ranks"),
    (("--group", "8", "--impl", "bogus"), "has no collective implementation 'bogus' (--impl)"),    # was: priced as nccl
    (("--group", "8", "--impl", "trtllm-auto", "--hidden", "-1"), "--hidden must be in 1.."),      # was: a negative shape
    (("--group", "8", "--impl", "trtllm-auto", "--hidden", "0"), "--hidden must be in 1.."),       # was: silently 4096
    (("--group", "16", "--profile", "h100-sxm", "--gpus-per-node", "9"), "--gpus-per-node must be 1..8"),
    (("--group", "8", "--bytes", "12Q"), "size must be a positive number of bytes"),
    (("--group", "8", "--profile", "no-such-profile"), "no-such-profile"),
    (("--group", "8", "--compare", str(FIX / "ar_v2_13.txt")), "measured over 4 ranks, but --group is 8"),
    (("--group", "4", "--compare", str(FIX / "broken_truncated.txt")), "broken_truncated.txt line"),
    (("--group", "4", "--compare", str(FIX / "broken_syntax.json")), "not valid JSON"),
    (("--group", "4", "--compare", "/nonexistent/ar.txt"), "cannot read nccl-tests output"),
])
def test_errors_are_one_line_exit_2(args, msg):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert msg in r.output and "Traceback" not in r.output


def test_group_spanning_nodes_needs_a_network(no_nic_profile):
    with pytest.raises(ValueError, match="describes no network"):
        collective_rows(load_profile(no_nic_profile), "all_reduce", 16, "graph", (1024,))
    r = run("--profile", no_nic_profile, "--group", "16")
    assert r.exit_code == 2 and "describes no network" in r.output


def test_runs_without_torch(tmp_path):
    """torch made unimportable: the command still prices (sim + calib.imports are pure Python)."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from tpsim.cli import main\n"
            "main(['collective', '--group', '8', '--bytes', '16K', '--json'])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"][0]["bytes"] == 16384


def test_dtype_decides_whether_symmetric_memory_takes_the_message():
    """vLLM at 8 ranks on h100-sxm, 1 MiB (above custom AR's 256 KiB SM90 max): bf16 (the default, what
    the engines serve in) goes to SymmMemCommunicator's multimem; fp16 falls back to NCCL and says why."""
    bf16 = as_json("--group", "8", "--bytes", "1M", "--impl", "vllm-custom")
    assert bf16["rows"][0]["path"] == "vllm-custom:multimem"
    fp16 = run("--group", "8", "--bytes", "1M", "--impl", "vllm-custom", "--dtype", "fp16")
    assert fp16.exit_code == 0 and "(NCCL for vllm-custom)" in fp16.output
    assert "symmetric memory takes bf16 only" in fp16.output


def test_compare_reads_a_multi_run_file_as_import_does():
    """Issue 48 item 7: `collective --compare` refused the README's own two-run nccl-tests file (8 then 16
    A100s), which `import-nccl-tests` accepts; each run compares at its own --group."""
    f = FIX / "oci_a100_8_then_16.txt"
    for g in (8, 16):
        out = as_json("--profile", "a100-sxm", "--mode", "nccl", "--group", str(g), "--compare", str(f))
        assert out["group"] == g and len(out["rows"]) == 28 and all(r["measured_us"] for r in out["rows"])
    r = CliRunner().invoke(main, ["collective", "--group", "4", "--compare", str(f)])
    assert r.exit_code == 2 and r.output.strip() == (f"Error: {f} was measured over 8 ranks (run at line 2) and 16 "
                                                     f"ranks (run at line 50), but --group is 4")
