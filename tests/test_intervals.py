"""The interval every answer carries (sim/sensitivity.py over a profile's and a stack's ranges): the
settings a stack's host ranges add, the intervals and the dominant term on toy tokens/s written out by
hand, a stack file's ranges, and predict's table, --json and sweep's columns on real runs."""
from __future__ import annotations

import csv
from dataclasses import replace
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.sensitivity import Ranged, _intervals, check, stack_ranged, with_stack_values
from tpsim.sim.stack.host_lane import HostStep
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import Stack, make_stack


def test_intervals_effects_and_the_profiles_share_on_toy_tokens_per_s():
    """One profile number p (1 in 0-2) and two host numbers a, b (each 1 in 0-2). Settings run (path
    order p, a, b): the host at (lo, lo) and (hi, hi) and each alone, with p at its value; p's two
    corners with the host at its values. Standard 100 at the base; ladder 120.
      (p1, a0, b0): std 110, lad 130        (p1, a2, b2): std 90, lad 105
      (p1, a0, b1): std 104, lad 124        (p1, a2, b1): std 96, lad 115      a alone: 104-96
      (p1, a1, b0): std 102, lad 122        (p1, a1, b2): std 98, lad 118      b alone: 102-98
      (p0, a1, b1): std 100, lad 125        (p2, a1, b1): std 100, lad 112    p: ladder 112-125
    Intervals over all nine runs: std 90-110, ladder 105-130; speedup min 112/100 = 1.12 (p at 2; the
    joint host hi gives 105/90 = 1.167), max 125/100 = 1.25 (p at 0). The widest term alone: p on ladder (13 of 125 = 10.4%) over a on
    standard (8 of 104 = 7.7%). With the host at its values only p moves: std 100-100, ladder 112-125."""
    pr = (Ranged("p", 1.0, 0.0, 2.0),)
    sr = (Ranged("host.a", 1.0, 0.0, 2.0), Ranged("host.b", 1.0, 0.0, 2.0))
    base = {"standard": 100.0, "ladder": 120.0}

    def k(p, a, b):
        return (("p", p), ("host.a", a), ("host.b", b))
    ends = {k(1, 0, 0): {"standard": 110.0, "ladder": 130.0}, k(1, 2, 2): {"standard": 90.0, "ladder": 105.0},
            k(1, 0, 1): {"standard": 104.0, "ladder": 124.0}, k(1, 2, 1): {"standard": 96.0, "ladder": 115.0},
            k(1, 1, 0): {"standard": 102.0, "ladder": 122.0}, k(1, 1, 2): {"standard": 98.0, "ladder": 118.0},
            k(0, 1, 1): {"standard": 100.0, "ladder": 125.0}, k(2, 1, 1): {"standard": 100.0, "ladder": 112.0}}
    intervals, effects, prof = _intervals(pr, sr, base, ends, ["standard", "ladder"])
    assert intervals["standard"] == {"tokens_per_s": (90.0, 110.0), "speedup": (1.0, 1.0)}
    assert intervals["ladder"]["tokens_per_s"] == (105.0, 130.0)
    assert intervals["ladder"]["speedup"] == pytest.approx((1.12, 1.25))
    assert effects["p"] == ("ladder", (112.0, 125.0))
    assert effects["host.a"] == ("standard", (96.0, 104.0))
    assert effects["host.b"] == ("standard", (98.0, 102.0))
    assert prof == {"standard": (100.0, 100.0), "ladder": (112.0, 125.0)}


def test_a_stacks_ranges_are_host_numbers_and_each_setting_replaces_them():
    st = make_stack({}, preset={"host": {"output_s": 1e-3, "handoff_s": 2e-4},
                                "host_ranges": {"output_s": (5e-4, 2e-3)}})
    assert stack_ranged(st) == (Ranged("host.output_s", 1e-3, 5e-4, 2e-3),)
    assert with_stack_values(st, (("overlap.compute_slowdown", 1.3), ("host.output_s", 2e-3))).host.output_s == 2e-3
    # a layer that sets the number again drops its range (a fitted value has none)
    assert make_stack({"host": {"output_s": 7e-4}}, preset={"host": {"output_s": 1e-3},
                                                            "host_ranges": {"output_s": (5e-4, 2e-3)}}).host_ranges == ()
    with pytest.raises(ValueError, match="0 <= lo < hi"):
        Stack(host=HostStep(output_s=1.0), host_ranges=(("output_s", 2.0, 1.0),))


