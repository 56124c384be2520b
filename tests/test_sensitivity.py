"""A profile number given as its source's range, and whether the schedules' order holds over it
(sim/sensitivity.py): the parse of "range", the settings rerun, the order comparison on toy
numbers, and `tpsim predict`'s note and JSON on a real profile extending h100-sxm."""
from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim import predict as predict_module
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.check import AS_READ, parse
from tpsim.sim.hardware.schema import ProfileError
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.price.cost import UNPRICED, CostModel
from tpsim.sim.schedule.language import build
from tpsim.sim.sensitivity import (NET_HOST, Flip, Ranged, Sensitivity, check, net_host_moves, order_flips,
                                  ranged_values, settings, with_values)
from tpsim.sim.stack.host_lane import HostStep
from tpsim.sim.stack.spec import Stack


# ---------------------------------------------------------------- the order, on toy tokens/s

def test_order_flips_names_each_reversed_pair_with_the_leader_at_the_profiles_values_first():
    base = {"standard": 100.0, "ladder": 130.0, "parallel": 128.0}
    # parallel overtakes ladder; both stay ahead of standard
    assert order_flips(base, {"standard": 100.0, "ladder": 126.0, "parallel": 128.0}) == [("ladder", "parallel")]
    # standard overtakes parallel only
    assert order_flips(base, {"standard": 129.0, "ladder": 131.0, "parallel": 128.0}) == [("parallel", "standard")]
    # a tie at the end is no reversal (strictly ahead on both sides)
    assert order_flips(base, {"standard": 100.0, "ladder": 128.0, "parallel": 128.0}) == []


def test_settings_are_every_corner_for_few_numbers_and_each_alone_beyond():
    two = (Ranged("a", 1.0, 0.5, 2.0), Ranged("b", 10.0, 9.0, 11.0))
    assert settings(two) == [(("a", 0.5), ("b", 9.0)), (("a", 0.5), ("b", 11.0)),
                             (("a", 2.0), ("b", 9.0)), (("a", 2.0), ("b", 11.0))]
    five = tuple(Ranged(f"x{i}", 1.0, 0.0, 2.0) for i in range(5))
    alone = settings(five)
    assert len(alone) == 10                                   # 5 numbers x (lo, hi), not 2^5 = 32 corners
    assert alone[0] == (("x0", 0.0),) + tuple((f"x{i}", 1.0) for i in range(1, 5))
    assert settings(()) == []


def test_the_note_names_the_pair_the_count_and_the_setting_that_reverses_it_most():
    ranged = (Ranged("overlap.compute_slowdown", 1.21, 1.18, 1.24),)
    lo, hi = (("overlap.compute_slowdown", 1.18),), (("overlap.compute_slowdown", 1.24),)
    sens = Sensitivity(ranged, {"ladder": 110.0, "parallel": 108.0},
                       {lo: {"ladder": 111.0, "parallel": 108.0}, hi: {"ladder": 107.0, "parallel": 108.0}},
                       (Flip(hi, "ladder", "parallel", (107.0, 108.0)),))
    (note,) = sens.notes()
    assert note.startswith("order not settled by the sources: ladder leads parallel (110.0 vs 108.0 tokens/s)")
    assert "parallel leads at 1 of 2 settings" in note
    assert "overlap.compute_slowdown 1.21 in 1.18-1.24" in note
    assert "most with overlap.compute_slowdown 1.24: parallel 108.0 vs ladder 107.0" in note
    assert sens.to_dict()["flips"] == [{"ahead": "ladder", "behind": "parallel",
                                        "setting": {"overlap.compute_slowdown": 1.24},
                                        "tokens_per_s": {"ladder": 107.0, "parallel": 108.0}}]


# ---------------------------------------------------------------- "range" in a profile

