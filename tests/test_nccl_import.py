"""`tpsim profiles import-nccl-tests` on nccl-tests outputs of every layout calib.imports reads:
one table per (collective, group, mode), multi-run logs split, broken input named by file and line."""
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.hardware.profile import load_profile

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "nccl_tests")
ROOT = Path(__file__).resolve().parent.parent


def fx(name):
    return os.path.join(FIX, name)


def run(*args):
    return CliRunner().invoke(main, ["profiles", "import-nccl-tests", *args])


def tables(path):
    """The profile's tables by key; the first of a key wins, as in the simulator (imports precede the base's)."""
    out = {}
    for t in load_profile(str(path)).collective_tables:
        out.setdefault((t.collective, t.group, t.mode, t.impl, t.scope), t)
    return out


@pytest.mark.parametrize("name, key, n, first_us", [
    ("ar_v2_13.txt", ("all_reduce", 4, "eager"), 10, 12.31),      # text >= 2.13, H100 -> h100-sxm
    ("ar_v2_12.txt", ("all_reduce", 8, "eager"), 11, 33.70),      # text <= 2.12, A100 -> a100-sxm
    ("ar_interval.txt", ("all_reduce", 2, "graph"), 4, 6.10),     # -I 1 columns, graph: 1 header
    ("ar_mpi.txt", ("all_reduce", 4, "eager"), 4, 25.10),         # mpirun prefixes + NCCL INFO lines
])
def test_each_text_layout_imports_and_predicts(tmp_path, name, key, n, first_us):
    out = tmp_path / "p.json"
    r = run(fx(name), "--out", str(out))
    assert r.exit_code == 0, r.output
    t = [t for k, t in tables(out).items() if k[:3] == key and k[3] == "nccl"][0]
    assert len(t.bytes) == n and t.time_s[0] == pytest.approx(first_us * 1e-6)
    raw = json.loads(out.read_text())
    assert len(raw["collectives"]["tables"]) == 1 and raw["extends"] in ("h100-sxm", "a100-sxm", "h200-sxm")
    r = CliRunner().invoke(main, ["predict", "--model", "toy-512", "--tp", str(key[1]), "--profile", str(out),
                                  "--gen", "4", "--prompt", "16", "--json"])
    assert r.exit_code == 0, r.output


def test_json_needs_a_base_and_the_table_prices_the_collective(tmp_path):
    out = tmp_path / "j.json"
    r = run(fx("ar.json"), "--out", str(out))          # -J output names no GPU
    assert r.exit_code == 2 and "give --extends BASE" in r.output
    r = run(fx("ar.json"), "--out", str(out), "--extends", "h100-sxm", "--impl", "mine", "--name", "lab")
    assert r.exit_code == 0, r.output
    p = load_profile(str(out))
    assert p.name == "lab"
    from tpsim.sim.price.cost import CostModel
    from tpsim.sim.stack.spec import Stack
    cm = CostModel(p, Stack(collective="mine"))
    # an exact measured size: the table's out-of-place time (262144 B -> 24.80 us)
    assert cm.collective_s("all_reduce", 262144, 8, "eager") == pytest.approx(24.80e-6)


def test_several_files_and_flags(tmp_path):
    out = tmp_path / "m.json"
    r = run(fx("ar_v2_13.txt"), fx("ar_interval.txt"), "--out", str(out), "--extends", "h200-sxm",
            "--mode", "graph")                           # the flag overrides the files' graph: 0 / 1
    assert r.exit_code == 0, r.output
    assert {k[:3] for k in tables(out)} >= {("all_reduce", 4, "graph"), ("all_reduce", 2, "graph")}
    # an all_gather run's rows carry redop none (an all_reduce's, sum: refused as all_gather below)
    ag = tmp_path / "ag.txt"
    ag.write_text(open(fx("ar_v2_13.txt")).read().replace("     sum  ", "    none  "))
    r = run(str(ag), "--out", str(out), "--extends", "h100-sxm", "--group", "2", "--collective", "all_gather")
    raw = json.loads(out.read_text())["collectives"]["tables"]
    assert r.exit_code == 0 and [(t["collective"], t["group"]) for t in raw] == [("all_gather", 2)]
    r = run(fx("ar_v2_13.txt"), "--out", str(tmp_path / "x.json"), "--extends", "h100-sxm", "--collective", "all_gather")
    assert r.exit_code == 2 and "its rows' redop is 'sum', so it measured a reduction, not all_gather" in r.output


