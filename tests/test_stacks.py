"""`--stack NAME|FILE` (sim/stack/presets/): every preset value names its source, the precedence flag >
preset > profile defaults > Stack's, stack files, and predict's `stack:` line and --json."""
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.stack.host_lane import HostStep
from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import DEFAULT_RANGES, Stack, Step, make_stack
from tpsim.sim.stack.presets import PRESETS, load_stack

WORKLOAD = ["--model", "llama-3.1-70b", "--tp", "4", "--batch", "8", "--prompt", "32", "--gen", "128",
            "--profile", "h100-sxm"]


def test_every_preset_value_names_a_source_and_builds_a_stack():
    assert set(PRESETS) == {"reference", "eager", "vllm@0.11", "vllm@0.6", "sglang@0.5", "trtllm@1", "trtllm@0.11"}
    for name, p in PRESETS.items():
        keys = {k for k in p.values if k not in ("host", "preset", "host_ranges", "ranges")} | \
            {f"host.{k}" for k in p.values.get("host", {})}
        assert keys == set(p.sources), name
        assert all(isinstance(s, str) and len(s) > 20 for s in p.sources.values()), name
        st = make_stack({}, None, preset=p.values)
        assert st.preset == name
        # a ranged number holds its value inside its range, and the stack carries the ranges
        assert {f"host.{k}" for k, _, _ in st.host_ranges} == {k for k in p.ranges if k.startswith("host.")}, name
        assert all(lo <= getattr(st.host, k) <= hi for k, lo, hi in st.host_ranges), name
        # the stack's own: the preset's over the defaults every stack has (sim.stack.spec.DEFAULT_RANGES)
        assert {f"stack.{k}": (lo, hi) for k, lo, hi in st.ranges} == \
            {f"stack.{k}": (lo, hi) for k, lo, hi in DEFAULT_RANGES} | {k: v for k, v in p.ranges.items()
                                                                        if k.startswith("stack.")}, name
        assert all(lo <= getattr(st, k) <= hi for k, lo, hi in st.ranges), name


def test_preset_names_carry_the_version_line_and_the_short_name_is_the_current_one():
    """NAME@LINE for every engine line; NAME alone is the CURRENT line (vllm = vllm@0.11); an unknown
    line of a known engine lists the lines there are."""
    assert load_stack("vllm") is load_stack("vllm@0.11") and load_stack("vllm@0.6").line == "0.6"
    assert "vllm" in PRESETS and PRESETS["vllm"] is PRESETS["vllm@0.11"] and "vllm" not in list(PRESETS)
    assert load_stack("sglang").name == "sglang@0.5" and load_stack("trtllm").name == "trtllm@1"
    with pytest.raises(ValueError, match=r"no preset for vllm version line '0.7'; .*vllm@0.11, vllm@0.6"):
        load_stack("vllm@0.7")
    assert "V0" in load_stack("vllm@0.6").engine and "0.11" in load_stack("vllm").engine


def test_precedence_flag_over_preset_over_profile_defaults():
    vllm = PRESETS["vllm"].values
    st = make_stack({"attention": "math", "kv": None}, {"kv": "static", "dtype": "bf16"}, preset=vllm)
    assert st.attention == "math"             # the explicit flag
    assert st.kv == "filled"                  # the preset over the profile's stack_defaults
    assert st.dtype == "bf16"                 # the profile's, the preset says nothing
    assert st.host == HostStep(**vllm["host"])
    assert make_stack({}, None).host == HostStep() and make_stack({}).preset == "reference"
    with pytest.raises(ValueError, match="unknown host field"):
        make_stack({"host": {"nope": 1}})


