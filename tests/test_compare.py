"""tpsim compare end to end on CPU: calibrate (quick) -> bench -> predict -> report, on real gloo
process groups; and bad inputs that fail one point while the rest of the grid completes."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.schedule.language import build
from tpsim.sim.model.presets import get_model
from tpsim.sim.stack.spec import Stack, Step

import procs

pytestmark = pytest.mark.hw


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # tiny (2 layers, hidden 64), not toy-512: the same calibrate -> bench -> predict -> report pipeline, every
    # op kind of a first and a last layer, at a third of the ranks' time (toy-512's 150 quick overlap passes
    # alone took 20 s); what is asserted (IR-name joins, every op measured and priced, the comm-free bound
    # faster) does not depend on the model's size, and the bound is faster by more the smaller the model
    out = tmp_path_factory.mktemp("compare")
    with pytest.MonkeyPatch.context() as mp:      # what the progress bar hears (test_progress_of_both_phases)
        mp.setattr("tpsim.commands.compare.PhaseBar", Recorder)
        r = CliRunner().invoke(main, ["compare", "--backend", "gloo", "--nproc", "2", "--quick", "--model", "tiny",
                                      "--prompt", "16", "--gen", "8", "--repeats", "2", "--schedule", "ladder",
                                      "--schedule", "upper-bound", "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    return out


REPORTED: list[tuple[str, int, int | None]] = []


class Recorder:
    """commands.console.PhaseBar's interface, recording each report."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def update(self, what, done, total=None):
        REPORTED.append((what, done, total))


@pytest.mark.slow
def test_progress_of_both_phases(run_dir):
    """Issue 48 item 2: compare's calibration and bench phases were silent for minutes. Both report to
    the one progress bar: the calibration's groups, then the point's bench counting rank 0's progress
    marks to RunConfig.bench_marks (3 schedules x (1 warm-up + 2 repeats) x 8 steps = 72)."""
    cal = [r for r in REPORTED if r[0] == "calibrating: groups"]
    bench = [r for r in REPORTED if r[0].startswith("bench 1/1 tiny_tp2_b1_p16_g8")]
    assert cal and cal[-1][1] == cal[-1][2] > 0
    assert bench and bench[-1][1:] == (72, 72) and REPORTED.index(cal[-1]) < REPORTED.index(bench[0])


@pytest.mark.slow          # the run_dir fixture calibrates and benches on real gloo ranks (minutes)
def test_end_to_end_report(run_dir):
    res = json.loads((run_dir / "compare.json").read_text())
    assert not res["failed"]
    (pt,) = res["points"]
    assert [s["schedule"] for s in pt["schedules"]] == ["standard", "ladder", "upper-bound"]
    for s in pt["schedules"]:
        for k in ("prefill_s", "decode_s", "tokens_per_s"):
            assert s["measured"][k] > 0 and s["predicted"][k] > 0
            assert s["err"][k] == pytest.approx((s["predicted"][k] - s["measured"][k]) / s["measured"][k])
    # the comm-free bound is faster than standard, measured and predicted alike
    ub = pt["schedules"][2]
    assert ub["measured"]["speedup"] > 1 and ub["predicted"]["speedup"] > 1 and ub["sign_match"]
    assert set(res["summary"]) == {"standard", "ladder", "upper-bound"}
    for f in ("report.md", "scatter.png", "speedup.png", "timeline.png", "profile.json"):
        assert (run_dir / f).stat().st_size > 0, f
    # the machine's speed probe, timed in calibration and around the measurement, and their ratio
    d = pt["machine_drift"]
    assert d["calibration_probe_s"] > 0 and len(d["measurement_probe_s"]) == 2 and all(d["measurement_probe_s"])
    assert d["ratio"] == pytest.approx(min(d["measurement_probe_s"]) / d["calibration_probe_s"])
    assert "machine speed" in (run_dir / "report.md").read_text()
    assert "| upper-bound |" in (run_dir / "report.md").read_text()


def test_machine_drift_is_measurement_over_calibration():
    from types import SimpleNamespace
    from tpsim.calib.compare_measure import machine_drift
    prof = SimpleNamespace(raw={"raw": {"groups": {"compute/a": {"kind": "compute", "probe_s": 0.010},
                                                    "compute/b": {"kind": "compute", "probe_s": 0.014},
                                                    "device": {"kind": "device"}}}})
    d = machine_drift({"env": {"probe_s": [0.021, 0.015]}}, prof)
    assert d["ratio"] == pytest.approx(0.015 / 0.010)          # the machine ran 1.5x slower
    assert d["calibration_probe_s"] == 0.010
    assert machine_drift({"env": {}}, prof) is None
    assert machine_drift({"env": {"probe_s": [0.01, 0.01]}}, SimpleNamespace(raw={})) is None


