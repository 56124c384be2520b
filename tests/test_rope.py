"""RoPE as the config says: both config layouts read to one RopeSpec, what cannot be honoured is
refused in one line, and the harness's frequency table equals transformers' ROPE_INIT_FUNCTIONS."""
import json
import os

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.model.hf.config import spec_from_hf
from tpsim.sim.model.presets import MODELS, get_model, rope

HF = os.path.join(os.path.dirname(__file__), "fixtures", "hf")
LLAMA31 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=8192)


def _cfg(name):
    with open(os.path.join(HF, name, "config.json")) as f:
        return json.load(f)


def test_both_layouts_read_to_one_rope():
    hub = _cfg("llama-3.1-8b")                                   # top-level rope_theta + rope_scaling
    v5 = {k: v for k, v in hub.items() if k not in ("rope_theta", "rope_scaling")}
    v5["rope_parameters"] = dict(hub["rope_scaling"], rope_theta=hub["rope_theta"])
    a, b = spec_from_hf(hub, "x", "hub.json"), spec_from_hf(v5, "x", "v5.json")
    assert a.rope == b.rope == MODELS["llama-3.1-8b"].rope
    assert (a.rope.theta, a.rope.type, a.rope.get("factor")) == (5e5, "llama3", 8.0)
    # a 5.x config without rope_scaling used to be read as theta 10000 (the default)
    qwen = {k: v for k, v in _cfg("qwen3-8b").items() if k not in ("rope_theta", "rope_scaling")}
    qwen["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000}
    assert spec_from_hf(qwen, "x").rope == rope(1e6)
    # no theta anywhere: transformers' default 10000; legacy "type" spelling of the hub layout
    bare = {k: v for k, v in hub.items() if k not in ("rope_theta", "rope_scaling")}
    assert spec_from_hf(bare, "x").rope == rope(1e4)
    legacy = dict(bare, rope_scaling={"type": "linear", "factor": 2.0})
    assert spec_from_hf(legacy, "x").rope == rope(1e4, "linear", factor=2.0)


def test_llama3_presets_carry_their_scaling():
    for name, factor in (("llama-3.1-8b", 8.0), ("llama-3.1-70b", 8.0), ("llama-3.1-405b", 8.0),
                         ("llama-3.2-1b", 32.0), ("llama-3.2-3b", 32.0)):
        r = MODELS[name].rope
        assert (r.theta, r.type, r.get("factor"), r.get("low_freq_factor"), r.get("high_freq_factor"),
                r.get("original_max_position_embeddings")) == (5e5, "llama3", factor, 1.0, 4.0, 8192)
    assert MODELS["llama-2-7b"].rope == rope(1e4) and MODELS["qwen3-8b"].rope == rope(1e6)


@pytest.mark.parametrize("edit, why", [
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "rope type 'longrope' is not one tpsim computes"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope type 'llama3' needs low_freq_factor, high_freq_factor"),
    ({"rope_scaling": dict(LLAMA31, beta_fast=32)}, "rope type 'llama3' does not take beta_fast"),
    ({"rope_scaling": {"rope_type": "linear", "factor": "2"}}, "rope parameter factor must be a number"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0.5}}, "rope factor must be >= 1"),
    ({"rope_scaling": "llama3"}, "rope_scaling must be an object or null"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"}}},
     "rope_parameters per layer type"),
    ({"rope_parameters": dict(LLAMA31, rope_theta=5e5), "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
     "rope_parameters and rope_scaling disagree"),
    ({"rope_parameters": dict(LLAMA31, rope_theta=1e4)}, "rope_theta 500000.0 and rope_parameters.rope_theta"),
    ({"rope_scaling": {"rope_type": "mrope", "mrope_section": [16, 24, 24]}}, "multimodal rope"),
    ({"rope_theta": -1}, "rope_theta must be a number > 1"),
])
def test_rope_refusals_say_why(edit, why):
    c = _cfg("llama-3.1-8b") | edit
    with pytest.raises(ValueError) as e:
        spec_from_hf(c, "x", "c.json")
    assert str(e.value).startswith("c.json") and why in str(e.value) and "\n" not in str(e.value)


@pytest.mark.hw
def test_dynamic_past_its_table_is_refused_before_any_process(tmp_path):
    pytest.importorskip("torch")                 # check itself needs torch (else refused earlier)
    c = _cfg("llama-3.1-8b") | {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, "num_hidden_layers": 1,
                                "max_position_embeddings": 16, "hidden_size": 64, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}
    (tmp_path / "config.json").write_text(json.dumps(c))
    r = CliRunner().invoke(main, ["check", "--model", str(tmp_path), "--nproc", "1", "--prompt", "12", "--gen", "8"])
    assert r.exit_code == 2 and "rope type 'dynamic' past max_position_embeddings (16)" in r.output, r.output


def test_models_show_reports_a_v5_config_rope():
    r = CliRunner().invoke(main, ["models", "--show", os.path.join(HF, "tiny-llama3-v5")])
    assert r.exit_code == 0, r.output
    # the value wraps at its spaces to fit 80 columns: read it with the line breaks as spaces
    assert ("rope theta 500000, llama3 (factor 8, high_freq_factor 4, low_freq_factor 1, "
            "original_max_position_embeddings 8192)") in " ".join(r.output.split())
    assert "LlamaForCausalLM, rope llama3" in r.output
    assert get_model(os.path.join(HF, "tiny-llama3-v5")).rope == MODELS["llama-3.1-8b"].rope


# ---------------------------------------------------------------- against transformers

ROPES = [
    ({"rope_type": "default"}, 64),
    ({"rope_type": "linear", "factor": 4.0}, 64),
    ({"rope_type": "dynamic", "factor": 2.0}, 64),
    (LLAMA31, 128),
    (LLAMA31, 16),
    (dict(LLAMA31, factor=32.0), 64),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 128),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
      "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1, "truncate": False}, 64),
    ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "attention_factor": 1.5}, 32),
]


@pytest.mark.hw
@pytest.mark.parametrize("params, head_dim", ROPES)
def test_frequencies_equal_transformers(params, head_dim):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from tpsim.hw.model import rope_inv_freq, rope_tables
    theta = 5e5 if params["rope_type"] == "llama3" else 1e6
    hf_cfg = transformers.LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=head_dim, intermediate_size=128, num_hidden_layers=1, vocab_size=64,
                                      max_position_embeddings=131072, rope_parameters=dict(params, rope_theta=theta))
    if params["rope_type"] == "default":
        want, want_scale = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding \
            .compute_default_rope_parameters(hf_cfg)
    else:
        want, want_scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf_cfg, "cpu")
    spec = spec_from_hf(json.loads(hf_cfg.to_json_string()) | {"architectures": ["LlamaForCausalLM"]}, "x")
    got, scale = rope_inv_freq(spec.rope, head_dim)
    assert got.dtype == torch.float32 and got.shape == (head_dim // 2,)
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert scale == pytest.approx(want_scale, rel=1e-12)
    if params["rope_type"] not in ("default", "dynamic"):   # scaling moves frequencies: the test has teeth
        plain, _ = rope_inv_freq(rope(theta), head_dim)
        assert not torch.allclose(plain, got)
    # the tables the harness attends with: transformers' rotary embedding over the same positions
    emb = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(hf_cfg)
    cos_hf, sin_hf = emb(torch.zeros(1, 1, dtype=torch.float32), torch.arange(64)[None])
    cos, sin = rope_tables(64, head_dim, rope=spec.rope)
    torch.testing.assert_close(cos, cos_hf[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sin, sin_hf[0], rtol=1e-6, atol=1e-6)
