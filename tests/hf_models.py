"""Tiny Hugging Face checkpoints built with transformers (random weights), for the checkpoint and
parity tests: Llama with Llama 3.1's rope scaling, Qwen2 (qkv bias), Qwen3 (q/k norm, head_dim !=
hidden / heads, tied embeddings). `save(name, dir, layout)` writes a real snapshot through
save_pretrained: layout "v5" is what transformers 5.x writes (rope_theta inside rope_parameters),
"hub" the same config rewritten by hand in the older layout most Hub checkpoints carry (top-level
rope_theta + rope_scaling); `sharded` splits the safetensors into several files with an index.
Callers importorskip transformers first."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import transformers

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=256, rms_norm_eps=1e-6, max_position_embeddings=131072)
CONFIGS = {
    # max_position_embeddings 131072 and a 16-dim head: 3 of 8 frequencies are rescaled by llama3
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(_COMMON, head_dim=16, rope_parameters=LLAMA3_ROPE, tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(_COMMON, rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
              dict(_COMMON, head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                   tie_word_embeddings=True)),
}


def build(name: str, seed: int = 0):
    """The model in fp32 eval mode, weights O(1)-scaled: N(0, 1/fan_in) projections, N(0, 1)
    embeddings, norms 1 + N(0, 0.1^2), biases N(0, 0.1^2) (transformers' 0.02 init would give
    near-uniform logits that hide errors)."""
    cfg_cls, model_cls, kw = CONFIGS[name]
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**kw, dtype="float32")).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed_tokens" in n:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    return model


def to_hub_layout(config_path: Path) -> None:
    """Rewrite a transformers 5.x config.json in the older hub layout: rope_theta at the top, the
    rest of rope_parameters as rope_scaling (null when the type is default)."""
    cfg = json.loads(config_path.read_text())
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = None if rp.get("rope_type") == "default" else rp
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    config_path.write_text(json.dumps(cfg, indent=2))


def save(name: str, out: Path, layout: str = "v5", sharded: bool = False, seed: int = 0):
    """Build `name`, save_pretrained it to `out` in `layout`; returns the model (to compare logits)."""
    model = build(name, seed)
    model.save_pretrained(out, max_shard_size="60KB" if sharded else "1GB")
    if layout == "hub":
        to_hub_layout(Path(out) / "config.json")
    return model
