"""A real 2-rank gloo calibration: stopped after its first group, resumed without redoing it,
written as a valid profile the simulator predicts with."""
import json
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.commands.calibrate import calibrate_cmd  # noqa: E402
from tpsim.calib.plan import CalibConfig, CalibrationStopped, env_tag, plan_groups, read_state, state_path, write_state  # noqa: E402
from tpsim.calib.run import calibrate  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import Stack  # noqa: E402

pytestmark = pytest.mark.hw
SHAPES = dict(models=("tiny",), tps=(2,), batches=(1,), prompt_len=(8,), gen_len=(4,), quick=True)


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_interrupted_calibration_resumes_without_remeasuring(tmp_path):
    out = tmp_path / "cpu.json"
    with pytest.raises(CalibrationStopped, match="partial results kept"):
        calibrate("gloo", 2, out=out, stop_after=2, timeout_s=60, **SHAPES)
    st = json.loads(open(state_path(out)).read())
    first = dict(st["groups"])
    assert list(first) == ["device", "collectives/gloo/all_reduce/eager/g2"]
    run1 = {g["run_id"] for g in first.values()}
    assert len(run1) == 1 and not out.exists()

    seen = []
    path = calibrate("gloo", 2, out=out, timeout_s=60, progress=lambda d, t, _n: seen.append((d, t)), **SHAPES)
    assert path == out and out.exists() and not os.path.exists(state_path(out))
    assert seen and seen[-1] == (5, 5) and seen[0][0] >= 2          # resumed at 2 of 5 groups
    prof = json.loads(out.read_text())
    raw = prof["raw"]["groups"]
    for name, g in first.items():                                   # finished groups kept as measured
        assert raw[name]["run_id"] == g["run_id"] and raw[name]["finished_at"] == g["finished_at"]
        assert raw[name].get("points") == g.get("points")
    later = {g["run_id"] for n, g in raw.items() if n not in first}
    assert later and not (later & run1)                             # the rest measured by the second run
    assert set(raw) == {"device", "collectives/gloo/all_reduce/eager/g2", "arrival/gloo/g2",
                        "compute/tiny/tp2/b1/p8/g4/fp32-static-math-replicated-all-gqa", "overlap/gloo"}
    # the ranks' arrival spread, measured; 0 on CPU, where the gloo tables already hold it
    jit = prof["jitter"]["arrival"]["node"]["mean_us"]
    assert jit["value"] == 0 and "barrier-free all-reduces" in jit["source"] and "already include" in jit["source"]
    assert raw["arrival/gloo/g2"]["mean_us"] > 0
    assert raw["arrival/gloo/g2"]["calls"] == 200 and raw["arrival/gloo/g2"]["ranks"] == 2

    # the profile: complete, validated, gloo tables the simulator uses, exact op points
    assert prof["device"] == "cpu" and prof["collectives"]["default_impl"] == "gloo"
    t = prof["collectives"]["tables"][0]
    assert (t["impl"], t["scope"], t["mode"], t["group"]) == ("gloo", "node", "eager", 2)
    assert 8 * 64 * 4 in t["bytes"] and 64 * 4 in t["bytes"]         # exact prefill / decode message sizes
    assert set(prof["collectives"]["model"]["node"]) == {"small", "large"}
    assert "measured by tpsim calibrate on" in prof["compute"]["launch_us"]["eager"]["source"]
    if len(os.sched_getaffinity(0)) >= 2:        # each rank on its own core, said where numbers come from
        rc = raw["device"]["rank_cores"]
        assert all(rc) and not set(rc[0]) & set(rc[1])
        assert "pinned to cores" in prof["compute"]["launch_us"]["eager"]["source"]
    assert prof["overlap"]["compute_slowdown"]["value"] >= 1.0
    p = load_profile(str(out))
    # the overlap trials are kept, so compare can bootstrap the predicted speedup's interval
    from tpsim.calib.compare_intervals import overlap_samples
    triples = overlap_samples(p)
    assert len(triples) == 30 and all(cs >= 1.0 and ks >= 1.0 and w >= 0.0 for cs, ks, w in triples)
    # fitted by simulating the calibration's own passes: the fit says what it matched, per case
    fit = raw["overlap/gloo"]["summary"]["fit"]
    assert "fitted so that the simulator" in prof["overlap"]["wake_us"]["source"]
    assert p.wake_s == pytest.approx(fit["wake_us"] * 1e-6) and p.compute_slowdown == fit["compute_slowdown"]
    (case,) = fit["cases"]
    assert case["measured"][0] > 0 and case["fitted"][0] > 0
    stack = Stack(dtype="fp32", collective="gloo", decode_graphs=False, compile_prefill=False, compile_decode=False)
    w = Workload(get_model("tiny"), 2, p, 1, 8, 4, stack)
    (pred,) = predict(w, ["standard"], record=False)
    assert pred.prefill_s > 0 and pred.decode_s > 0
    from tpsim.sim.price.cost import CostModel
    cm = CostModel(p, stack)
    from tpsim.calib.shapes import ShapeCase
    case = ShapeCase(get_model("tiny"), 2, 1, 8, 4, stack)
    pts = {(q.kind, q.attrs, q.dtype): q.time_s for q in p.compute_points}
    for sched in case.schedules()[:1]:
        for op in sched.ops:
            if not op.is_comm:      # every op hits its measured point exactly
                assert cm.compute_s(op, sched.step.phase) == pts[(op.kind, tuple(sorted(op.attrs)), op.dtype)]