def test_a_stack_file_carries_a_range_and_refuses_one_on_a_switch(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm", "host": {
        "output_s": {"value": 3e-4, "range": [1e-4, 6e-4], "source": "my nsys trace"}, "prepare_s": 1e-4}}))
    p = load_stack(str(f))
    assert p.ranges["host.output_s"] == (1e-4, 6e-4) and p.sources["host.output_s"] == "my nsys trace"
    assert "host.prepare_s" not in p.ranges and "host.schedule_s" in p.ranges     # replaced / inherited
    for host, msg in (({"overlap": {"value": True, "range": [0, 1]}}, "a range is for a number of seconds"),
                      ({"output_s": {"value": 3e-4, "range": [5e-4, 6e-4]}}, "must hold the value"),
                      ({"output_s": {"range": [1e-4, 6e-4]}}, "takes \"value\""),
                      ({"step_broadcasts": 2.5}, "must be a count")):
        f.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm", "host": host}))
        with pytest.raises(ValueError, match=msg):
            load_stack(str(f))


def test_a_ranged_host_term_in_series_gives_the_interval_each_step_pays():
    """A stack with one in-series output term of 1 ms (range 0-3 ms) on a profile with no ranges of its
    own: every one of the gen = 4 engine steps (the prefill and 3 decode steps) pays it, so tokens/s at
    an end is batch x gen / (T0 + 4 x output), T0 the run without it. The speedup's interval is the
    same formula for ladder over standard."""
    prof = load_profile("h100-sxm")
    prof = type(prof)(**{**prof.__dict__, "ranges": {}})          # the profile's own ranges out of the way
    model = get_model("llama-3.1-8b").truncated(2)

    def w(out_s, ranges=()):
        return Workload(model, 2, prof, batch=4, prompt_len=16, gen_len=4, memory_check=False,
                        stack=Stack(host=HostStep(output_s=out_s), host_ranges=ranges))
    t0 = {p.schedule: p.prefill_s + p.decode_s for p in predict(w(0.0), ["standard", "ladder"], record=False)}
    sens = check(w(1e-3, (("output_s", 0.0, 3e-3),)), ["standard", "ladder"])
    tps = {s: (16 / (t + 4 * 3e-3), 16 / t) for s, t in t0.items()}
    assert sens.intervals["standard"]["tokens_per_s"] == pytest.approx(tps["standard"], rel=1e-9)
    assert sens.intervals["ladder"]["tokens_per_s"] == pytest.approx(tps["ladder"], rel=1e-9)
    assert sens.intervals["ladder"]["speedup"] == pytest.approx(
        (tps["ladder"][0] / tps["standard"][0], tps["ladder"][1] / tps["standard"][1]), rel=1e-9)
    assert sens.dominant() == "host.output_s"
    assert sens.profile_only["standard"][0] == sens.profile_only["standard"][1]


ARGS = ["--stack", "vllm", "--model", "llama-3.1-8b", "--tp", "2", "--batch", "4", "--prompt", "32", "--gen", "16"]


def test_predict_prints_each_interval_the_dominant_term_and_that_the_stack_is_uncalibrated():
    res = CliRunner().invoke(main, ["predict", *ARGS, "--schedule", "ladder"])
    assert res.exit_code == 0, res.output
    assert "tokens/s interval" in res.output and "speedup interval" in res.output
    # 11 host terms of the vllm preset, the two overlap factors and the arrival jitter of h100-sxm
    flat = " ".join(res.output.split())              # the notes wrap at 80 columns (issue 48)
    assert "interval: the ends of 14 ranged numbers" in flat and "widest from host." in flat
    assert "uncalibrated: stack vllm@0.11 has 11 host terms given as ranges" in flat
    row = next(line for line in res.output.splitlines() if line.startswith("ladder ") and " - " in line)
    lo, hi = (float(x) for x in row.split()[1:4:2])
    js = json.loads(CliRunner().invoke(main, ["predict", *ARGS, "--schedule", "ladder", "--json"]).output)
    (lad,) = js["schedules"]
    assert lad["tokens_per_s_range"][0] <= lad["tokens_per_s"] <= lad["tokens_per_s_range"][1]
    assert (lo, hi) == pytest.approx(tuple(lad["tokens_per_s_range"]), abs=0.051)
    assert js["sensitivity"]["intervals"]["ladder"]["speedup"] == lad["speedup_range"]
    assert js["sensitivity"]["dominant"].startswith("host.")
    assert max(len(line) for line in res.output.splitlines()) <= 80


