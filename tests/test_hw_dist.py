"""Real multi-process runs on gloo (spawned rank processes, real process groups)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import procs

pytest.importorskip("torch")

from tpsim.commands.bench import bench_cmd, check_cmd  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402

pytestmark = pytest.mark.hw
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--model", "tiny", "--prompt", "16", "--gen", "9", "--device", "cpu", "--backend", "gloo"]
ALL5 = ["--schedule", "standard", "--schedule", "ladder", "--schedule", "spd:0.5", "--schedule", "parallel",
        "--schedule", "upper-bound"]


def _json_of(cmd, *args) -> dict:
    """`tpsim bench` / `check` (`cmd`) on SMALL with `args` and --json: it must succeed; its JSON."""
    res = CliRunner().invoke(cmd, [*SMALL, *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _check(tp, *extra):
    out = _json_of(check_cmd, "--tp", str(tp), *ALL5, *extra)
    assert out["ok"] and out["tp"] == tp
    rows = {r["schedule"]: r for r in out["schedules"]}
    assert list(rows) == ["standard", "ladder", "spd:0.5", "parallel", "upper-bound"]
    for name, r in rows.items():
        assert r["ok"] and r["decode_steps"] >= 8
        if name != "upper-bound":
            assert r["prefill_err"] < 1e-4 and r["decode_err"] < 1e-4
    return out


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_check_tp2_all_schedules():
    _check(2)


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_check_without_a_decode_step_measures_no_decode_error():
    """--gen 1 is the prefill alone: the decode error is null and printed '-', not a measured 0."""
    out = _json_of(check_cmd, "--tp", "2", "--schedule", "standard", "--gen", "1")
    row = out["schedules"][0]
    assert row["decode_steps"] == 0 and row["decode_err"] is None and row["prefill_err"] < 1e-4 and out["ok"]
    from tpsim.hw.check import format_check
    cells = next(ln.split() for ln in format_check(out).splitlines() if ln.split()[:1] == ["standard"])
    assert cells[1:5] == [f"{row['prefill_err']:.2e}", "-", "0", "ok"]


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_check_tp4_all_schedules():
    _check(4, "--batch", "2")


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_check_tp2_other_stack():
    # the engines' layout: vocab-parallel head and input embedding (each rank its shard, embed.allreduce)
    _check(2, "--head", "vocab-parallel", "--embed", "vocab-parallel", "--attention", "flash", "--kv", "filled",
           "--prefill-logits", "last", "--no-expand-gqa")


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_bench_json_records_match_ir(tmp_path):
    out_path = tmp_path / "bench.json"
    cmd = [sys.executable, "cli.py", "bench", "--backend", "gloo", "--nproc", "2", "--model", "tiny",
           "--schedule", "standard", "--schedule", "ladder", "--json", "--prompt", "16", "--gen", "9",
           "--repeats", "2", "--warmup", "1", "--device", "cpu", "--out", str(out_path)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d == json.loads(out_path.read_text())
    for k in ("model", "tp", "profile", "batch", "prompt_len", "gen_len", "schedules", "env"):
        assert k in d
    assert d["profile"] == "measured" and d["tp"] == 2 and d["env"]["world_size"] == 2
    assert d["env"]["backend"] == "gloo" and d["env"]["torch"]
    assert len(d["env"]["probe_s"]) == 2 and all(x > 0 for x in d["env"]["probe_s"])     # hw.probe
    # each rank pinned to its own cores (hw.rank.pin_cores), recorded with the result
    cores = d["env"]["rank_cores"]
    if len(os.sched_getaffinity(0)) >= 2:
        assert all(cores) and not set(cores[0]) & set(cores[1]) and len(cores[0]) == len(cores[1])
    m, st = get_model("tiny"), Stack(dtype="fp32", collective="gloo")
    rows = {r["schedule"]: r for r in d["schedules"]}
    assert list(rows) == ["standard", "ladder"] and rows["standard"]["speedup"] == 1.0
    for spec, r in rows.items():
        assert r["tokens_per_s"] == pytest.approx(1 * 9 / (r["prefill_s"] + r["decode_s"]))
        assert r["spread"]["decode_s"]["n"] == 2 and r["exposed_comm_s"] >= 0
        for phase, step in [("prefill", Step.prefill(1, 16, 9, st)), ("decode", Step.decode(1, 16, 9, 1, st))]:
            ir = build(spec, m, 2, step, st)
            for rank in (0, 1):
                recs = [x for x in r["records"] if x["phase"] == phase and x["rank"] == rank]
                assert {x["op"] for x in recs if x["stream"] == "compute"} == {o.name for o in ir.ops if not o.is_comm}
                assert {x["op"] for x in recs if x["stream"] == "comm"} == {o.name for o in ir.collectives}
                assert all(x["end_s"] >= x["start_s"] >= 0 for x in recs)


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_emulated_rank_runs_tp_shapes_on_one_process():
    # one process as rank 0 of a TP-4 job: its shard shapes, collectives over the 1-process group
    d = _json_of(bench_cmd, "--tp", "1", "--emulate-tp", "4", "--schedule", "ladder", "--repeats", "1", "--warmup", "0")
    assert d["tp"] == 4 and d["emulated"] == {"tp": 4, "ranks": 1} and d["env"]["world_size"] == 1
    ir = build("ladder", get_model("tiny"), 4, Step.decode(1, 16, 9, 1, Stack()), Stack())
    recs = next(r for r in d["schedules"] if r["schedule"] == "ladder")["records"]
    assert {x["op"] for x in recs if x["phase"] == "decode" and x["stream"] == "comm"} == {o.name for o in ir.collectives}
    bad = CliRunner().invoke(bench_cmd, [*SMALL, "--tp", "2", "--emulate-tp", "4"])
    assert bad.exit_code == 2 and "--emulate-tp 4 runs one process" in bad.output


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_emulated_rank_with_a_vocab_parallel_head():
    # the head's all-gather runs over the 1-process group and still yields full-vocab logits
    d = _json_of(bench_cmd, "--tp", "1", "--emulate-tp", "2", "--head", "vocab-parallel", "--repeats", "1",
                 "--warmup", "0")
    recs = d["schedules"][0]["records"]
    assert any(x["op"] == "head.allgather" and x["stream"] == "comm" for x in recs), {x["op"] for x in recs}


def _faulted_bench(timeout_s: str, fault: str) -> str:
    """bench on 2 ranks with an injected `fault` (--fault RANK:PHASE:WHAT): it must fail (exit 1)
    within 30 s, whatever --timeout-s; its output."""
    t = time.monotonic()
    res = CliRunner().invoke(bench_cmd, [*SMALL, "--tp", "2", "--repeats", "1", "--timeout-s", timeout_s,
                                         "--fault", fault])
    assert time.monotonic() - t < 30
    assert res.exit_code == 1
    return res.output


def test_rank_death_ends_run_quickly():
    out = _faulted_bench("60", "1:decode:exit")
    assert "rank 1 of 2 exited with code 17" in out and "stopped the other ranks" in out


def test_a_failed_runs_kept_folder_lands_under_pytests_basetemp(tmp_path_factory):
    """hw.dist.launch keeps a failed run's folder (its rank logs, named in the error); tests/conftest.py
    points tempfile and TMPDIR (for child processes) at pytest's basetemp for the session, so the many
    rank failures the suite makes on purpose leave nothing in /tmp. Before: ~300 /tmp/tpsim-run-* per
    suite run."""
    base = tmp_path_factory.getbasetemp().resolve()
    out = _faulted_bench("60", "1:decode:exit")
    (logs,) = [line.removeprefix("rank logs: ") for line in out.splitlines() if line.startswith("rank logs: ")]
    run = Path(logs).parent
    assert run.name.startswith("tpsim-run-") and run.resolve().is_relative_to(base) and (run / "rank1.log").exists()
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(child).resolve() == run.parent.resolve()          # the same folder, for the ranks too


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_hung_rank_times_out():
    out = _faulted_bench("4", "1:prefill:hang")
    assert "timed out" in out and "rank 1: injected fault, hanging" in out


def test_ctrl_c_stops_the_ranks_removes_the_run_folder_and_exits_130(tmp_path):
    """Ctrl-C (SIGINT) of a real `tpsim bench` launcher once its ranks are started: every rank is
    stopped, the run folder removed, one line said, exit 130 (as calibrate). Before: click's bare
    "Aborted!", exit 1, and /tmp/tpsim-run-* (config, rank logs, heartbeats) left behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # long enough that the ranks are still at work when the launcher is signalled
    rc, out, err, _ = procs.ctrl_c_when(
        ["bench", *SMALL, "--tp", "2", "--gen", "400", "--repeats", "200", "--warmup", "0", "--schedule", "standard",
         "--timeout-s", "120"],
        tmp_path, tmp, lambda ranks: bool(list(tmp.glob("tpsim-run-*"))) and len(ranks) == 2)
    assert rc == 130, err
    assert err.strip() == "Aborted! all ranks stopped; no rank logs kept" and out == ""
    assert list(tmp.glob("tpsim-run-*")) == []


def test_user_errors_exit_2():
    r = CliRunner().invoke(check_cmd, [*SMALL, "--tp", "3"])
    assert r.exit_code == 2 and "TP 3" in r.output
    r = CliRunner().invoke(bench_cmd, [*SMALL, "--schedule", "zigzag"])
    assert r.exit_code == 2 and "unknown schedule" in r.output
    r = CliRunner().invoke(bench_cmd, [*SMALL, "--device", "cpu", "--backend", "nccl"])
    assert r.exit_code == 2 and "nccl" in r.output


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_torchrun_rank_mode_and_layers():
    """`torchrun -m tpsim check` runs each process as one rank; --layers truncates the model."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "tpsim", "check", "--model", "toy-512", "--layers", "1", "--prompt", "8", "--gen", "9",
           "--device", "cpu", "--schedule", "standard", "--schedule", "ladder", "--json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    assert d["ok"] and d["model"] == "toy-512[:1]" and d["tp"] == 2
