"""nccl-tests output in every layout of docs/sources.md §5 -> profile tables; broken files name the line."""
import os

import pytest

from tpsim.calib.imports import parse_nccl_tests, read_nccl_tests
from tpsim.sim.hardware.profile import parse

FIX = os.path.join(os.path.dirname(__file__), "fixtures", "nccl_tests")


def path(name):
    return os.path.join(FIX, name)


@pytest.mark.parametrize("name, group, layout, mode, first, last, n", [
    ("ar_v2_13.txt", 4, "text>=2.13", "eager", (8, 12.31), (1048576, 41.50), 10),
    ("ar_v2_12.txt", 8, "text<=2.12", "eager", (8, 33.70), (8192, 38.10), 11),
    ("ar_interval.txt", 2, "text>=2.13", "graph", (1024, 6.10), (65536, 8.80), 4),
    ("ar_mpi.txt", 4, "text>=2.13", "eager", (8, 25.10), (4096, 29.90), 4),
    ("ar.json", 8, "json", "eager", (1024, 19.35), (1048576, 32.40), 4),
])
def test_each_layout(name, group, layout, mode, first, last, n):
    t = read_nccl_tests(path(name))
    assert (t.group, t.layout, t.mode, len(t.bytes)) == (group, layout, mode, n)
    assert (t.bytes[0], t.time_us[0]) == first          # out-of-place time, not in-place
    assert (t.bytes[-1], t.time_us[-1]) == last
    assert list(t.bytes) == sorted(t.bytes)


def test_table_loads_into_a_profile():
    t = read_nccl_tests(path("ar_v2_13.txt")).to_table(impl="nccl")
    prof = {"format": "tpsim-profile", "version": 1, "name": "x", "gpus_per_node": 8, "memory_gib": 80,
            "compute": {"matmul_tflops": {"fp16": 1.0}, "memory_gbps": 1.0,
                        "gemm_efficiency": {"flops": [1], "efficiency": [1], "source": "t"},
                        "memory_efficiency": {"bytes": [1], "efficiency": [1], "source": "t"},
                        "launch_us": {"eager": 1, "graph": 1}},
            "collectives": {"tables": [t], "model": {"node": {"ll": {"base_us": 1, "hop_us": 1, "busbw_gbps": 1,
                                                                      "source": "t"}}}},
            "overlap": {"compute_slowdown": 1, "comm_slowdown": 1}}
    p = parse(prof)
    assert p.collective_tables[0].group == 4 and p.collective_tables[0].time_s[0] == pytest.approx(12.31e-6)


def test_group_parameter_and_headerless_rows():
    rows = ("   8   2  float  sum  -1  10.0  0.0  0.0  0  9.9  0.0  0.0  0\n"
            "  64  16  float  sum  -1  11.0  0.0  0.0  0  10.9  0.0  0.0  0\n")
    t = parse_nccl_tests(rows, "grep.txt", group=2)
    assert t.bytes == (8, 64) and t.time_us == (10.0, 11.0) and t.group == 2
    with pytest.raises(ValueError, match="give the group size"):
        parse_nccl_tests(rows, "grep.txt")


@pytest.mark.parametrize("name, line, what", [
    ("broken_truncated.txt", 14, "has 7 columns"),
    ("broken_time.txt", 18, "cannot read"),
    ("broken_record.json", 17, "out_of_place.time"),
    ("broken_syntax.json", 13, "not valid JSON"),
])
def test_broken_files_name_file_and_line(name, line, what):
    with pytest.raises(ValueError) as e:
        read_nccl_tests(path(name))
    msg = str(e.value)
    assert name in msg and f"line {line}:" in msg and what in msg


def test_wrong_results_and_empty_files_rejected():
    bad = "#  Rank  0 Group 0\n  8  2  float  sum  -1  10.0  0.0  0.0  3  9.9  0.0  0.0  0\n"
    with pytest.raises(ValueError, match="line 2: nccl-tests reports 3 wrong"):
        parse_nccl_tests(bad, "w.txt")
    with pytest.raises(ValueError, match="no nccl-tests data rows"):
        parse_nccl_tests("# nothing here\n", "e.txt")