def test_multi_run_log_is_split_by_header_never_merged(tmp_path):
    out = tmp_path / "multi.json"
    r = run(fx("ar_multi_run.txt"), "--out", str(out))
    assert r.exit_code == 0, r.output
    raw = json.loads(out.read_text())["collectives"]["tables"]
    assert [(t["group"], t["mode"], len(t["bytes"])) for t in raw] == [(2, "graph", 4), (4, "eager", 10)]
    assert raw[0]["time_us"][0] == 6.10 and raw[1]["time_us"][0] == 12.31
    assert "run at line 17" in raw[1]["source"]


def test_same_measurement_twice_is_refused(tmp_path):
    r = run(fx("ar_v2_12.txt"), fx("ar.json"), "--out", str(tmp_path / "x.json"), "--extends", "a100-sxm")
    assert r.exit_code == 2 and "both measure all_reduce over 8 ranks (eager)" in r.output


@pytest.mark.parametrize("name, where", [
    ("broken_time.txt", "broken_time.txt line 18: cannot read size/count/time"),
    ("broken_truncated.txt", "broken_truncated.txt line 14: data row has 7 columns"),
    ("broken_syntax.json", "broken_syntax.json line 13: not valid JSON"),
    ("broken_multi_run.txt", "broken_multi_run.txt line 9: a new run starts before the run at line 1"),
])
def test_malformed_input_one_line_exit_2_nothing_written(tmp_path, name, where):
    out = tmp_path / "bad.json"
    r = run(fx(name), "--out", str(out), "--extends", "h100-sxm")
    assert r.exit_code == 2 and where in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert not out.exists() and os.listdir(tmp_path) == []


def test_missing_rank_lines_point_at_the_real_flag(tmp_path):
    src = tmp_path / "norank.txt"
    src.write_text("\n".join(l for l in open(fx("ar_v2_13.txt")).read().splitlines() if "Rank" not in l))
    r = run(str(src), "--out", str(tmp_path / "o.json"), "--extends", "h100-sxm")
    assert r.exit_code == 2 and "tpsim profiles import-nccl-tests --group N" in r.output
    assert run(str(src), "--out", str(tmp_path / "o.json"), "--extends", "h100-sxm", "--group", "4").exit_code == 0


def test_real_log_of_two_runs_one_node_then_two(tmp_path):
    """A public log (oracle-japan/ocitutorials, 'GPUクラスタを構築する': all_reduce_perf on 8 A100s
    of one BM.GPU4.8 node, then over 16 GPUs of two nodes via mpirun), the two outputs one after
    the other with the commands and ssh chatter between them, as a terminal log holds them."""
    out = tmp_path / "oci.json"
    r = run(fx("oci_a100_8_then_16.txt"), "--out", str(out))
    assert r.exit_code == 0, r.output
    raw = json.loads(out.read_text())
    assert raw["extends"] == "a100-sxm"                   # A100-SXM4-40GB in the rank lines
    t8, t16 = raw["collectives"]["tables"]
    assert (t8["group"], t8["scope"], len(t8["bytes"])) == (8, "node", 28)
    assert (t16["group"], t16["scope"], len(t16["bytes"])) == (16, "net", 28)    # 2 nodes of 8
    assert (t8["time_us"][0], t8["time_us"][-1], t16["time_us"][0], t16["time_us"][-1]) == (32.01, 63929, 38.75, 225083)
    assert "run at line 50" in t16["source"]
    from tpsim.sim.price.cost import CostModel
    from tpsim.sim.stack.spec import Stack
    cm = CostModel(load_profile(str(out)), Stack())
    # TP16 on an 8-GPU-per-node profile is a 'net' group: the 16-rank run prices it
    assert cm.collective_s("all_reduce", 1048576, 16, "eager") == pytest.approx(136.1e-6)
    assert cm.collective_s("all_reduce", 1048576, 8, "eager") == pytest.approx(76.71e-6)


