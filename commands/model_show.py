"""`tpsim models --show`: one model's shapes, variant features and per-rank shards, as text."""
from __future__ import annotations

import textwrap

from tpsim.sim.model.presets import ModelSpec, valid_tp

WIDTH = 80               # a terminal's columns when nothing says otherwise (rich's default too)


def show_model(m: ModelSpec, up_to: int = 64) -> str:
    n = m.param_count()
    feats = [f for f, on in (("tied embeddings", m.tied_embeddings), ("qkv bias", m.qkv_bias),
                             ("q/k norm", m.qk_norm)) if on]
    if m.sliding_window:
        feats.append(f"sliding window {m.sliding_window}")
    fields = [("params", f"{n / 1e9:.3f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"),
              ("layers", m.layers),
              ("hidden", m.hidden),
              ("heads", f"{m.heads} x head_dim {m.head_dim} (q_dim {m.q_dim})"),
              ("kv heads", f"{m.kv_heads} (kv_dim {m.kv_dim}; GQA group {m.heads // m.kv_heads})"),
              ("ffn", f"{m.ffn} (SwiGLU)"),
              ("vocab", m.vocab),
              ("rope", m.rope.describe()),
              ("rms_norm_eps", f"{m.norm_eps:g}"),
              ("features", ", ".join(feats) or "none (plain Llama block)"),
              ("valid TP", ", ".join(map(str, valid_tp(m, up_to))))]
    # every line at most WIDTH columns: the title (a config's features and path) wraps at its spaces
    # under the model's name, a value (a long rope description) under itself
    title = f"{m.name}: {m.description}" if m.description else m.name
    lines = [_fill(title, "", "    ")]
    lines += [_fill(str(v), f"  {k:<16}", " " * 18) for k, v in fields]
    lines += ["  per rank, at each valid TP ([n, k]: each gemm's shape):",
              # 80 columns for the widest shards (Llama 3.1 405B at TP 1)
              "   TP  q heads  kv heads    ffn  qkv [n, k]      out [n, k]      up [n, k]"]
    for tp in valid_tp(m, up_to):
        s = m.shard(tp)
        lines.append(f"  {tp:3d}  {s.heads:7d}  {s.kv_heads:8d} {s.ffn:6d}  " + f"[{s.qkv_dim}, {s.hidden}]".ljust(16)
                     + f"[{s.hidden}, {s.q_dim}]".ljust(16) + f"[{2 * s.ffn}, {s.hidden}]")
    return "\n".join(lines)


def _fill(text: str, first: str, rest: str) -> str:
    """`text` wrapped at its spaces to WIDTH columns after `first`, later lines indented by `rest`; a
    word (a path) is never cut."""
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)
