"""Hugging Face config.json -> ModelSpec, on the public configs of each supported architecture
(tests/fixtures/hf, sources in SOURCES.md); what the variants add to the IR and what it costs."""
import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import roofline_s, separable_work
from tpsim.sim.model.hf.config import spec_from_hf
from tpsim.sim.model.presets import MODELS, get_model, valid_tp
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step

HF = os.path.join(os.path.dirname(__file__), "fixtures", "hf")


def hf(name, file=False):
    return os.path.join(HF, name, "config.json") if file else os.path.join(HF, name)


def cfg(name):
    with open(hf(name, True)) as f:
        return json.load(f)


@pytest.mark.parametrize("name, shape, flags, params_b", [
    # (layers, hidden, heads, kv, head_dim, ffn, vocab, tied), (qkv_bias, qk_norm, rope_theta, window)
    ("llama-3.1-8b", (32, 4096, 32, 8, 128, 14336, 128256, False), (False, False, 5e5, 0), 8.030),
    ("mistral-7b-v0.3", (32, 4096, 32, 8, 128, 14336, 32768, False), (False, False, 1e6, 0), 7.248),
    ("mistral-7b-v0.1", (32, 4096, 32, 8, 128, 14336, 32000, False), (False, False, 1e4, 4096), 7.242),
    ("qwen2.5-7b", (28, 3584, 28, 4, 128, 18944, 152064, False), (True, False, 1e6, 0), 7.616),
    ("qwen2.5-72b", (80, 8192, 64, 8, 128, 29568, 152064, False), (True, False, 1e6, 0), 72.706),
    ("qwen3-8b", (36, 4096, 32, 8, 128, 12288, 151936, False), (False, True, 1e6, 0), 8.191),
    # head_dim 128 with hidden 1024 / 16 heads = 64: the config's head_dim wins; tied embeddings
    ("qwen3-0.6b", (28, 1024, 16, 8, 128, 3072, 151936, True), (False, True, 1e6, 0), 0.596),
])
def test_each_architecture(name, shape, flags, params_b):
    for ref in (hf(name), hf(name, True)):          # the folder or the file itself
        m = get_model(ref)
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, m.tied_embeddings) == shape
        assert (m.qkv_bias, m.qk_norm, m.rope_theta, m.sliding_window) == flags
        # the published parameter counts (7.62B Qwen2.5-7B, 72.7B Qwen2.5-72B, 8.19B Qwen3-8B, 0.6B ...)
        assert m.param_count() / 1e9 == pytest.approx(params_b, abs=1e-3)
        assert m.name == name


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "mistral-7b-v0.3", "llama-3.1-8b",
                                  "llama-3-8b"])
def test_presets_are_their_configs(name):
    m = get_model(hf(name))
    assert replace(m, description=MODELS[name].description) == MODELS[name]


def test_truncation_and_valid_tp():
    m = get_model(hf("qwen2.5-7b") + "[:3]")
    assert (m.name, m.layers) == ("qwen2.5-7b[:3]", 3)
    assert valid_tp(m, 16) == [1, 2, 4]            # 28 heads, 4 KV heads: TP 8 splits neither


@pytest.mark.parametrize("edit, why", [
    ({}, None),
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"},
     "architecture GPT2LMHeadModel is not one tpsim prices"),
    ({"architectures": ["Qwen2MoeForCausalLM"], "num_experts": 60}, "mixture-of-experts model (num_experts=60)"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"attention_bias": True}, "also biases o_proj"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "a quantized checkpoint (awq)"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor 0.5"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"num_attention_heads": 30, "head_dim": 128}, "heads (30) must be a multiple of kv_heads (8)"),
    ({"num_attention_heads": 30}, "hidden_size 4096 is not a multiple of num_attention_heads 30"),
    ({"hidden_size": "4096"}, "'hidden_size' must be an integer"),
    ({"num_hidden_layers": None}, "missing 'num_hidden_layers'"),
])
def test_refusals_say_why(edit, why):
    c = cfg("llama-3.1-8b") | edit
    if why is None:
        assert spec_from_hf(c, "x", "c.json").hidden == 4096
        return
    with pytest.raises(ValueError, match=None) as e:
        spec_from_hf(c, "x", "c.json")
    msg = str(e.value)
    assert msg.startswith("c.json") and why in msg and "\n" not in msg


def test_cli_refuses_moe_and_broken_json_in_one_line(tmp_path):
    r = CliRunner().invoke(main, ["predict", "--model", hf("mixtral-8x7b"), "--tp", "2"])
    assert r.exit_code == 2 and "MixtralForCausalLM is a mixture-of-experts model" in r.output
    assert len(r.output.strip().splitlines()) == 1
    bad = tmp_path / "config.json"
    bad.write_text('{\n "hidden_size": 4096,\n "num_hidden_layers" 32\n}')
    r = CliRunner().invoke(main, ["predict", "--model", str(tmp_path), "--tp", "2"])
    assert r.exit_code == 2 and f"{bad} line 3: not valid JSON" in r.output
    r = CliRunner().invoke(main, ["predict", "--model", str(tmp_path / "nope"), "--tp", "2"])
    assert r.exit_code == 2 and "model config not found" in r.output


def _attn_ops(model, tp=4, step=None):
    stack = Stack()
    step = step or Step.decode(2, 16, 8, 1, stack)
    s = build("standard", model, tp, step, stack)
    return {op.name: op for op in s.ops if op.layer == 0}


