"""`tpsim models --show`: one model's shapes, variant features and per-rank shards, as text."""
from __future__ import annotations

from .model import ModelSpec, valid_tp


def show_model(m: ModelSpec, up_to: int = 64) -> str:
    n = m.param_count()
    feats = [f for f, on in (("tied embeddings", m.tied_embeddings), ("qkv bias", m.qkv_bias),
                             ("q/k norm", m.qk_norm)) if on]
    if m.sliding_window:
        feats.append(f"sliding window {m.sliding_window}")
    lines = [f"{m.name}: {m.description}" if m.description else m.name,
             f"  params          {n / 1e9:.3f}B" if n >= 1e9 else f"  params          {n / 1e6:.1f}M",
             f"  layers          {m.layers}",
             f"  hidden          {m.hidden}",
             f"  heads           {m.heads} x head_dim {m.head_dim} (q_dim {m.q_dim})",
             f"  kv heads        {m.kv_heads} (kv_dim {m.kv_dim}; GQA group {m.heads // m.kv_heads})",
             f"  ffn             {m.ffn} (SwiGLU)",
             f"  vocab           {m.vocab}",
             f"  rope            {m.rope.describe()}",
             f"  rms_norm_eps    {m.norm_eps:g}",
             f"  features        {', '.join(feats) or 'none (plain Llama block)'}",
             f"  valid TP        {', '.join(map(str, valid_tp(m, up_to)))}",
             "  per rank:  TP  q heads  kv heads  ffn    qkv gemm [n, k]   out gemm [n, k]   up gemm [n, k]"]
    for tp in valid_tp(m, up_to):
        s = m.shard(tp)
        lines.append(f"           {tp:3d}  {s.heads:7d}  {s.kv_heads:8d}  {s.ffn:<6d} "
                     f"[{s.qkv_dim}, {s.hidden}]".ljust(18 + 43) + f"[{s.hidden}, {s.q_dim}]".ljust(18)
                     + f"[{2 * s.ffn}, {s.hidden}]")
    return "\n".join(lines)