def test_collective_from_the_file_name_and_pcie_boards_need_a_base(tmp_path):
    src = open(fx("ar_v2_13.txt")).read()
    (tmp_path / "all_gather_perf_4gpu.log").write_text(src.replace("     sum  ", "    none  "))   # all_gather's rows
    r = run(str(tmp_path / "all_gather_perf_4gpu.log"), "--out", str(tmp_path / "ag.json"))
    assert r.exit_code == 0, r.output
    raw = json.loads((tmp_path / "ag.json").read_text())["collectives"]["tables"]
    assert [(t["collective"], t["group"]) for t in raw] == [("all_gather", 4)]
    (tmp_path / "pcie.txt").write_text(src.replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"))
    r = run(str(tmp_path / "pcie.txt"), "--out", str(tmp_path / "p.json"))
    assert r.exit_code == 2 and "no GPU with a built-in profile (NVIDIA H100 PCIe)" in r.output


def _one_error(r) -> str:
    """The run failed with exit 2 and one `Error:` line (no traceback)."""
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
    return lines[0]


@pytest.mark.parametrize("impl", ["a b", "auto", "x\x1b[2J", "-nccl"])
def test_impl_must_be_a_table_tag_as_calibrate_says(tmp_path, impl):
    if "\x1b" in impl:          # refused sooner, as every argument holding a control character (issue 48)
        line = _one_error(run(fx("ar_v2_13.txt"), "--impl", impl, "--out", str(tmp_path / "p.json")))
        assert "('x\\x1b[2J') holds a control character" in line and not (tmp_path / "p.json").exists()
        return
    """Before: `--impl 'a b'` was written into the profile, while calibrate refused it (one rule now)."""
    line = _one_error(run(fx("ar_v2_13.txt"), "--impl", impl, "--out", str(tmp_path / "p.json")))
    assert "--impl must be a table tag" in line and repr(impl) in line
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("option", ["--impl", "--extends", "--name"])
def test_an_empty_value_is_refused_as_every_command_refuses_it(tmp_path, option):
    """`--extends ""` and `--name ""` read as "not given" (the GPU's base profile, the file's stem);
    an empty value is refused by the callback every free-text option runs (commands.options.not_empty)."""
    line = _one_error(run(fx("ar_v2_13.txt"), option, "", "--out", str(tmp_path / "p.json")))
    assert line == f"Error: Invalid value for '{option}': must not be empty"
    assert not (tmp_path / "p.json").exists()


def test_a_non_utf8_byte_is_refused_with_its_offset(tmp_path):
    """Before: a stray 0xff was replaced and the file imported, though inputs must be UTF-8 text."""
    text = open(fx("ar_v2_13.txt"), "rb").read()
    bad = tmp_path / "ar.txt"
    bad.write_bytes(text + b"\xff\n")
    line = _one_error(run(str(bad), "--out", str(tmp_path / "p.json")))
    assert f"nccl-tests output {bad}: not UTF-8 text (byte 0xff at offset {len(text)})" in line


def test_a_file_that_is_not_nccl_tests_output_says_so(tmp_path):
    """Before: 3000 random bytes said 'JSON follows the text output'; text with no nccl-tests header
    or rows is now named as not an nccl-tests output."""
    rnd = tmp_path / "rnd.txt"
    rnd.write_bytes(bytes(range(256)) * 12)
    assert "not UTF-8 text" in _one_error(run(str(rnd), "--out", str(tmp_path / "p.json")))
    for text in ("hello\n{\"a\": 1}\n", "# just a comment\nsome words\n"):
        other = tmp_path / "other.txt"
        other.write_text(text)
        line = _one_error(run(str(other), "--out", str(tmp_path / "p.json")))
        assert f"{other}: not an nccl-tests output" in line and "JSON follows" not in line
    assert not (tmp_path / "p.json").exists()


def test_a_file_of_another_collective_is_refused_by_its_test_name(tmp_path):
    """nccl-tests names its binary (`# Collective test starting: all_reduce_perf`): that file priced as
    all_gather (`collective --op all_gather --compare`, `--collective all_gather`) compared unlike with like."""
    raw = ROOT / "bench" / "data" / "raw" / "ncb-4xh100-all_reduce.txt"
    r = run(str(raw), "--out", str(tmp_path / "x.json"), "--extends", "h100-sxm", "--collective", "all_gather")
    assert r.exit_code == 2 and "line 4: this is all_reduce_perf output, not all_gather's" in r.output
    r = CliRunner().invoke(main, ["collective", "--group", "4", "--op", "all_gather", "--mode", "nccl",
                                  "--compare", str(raw)])
    assert r.exit_code == 2 and "(--op all_reduce)" in r.output
