"""compare.json through calib.compare_result's dataclasses: a real `tpsim compare --measured` run
(a committed `tpsim bench --json` output of tiny at TP2 on gloo, no torch needed to compare it)
writes compare.json; read back with from_dict and written with to_dict it is the same file byte for
byte, and the typed fields say what the file says. tests/fixtures/compare/README.md: the fixtures."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.calib.compare_result import (ComparedPoint, OpRow, ScheduleResult, comparison_from_dict,
                                        comparison_to_dict)
from tpsim.cli import main

FIX = Path(__file__).parent / "fixtures" / "compare"


@pytest.fixture(scope="module")
def compare_json(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("compare")
    r = CliRunner().invoke(main, ["compare", "--profile", str(FIX / "profile.json"),
                                  "--measured", str(FIX / "measured-tiny-tp2.json"), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    return (out / "compare.json").read_text()


def test_compare_json_round_trips_byte_for_byte(compare_json):
    res = comparison_from_dict(json.loads(compare_json))
    assert json.dumps(comparison_to_dict(res), indent=1) + "\n" == compare_json   # write_json_atomic's format
    (pt,) = res["points"]
    assert isinstance(pt, ComparedPoint) and all(isinstance(s, ScheduleResult) for s in pt.schedules)
    assert ComparedPoint.from_dict(pt.to_dict()) == pt


def test_compare_json_keeps_its_format(compare_json):
    # the writer is to_dict too, so the round trip alone would not see a changed format: the keys
    # and their order, as compare.json has had them (readers of old files depend on them)
    res = json.loads(compare_json)
    assert list(res) == ["profile", "profile_path", "points", "failed", "summary", "timelines"]
    (pt,) = res["points"]
    assert list(pt) == ["model", "tp", "batch", "prompt_len", "gen_len", "profile", "missing_schedules",
                        "schedules", "machine_drift", "env", "trace"]
    std, ladder = pt["schedules"]
    assert list(ladder) == ["schedule", "measured", "predicted", "err", "speedup_err", "sign_match",
                            "measured_speedup_within_noise", "predicted_speedup_within_noise", "ops"]
    side = ["prefill_s", "decode_s", "tokens_per_s", "exposed_comm_s", "speedup", "speedup_of_medians"]
    assert list(std["measured"]) == side
    assert list(ladder["measured"]) == side + ["speedup_ci", "speedup_ci_coverage"]
    # predicted: sim.predict.Prediction.to_dict's own keys, then compare's interval
    assert list(ladder["predicted"])[-1] == "speedup_interval" and "speedup_interval" not in std["predicted"]
    assert list(ladder["predicted"])[:5] == ["schedule", "prefill_s", "decode_s", "tokens_per_s", "speedup"]
    assert list(ladder["err"]) == ["prefill_s", "decode_s", "tokens_per_s"]
    assert list(ladder["ops"][0]) == ["phase", "op", "stream", "measured_s", "predicted_s", "rel_err", "contribution_s"]
    assert list(pt["machine_drift"]) == ["calibration_probe_s", "measurement_probe_s", "ratio"]


def test_typed_fields_say_what_the_file_says(compare_json):
    raw = json.loads(compare_json)["points"][0]
    measured = json.loads((FIX / "measured-tiny-tp2.json").read_text())
    (pt,) = comparison_from_dict(json.loads(compare_json))["points"]
    assert (pt.label, pt.missing_schedules, pt.profile) == ("tiny TP2 b1", (), "compare-fixture")
    assert Path(pt.trace).is_file()
    std, ladder = pt.schedules
    assert [s.schedule for s in pt.schedules] == ["standard", "ladder"]
    # every optional field is filled on ladder: 3 paired repeats give a 75% sign-test interval, the
    # profile's kept overlap-fit samples a predicted one; standard (over itself) has neither
    m = next(s for s in measured["schedules"] if s["schedule"] == "ladder")
    sp = m["spread"]["speedup"]
    assert ladder.measured.speedup_ci == (sp["ci_lo"], sp["ci_hi"]) and ladder.measured.speedup_ci_coverage == 0.75
    assert ladder.measured.speedup == sp["median"] and ladder.measured.speedup_of_medians == m["speedup"]
    lo, hi = ladder.predicted.speedup_interval
    # the verdict field says what the interval says (a launch-bound toy on a GPU profile: an interval
    # just above 1, [1.007, 1.016], since the eager launch chain holds both schedules back alike)
    assert lo < hi and ladder.predicted_speedup_within_noise == (lo <= 1.0 <= hi)
    assert lo <= ladder.predicted.speedup <= hi
    assert std.measured.speedup_ci is None and std.predicted.speedup_interval is None
    raw_std = raw["schedules"][0]
    assert "speedup_ci" not in raw_std["measured"] and "speedup_interval" not in raw_std["predicted"]
    assert ladder.predicted.tokens_per_s == raw["schedules"][1]["predicted"]["tokens_per_s"]
    assert ladder.err.tokens_per_s == pytest.approx(
        (ladder.predicted.tokens_per_s - ladder.measured.tokens_per_s) / ladder.measured.tokens_per_s)
    assert ladder.speedup_err == ladder.predicted.speedup - ladder.measured.speedup
    # the calibration probe 2.5 ms (the fixture profile) against the faster of the two measured probes
    assert pt.machine_drift["ratio"] == pytest.approx(min(measured["env"]["probe_s"]) / 0.0025)
    # the per-op join: largest |contribution| first; ops only the harness recorded predict 0
    contrib = [abs(o.contribution_s) for o in ladder.ops]
    assert contrib == sorted(contrib, reverse=True)
    assert {o.stream for o in ladder.ops} <= {"compute", "comm", "wait"}


def test_optional_fields_absent_and_verdicts(compare_json):
    (pt,) = comparison_from_dict(json.loads(compare_json))["points"]
    ladder = pt.schedules[1]
    assert ladder.sign == "ok"
    # disagreeing signs: undetermined while either interval contains 1, WRONG when neither does
    off = dataclasses.replace(ladder, sign_match=False, predicted_speedup_within_noise=True)
    assert off.sign == "undetermined"
    assert dataclasses.replace(off, predicted_speedup_within_noise=False).sign == "WRONG"
    assert dataclasses.replace(off, predicted_speedup_within_noise=False, measured_speedup_within_noise=True).sign \
        == "undetermined"
    # without the intervals, the trace, a measured op or a measured time: the keys go, None and nan stay
    bare = dataclasses.replace(
        pt, trace=None, machine_drift=None,
        schedules=(pt.schedules[0], dataclasses.replace(
            ladder, measured=dataclasses.replace(ladder.measured, speedup_ci=None, speedup_ci_coverage=None),
            predicted=dataclasses.replace(ladder.predicted, speedup_interval=None),
            err=dataclasses.replace(ladder.err, decode_s=float("nan")),
            ops=(OpRow("decode", "L0.mlp.up", "compute", 0.0, 1e-3, None, 1e-3),))))
    d = bare.to_dict()
    assert "trace" not in d and d["machine_drift"] is None
    s = d["schedules"][1]
    assert "speedup_ci" not in s["measured"] and "speedup_ci_coverage" not in s["measured"]
    assert "speedup_interval" not in s["predicted"] and s["ops"][0]["rel_err"] is None
    text = json.dumps(d, indent=1)
    back = ComparedPoint.from_dict(json.loads(text))
    assert json.dumps(back.to_dict(), indent=1) == text and math.isnan(back.schedules[1].err.decode_s)


# ---------------------------------------------------------------- measured files of the wrong shape

def _measured() -> dict:
    return json.loads((FIX / "measured-tiny-tp2.json").read_text())


def _compare(tmp_path, files: dict, *extra: str):
    """`tpsim compare --measured` of the fixture and each of `files` (name -> document), in that order."""
    args = ["compare", "--profile", str(FIX / "profile.json"), "--measured", str(FIX / "measured-tiny-tp2.json")]
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
        args += ["--measured", str(tmp_path / name)]
    r = CliRunner().invoke(main, [*args, "--out-dir", str(tmp_path / "out"), *extra])
    return r, tmp_path / "out"


def test_measured_fields_of_the_wrong_shape_fail_their_point_alone(tmp_path):
    # each was a traceback that ended the whole run (AttributeError, KeyError) or a message without
    # the field (tp: "invalid literal for int()"); now one failed point naming the field, and the good
    # file is compared, its report written, exit 0 (some point was compared)
    good = _measured()
    no_decode = json.loads(json.dumps(good))
    del no_decode["schedules"][1]["decode_s"]
    bad = {"stack.json": (good | {"stack": "x"}, "field 'stack' must be an object, got 'x'"),
           "env.json": (good | {"env": None}, "field 'env' must be an object, got None"),
           "rows.json": (good | {"schedules": [{"schedule": "standard"}]}, "field 'schedules[0].prefill_s' is missing"),
           "decode.json": (no_decode, "field 'schedules[1].decode_s' is missing"),
           "tp.json": (good | {"tp": "two"}, "field 'tp' must be an integer in 1..1024, got 'two'"),
           "list.json": ([good], "the measured JSON must be an object, got [{")}
    r, out = _compare(tmp_path, {name: doc for name, (doc, _) in bad.items()})
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    res = json.loads((out / "compare.json").read_text())
    assert len(res["points"]) == 1 and (out / "report.md").is_file()
    errors = {Path(f["point"]).name: f["error"] for f in res["failed"]}
    assert set(errors) == set(bad)
    for name, (_, says) in bad.items():
        assert says in errors[name] and "tpsim bench --json" in errors[name], errors[name]
    assert sum(line.split(" ")[0] == "failed" for line in r.output.splitlines()) == len(bad)   # a wrapped line may end at "failed"


# where compare reads fields of a measured run: the run, its stack, env and model shapes, and the ladder
# row with its spreads and a per-op record
_READ = [(), ("stack",), ("env",), ("model_spec",), ("model_spec", "rope"), ("schedules", 1),
         ("schedules", 1, "spread", "speedup"), ("schedules", 1, "records", 0)]


@pytest.mark.slow           # ~300 damaged files, ~20 s on 2 cores
def test_any_field_of_a_measured_json_damaged_is_one_failed_point_or_compared(tmp_path):
    # each field there replaced by a value of another JSON type, or removed: compared, or one failed
    # point with a one-line reason; never a crash
    good, files = _measured(), {}
    for parent in _READ:
        for key in _at(good, parent):
            for value in (None, "x", -1, "DROP"):
                doc = json.loads(json.dumps(good))
                if value == "DROP":
                    del _at(doc, parent)[key]
                else:
                    _at(doc, parent)[key] = value
                files[f"{len(files)}.json"] = doc
    r, out = _compare(tmp_path, files)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output[-3000:]
    res = json.loads((out / "compare.json").read_text())
    assert len(res["points"]) + len(res["failed"]) == len(files) + 1 and len(res["failed"]) > len(files) / 2
    assert all(len(f["error"].splitlines()) == 1 for f in res["failed"])


def _at(doc, path: tuple):
    for k in path:
        doc = doc[k]
    return doc


def test_one_repeat_has_no_measured_interval(tmp_path):
    # a --repeats 1 run: hw.bench's spread of one paired ratio is [x, x] with coverage 0 (median_ci of a
    # single sample), which the legend called "an at least 0% confidence interval"
    one = _measured() | {"repeats": 1}
    for row in one["schedules"]:
        for k, sp in row["spread"].items():
            x = sp["median"]
            row["spread"][k] = {"min": x, "p25": x, "median": x, "p75": x, "max": x, "n": 1,
                                "ci_lo": x, "ci_hi": x, "ci_coverage": 0.0}
    (tmp_path / "one.json").write_text(json.dumps(one))
    r = CliRunner().invoke(main, ["compare", "--profile", str(FIX / "profile.json"), "--measured",
                                  str(tmp_path / "one.json"), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    for text in (" ".join(r.output.split()), (tmp_path / "out" / "report.md").read_text()):
        assert "at least 0%" not in text
        assert "meas speedup of one repeat: that repeat's paired ratio, with no interval" in " ".join(text.split())
    x = one["schedules"][1]["spread"]["speedup"]["median"]
    assert f"| {x:.3f} |" in (tmp_path / "out" / "report.md").read_text()        # no [x-x] after it


def test_a_rerun_says_which_points_it_reuses(tmp_path):
    # a point whose measured JSON is kept from an earlier run (here: the fixture, the same work) is not
    # benched again; it was still announced as "[1/1] bench ..."
    pytest.importorskip("torch")                  # compare without --measured runs (and requires) the harness
    m = _measured()
    saved = tmp_path / "out" / "measured" / "tiny_tp2_b1_p16_g3.json"
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps(m))
    r = CliRunner().invoke(main, ["compare", "--profile", str(FIX / "profile.json"), "--model", "tiny",
                                  "--nproc", "2", "--prompt", "16", "--gen", "3", "--repeats", str(m["repeats"]),
                                  "--schedule", "ladder", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert f"[1/1] reuse tiny_tp2_b1_p16_g3: {saved} from an earlier run" in out and "bench tiny" not in out


def test_the_summary_names_only_what_the_run_wrote(tmp_path):
    """Issue 48 item 6: a failed compare named report and trace paths it never wrote (and drew an empty
    table above the failure)."""
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["compare", "--profile", str(FIX / "profile.json"), "--measured",
                                  str(tmp_path / "nope.json"), "--out-dir", str(out)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    flat = "".join(r.output.split())             # the console wraps (and folds) long paths
    assert "traces" not in flat and "schedule" not in flat, r.output
    assert f"report:{out / 'report.md'}data:{out / 'compare.json'}" in flat
    assert (out / "report.md").is_file() and not (out / "traces").exists()
    r, out = _compare(tmp_path, {})
    assert r.exit_code == 0, r.output
    traces = "".join(r.output.split("traces (measured beside simulated; ui.perfetto.dev):")[1].split())
    assert Path(traces).is_dir() and any(Path(traces).iterdir())


def test_standard_sign_is_not_counted_as_a_result(tmp_path):
    """Issue 48 item 9: standard's speedup is 1 by definition on both sides, yet its sign was counted as
    agreeing (a README summed 10/10 signs over 5 schedules x 2 points)."""
    r, _ = _compare(tmp_path, {})
    assert r.exit_code == 0, r.output
    lines = {ln.split()[0]: ln for ln in r.output.splitlines() if "median |err| tokens/s" in ln}
    assert lines["standard"].endswith("speedup 1 by definition") and "sign" not in lines["standard"]
    assert lines["ladder"].endswith("speedup sign 1/1")


def test_a_failed_points_text_is_printed_as_text_not_markup(tmp_path):
    """Found by bench/fuzz_cli.py --seed 2 (issue 48): a measured field holding '[/]' was quoted in the
    failed point's line and read by rich as markup: a MarkupError traceback."""
    doc = _measured()
    doc["schedules"][0]["records"][0]["end_s"] = "[/]"
    r, _ = _compare(tmp_path, {"m.json": doc})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "got '[/]'" in " ".join(r.output.split()) and "Traceback" not in r.output