def test_sweep_writes_both_ends_in_the_csv_and_its_json_twin(tmp_path):
    out = tmp_path / "s.csv"
    res = CliRunner().invoke(main, ["sweep", "--stack", "vllm", "--model", "llama-3.1-8b", "--tp", "2",
                                    "--batch", "4", "--prompt", "32", "--gen", "16", "--schedule", "ladder",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    twin = json.loads(out.with_suffix(".json").read_text())
    for r, j in zip(rows, twin):
        assert float(r["tokens_per_s_lo"]) <= float(r["tokens_per_s"]) <= float(r["tokens_per_s_hi"])
        assert float(r["speedup_lo"]) <= float(r["speedup"]) <= float(r["speedup_hi"])
        assert j["tokens_per_s_lo"] == pytest.approx(float(r["tokens_per_s_lo"]))
        assert r["interval_dominant"].startswith("host.")
    assert float(rows[0]["tokens_per_s_lo"]) < float(rows[0]["tokens_per_s_hi"])


def test_the_stacks_own_ranged_numbers_reach_the_interval_where_an_op_reads_them(tmp_path):
    """Stack.ranges: a preset's (value, source, (lo, hi)) on one of the stack's own numbers, a stack file's
    {"value", "range"} beside it, and DEFAULT_RANGES on every stack. A number is a setting only where an op
    of the workload reads it: vLLM 0.6 runs prefill eagerly, so its layers' Python (55.6 us, range
    44.5-113.6) moves the answer; TokenWeave's kernel floor does not without tokenweave."""
    from tpsim.sim.sensitivity import stack_number_moves, stack_own_ranged
    prof = load_profile("h100-sxm")
    st = make_stack({}, prof.stack_defaults, preset=load_stack("vllm@0.6").values)
    own = {r.path: r for r in stack_own_ranged(st)}
    assert own["stack.layer_host_s"] == Ranged("stack.layer_host_s", 55.6e-6, 44.5e-6, 113.6e-6)
    assert {"stack.ar_norm_epilogue_share", "stack.tokenweave_floor_s"} <= set(own)
    w = Workload(get_model("llama-3.1-8b").truncated(2), 2, prof, batch=4, prompt_len=32, gen_len=4, stack=st,
                 memory_check=False)
    assert stack_number_moves(own["stack.layer_host_s"], w, ["ladder"])
    assert not stack_number_moves(own["stack.tokenweave_floor_s"], w, ["ladder"])
    assert stack_number_moves(own["stack.tokenweave_floor_s"], w, ["tokenweave"])
    sens = check(w, ["ladder"])
    paths = {r.path for r in sens.ranged}
    assert "stack.layer_host_s" in paths and "stack.tokenweave_floor_s" not in paths
    lad = sens.effects["stack.layer_host_s"][1]          # alone, its ends move tokens/s: hi is slower
    assert lad[0] < lad[1]
    lo = with_stack_values(st, (("stack.layer_host_s", 44.5e-6),))
    assert lo.layer_host_s == 44.5e-6 and lo.ranges == st.ranges
    # a stack file gives its own value and range; one outside its range, or on a number no range is for, is refused
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm@0.6", "stack": {
        "layer_host_s": {"value": 3e-5, "range": [2e-5, 9e-5], "source": "my py-spy"}}}))
    p = load_stack(str(f))
    assert p.ranges["stack.layer_host_s"] == (2e-5, 9e-5) and p.sources["layer_host_s"] == "my py-spy"
    for stack, msg in (({"layer_host_s": {"value": 3e-5, "range": [4e-5, 9e-5]}}, "must hold the value"),
                       ({"kv": {"value": "filled", "range": [0, 1]}}, "a range is for one of the stack's numbers")):
        f.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm@0.6", "stack": stack}))
        with pytest.raises(ValueError, match=msg):
            load_stack(str(f))


@pytest.mark.parametrize("number", ["layer_host_s", "ar_norm_epilogue_share", "tokenweave_floor_s",
                                    "ubatch_switch_s", "ubatch_start_s", "launch_host_s"])
def test_only_the_ops_readers_names_price_a_stack_number_apart(number):
    """sim/sensitivity.py READERS, held to the code: every op of every schedule that could read the number
    (eager and compiled vLLM stacks with the fused all-reduce + RMSNorm on, prefill over DBO's and
    TokenWeave's thresholds and decode at batch 64), priced at two values of it: the ops priced apart are
    all among READERS' and there is at least one."""
    from tpsim.sim.predict import Simulator
    from tpsim.sim.sensitivity import READERS
    prof = load_profile("h100-sxm")
    base = make_stack({"ar_norm_fusion": "vllm"}, prof.stack_defaults, preset=load_stack("vllm").values)
    moved, outside = 0, []
    for st in (base, make_stack({"compile_prefill": False, "compile_decode": False, "decode_graphs": False},
                                base=base)):
        w = Workload(get_model("llama-3.1-8b").truncated(2), 8, prof, batch=64, prompt_len=1024, gen_len=4,
                     stack=st, memory_check=False)
        a, b = getattr(st, number), getattr(st, number) * 0.5 + 1e-6 if number.endswith("_s") else 0.25
        sims = [Simulator(replace(w, stack=replace(st, **{number: v})), record=False, mode="fast") for v in (a, b)]
        for spec in ("standard", "dbo", "tokenweave", "token-split"):
            for step in (w.prefill_step(), w.decode_step(1)):
                s = w.schedule(spec, step)
                for op in s.ops:
                    got = [(sim.comm_s(op, step.phase) if op.is_comm else sim.cost.compute_s(op, step.phase, s),
                            sim.cost.issue_s(op, step.phase, s)) for sim in sims]
                    if got[0] != got[1]:
                        moved += 1
                        if not READERS[number](op):
                            outside.append((spec, step.phase, op.name))
    assert moved and not outside, outside