def test_stack_file_extends_a_preset_and_keeps_sources(tmp_path):
    f = tmp_path / "my-vllm.json"
    f.write_text(json.dumps({"format": "tpsim-stack", "name": "my-vllm", "extends": "vllm",
                             "stack": {"collective": "nccl"}, "host": {"handoff_per_rank_s": 4e-5},
                             "sources": {"host.handoff_per_rank_s": "fitted from my runs"}}))
    p = load_stack(str(f))
    st = make_stack({}, None, preset=p.values)
    assert (st.preset, st.collective, st.kv) == ("my-vllm", "nccl", "filled")
    assert st.host.handoff_per_rank_s == 4e-5 and st.host.output_per_seq_s == PRESETS["vllm"].values["host"]["output_per_seq_s"]
    assert p.sources["host.handoff_per_rank_s"] == "fitted from my runs"
    assert p.sources["collective"] == f"stack file {f}"
    assert p.sources["kv"] == PRESETS["vllm"].sources["kv"]
    bad = tmp_path / "bad.json"
    for doc, msg in (({"format": "x"}, "not a stack file"),
                     ({"format": "tpsim-stack", "host": {"schedule_s": -1}}, "host.schedule_s"),
                     ({"format": "tpsim-stack", "stack": {"atention": "flash"}}, "unknown stack field"),
                     ({"format": "tpsim-stack", "extends": "nope"}, "extends"),
                     # "" is no file: not read as the file's own folder ("... is a directory")
                     ({"format": "tpsim-stack", "extends": ""},
                      "'extends' must be a preset name or a stack file path, got ''$")):
        bad.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match=msg):
            load_stack(str(bad))
    with pytest.raises(ValueError, match="unknown stack 'vlm'"):
        load_stack("vlm")
    with pytest.raises(ValueError, match=r"^no stack named \(an empty name\); choose a preset \(reference, "):
        load_stack("")                  # not Path("") = ".", the working directory


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_predict_every_preset_runs_and_reports_it(preset):
    r = CliRunner().invoke(main, ["predict", "--stack", preset, *WORKLOAD, "--schedule", "ladder", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["stack"]["preset"] == preset
    module = {"vllm@0.6": "vllm_v0", "trtllm@0.11": "trtllm_trt"}.get(preset, preset.partition("@")[0])
    assert out["stack"]["preset_info"]["from"] == f"sim/stack/presets/{module}.py"
    assert set(out["stack"]["host"]) >= {"schedule_s", "overlap"}
    assert {s["schedule"] for s in out["schedules"]} == {"ladder"}


def test_predict_flag_overrides_the_preset_and_the_stack_line_names_it():
    r = CliRunner().invoke(main, ["predict", "--stack", "vllm", "--attention", "math", *WORKLOAD, "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.output)["stack"]
    assert st["attention"] == "math" and st["kv"] == "filled"
    assert "attention" not in st["preset_info"]["sources"] and "kv" in st["preset_info"]["sources"]
    r = CliRunner().invoke(main, ["predict", "--stack", "vllm", *WORKLOAD, "--schedule", "standard"])
    assert r.exit_code == 0 and "stack: vllm@0.11:" in r.output and "host lane in series" in r.output
    r = CliRunner().invoke(main, ["predict", "--stack", "nope", *WORKLOAD])
    assert r.exit_code == 2 and "unknown stack 'nope'" in r.output and "Traceback" not in r.output


def test_the_vllm_host_lane_slows_a_decode_step_in_series(tmp_path):
    """vLLM's choices with and without its host lane: in series, each decode step (batch 8, TP 4) pays the
    lane's lead (schedule, hand-off, prepare, launch) + post + the last of 4 ranks' stagger (3 polls of
    the hand-off, and E[max of 4 normals] = 1.0294 spreads), exactly (filled KV: sampled steps, all
    shifted alike)."""
    h = PRESETS["vllm"].values["host"]
    off = tmp_path / "no-host.json"
    off.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm",
                               "host": {k: (False if k == "overlap" else 0) for k in h}}))

    def decode_step_s(stack):
        r = CliRunner().invoke(main, ["predict", "--stack", stack, *WORKLOAD, "--schedule", "standard", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)["schedules"][0]["decode_s"] / 127
    lane_s = (h["schedule_s"] + h["schedule_per_seq_s"] * 8 + h["handoff_s"] + h["handoff_per_seq_s"] * 8
              + h["prepare_s"] + h["prepare_per_seq_s"] * 8 + h["launch_s"]
              + h["output_s"] + h["output_per_seq_s"] * 8
              + 3 * h["handoff_per_rank_s"] + 1.0294 * h["rank_spread_s"])
    assert decode_step_s("vllm") - decode_step_s(str(off)) == pytest.approx(lane_s, rel=1e-5)


def test_preset_custom_all_reduce_falls_back_where_the_profile_has_none():
    """On a p2p-off profile `--stack vllm` prices NCCL and says so: vLLM disables its custom all-reduce
    without GPU peer access (sim/price/comm/custom_allreduce.py's rule); an explicit --collective custom (a profile
    table's impl) is still refused."""
    args = ["--model", "llama-3.1-8b", "--tp", "4", "--batch", "8", "--prompt", "32", "--gen", "16",
            "--profile", "h100-sxm-p2p-off", "--schedule", "standard", "--json"]
    r = CliRunner().invoke(main, ["predict", "--stack", "vllm", *args])
    assert r.exit_code == 0
    doc = json.loads(r.output[r.output.index("{"):])
    assert doc["stack"]["collective"] == "vllm-custom"
    assert any("lacks GPU P2P capability; falls back to NCCL" in n for n in doc["schedules"][0]["notes"])
    r = CliRunner().invoke(main, ["predict", "--stack", "vllm", "--collective", "custom", *args])
    assert r.exit_code == 2 and "no collective implementation 'custom'" in r.output


def test_sweep_takes_the_stack_as_predict_does(tmp_path):
    """`tpsim sweep --stack vllm` (the same --stack declaration): its row is predict --stack vllm's,
    its checkpoint key names the preset and its host lane; an unknown stack is a one-line error."""
    point = ["--model", "llama-3.1-8b", "--tp", "2", "--batch", "4", "--prompt", "32", "--gen", "16",
             "--profile", "h100-sxm"]
    out = tmp_path / "s.csv"
    r = CliRunner().invoke(main, ["sweep", "--stack", "vllm", "--model", "llama-3.1-8b", "--tp", "2", "--batch", "4",
                                  "--prompt", "32", "--gen", "16", "--profile", "h100-sxm", "--schedule", "ladder",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.with_suffix(".json").read_text())
    std = next(x for x in rows if x["schedule"] == "standard")
    p = CliRunner().invoke(main, ["predict", "--stack", "vllm", *point, "--schedule", "standard", "--json"])
    assert p.exit_code == 0, p.output
    assert std["decode_s"] == pytest.approx(json.loads(p.output)["schedules"][0]["decode_s"], rel=1e-12)
    plain = CliRunner().invoke(main, ["predict", *point, "--schedule", "standard", "--json"])
    assert std["decode_s"] != pytest.approx(json.loads(plain.output)["schedules"][0]["decode_s"], rel=1e-6)
    from tpsim.commands import sweep_grid as sw
    from tpsim.sim.grid import grid
    key = json.loads(sw.point_key(grid(["llama-3.1-8b"], [2], [4], ["h100-sxm"], 32, 16, [1.0], [1.0])[0],
                                  ("standard",), {"kv": "static", "head": None}, preset=PRESETS["vllm"].values))
    assert key["preset"]["preset"] == "vllm@0.11" and key["preset"]["host"]["output_s"] > 0
    assert key["stack"] == {"kv": "static"}          # the flags given, None = not given
    bad = CliRunner().invoke(main, ["sweep", "--stack", "vlm", *point, "--out", str(tmp_path / "b.csv")])
    assert bad.exit_code == 2 and "unknown stack 'vlm'" in bad.output and "Traceback" not in bad.output


def _attention_impls(model_name: str, stack: Stack) -> tuple[set, tuple]:
    step = Step("decode", batch=2, q_len=1, start_pos=32, kv_len=33, logits_len=1)
    s = build("standard", get_model(model_name), 2, step, stack)
    return {op.attr("impl") for op in s.ops if op.kind == "attention"}, s.notes


def test_sweep_keeps_a_flag_that_equals_the_default_over_the_preset(tmp_path):
    """`--stack sglang --head replicated`: replicated is Stack's default, but the user gave it, so it
    wins over the preset's vocab-parallel head in sweep as in predict (sweep once rebuilt the flags
    from the fields that differed from Stack(), dropping this one)."""
    point = ["--model", "llama-3.1-8b", "--tp", "2", "--batch", "4", "--prompt", "32", "--gen", "16",
             "--profile", "l40s-pcie"]
    out = tmp_path / "s.csv"
    r = CliRunner().invoke(main, ["sweep", "--stack", "sglang", "--head", "replicated", *point,
                                  "--schedule", "ladder", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {x["schedule"]: x for x in json.loads(out.with_suffix(".json").read_text())}
    for flags, same in ((["--head", "replicated"], True), ([], False)):
        p = CliRunner().invoke(main, ["predict", "--stack", "sglang", *flags, *point, "--schedule", "ladder", "--json"])
        assert p.exit_code == 0, p.output
        for s in json.loads(p.output)["schedules"]:
            assert (rows[s["schedule"]]["decode_s"] == pytest.approx(s["decode_s"], rel=1e-12)) is same


def test_sglang_attention_follows_the_model_architecture():
    """SGLang's auto-select gives FA3 to the architectures of is_fa3_default_architecture only
    (Stack.attention_archs): a Mistral runs FlashInfer, noted; an attention the user names runs for
    every model; a stack file's JSON list becomes the tuple."""
    sglang = make_stack({}, None, preset=PRESETS["sglang"].values)
    assert "LlamaForCausalLM" in sglang.attention_archs and "MistralForCausalLM" not in sglang.attention_archs
    impls, notes = _attention_impls("llama-3.1-8b", sglang)
    assert impls == {"fa3"} and not any("attention_archs" in n for n in notes)
    impls, notes = _attention_impls("qwen3-8b", sglang)                 # Qwen3ForCausalLM: in the set
    assert impls == {"fa3"}
    impls, notes = _attention_impls("mistral-7b-v0.3", sglang)
    assert impls == {"flashinfer"}
    assert any("MistralForCausalLM" in n and "runs flashinfer" in n for n in notes)
    forced = make_stack({"attention": "fa3"}, None, preset=PRESETS["sglang"].values)
    assert forced.attention_archs == () and _attention_impls("mistral-7b-v0.3", forced)[0] == {"fa3"}
    # vLLM picks FA3 for every architecture (no list)
    assert _attention_impls("mistral-7b-v0.3", make_stack({}, None, preset=PRESETS["vllm"].values))[0] == {"fa3"}
    assert make_stack({"attention_archs": ["MistralForCausalLM"]}).attention_archs == ("MistralForCausalLM",)
    with pytest.raises(ValueError, match="attention_archs"):
        make_stack({"attention_archs": "MistralForCausalLM"})


def test_a_hugging_face_config_carries_its_architecture():
    hf = Path(__file__).parent / "fixtures" / "hf"
    assert get_model(str(hf / "mistral-7b-v0.3")).architecture == "MistralForCausalLM"
    assert get_model(str(hf / "qwen2.5-7b")).architecture == "Qwen2ForCausalLM"
    # the presets written from those configs say the same
    for name in ("mistral-7b-v0.3", "qwen2.5-7b", "qwen3-8b", "llama-3.1-8b"):
        assert get_model(name).architecture == get_model(str(hf / name)).architecture, name


def test_a_stack_file_is_read_by_the_input_policy_and_knows_its_chain(tmp_path):
    """A --stack file is read as every input is (a FIFO or a duplicate key refused in one line, not a
    hang or a silent overwrite), and the Preset lists the files of its `extends` chain (what
    import-engine-bench must not overwrite)."""
    from tpsim.sim.stack.presets import load_stack
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm", "host": {"prepare_s": 1e-4}}))
    top = tmp_path / "top.json"
    top.write_text(json.dumps({"format": "tpsim-stack", "extends": "base.json"}))
    assert load_stack(str(top)).files == (str(top), str(base)) and load_stack("vllm").files == ()
    fifo = tmp_path / "s.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is a FIFO, not a regular file"):
        load_stack(str(fifo))
    dup = tmp_path / "dup.json"
    dup.write_text('{"format": "tpsim-stack", "extends": "vllm", "extends": "sglang"}')
    with pytest.raises(ValueError, match="appears twice"):
        load_stack(str(dup))


def test_a_stack_written_as_json_and_read_back_is_the_same_stack():
    """A calibration case keeps its stack as dataclasses.asdict in the state file (calib/overlap_fit.py) and
    rebuilds it with make_stack: every preset's stack, its host and own ranges (field, lo, hi) included,
    comes back equal."""
    import dataclasses
    import json
    for name, p in PRESETS.items():
        st = make_stack({}, None, preset=p.values)
        assert make_stack(json.loads(json.dumps(dataclasses.asdict(st)))) == st, name