def test_variants_reach_the_ir_as_attrs_only_where_present():
    llama = _attn_ops(get_model("llama-3.1-8b"))
    qwen2 = _attn_ops(get_model(hf("qwen2.5-7b")))
    qwen3 = _attn_ops(get_model(hf("qwen3-8b")))
    assert "bias" not in dict(llama["L0.attn.qkv"].attrs) and "qk_norm" not in dict(llama["L0.attn.sdpa"].attrs)
    a = dict(qwen2["L0.attn.qkv"].attrs)
    assert (a["bias"], a["n"], a["k"]) == (1, (7 + 2 * 1) * 128, 3584)     # TP4: 7 q heads + 1 K + 1 V
    assert "bias" not in dict(qwen2["L0.attn.out"].attrs) and "bias" not in dict(qwen2["L0.mlp.up"].attrs)
    assert dict(qwen3["L0.attn.sdpa"].attrs)["qk_norm"] == 1 and "bias" not in dict(qwen3["L0.attn.qkv"].attrs)


def test_sliding_window_beyond_the_window_is_refused():
    m = get_model(hf("mistral-7b-v0.1"))
    stack = Stack()
    build("standard", m, 2, Step.prefill(1, 2048, 2048, stack), stack)      # 4096 positions: inside
    with pytest.raises(ValueError, match="attends to its last 4096 positions"):
        build("standard", m, 2, Step.prefill(1, 4000, 512, stack), stack)


def test_bias_and_qk_norm_are_priced_on_top_of_the_measured_plain_op():
    prof = load_profile("h100-sxm")
    cm = CostModel(prof, Stack())
    # Llama 3.1 8B's shapes with Qwen2's bias: its plain (n, k) is in the built-in GEMM tables
    q2 = _attn_ops(replace(get_model("llama-3.1-8b"), qkv_bias=True), step=Step.prefill(1, 1024, 512, Stack()))
    qkv = q2["L0.attn.qkv"]
    plain = replace(qkv, attrs=tuple(kv for kv in qkv.attrs if kv[0] != "bias"))
    t_plain, t_bias = cm.compute_s(plain, "prefill"), cm.compute_s(qkv, "prefill")
    assert cm._measured(plain, False) is not None            # the GEMM table has the plain (n, k)
    # bias: m*n adds and n reads, 0 launches -> its roofline, on top of the measured GEMM
    assert t_bias == pytest.approx(t_plain + roofline_s(prof, separable_work(qkv, False), "fp16"))
    assert 0 < t_bias - t_plain < 0.02 * t_plain
    q3 = _attn_ops(replace(get_model("llama-3.1-8b"), qk_norm=True), tp=8, step=Step.decode(1, 1024, 512, 1, Stack()))
    sdpa = q3["L0.attn.sdpa"]
    plain = replace(sdpa, attrs=tuple(kv for kv in sdpa.attrs if kv[0] != "qk_norm"))
    eager = CostModel(prof, Stack(compile_decode=False, decode_graphs=False))
    # eager: 12 more kernels (6 per norm), each at least the device floor on the GPU and one more
    # launch on the rank's CPU chain
    assert eager.compute_s(sdpa, "decode") - eager.compute_s(plain, "decode") >= 12 * prof.launch_s["graph"] - 1e-12
    assert eager.issue_s(sdpa, "decode") - eager.issue_s(plain, "decode") == pytest.approx(12 * prof.launch_s["eager"])
    # graphs: fused into the RoPE kernel -- a few KB more, hidden under the launch-bound decode kernel
    assert cm.compute_s(sdpa, "decode") >= cm.compute_s(plain, "decode")


def test_predict_and_models_show_from_a_config_path():
    r = CliRunner().invoke(main, ["predict", "--model", hf("qwen3-0.6b", True), "--tp", "2", "--gen", "8",
                                  "--schedule", "standard", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["model"] == "qwen3-0.6b"
    r = CliRunner().invoke(main, ["models", "--show", hf("qwen2.5-7b")])
    assert r.exit_code == 0, r.output
    assert "valid TP        1, 2, 4" in r.output and "qkv bias" in r.output
    last = r.output.strip().splitlines()[-1].split()
    assert last[:4] == ["4", "7", "1", "4736"] and " ".join(last[4:6]) == "[1152, 3584]"
    r = CliRunner().invoke(main, ["models", "--show", "mistral-7b-v0.3"])
    assert r.exit_code == 0 and "valid TP        1, 2, 4, 8, 16, 32" in r.output


def test_compare_finds_a_config_models_shapes_in_the_measured_json():
    """bench records the ModelSpec of a config.json run (its name is no preset): compare uses it."""
    from dataclasses import asdict
    from tpsim.calib.compare_measure import workload_of
    m = get_model(hf("qwen3-0.6b") + "[:2]")
    measured = {"model": m.name, "model_spec": asdict(m), "tp": 2, "batch": 1, "prompt_len": 16, "gen_len": 4,
                "schedules": [], "dtype": "fp16"}
    assert workload_of(measured, load_profile("h100-sxm")).model == m
    with pytest.raises(ValueError, match="unknown model 'other'"):      # a spec of another name is not used
        workload_of(measured | {"model": "other"}, load_profile("h100-sxm"))
