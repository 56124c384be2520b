"""Model presets and `get_model` (a preset name, or a Hugging Face config.json, to a ModelSpec). The
shape types, ModelSpec and its per-rank TP Shard, are in sim/model/spec.py (re-exported here).

Shapes come from docs/sources.md §3 (the models' published configs); the Qwen and
Mistral presets from their Hugging Face config.json (source in each description). Any Llama-family
config.json is read by sim.model.hf.config wherever a model name is accepted (`get_model`).
"""
from __future__ import annotations

import os

from tpsim.sim.model.hf.config import load_hf_config
from tpsim.sim.model.spec import ModelSpec, RopeSpec, Shard, rope, valid_tp  # noqa: F401  (sim.model.presets is where callers look for them)


def _m(name, hidden, layers, heads, kv, head_dim, ffn, vocab, tied=False, desc="", **kw):
    return ModelSpec(name, hidden, layers, heads, kv, head_dim, ffn, vocab, tied, desc, **kw)


# RoPE of the Llama presets, from their Hugging Face config.json: Llama 3.1 (8B/70B/405B; 3.3 70B
# alike) `rope_scaling` llama3 factor 8, Llama 3.2 (1B/3B) factor 32, both low 1 / high 4 /
# original 8192 around theta 500000 (tests/fixtures/hf/llama-3.1-8b holds the 8B one); Llama 2 has
# no rope_theta (transformers' default 10000); CodeLlama sets rope_theta 1000000.
_LLAMA31 = rope(5e5, "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192)
_LLAMA32 = rope(5e5, "llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192)
_LLAMA3 = rope(5e5)            # Llama 3 (8B/70B, April 2024): rope_theta 500000, rope_scaling null
_LLAMA2, _CODELLAMA, _QWEN = rope(1e4), rope(1e6), rope(1e6)
# max_position_embeddings of the same config.json files (ModelSpec.max_context): Llama 3.1 and 3.2 131072
# (tests/fixtures/hf/llama-3.1-8b; meta-llama/Llama-3.2-1B states the same), Llama 3 8192
# (tests/fixtures/hf/llama-3-8b; meta-llama/Meta-Llama-3-70B states the same), Llama 2 4096
# (meta-llama/Llama-2-7b-hf), CodeLlama 16384 (codellama/CodeLlama-34b-hf); the Qwen and Mistral presets'
# from their fixtures below. The Ladder paper's shapes and the toys state none (0).
_CTX = {"llama-3.1": 131072, "llama-3": 8192, "llama-2": 4096, "codellama": 16384}

# Preset registry: name -> spec. Also feeds the CLI's choices.
MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    _m("llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, True, "Llama 3.2 1B (tied embeddings)", rope=_LLAMA32,
       max_context=_CTX["llama-3.1"]),
    _m("llama-3.2-3b", 3072, 28, 24, 8, 128, 8192, 128256, True, "Llama 3.2 3B (tied embeddings)", rope=_LLAMA32,
       max_context=_CTX["llama-3.1"]),
    _m("llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, desc="Llama 3.1 8B", rope=_LLAMA31, max_context=_CTX["llama-3.1"]),
    _m("llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, desc="Llama 3.1 70B", rope=_LLAMA31, max_context=_CTX["llama-3.1"]),
    _m("llama-3.1-405b", 16384, 126, 128, 8, 128, 53248, 128256, desc="Llama 3.1 405B", rope=_LLAMA31, max_context=_CTX["llama-3.1"]),
    _m("llama-3-8b", 4096, 32, 32, 8, 128, 14336, 128256, desc="Llama 3 8B (8K context)", rope=_LLAMA3,
       max_context=_CTX["llama-3"]),
    _m("llama-3-70b", 8192, 80, 64, 8, 128, 28672, 128256, desc="Llama 3 70B (8K context)", rope=_LLAMA3,
       max_context=_CTX["llama-3"]),
    _m("llama-2-7b", 4096, 32, 32, 32, 128, 11008, 32000, desc="Llama 2 7B (MHA)", rope=_LLAMA2, max_context=_CTX["llama-2"]),
    _m("llama-2-13b", 5120, 40, 40, 40, 128, 13824, 32000, desc="Llama 2 13B (MHA)", rope=_LLAMA2, max_context=_CTX["llama-2"]),
    _m("llama-2-70b", 8192, 80, 64, 8, 128, 28672, 32000, desc="Llama 2 70B", rope=_LLAMA2, max_context=_CTX["llama-2"]),
    _m("codellama-34b", 8192, 48, 64, 8, 128, 22016, 32000, desc="CodeLlama 34B", rope=_CODELLAMA,
       max_context=_CTX["codellama"]),
    # The Ladder Residual paper's own configurations (docs/sources.md §3).
    _m("ladder-1b", 1536, 40, 24, 24, 64, 4096, 49152, desc="Ladder paper '1B' (MHA)"),
    _m("ladder-3b", 2304, 40, 32, 32, 72, 9216, 49152, desc="Ladder paper '3B' (MHA)"),
    _m("ladder-405b", 16384, 126, 128, 16, 128, 53248, 128256, desc="Ladder paper's 405B (16 KV heads)"),
    _m("bloom-176b-llama", 14336, 70, 112, 112, 128, 50176, 250880,
       desc="BLOOM-176B dims in a Llama block (Ladder paper '176B')"),
    # Widely served Llama-family models, from their Hugging Face config.json (copies in
    # tests/fixtures/hf/, which a test reads back through sim.model.hf.config to hold these equal).
    _m("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, qkv_bias=True, rope=_QWEN, norm_eps=1e-6,
       architecture="Qwen2ForCausalLM", max_context=131072,
       desc="Qwen2.5 7B (qkv bias; huggingface.co/Qwen/Qwen2.5-7B config.json)"),
    _m("qwen2.5-72b", 8192, 80, 64, 8, 128, 29568, 152064, qkv_bias=True, rope=_QWEN, norm_eps=1e-5,
       architecture="Qwen2ForCausalLM", max_context=131072,
       desc="Qwen2.5 72B (qkv bias; huggingface.co/Qwen/Qwen2.5-72B config.json)"),
    _m("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, qk_norm=True, rope=_QWEN, norm_eps=1e-6,
       architecture="Qwen3ForCausalLM", max_context=40960,
       desc="Qwen3 8B (q/k norm; huggingface.co/Qwen/Qwen3-8B config.json)"),
    _m("mistral-7b-v0.3", 4096, 32, 32, 8, 128, 14336, 32768, rope=rope(1e6),
       architecture="MistralForCausalLM", max_context=32768,
       desc="Mistral 7B v0.3 (huggingface.co/mistralai/Mistral-7B-v0.3 config.json)"),
    # Tiny models for tests and CPU runs. toy-* follow docs/sources.md §8: an 8-layer stack whose hidden
    # size moves a 2-rank gloo group from communication-bound (512) to balanced (1024-2048).
    _m("tiny", 64, 2, 4, 2, 16, 128, 256, desc="4-head toy for numerics tests"),
    _m("toy-512", 512, 8, 8, 4, 64, 1536, 1024, desc="8-layer CPU toy, comm-bound on gloo"),
    _m("toy-1024", 1024, 8, 16, 8, 64, 2816, 1024, desc="8-layer CPU toy, balanced on gloo"),
    _m("toy-2048", 2048, 8, 16, 8, 128, 5632, 1024, desc="8-layer CPU toy, compute-heavier on gloo"),
]}


def get_model(name: str) -> ModelSpec:
    """Preset by name, or a Hugging Face config.json (or a folder holding one); `NAME[:K]` takes
    the first K layers (e.g. `llama-3.1-405b[:8]`, `path/to/config.json[:4]`)."""
    base, layers = split_layers(name)
    if base not in MODELS:
        if is_config_path(base):
            spec = load_hf_config(base)
            return spec.truncated(layers) if layers is not None else spec
        head, colon, k = base.rpartition(":")
        hint = f"; for its first {k} layers write {head}[:{k}]" if colon and head in MODELS and k.isdigit() else ""
        raise ValueError(f"unknown model {base!r}{hint}; choose from: {', '.join(MODELS)}, "
                         f"or a Hugging Face config.json (or its folder)")
    spec = MODELS[base]
    return spec.truncated(layers) if layers is not None else spec


def split_layers(name: str) -> tuple[str, int | None]:
    """`NAME[:K]` -> (NAME, K); a name without the suffix -> (name, None). ValueError for a bad K."""
    if not (name.endswith("]") and "[:" in name):
        return name, None
    base, _, rest = name.rpartition("[:")
    try:
        return base, int(rest[:-1])
    except ValueError:
        raise ValueError(f"bad layer count in model name {name!r}; use NAME[:K]") from None


def is_config_path(name: str) -> bool:
    """Is `name` meant as a file path (a .json, something with a path separator, an existing folder)?"""
    return name.endswith(".json") or os.sep in name or "/" in name or os.path.isdir(name)