@pytest.mark.slow          # the run_dir fixture calibrates and benches on real gloo ranks (minutes)
def test_per_op_join_uses_the_ir_names(run_dir):
    res = json.loads((run_dir / "compare.json").read_text())
    std = res["points"][0]["schedules"][0]
    m = get_model("tiny")
    names = {op.name for step in (Step.prefill(1, 16, 8, Stack()), Step.decode(1, 16, 8, 1, Stack()))
             for op in build("standard", m, 2, step, Stack()).ops}
    joined = {o["op"] for o in std["ops"]}
    assert joined <= names and len(joined) > 0.9 * len(names)
    both = [o for o in std["ops"] if o["measured_s"] > 0 and o["predicted_s"] > 0]
    assert len(both) > 0.9 * len(std["ops"])
    # ordered by contribution to the end-to-end error
    contrib = [abs(o["contribution_s"]) for o in std["ops"]]
    assert contrib == sorted(contrib, reverse=True)


@pytest.mark.slow          # the run_dir fixture calibrates and benches on real gloo ranks (minutes)
def test_bad_measured_inputs_fail_alone(run_dir, tmp_path):
    good = next((run_dir / "measured").glob("*.json"))
    other = json.loads(good.read_text()) | {"model": "llama-9"}
    (tmp_path / "other.json").write_text(json.dumps(other))
    (tmp_path / "torn.json").write_text('{"model": "toy-512", ')
    r = CliRunner().invoke(main, ["compare", "--profile", str(run_dir / "profile.json"), "--measured", str(good),
                                  "--measured", str(tmp_path / "other.json"), "--measured", str(tmp_path / "torn.json"),
                                  "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert len(res["points"]) == 1
    errors = " ".join(f["error"] for f in res["failed"])
    assert "llama-9" in errors and "cannot read measured JSON" in errors
    # a profile that cannot price the measured run (a GPU profile, NCCL tables only, for a CPU gloo run):
    # a clear message naming what is missing
    r = CliRunner().invoke(main, ["compare", "--profile", "h100-sxm", "--measured", str(good),
                                  "--out-dir", str(tmp_path / "out2")])
    res = json.loads((tmp_path / "out2" / "compare.json").read_text())
    assert not res["points"] and "h100-sxm has no collective tables for 'gloo'" in res["failed"][0]["error"]
    # and one with the right dtype but no gloo collective tables
    prof = json.loads((run_dir / "profile.json").read_text())
    prof["collectives"]["tables"] = []
    (tmp_path / "nogloo.json").write_text(json.dumps(prof))
    r = CliRunner().invoke(main, ["compare", "--profile", str(tmp_path / "nogloo.json"), "--measured", str(good),
                                  "--out-dir", str(tmp_path / "out3")])
    res = json.loads((tmp_path / "out3" / "compare.json").read_text())
    assert not res["points"] and "no collective tables for 'gloo'" in res["failed"][0]["error"]


def test_ctrl_c_while_a_point_benches_exits_130_and_leaves_no_run_folder(tmp_path):
    """Ctrl-C (SIGINT) of a real `tpsim compare` while its ranks bench a point: as bench, every rank is
    stopped, the run folder removed, `Aborted! ...` and exit 130, through the one helper
    (commands.errors.ctrl_c_exits_130). Before: click's bare "Aborted!" and exit 1."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    profile = Path(__file__).resolve().parent / "fixtures" / "compare" / "profile.json"    # prices gloo: no calibration
    # long enough that the ranks are still at work when the launcher is signalled
    rc, out, err, _ = procs.ctrl_c_when(
        ["compare", "--profile", str(profile), "--model", "tiny", "--nproc", "2", "--prompt", "16", "--gen", "400",
         "--repeats", "200", "--schedule", "standard", "--out-dir", str(tmp_path / "out"), "--timeout-s", "120"],
        tmp_path, tmp, lambda ranks: bool(list(tmp.glob("tpsim-run-*"))) and len(ranks) == 2)
    assert rc == 130, err
    assert err.strip() == "Aborted! all ranks stopped; no rank logs kept", err
    assert out.startswith("[1/1] bench tiny") and list(tmp.glob("tpsim-run-*")) == []


def test_a_rank_failing_in_the_calibration_is_one_error_not_a_traceback(tmp_path, monkeypatch):
    """Found by bench/fuzz_cli.py (issue 48): a rank that died while compare calibrated escaped as a
    WorkerFailed traceback; `calibrate` reports the same failure as one error, exit 1."""
    from tpsim.hw.dist import WorkerFailed

    def dies(*a, **k):
        raise WorkerFailed("rank 1 of 2 exited with code 17 after 0.5 s; stopped the other ranks.")
    monkeypatch.setattr("tpsim.calib.run.launch", dies)
    r = CliRunner().invoke(main, ["compare", "--quick", "--model", "tiny", "--out-dir", str(tmp_path / "c")])
    assert r.exit_code == 1 and (r.exception is None or isinstance(r.exception, SystemExit)), r.exception
    assert "Error: calibration failed: rank 1 of 2 exited with code 17" in r.output and "Traceback" not in r.output
