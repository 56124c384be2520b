"""Issue 48 item 3 and the bounds of every file tpsim reads: a stack file's `extends` and values of the
wrong type, host terms past the bounds table's span (sim/bounds.py SECONDS), a sweep checkpoint whose
rows are not its point's, an engine benchmark's and an nccl-tests file's numbers. Each repro through
the real CLI (CliRunner) or the reader: one line naming the file and the field, exit 2, or the
intended result. Pure Python: no torch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.commands import sweep_grid as sw
from tpsim.sim.grid import Point

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
PREDICT = ["predict", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "8"]


def one_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def stack_file(tmp_path, **doc) -> Path:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm", **doc}))
    return p


# ------------------------------------------------------------------ stack files

@pytest.mark.parametrize("extends", [[1], {}, 5, None])
def test_extends_of_the_wrong_type_is_one_line(tmp_path, extends):
    """Before: [1] and {} were a TypeError (unhashable) in the preset lookup."""
    line = one_line_exit_2(CliRunner().invoke(cli.main, [*PREDICT, "--stack", str(stack_file(tmp_path, extends=extends))]))
    assert f"s.json: 'extends' must be a preset name or a stack file path, got {json.loads(json.dumps(extends))!r}" in line


@pytest.mark.parametrize("value, says", [
    (1e308, "got 1e+308"),                 # was a ZeroDivisionError in predict (tokens/s 0 / 0)
    (9.2e18, "got 9.2e+18"),               # was accepted
    (61.0, "got 61"),
    (-1e-6, "got -1e-06"),
    ("0.1", "must be a finite number of seconds in 0..60, got '0.1'"),
])
def test_host_terms_are_held_to_the_bounds_table(tmp_path, value, says):
    line = one_line_exit_2(CliRunner().invoke(cli.main, [*PREDICT, "--stack",
                                                         str(stack_file(tmp_path, host={"schedule_s": value}))]))
    assert "s.json: host.schedule_s must be" in line and "0..60" in line and says in line, line


def test_host_term_at_the_bound_prices(tmp_path):
    r = CliRunner().invoke(cli.main, [*PREDICT, "--stack", str(stack_file(tmp_path, host={"schedule_s": 60.0})),
                                      "--json"])
    assert r.exit_code == 0, r.output
    assert all(s["tokens_per_s"] > 0 for s in json.loads(r.output)["schedules"])


@pytest.mark.parametrize("stack, says", [
    ({"compile_prefill": "no"}, "compile_prefill must be true or false, got 'no'"),    # was read as true
    ({"expand_gqa": None}, "expand_gqa must be true or false, got None"),               # was a TypeError
    ({"attention_archs": 5}, "attention_archs must be a list of architecture names"),   # was a TypeError
    ({"attention_prep_kernels": True}, "attention_prep_kernels must be an integer"),
    ({"collective": 5}, "collective must be a string, got 5"),
])
def test_stack_values_of_the_wrong_type_name_the_file(tmp_path, stack, says):
    line = one_line_exit_2(CliRunner().invoke(cli.main, [*PREDICT, "--stack", str(stack_file(tmp_path, stack=stack))]))
    assert f"s.json: {says}" in line, line


@pytest.mark.parametrize("doc, says", [
    ({"name": 5}, "'name' must be a string, got 5"),
    ({"engine": ["x"]}, "'engine' must be a string"),
    ({"sources": {"host.handoff_s": 1}}, "sources.host.handoff_s must be a string"),
])
def test_stack_file_text_fields_are_strings(tmp_path, doc, says):
    line = one_line_exit_2(CliRunner().invoke(cli.main, [*PREDICT, "--stack", str(stack_file(tmp_path, **doc))]))
    assert says in line, line


# ------------------------------------------------------------------ sweep checkpoints

POINTS = [Point("tiny", 2, 1, 8, 4), Point("tiny", 2, 2, 8, 4)]
SCHEDS = ("standard", "ladder")


def _checkpoint(tmp_path) -> tuple[Path, list[dict], list[str]]:
    ck = tmp_path / "s.csv.partial.jsonl"
    fresh = sw.sweep(POINTS, SCHEDS, checkpoint=ck)
    return ck, fresh, [json.loads(x)["key"] for x in ck.read_text().splitlines()]


def _bad_rows(fresh: list[dict]) -> list:
    first = [r for r in fresh if r["batch"] == 1]
    other = [r for r in fresh if r["batch"] == 2]
    return ["garbage", 5, None, [{"foo": 1}], [],                      # a traceback in to_csv; [] dropped the point
            [dict(r, decode_s=float("nan")) for r in first],           # NaN copied into the result
            [dict(r, prefill_s=-1.0) for r in first],                  # a negative time copied
            other,                                                      # another point's rows copied
            [dict(r, model="llama-3.1-8b") for r in first],            # another model's
            first[:1],                                                  # a schedule missing
            [dict(r, tokens_per_s="fast") for r in first],
            [dict(r, tp=2.0) for r in first]]


def test_a_resumed_point_is_checked_against_its_point(tmp_path):
    """Issue 48 item 3: rows of the wrong type crashed to_csv, `rows: []` dropped the point, NaN,
    negative and another point's rows were copied into the result. Now each such point is computed
    again and said so (`discarded`); the result equals a fresh sweep's."""
    ck, fresh, keys = _checkpoint(tmp_path)
    good = ck.read_text().splitlines()
    for bad in _bad_rows(fresh):
        ck.write_text(json.dumps({"key": keys[0], "rows": bad}, allow_nan=True) + "\n" + good[1] + "\n")
        discarded: list[str] = []
        rows = sw.sweep(POINTS, SCHEDS, checkpoint=ck, discarded=discarded)
        assert rows == fresh, bad
        assert discarded == ([keys[0]] if isinstance(bad, list) and all(isinstance(r, dict) for r in bad) else []), bad
        sw.to_csv(rows)