def test_builtin_profiles_carry_the_ranges_their_sources_state_and_an_override_drops_them():
    # the per-CTA rate of a decode attention grid: the marginals its source lists (sim/price/decode_grid.py)
    rate = {"compute.decode_attention.cta_gbps": (28.0, 60.0)}
    jitter = {"jitter.arrival.node.mean_us": (0.05, 2.1)}      # each GPU's own speed between collectives
    jitter |= {"collectives.graph_net_host_us": (13.0, 85.0)}   # NCCL's graph host node (torchcomms#1203, #3646)
    assert load_profile("h100-sxm").ranges == rate | {"overlap.compute_slowdown": (1.18, 1.24),
                                                      "overlap.comm_slowdown": (1.18, 1.24)} | jitter
    assert load_profile("h100-sxm-p2p-off").ranges == load_profile("h100-sxm").ranges      # via extends
    # the co-scheduling twin replaces the flat factors by 1.0 (its leaf has no range) and ranges NCCL's
    # 2x-3x HBM bytes per link byte instead
    assert load_profile("h100-sxm-coschedule").ranges == rate | {"overlap.gpu.hbm_per_bus_byte": (2.0, 3.0)} | jitter


def test_the_graph_host_node_is_a_setting_only_where_a_collective_crosses_nccls_node_boundary():
    """collectives.graph_net_host_us (26 us, range 13-85) is paid by a captured collective across NCCL nodes
    only (CostModel.host_s): 70B TP8 in one NVLink box never does, so its ends are no setting to rerun; TP16
    over two boxes does, and so does TP8 with P2P off (NCCL splits the box into 2 nodes); eager decode
    (no CUDA graph) does not."""
    def moves(profile: str, tp: int, stack: Stack = Stack()) -> bool:
        w = Workload(get_model("llama-3.1-70b"), tp, load_profile(profile), stack=stack, memory_check=False)
        r = next(r for r in ranged_values(w.profile) if r.path == NET_HOST)
        return net_host_moves(r, w, ["ladder"])
    assert not moves("h100-sxm", 8) and moves("h100-sxm", 16) and moves("h100-sxm-p2p-off", 8)
    assert not moves("h100-sxm-p2p-off", 8, Stack(decode_graphs=False))
    other = Ranged("overlap.comm_slowdown", 1.21, 1.18, 1.24)
    assert net_host_moves(other, Workload(get_model("llama-3.1-70b"), 8, load_profile("h100-sxm")), [])


def _with(path: str, leaf) -> dict:
    data = json.loads(json.dumps(load_profile("h100-sxm").raw))
    cur = data
    *up, last = path.split(".")
    for part in up:
        cur = cur[part]
    cur[last] = leaf
    return data


@pytest.mark.parametrize("path, leaf, message", [
    ("overlap.compute_slowdown", {"value": 1.21, "range": 1.2, "source": "s"},
     "field 'overlap.compute_slowdown.range' must be [lo, hi], two numbers around 'value', got 1.2"),
    ("overlap.compute_slowdown", {"value": 1.21, "range": [1.1, 1.2, 1.3], "source": "s"},
     "field 'overlap.compute_slowdown.range' must be [lo, hi]"),
    ("overlap.compute_slowdown", {"value": 1.21, "range": [1.22, 1.3], "source": "s"},
     "field 'overlap.compute_slowdown.range' must hold 'value' (1.21) with lo < hi, got [1.22, 1.3]"),
    ("overlap.compute_slowdown", {"value": 1.21, "range": [1.21, 1.21], "source": "s"},
     "must hold 'value' (1.21) with lo < hi, got [1.21, 1.21]"),
    # each end as valid as the value: the slowdown is a factor >= 1
    ("overlap.compute_slowdown", {"value": 1.21, "range": [0.5, 1.3], "source": "s"},
     "field 'overlap.compute_slowdown.range' must be >= 1.0, got 0.5"),
    ("overlap.compute_slowdown", {"value": 1.21, "range": [1.1, "2"], "source": "s"},
     "field 'overlap.compute_slowdown.range' must be a number, got '2'"),
    ("gpus_per_node", {"value": 8, "range": [4, 8], "source": "s"},
     "field 'gpus_per_node.range' is for a measured or derived number; a count has none"),
])
def test_a_malformed_range_is_refused_naming_the_field(path, leaf, message):
    with pytest.raises(ProfileError, match="profile mine") as e:
        parse(_with(path, leaf), "mine")
    assert message in str(e.value)


