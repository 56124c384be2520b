"""Harness and CLI edges of issue #29 item 9: each bad value is one line and exit 2 before any
work, from the one bounds table (sim/bounds.py, through commands.bounds.OPTION_BOUNDS); and the launcher's heartbeat reading
(hw.dist) on real beat files (docs/reliability.md)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.sim.bounds import BOUNDS
from tpsim.commands.bounds import OPTION_BOUNDS, check_bounds, check_sizes

ROOT = Path(__file__).resolve().parent.parent


def one_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def test_one_bounds_table_for_every_command():
    """check_sizes (predict, trace, sweep) and the harness's checks read the same table."""
    from tpsim.commands import bench as commands
    assert not hasattr(commands, "MAX_PROMPT")                 # the second copy of the bounds is gone
    for option, name in OPTION_BOUNDS.items():
        lo, hi = BOUNDS[name].lo, BOUNDS[name].hi
        check_bounds({option: lo})
        check_bounds({option: [lo, hi]})
        for bad in (lo - 1, hi + 1):
            with pytest.raises(ValueError, match=f"^{option} must be in {lo}..{hi}, got {bad}$"):
                check_bounds({option: (lo, bad)})
    with pytest.raises(ValueError, match="--tp must be in 1..1024, got 2000"):
        check_sizes(tp=2000)
    with pytest.raises(ValueError, match="--seed must be in"):
        check_bounds({"--seed": True})                          # a bool is not a count


@pytest.mark.parametrize("args, says", [
    (["predict", "--model", "tiny", "--tp", "2", "--schedule", "upper-bound:"], "ends in ':' with no argument"),
    (["predict", "--model", "tiny", "--tp", "2", "--schedule", "ladder:"], "ends in ':' with no argument"),
    (["predict", "--model", "tiny", "--tp", "2", "--exact", "--exhaustive"], "choose one"),   # was a KeyError
    (["sweep", "--model", "tiny", "--tp", "0", "--out", "s.csv"], "--tp must be in 1..1024, got 0"),
    (["sweep", "--model", "tiny", "--tp", "2", "--jobs", "0", "--out", "s.csv"], "--jobs must be in 1..1024"),
])
def test_simulator_edges_refused(tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    assert says in one_line_exit_2(CliRunner().invoke(cli.main, args))


def test_exhaustive_work_is_estimated_and_refused_before_it_runs():
    """Issue 48 item 4: --exhaustive costs schedules x steps x layers x ranks; 405B TP128 with a long --gen
    would have run for days. Refused at once past the bounds table's entry, the estimate written out;
    at the bound (1 schedule x 8 steps x 2 layers x 2 ranks, far under it) it runs."""
    t = time.monotonic()
    line = one_line_exit_2(CliRunner().invoke(cli.main, ["predict", "--model", "llama-3.1-405b", "--tp", "128",
                                                         "--gen", "100000", "--exhaustive"]))
    assert ("--exhaustive would simulate 5 schedules x 100000 steps x 126 layers x 128 ranks = 8,064,000,000 "
            "rank-layer steps, more than 4,000,000") in line and "use --exact" in line
    assert time.monotonic() - t < 10
    # the estimate's own arithmetic, just past the bound: 2 schedules x 1954 steps x 32 layers x 32 ranks
    assert "= 4,001,792 rank-layer steps" in one_line_exit_2(CliRunner().invoke(cli.main, [
        "predict", "--model", "llama-3.1-8b", "--tp", "32", "--gen", "1954", "--schedule", "ladder", "--exhaustive"]))
    r = CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--gen", "8", "--prompt", "8",
                                      "--schedule", "standard", "--exhaustive", "--json"])
    assert r.exit_code == 0, r.output


def test_sweep_counts_a_repeated_value_once(tmp_path):
    out = tmp_path / "s.csv"
    r = CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--model", "tiny", "--tp", "2", "--tp", "2",
                                      "--batch", "1", "--batch", "1", "--prompt", "16", "--gen", "4",
                                      "--schedule", "ladder", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = out.read_text().splitlines()[1:]
    assert len(rows) == 2, rows                   # standard and ladder, once each (was 8 rows)
    assert "1 points" in r.output


BENCH = ["bench", "--model", "tiny", "--device", "cpu"]