def test_an_intact_checkpoint_is_reused_row_for_row(tmp_path):
    ck, fresh, keys = _checkpoint(tmp_path)
    marked = [dict(r, stack="marked") for r in fresh]          # a valid row, told apart from a recomputed one
    ck.write_text("".join(json.dumps({"key": k, "rows": [r for r in marked if r["batch"] == p.batch]}) + "\n"
                          for k, p in zip(keys, POINTS)))
    discarded: list[str] = []
    assert sw.sweep(POINTS, SCHEDS, checkpoint=ck, discarded=discarded) == marked and not discarded


def test_the_sweep_command_says_it_recomputed_a_bad_point(tmp_path):
    out = tmp_path / "s.csv"
    args = ["sweep", "--model", "tiny", "--tp", "2", "--batch", "1", "--prompt", "8", "--gen", "4",
            "--schedule", "ladder", "--out", str(out)]
    assert CliRunner().invoke(cli.main, args).exit_code == 0
    fresh = out.read_text()
    key = sw.point_key(Point("tiny", 2, 1, 8, 4), SCHEDS, {}, sw.input_digest("h100-sxm"))
    Path(f"{out}.partial.jsonl").write_text(json.dumps({"key": key, "rows": []}) + "\n")
    r = CliRunner().invoke(cli.main, args)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "1 checkpointed point(s)" in r.output and out.read_text() == fresh


# ------------------------------------------------------------------ engine benchmarks, nccl-tests

def _engine(tmp_path, latency) -> list[str]:
    doc = json.loads((FIX / "engine_bench" / "vllm_latency_tp2.json").read_text())
    doc["avg_latency"] = latency
    (tmp_path / "b.json").write_text(json.dumps(doc))
    return ["profiles", "import-engine-bench", f"{tmp_path / 'b.json'}:tp=2",
            f"{FIX / 'engine_bench' / 'vllm_latency_tp4.json'}:tp=4", "--model", "llama-3.1-70b",
            "--out", str(tmp_path / "o.json")]


@pytest.mark.parametrize("latency, says", [(1e300, "avg_latency must be a number of seconds in 1e-09..86400"),
                                           (0, "avg_latency must be a number of seconds in 1e-09..86400"),
                                           ("3.8", "avg_latency must be a finite number of seconds")])
def test_engine_benchmark_latencies_are_bounded(tmp_path, latency, says):
    line = one_line_exit_2(CliRunner().invoke(cli.main, _engine(tmp_path, latency)))
    assert f"b.json: {says}" in line, line


def test_engine_benchmark_json_is_read_by_the_input_policy(tmp_path):
    """A 5,000-digit number was Python's int-conversion message naming no file; a string where an
    object goes was an AttributeError."""
    args = _engine(tmp_path, 1.0)
    (tmp_path / "b.json").write_text('{"avg_latency": 1' + "0" * 5000 + ', "latencies": [1]}')
    assert "b.json line 1: integer 1000" in one_line_exit_2(CliRunner().invoke(cli.main, args))
    (tmp_path / "b.json").write_text(json.dumps([{"benchmark": "x", "metric": {"name": "latency"}}]))
    line = one_line_exit_2(CliRunner().invoke(cli.main, args))
    assert "b.json: 'benchmark' must be an object, got 'x'" in line, line


def test_a_5000_digit_spec_value_names_the_file_and_key(tmp_path):
    """Before: 'Exceeds the limit (4300 digits) for integer string conversion ...', the spec echoed whole."""
    args = _engine(tmp_path, 3.8)
    args[2] = f"{tmp_path / 'b.json'}:tp={'9' * 5000}"
    line = one_line_exit_2(CliRunner().invoke(cli.main, args))
    assert line == f"Error: {tmp_path / 'b.json'}: tp must be a count of at most 19 digits, got one of 5000 digits"


def test_a_5000_digit_nccl_tests_time_is_not_echoed_whole(tmp_path):
    lines = (FIX / "nccl_tests" / "ar_v2_13.txt").read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if x.strip() and x.split()[0].isdigit())
    toks = lines[i].split()
    for value, says in (("9" * 5000, "got inf"), ("1e300", "(no kernel or collective")):
        toks[5] = value
        (tmp_path / "a.txt").write_text("\n".join(lines[:i] + ["  ".join(toks)] + lines[i + 1:]))
        for args in (["profiles", "import-nccl-tests", str(tmp_path / "a.txt"), "--out", str(tmp_path / "o.json")],
                     ["collective", "--group", "4", "--compare", str(tmp_path / "a.txt")]):
            line = one_line_exit_2(CliRunner().invoke(cli.main, args))
            assert f"a.txt line {i + 1}: time must be" in line and says in line and len(line) < 300, line