def test_a_range_on_a_choice_is_refused():
    data = json.loads(json.dumps(load_profile("h100-sxm-coschedule").raw))
    data["overlap"]["gpu"]["nccl_high_priority"] = {"value": False, "range": [0, 1], "source": "s"}
    with pytest.raises(ProfileError, match="'overlap.gpu.nccl_high_priority.range' is for a number"):
        parse(data, "mine")


# ---------------------------------------------------------------- tpsim predict

WIDE = {"format": "tpsim-profile", "version": 1, "name": "wide", "extends": "h100-sxm",
        "overlap": {"compute_slowdown": {"value": 1.21, "range": [1.0, 3.0], "source": "test: a wide range"},
                    "comm_slowdown": {"value": 1.21, "source": "test: no range"}},
        "jitter": {"arrival": {"node": {"mean_us": {"value": 0.3, "source": "test: no range"}}}}}
ARGS = ["predict", "--model", "llama-3.1-70b", "--tp", "8", "--schedule", "ladder", "--schedule", "parallel"]


def _profile(tmp_path, overlap: dict, name: str = "p") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(WIDE | {"overlap": overlap}))
    return str(path)


def test_predict_notes_an_order_that_reverses_within_a_range_and_keeps_the_profiles_values(tmp_path):
    """70B TP8 batch 1: ladder hides its all-reduces behind compute, parallel exposes one per layer.
    A compute slowdown of 3.0 while a collective runs beside it costs ladder more than its hiding
    saves, so parallel leads at that end; at 1.0 ladder leads further."""
    wide = _profile(tmp_path, WIDE["overlap"])
    res = CliRunner().invoke(main, ARGS + ["--profile", wide, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    sens = out["sensitivity"]
    assert sens["fields"] == {"overlap.compute_slowdown": {"value": 1.21, "range": [1.0, 3.0]}}
    assert [s["setting"] for s in sens["settings"]] == [{"overlap.compute_slowdown": 1.0},
                                                        {"overlap.compute_slowdown": 3.0}]
    lo, hi = (s["tokens_per_s"] for s in sens["settings"])
    assert lo["ladder"] > lo["parallel"] and hi["ladder"] < hi["parallel"]
    assert lo["standard"] == hi["standard"]                 # standard overlaps nothing: no slowdown applies
    assert [(f["ahead"], f["behind"], f["setting"]) for f in sens["flips"]] == [
        ("ladder", "parallel", {"overlap.compute_slowdown": 3.0})]
    # the table keeps the profile's own values: the same numbers as the same profile without a range
    plain = _profile(tmp_path, WIDE["overlap"] | {"compute_slowdown": {"value": 1.21, "source": "s"}}, "plain")
    res2 = CliRunner().invoke(main, ARGS + ["--profile", plain, "--json"])
    assert [s["tokens_per_s"] for s in json.loads(res2.output)["schedules"]] == \
        [s["tokens_per_s"] for s in out["schedules"]]
    assert json.loads(res2.output)["sensitivity"] == {"fields": {}, "settings": [], "flips": []}
    text = " ".join(CliRunner().invoke(main, ARGS + ["--profile", wide]).output.split())   # the note wraps
    assert "order not settled by the sources: ladder leads parallel" in text
    assert "most with overlap.compute_slowdown 3:" in text


def test_predict_says_nothing_when_the_order_holds_over_the_range(tmp_path):
    narrow = _profile(tmp_path, WIDE["overlap"] | {
        "compute_slowdown": {"value": 1.21, "range": [1.2, 1.22], "source": "test: a narrow range"}})
    res = CliRunner().invoke(main, ARGS + ["--profile", narrow])
    assert res.exit_code == 0, res.output
    assert "order not settled" not in res.output
    sens = json.loads(CliRunner().invoke(main, ARGS + ["--profile", narrow, "--json"]).output)["sensitivity"]
    assert len(sens["settings"]) == 2 and sens["flips"] == []


def test_profiles_show_prints_a_range_beside_its_value():
    res = CliRunner().invoke(main, ["profiles", "show", "h100-sxm"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "1.21 (source's range 1.18-1.24)" in res.output


def test_an_end_that_would_not_fit_in_memory_is_still_priced(tmp_path):
    """memory_gib 10-80: at 10 GiB a 70B TP8 rank (about 19 GiB) would not fit, but whether it fits is
    the workload's own check at the profile's value (80), not a speed question: the setting runs."""
    path = _profile(tmp_path, WIDE["overlap"] | {"compute_slowdown": {"value": 1.21, "source": "s"}})
    data = json.loads(open(path).read()) | {"memory_gib": {"value": 80, "range": [10, 80], "source": "test"}}
    open(path, "w").write(json.dumps(data))
    res = CliRunner().invoke(main, ARGS + ["--profile", path, "--json"])
    assert res.exit_code == 0, res.output
    sens = json.loads(res.output)["sensitivity"]
    assert [s["setting"] for s in sens["settings"]] == [{"memory_gib": 10}, {"memory_gib": 80}]
    assert sens["flips"] == []


def test_an_end_the_profiles_other_fields_do_not_allow_is_a_clear_error(tmp_path):
    """overlap.gpu.sms 120-132 on a profile whose GPCs sum to 132: the end 120 is no valid profile."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "bad",
                                "extends": "h100-sxm-coschedule",
                                "overlap": {"gpu": {"sms": {"value": 132, "range": [120, 132], "source": "t"}}}}))
    res = CliRunner().invoke(main, ARGS + ["--profile", str(path)])
    assert res.exit_code == 2
    assert "field 'overlap.gpu.gpc_sms' must list positive whole SM counts summing to overlap.gpu.sms" in res.output
    assert "overlap.gpu.sms = 120, overlap.gpu.hbm_per_bus_byte = 2, ends of the ranges" in res.output
    assert "Traceback" not in res.output


# ---------------------------------------------------------------- the reruns: no work for nothing

RANGED_BUILTINS = ("h100-sxm", "h100-sxm-coschedule", "a100-sxm", "l40s-pcie")


@pytest.mark.parametrize("name", RANGED_BUILTINS)
def test_a_setting_set_on_the_parsed_profile_is_the_profile_a_parse_of_it_gives(name):
    """with_values sets a number parse reads as is (sim.hardware.check.AS_READ) on the parsed profile:
    every field, the raw JSON and the ranges equal those of a parse of the edited file."""
    p = load_profile(name)
    for setting in settings(ranged_values(p)):
        data = json.loads(json.dumps(p.raw))
        for path, v in setting:
            cur = data
            for part in path.split("."):
                cur = cur[part]
            cur["value"] = v
        want, got = parse(data, p.source_path), with_values(p, setting)
        assert got == want and got.raw == want.raw and got.ranges == want.ranges
        assert [repr(getattr(got, f.name)) for f in fields(got)] == [repr(getattr(want, f.name)) for f in fields(want)]


def test_the_numbers_no_price_reads_are_read_by_no_price():
    """A cost model on a profile whose UNPRICED numbers are None prices every op of 70B TP8 (every
    schedule, prefill and decode, compiled and eager) as on the profile itself: a price that read
    one would fail or differ."""
    assert set(UNPRICED) <= set(AS_READ)
    p = load_profile("h100-sxm-coschedule")
    blank = replace(p, compute_slowdown=None, comm_slowdown=None,
                    coschedule=replace(p.coschedule, hbm_per_bus_byte=None))
    for stack in (Stack(), Stack(compile_prefill=False, compile_decode=False, decode_graphs=False)):
        w = Workload(get_model("llama-3.1-70b"), 8, p, stack=stack)
        a, b = CostModel(p, stack), CostModel(blank, stack)
        for spec in ("standard", "ladder", "spd:0.5", "parallel", "seq-parallel"):
            for step in (w.prefill_step(), w.decode_step(1)):
                s = build(spec, w.model.truncated(3), 8, step, stack)
                for op in s.ops:
                    price = (lambda c: c.comm_s(op, step.phase)) if op.is_comm else \
                        (lambda c: (c.compute_s(op, step.phase, s), c.issue_s(op, step.phase, s)))
                    assert price(a) == price(b), (spec, step.phase, op.name)


@pytest.mark.parametrize("name, reruns", [("h100-sxm", 60), ("h100-sxm-coschedule", 88)])
def test_the_reruns_price_nothing_again_and_simulate_only_the_passes_the_factors_move(name, reruns, monkeypatch):
    """70B TP8, default schedules: each setting's tokens/s equal a fresh prediction on the parsed profile
    at that setting; the reruns share the base prediction's prices and passes. Flat factors (h100-sxm:
    the two factors' 4 corners x the arrival jitter's 2 ends, 22 passes a setting): the jitter moves
    every timeline with a collective, so at each of its ends the 18 such passes are simulated once, then
    only ladder's 4 passes, where compute runs beside its all-reduces, at each further corner of the
    factors; upper-bound's 4 passes, which have no collective, not at all (the base prediction's serve):
    2 x (18 + 3 x 4) = 60 instead of 176. Co-scheduling (hbm_per_bus_byte's 2 ends x the jitter's 2): every pass of every setting, 88."""
    w = Workload(get_model("llama-3.1-70b"), 8, load_profile(name))
    scheds = ["standard", "ladder", "parallel", "spd:0.7", "upper-bound"]
    base = predict(w, scheds, record=False)
    runs = []
    real = predict_module.simulate
    monkeypatch.setattr(predict_module, "simulate", lambda *a, **k: runs.append(a[0].name) or real(*a, **k))
    sens = check(w, scheds, base)
    assert len(runs) == reruns
    monkeypatch.undo()
    for setting, tps in sens.ends.items():
        data = json.loads(json.dumps(w.profile.raw))
        for path, v in setting:
            cur = data
            for part in path.split("."):
                cur = cur[part]
            cur["value"] = v
        fresh = predict(replace(w, profile=parse(data, w.profile.source_path), memory_check=False), list(tps),
                        record=False)
        assert tps == {p.schedule: p.tokens_per_s for p in fresh}


def test_the_host_settings_at_the_profiles_values_reuse_the_base_predictions_passes(monkeypatch):
    """A stack with one ranged host term (output_s 1 ms, range 0-3 ms) on a profile with no ranges of its
    own: the settings are the term's two ends at the profile's values, and the lane never enters a
    one-rank pass, so they reuse the passes the base prediction kept (Prediction.simulator.kept_passes):
    no pass is simulated again, and each end's tokens/s equals a fresh prediction with the term there."""
    prof = replace(load_profile("h100-sxm"), ranges={})
    stack = Stack(host=HostStep(output_s=1e-3), host_ranges=(("output_s", 0.0, 3e-3),))
    w = Workload(get_model("llama-3.1-8b").truncated(2), 2, prof, batch=4, prompt_len=16, gen_len=4,
                 memory_check=False, stack=stack)
    scheds = ["standard", "ladder"]
    base = predict(w, scheds, record=False)
    runs = []
    real = predict_module.simulate
    monkeypatch.setattr(predict_module, "simulate", lambda *a, **k: runs.append(a[0].name) or real(*a, **k))
    sens = check(w, scheds, base)
    assert runs == [] and len(sens.ends) == 2
    monkeypatch.undo()
    for setting, tps in sens.ends.items():
        out_s = dict(setting)["host.output_s"]
        fresh = predict(replace(w, stack=replace(stack, host=HostStep(output_s=out_s))), scheds, record=False)
        assert tps == {p.schedule: p.tokens_per_s for p in fresh}