@pytest.mark.hw
@pytest.mark.parametrize("args, says", [
    ([*BENCH, "--trace", ""], "Invalid value for '--trace': must not be empty"),  # was: silently nothing
    ([*BENCH, "--trace", "/dev/null/t.json"], "--trace /dev/null/t.json: cannot use it: Not a directory"),  # was: after the run
    ([*BENCH, "--out", ""], "Invalid value for '--out': must not be empty"),
    ([*BENCH, "--out", " "], "--out needs a file path, got ' '"),                # blank: commands.bench.check_out_path
    ([*BENCH, "--seed", str(10 ** 20)], "--seed must be in 0..4294967295"),      # crashed the ranks
    (["calibrate", "--models", "tiny", "--out", "p.json", "--impl", ""],
     "Invalid value for '--impl': must not be empty"),                          # commands.options.not_empty
    (["calibrate", "--models", "tiny", "--out", "p.json", "--impl", "auto"], "--impl must be a table tag"),
    (["calibrate", "--models", "tiny", "--out", "p.json", "--seed", "-1"], "--seed must be in"),
    (["compare", "--profile", "h100-sxm", "--repeats", "0"], "--repeats must be in 1.."),   # was: 9
    (["compare", "--profile", "h100-sxm", "--prompt", "0"], "--prompt must be in 1.."),     # was: 128
    (["compare", "--profile", "h100-sxm", "--gen", "0"], "--gen must be in 1.."),           # was: 64
    (["compare", "--profile", "h100-sxm", "--nproc", "0"], "--nproc must be in 1.."),       # was: a failed point, exit 1
    (["compare", "--profile", "h100-sxm", "--tp", "0"], "--tp must be in 1.."),
    (["compare", "--profile", "h100-sxm", "--batch", "0"], "--batch must be in 1.."),
    (["compare", "--profile", "h100-sxm", "--timeout-s", "nan"], "--timeout-s must be a number of seconds"),
    # a GPU profile has no gloo tables: said before benchmarking (was: after the whole grid ran)
    (["compare", "--profile", "h100-sxm", "--quick"], "has no collective tables for 'gloo'"),
])
def test_harness_edges_refused_before_work(tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    t = time.monotonic()
    assert says in one_line_exit_2(CliRunner().invoke(cli.main, args))
    assert time.monotonic() - t < 10                            # refused at once: no rank, no benchmark
    assert not (tmp_path / "compare-out").exists() or not any((tmp_path / "compare-out").rglob("*.json"))


@pytest.mark.hw
@pytest.mark.slow
def test_a_fractional_deadline_is_reported_as_given(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "cli.py"), *BENCH, "--prompt", "16", "--gen", "4",
                        "--deadline-s", "0.5", "--timeout-s", "60"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Error: run exceeded its 0.5 s deadline" in r.stderr        # was "0 s"
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------ the launcher reads the beats

def _beat_file(path: Path, count: int, mark_age_s: float, phase: str, alive_age_s: float | None) -> str:
    from tpsim.hw import beat
    now = time.monotonic()
    data = beat._MARK.pack(count, now - mark_age_s, phase.encode()) + beat._ALIVE.pack(
        0.0 if alive_age_s is None else now - alive_age_s)
    path.write_bytes(data)
    return str(path)


@pytest.mark.hw
def test_the_launcher_names_the_rank_whose_heartbeat_is_stale(tmp_path):
    from tpsim.hw import dist
    log0 = tmp_path / "rank0.log"
    log0.write_text("[tpsim] rank 0 failed: RuntimeError: a collective timed out (--timeout-s); ...\n")
    logs = [str(log0), str(tmp_path / "rank1.log"), str(tmp_path / "rank2.log")]
    # all three ranks in 'decode' #40 (the marks tie); rank 2's heartbeat is 7 s old, the others fresh
    beats = [_beat_file(tmp_path / f"b{r}", 40, 1.0, "decode", age) for r, age in enumerate((0.1, 0.2, 7.0))]
    running = [1, None, None]                                   # rank 0 exited (its wait timed out)
    assert dist._stale_heartbeat(beats, running, timeout_s=10.0) == ""          # 7 s is within --timeout-s 10
    stale = dist._stale_heartbeat(beats, running, timeout_s=5.0)
    assert stale.startswith("rank 2 stopped responding: its heartbeat is 7.0 s old (--timeout-s 5;"), stale
    assert "last progress mark 'decode' #40" in stale
    # rank 0's wait expired first: the blame goes to rank 2 (stale for over half the timeout), not rank 0
    assert dist._stalled_rank(logs, beats, 0, running, timeout_s=10.0).startswith("rank 2 stopped responding")
    # an exited rank's heartbeat is old too, but it is not the one that hung
    assert dist._stale_heartbeat(beats, [None, None, 1], timeout_s=5.0) == ""
    # fewer progress marks still win over the heartbeat (a rank hung in Python keeps beating)
    beats[1] = _beat_file(tmp_path / "b1", 39, 9.0, "decode", 0.1)
    assert dist._stalled_rank(logs, beats, 0, running, timeout_s=10.0).startswith("rank 1 stopped making progress")
    # a heartbeat not started yet (before the process group exists) is never stale
    beats = [_beat_file(tmp_path / f"c{r}", 0, 0.0, "", None) for r in range(3)]
    assert dist._stale_heartbeat(beats, [None] * 3, timeout_s=1.0) == ""