def test_state_of_other_options_is_refused(tmp_path):
    out = tmp_path / "p.json"
    cfg = CalibConfig(out=str(out), models=("tiny",), quick=True)
    st = read_state(cfg)
    write_state(cfg.state_path, st)
    other = CalibConfig(out=str(out), models=("toy-512",), quick=True)
    with pytest.raises(ValueError, match="other options .*models"):
        read_state(other)


def test_plan_and_tags():
    cfg = CalibConfig(backend="nccl", device="cuda", dtype="fp16", models=("tiny",), quick=False,
                      envs=("NCCL_P2P_DISABLE=1", "NCCL_ALGO=Ring,NCCL_PROTO=LL"))
    assert cfg.impl_of(1) == "nccl-p2p-off" and cfg.impl_of(2) == "nccl-algo-ring-proto-ll"
    assert env_tag("nccl", {"NCCL_NVLS_ENABLE": "0"}) == "nccl-nvls-enable-0"
    g0 = [g.name for g in plan_groups(cfg, 4)]
    assert g0[0] == "device" and "collectives/nccl/reduce_scatter/graph/g3" in g0 and g0[-1] == "overlap/nccl"
    g1 = [g.name for g in plan_groups(cfg, 4, 1)]
    assert g1 and all(n.startswith("collectives/nccl-p2p-off/") for n in g1)


