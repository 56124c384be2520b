"""A Hugging Face `config.json` -> ModelSpec, for the Llama-family dense decoders tpsim prices.

Accepted: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM (by
`architectures`, else `model_type`). They share tpsim's forward -- RMSNorm, RoPE, GQA attention,
SwiGLU MLP, Megatron TP split -- and differ only in what ModelSpec carries:
  * heads, KV heads, head_dim (Qwen3 and Mistral may set head_dim != hidden / heads), FFN width,
    vocab, tied embeddings (`tie_word_embeddings`, default false for all four);
  * Qwen2/2.5: bias on the q, k and v projections (always, in transformers' Qwen2Attention);
  * Qwen3: RMSNorm over head_dim on each q and k head before RoPE (Qwen3Attention.q_norm/k_norm);
  * rope (sim.model.hf.rope, both layouts: hub `rope_theta` + `rope_scaling`, transformers 5.x
    `rope_parameters`): default, linear, dynamic, llama3, yarn only change the frequency tables, not
    the work per token, so they are recorded (ModelSpec.rope, which the harness runs), not priced;
    other rope types and a partial rotary factor are refused;
  * Mistral's `sliding_window` (v0.1: 4096) is kept: a workload attending further is refused
    by the schedule builder rather than priced as full attention.
Anything tpsim would price wrongly is refused with one line that says why: mixture-of-experts
(no expert routing or expert parallelism in the IR), biases on o_proj or the MLP (a row-parallel
bias is added once after the all-reduce, not per rank), activations other than SiLU, quantized
checkpoints other than FP8 (sim/model/hf/quant.py), per-layer sliding windows (Qwen's use_sliding_window). Reads one local file: no network.
"""
from __future__ import annotations

import math
from pathlib import Path

from tpsim.sim.model.hf.rope import rope_of
from tpsim.sim.model.hf.check import check_config, read_config
from tpsim.sim.model.hf.quant import quant_of
from tpsim.sim.model.spec import ModelSpec

ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                 "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
             "num_experts_per_tok")


def config_path(path: str | Path) -> Path:
    """The config.json itself, or the one inside a folder (a downloaded snapshot)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():                   # present but not a regular file: refused by read_config, by name
        raise ValueError(f"model config not found: {p} (give a preset name, a config.json or its folder)")
    return p


def load_hf_config(path: str | Path) -> ModelSpec:
    p = config_path(path)
    cfg = read_config(p)                 # the input policy: regular file, bounded, BOM ok, strict JSON
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return spec_from_hf(cfg, name, str(p))


def spec_from_hf(cfg: dict, name: str, where: str = "config.json") -> ModelSpec:
    """ModelSpec of one config dict; ValueError (one line naming `where`) for what tpsim cannot price."""
    check_config(cfg, where)             # types and the bounds table first (sim/model/hf/check.py)
    arch = _architecture(cfg, where)
    kind = ARCHITECTURES[arch]

    def num(key, default=None, *, kind_=int):
        v = cfg.get(key, default)
        if v is None:
            raise ValueError(f"{where}: missing {key!r} (needed for a {arch})")
        if kind_ is int and isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind_ is int and not isinstance(v, int)):
            raise ValueError(f"{where}: {key!r} must be {'an integer' if kind_ is int else 'a number'}, got {v!r}")
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{where}: {key!r} must be positive, got {v!r}")
        return v

    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act != "silu":
        raise ValueError(f"{where}: hidden_act {act!r}: tpsim's MLP is SwiGLU (silu); other activations are not priced")
    quant = quant_of(cfg, where)         # FP8 linears, or a one-line refusal (sim/model/hf/quant.py)
    if cfg.get("mlp_bias"):
        raise ValueError(f"{where}: mlp_bias: the row-parallel down projection's bias is added after the "
                         f"all-reduce, which tpsim's schedules do not model")
    if cfg.get("attention_bias"):
        raise ValueError(f"{where}: attention_bias on {arch} also biases o_proj, added after the all-reduce, "
                         f"which tpsim's schedules do not model")
    prf = cfg.get("partial_rotary_factor", 1.0)
    if prf not in (None, 1, 1.0):
        raise ValueError(f"{where}: partial_rotary_factor {prf}: tpsim rotates the whole head")
    rope = rope_of(cfg, where)
    if cfg.get("use_sliding_window"):
        raise ValueError(f"{where}: use_sliding_window: per-layer sliding windows (max_window_layers) are not "
                         f"priced; tpsim prices full attention")

    hidden = num("hidden_size")
    heads = num("num_attention_heads")
    kv = num("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ValueError(f"{where}: no head_dim and hidden_size {hidden} is not a multiple of "
                             f"num_attention_heads {heads}")
        head_dim = hidden // heads
    else:
        head_dim = num("head_dim")
    window = cfg.get("sliding_window") if kind == "mistral" else None
    if window is not None:
        window = num("sliding_window")
    eps = num("rms_norm_eps", 1e-6, kind_=float)
    context = num("max_position_embeddings") if cfg.get("max_position_embeddings") is not None else 0
    notes = [arch]
    if kind == "qwen2":
        notes.append("qkv bias")
    if kind == "qwen3":
        notes.append("q/k norm")
    if rope.type != "default":
        notes.append(f"rope {rope.type} (tables only, not priced)")
    if window:
        notes.append(f"sliding window {window}")
    if quant:
        notes.append(f"{quant} linears")
    try:
        return ModelSpec(name, hidden, num("num_hidden_layers"), heads, kv, head_dim, num("intermediate_size"),
                         num("vocab_size"), bool(cfg.get("tie_word_embeddings", False)),
                         f"{', '.join(notes)}; from {where}",
                         qkv_bias=(kind == "qwen2"), qk_norm=(kind == "qwen3"), rope=rope,
                         norm_eps=float(eps), sliding_window=int(window or 0), architecture=arch,
                         max_context=int(context), quant=quant)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _architecture(cfg: dict, where: str) -> str:
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    mtype = str(cfg.get("model_type", ""))
    moe = [k for k in _MOE_KEYS if cfg.get(k)]
    named = archs[0] if archs else mtype or "?"
    if moe or "moe" in named.lower() or "mixtral" in named.lower() or "moe" in mtype.lower():
        why = f" ({moe[0]}={cfg[moe[0]]})" if moe else ""
        raise ValueError(f"{where}: {named} is a mixture-of-experts model{why}: tpsim prices dense decoders "
                         f"only (its IR has no expert routing or expert parallelism)")
    for a in archs:
        if a in ARCHITECTURES:
            return a
    by_type = {v: k for k, v in ARCHITECTURES.items()}
    if not archs and mtype in by_type:
        return by_type[mtype]
    if not archs and not mtype:
        raise ValueError(f"{where}: names no architecture (neither 'architectures' nor 'model_type' is set); "
                         f"supported: {', '.join(ARCHITECTURES)} (dense Llama-family decoders)")
    raise ValueError(f"{where}: architecture {named} is not one tpsim prices; supported: "
                     f"{', '.join(ARCHITECTURES)} (dense Llama-family decoders)")