def test_cli_user_errors_exit_2(tmp_path):
    r = CliRunner().invoke(calibrate_cmd, ["--models", "nope", "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "unknown model" in r.output.lower()
    r = CliRunner().invoke(calibrate_cmd, ["--nccl-env", "NCCL_P2P_DISABLE=1", "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "need --backend nccl" in r.output
    r = CliRunner().invoke(calibrate_cmd, ["--parts", "compute", "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--extends" in r.output


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_partial_calibration_extends_a_base(tmp_path):
    """--extends: only the measured collectives are written; the base completes the profile."""
    out = tmp_path / "gloo-over-h100.json"
    r = CliRunner().invoke(calibrate_cmd, ["--nproc", "2", "--quick", "--parts", "collectives", "--extends",
                                           "h100-sxm", "--out", str(out), "--timeout-s", "60"])
    assert r.exit_code == 0, r.output
    prof = json.loads(out.read_text())
    assert prof["extends"] == "h100-sxm" and "device" not in prof and "compute" not in prof
    assert set(prof["collectives"]["model"]["node"]) == {"small", "large"}
    p = load_profile(str(out))
    assert p.device == "cuda" and p.gpus_per_node == 8                     # from the base
    assert p.collective_tables[0].impl == "gloo"                           # measured tables first
    assert {lm.name for lm in p.link_models["node"]} == {"small", "large"}  # only ours: h100-sxm has a topology


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_overlap_without_a_decode_step_falls_back_to_the_gemm_method(tmp_path):
    # gen 1 has no decode step to run passes of: the one-gemm method measures instead of crashing.
    # Only the compute cases (which pick the method) and the overlap group: the device constants and the
    # collective sweep feed neither, so the base completes the profile (half the ranks' time)
    out = calibrate("gloo", 2, out=tmp_path / "g1.json", timeout_s=60, parts=("compute", "overlap"),
                    extends="h100-sxm", **(SHAPES | {"gen_len": (1,)}))
    prof = json.loads(out.read_text())
    assert "gemm [" in prof["overlap"]["comm_slowdown"]["source"]
    assert prof["raw"]["groups"]["overlap/gloo"]["summary"].get("method") != "passes"


# ---------------------------------------------------------------- the state file: damaged, interrupted

STATE = Path(__file__).parent / "fixtures" / "calib" / "state-tiny-tp2.json"       # README.md there
STATE_ARGS = ["--quick", "--nproc", "2", "--models", "tiny", "--tp", "2", "--prompt", "8", "--gen", "4",
              "--timeout-s", "60"]
COMPUTE = "compute/tiny/tp2/b1/p8/g4/fp32-static-math-replicated-all-gqa"
COLL = "collectives/gloo/all_reduce/eager/g2"


def _write_state(out: Path, damage=None, drop: tuple[str, ...] = ()) -> Path:
    """The fixture's finished groups (less `drop`) as the state file of `calibrate STATE_ARGS --out out`,
    fingerprinted by this code; `damage(state)` edits it first."""
    st = json.loads(STATE.read_text())
    st["fingerprint"] = CalibConfig(out=str(out), models=("tiny",), tps=(2,), prompt_lens=(8,), gen_lens=(4,),
                                    quick=True).fingerprint()
    for name in drop:
        del st["groups"][name]
    if damage:
        damage(st)
    path = Path(state_path(out))
    path.write_text(json.dumps(st))
    return path


@pytest.fixture
def no_ranks(monkeypatch):
    """hw.dist.launch as calib.run calls it, failing the test if any rank would start."""
    monkeypatch.setattr("tpsim.calib.run.launch", lambda *a, **k: pytest.fail("a rank was launched"))


@pytest.mark.parametrize("damage, says", [
    (lambda st: st["groups"]["overlap/gloo"].pop("summary"), "group 'overlap/gloo': field 'summary' is missing"),
    (lambda st: st["groups"][COMPUTE].update(points="oops"),
     f"group '{COMPUTE}': field 'points' must be a non-empty list, got 'oops'"),
    (lambda st: st["groups"]["device"].update(matmul_flops=None),
     "group 'device': field 'matmul_flops' must be a non-empty object of sizes to rates > 0, got None"),
    (lambda st: st.update(groups="x"), "'groups' must be an object, got 'x'"),
    (lambda st: st["groups"][COMPUTE]["points"][0]["attrs"].update(rows="x"),
     f"group '{COMPUTE}': field 'points[0]' is not an op the fit can price"),
    (lambda st: st["groups"]["overlap/gloo"]["summary"]["cases"][0]["case"].update(model="nope"),
     "field 'summary.cases[0].case' is not a case the overlap fit can rebuild"),
    (lambda st: st["groups"][COLL].update(kind="device"), f"group '{COLL}' has kind 'device'"),
])
def test_a_damaged_state_file_is_refused_before_any_rank_starts(tmp_path, no_ranks, damage, says):
    # before: KeyError / TypeError / AttributeError tracebacks in the fit, or (groups "x") ranks launched
    # and died with "rank 0 failed: TypeError", then "no group had finished"
    out = tmp_path / "p.json"
    state = _write_state(out, damage, drop=("arrival/gloo/g2",))          # a group left to measure
    r = CliRunner().invoke(calibrate_cmd, [*STATE_ARGS, "--out", str(out)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith(f"Error: state file {state} is damaged (") and says in r.output, r.output
    assert r.output.strip().endswith("); delete it to start over")


@pytest.mark.slow          # the overlap refit simulates the calibration's passes: a few seconds
def test_a_state_file_with_every_group_finished_is_fitted_without_any_rank(tmp_path, no_ranks):
    # the real state passes the check: its fit is the profile, and the state file is gone
    out = tmp_path / "p.json"
    state = _write_state(out)
    r = CliRunner().invoke(calibrate_cmd, [*STATE_ARGS, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert load_profile(str(out)).device == "cpu" and not state.exists()


def _interrupting_launch(log_line: str):
    """A stand-in for hw.dist.launch: leaves a run folder as launch does (config.json, rank logs, the
    first holding `log_line`) and is interrupted, as Ctrl-C does."""
    def launch(target, config, nproc, **kw):
        run = Path(tempfile.mkdtemp(prefix="tpsim-run-"))
        (run / "config.json").write_text(json.dumps(config))
        for r in range(nproc):
            (run / f"rank{r}.log").write_text(log_line if r == 0 else "")
        raise KeyboardInterrupt
    return launch


@pytest.mark.parametrize("log_line", ["", "[tpsim] rank 0: interrupted in prefill\n"])
def test_ctrl_c_says_what_the_state_file_keeps_and_where_the_logs_are(tmp_path, monkeypatch, log_line):
    # before: click's "Aborted!" alone, exit 1, and the /tmp/tpsim-run-* folder left behind unnamed
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))                # where launch makes its folder
    monkeypatch.setattr("tpsim.calib.run.launch", _interrupting_launch(log_line))
    out = tmp_path / "p.json"
    state = _write_state(out, drop=("overlap/gloo",))                      # 4 of 5 groups finished
    r = CliRunner().invoke(calibrate_cmd, [*STATE_ARGS, "--out", str(out)])
    assert r.exit_code == 130, r.output
    lines = r.output[r.output.index("Aborted!"):].strip().splitlines()       # after the progress bar
    # commands.errors.ctrl_c_exits_130, as bench's: `Aborted! <what is left>`
    assert lines[0] == f"Aborted! 4 finished group(s) are kept in {state}: rerun the same command to continue"
    runs = list(tmp_path.glob("tpsim-run-*"))
    if log_line:                                   # what a rank said is kept, and named
        assert lines[1:] == [f"rank logs: {runs[0]}/rank*.log"]
    else:                                          # nothing said: nothing left behind
        assert lines[1:] == [] and runs == []
