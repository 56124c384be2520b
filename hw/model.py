"""Random-weight Llama shards for one TP rank, identical full weights at every TP degree.

Seeding. Each full weight is a well-defined tensor W(seed, name) independent of TP: it is cut
into fixed row chunks (`_chunk_rows`, which depends only on the full shape) and chunk c is drawn
from a torch.Generator seeded with blake2b(seed, name, c). A rank draws only the chunks that
overlap its slice and keeps the overlap, so nothing larger than max(shard, one chunk of
~4M elements) is ever allocated, yet TP 1, 2, 4 ... see bit-identical full weights (what the
numerics checks need). Weights are drawn on the target device's generator: CPU and CUDA runs
get different (but each self-consistent) weights, which only matters for comparing logits
across devices, never across TP degrees.

Layout (gemm weights stored [out, in] for F.linear):
  L{i}.wqkv [q_heads_r*hd + 2*kv_heads_r*hd, hidden] = [q heads | k heads | v heads] of rank r
  L{i}.w13  [2*ffn_r, hidden] = [w1 cols of r | w3 cols of r]
  L{i}.wo   [hidden, q_heads_r*hd], L{i}.w2 [hidden, ffn_r]   (row split of the full [in, out])
  embed [vocab, hidden] replicated; head [vocab, hidden] replicated or a padded vocab shard.
  Qwen2: L{i}.wqkv.bias [q_r + 2*kv_r] = [bq | bk | bv] of rank r; Qwen3: L{i}.q_norm, L{i}.k_norm [hd].
Scales: N(0, 1/fan_in) for gemms so every matmul output is O(1), N(0, 1) embeddings, norm
weights 1 + N(0, 0.1^2): activations stay O(sqrt(layers)) and finite in fp16 at 126 layers.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from tpsim.sim.model import ModelSpec
from tpsim.sim.memory import Placement, kv_cache_shape, local_param_shapes

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
ROPE_THETA = 500_000.0          # Llama 3 (ModelSpec.rope_theta's default; a model's own wins)
NORM_EPS = 1e-5                 # likewise ModelSpec.norm_eps
_CHUNK_ELEMS = 1 << 22


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose from: {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def _seed(seed: int, name: str, chunk: int) -> int:
    h = hashlib.blake2b(f"{seed}/{name}/{chunk}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def _chunk_rows(cols: int) -> int:
    return max(1, _CHUNK_ELEMS // max(cols, 1))


def draw_rows(name: str, full_rows: int, cols: int, lo: int, hi: int, *, seed: int, std: float,
              mean: float = 0.0, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Rows [lo, hi) of the full random tensor `name` [full_rows, cols]; rows >= full_rows are zero.

    Only the chunks overlapping [lo, hi) are drawn, one at a time (fp32, then cast).
    """
    device = torch.device(device)
    out = torch.zeros(hi - lo, cols, dtype=dtype, device=device)
    step = _chunk_rows(cols)
    gen = torch.Generator(device=device)
    for c in range(lo // step, (min(hi, full_rows) + step - 1) // step):
        c_lo, c_hi = c * step, min((c + 1) * step, full_rows)
        gen.manual_seed(_seed(seed, name, c))
        block = torch.randn(c_hi - c_lo, cols, generator=gen, device=device, dtype=torch.float32)
        a, b = max(lo, c_lo), min(hi, c_hi)
        if a < b:
            out[a - lo:b - lo] = (block[a - c_lo:b - c_lo] * std + mean).to(dtype)
    return out


def _head_rows(heads: range, head_dim: int) -> tuple[int, int]:
    return heads.start * head_dim, heads.stop * head_dim


def build_weights(p: Placement, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                  device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The local shard of every weight of placement `p`, keyed by the IR's param names."""
    m = p.model
    h, hd = m.hidden, m.head_dim
    kw = dict(seed=seed, dtype=dtype, device=device)
    col = 1.0 / math.sqrt(h)
    w: dict[str, torch.Tensor] = {}
    w["embed"] = draw_rows("embed", m.vocab, h, 0, m.vocab, std=1.0, **kw)
    head_src = "embed" if m.tied_embeddings else "head"
    head_std = 1.0 if m.tied_embeddings else col
    v = p.vocab
    if m.tied_embeddings and p.vocab_rows == m.vocab:
        w["head"] = w["embed"]                                    # tied and replicated: same tensor
    else:
        w["head"] = draw_rows(head_src, m.vocab, h, v.start, v.stop, std=head_std, **kw)
    w["final_norm"] = draw_rows("final_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]
    q_lo, q_hi = _head_rows(p.heads, hd)
    kv_lo, kv_hi = _head_rows(p.kv_heads, hd)
    f = p.ffn
    for i in range(m.layers):
        L = f"L{i}"
        wq = draw_rows(f"{L}.wq", m.q_dim, h, q_lo, q_hi, std=col, **kw)           # [q_r, hidden]
        wk = draw_rows(f"{L}.wk", m.kv_dim, h, kv_lo, kv_hi, std=col, **kw)        # [kv_r, hidden]
        wv = draw_rows(f"{L}.wv", m.kv_dim, h, kv_lo, kv_hi, std=col, **kw)
        w[f"{L}.wqkv"] = torch.cat([wq, wk, wv])
        del wq, wk, wv
        # wo / w2 are drawn as their full [in, out] (rows = the split dim) and transposed.
        w[f"{L}.wo"] = draw_rows(f"{L}.wo", m.q_dim, h, q_lo, q_hi,
                                 std=1.0 / math.sqrt(m.q_dim), **kw).t().contiguous()
        w1 = draw_rows(f"{L}.w1", m.ffn, h, f.start, f.stop, std=col, **kw)
        w3 = draw_rows(f"{L}.w3", m.ffn, h, f.start, f.stop, std=col, **kw)
        w[f"{L}.w13"] = torch.cat([w1, w3])
        del w1, w3
        w[f"{L}.w2"] = draw_rows(f"{L}.w2", m.ffn, h, f.start, f.stop,
                                 std=1.0 / math.sqrt(m.ffn), **kw).t().contiguous()
        w[f"{L}.attn_norm"] = draw_rows(f"{L}.attn_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]
        w[f"{L}.mlp_norm"] = draw_rows(f"{L}.mlp_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]
        _variant_weights(w, m, L, (q_lo, q_hi), (kv_lo, kv_hi), kw)
    expected = local_param_shapes(p)
    for name, shape in expected.items():      # the memory estimate and the allocation agree
        assert tuple(w[name].shape) == shape, (name, tuple(w[name].shape), shape)
    return w


def _variant_weights(w: dict, m: ModelSpec, L: str, q_rows: tuple[int, int], kv_rows: tuple[int, int],
                     kw: dict) -> None:
    """Qwen2's qkv bias (rows of this rank, laid out like wqkv) and Qwen3's q/k norm weights [head_dim].

    Biases are N(0, 0.1^2) per full vector (bq [q_dim], bk, bv [kv_dim]) so every TP degree sees
    the same full bias, as for the weights."""
    if m.qkv_bias:
        parts = [draw_rows(f"{L}.bq", m.q_dim, 1, *q_rows, std=0.1, **kw)[:, 0],
                 draw_rows(f"{L}.bk", m.kv_dim, 1, *kv_rows, std=0.1, **kw)[:, 0],
                 draw_rows(f"{L}.bv", m.kv_dim, 1, *kv_rows, std=0.1, **kw)[:, 0]]
        w[f"{L}.wqkv.bias"] = torch.cat(parts)
    if m.qk_norm:
        for n in ("q_norm", "k_norm"):
            w[f"{L}.{n}"] = draw_rows(f"{L}.{n}", 1, m.head_dim, 0, 1, std=0.1, mean=1.0, **kw)[0]


def full_weights(model: ModelSpec, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Unsharded weights for single-process references, nn.Linear layout ([out, in]).

    Separate wq/wk/wv/w1/w3 entries (no fused layouts), so references slice heads and FFN
    columns themselves instead of trusting the shard code.
    """
    m = model
    h = m.hidden
    kw = dict(seed=seed, dtype=dtype, device=device)
    col = 1.0 / math.sqrt(h)
    w = {"embed": draw_rows("embed", m.vocab, h, 0, m.vocab, std=1.0, **kw),
         "final_norm": draw_rows("final_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]}
    w["head"] = w["embed"] if m.tied_embeddings else draw_rows("head", m.vocab, h, 0, m.vocab, std=col, **kw)
    for i in range(m.layers):
        L = f"L{i}"
        w[f"{L}.wq"] = draw_rows(f"{L}.wq", m.q_dim, h, 0, m.q_dim, std=col, **kw)
        w[f"{L}.wk"] = draw_rows(f"{L}.wk", m.kv_dim, h, 0, m.kv_dim, std=col, **kw)
        w[f"{L}.wv"] = draw_rows(f"{L}.wv", m.kv_dim, h, 0, m.kv_dim, std=col, **kw)
        w[f"{L}.wo"] = draw_rows(f"{L}.wo", m.q_dim, h, 0, m.q_dim, std=1.0 / math.sqrt(m.q_dim), **kw).t()
        w[f"{L}.w1"] = draw_rows(f"{L}.w1", m.ffn, h, 0, m.ffn, std=col, **kw)
        w[f"{L}.w3"] = draw_rows(f"{L}.w3", m.ffn, h, 0, m.ffn, std=col, **kw)
        w[f"{L}.w2"] = draw_rows(f"{L}.w2", m.ffn, h, 0, m.ffn, std=1.0 / math.sqrt(m.ffn), **kw).t()
        w[f"{L}.attn_norm"] = draw_rows(f"{L}.attn_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]
        w[f"{L}.mlp_norm"] = draw_rows(f"{L}.mlp_norm", 1, h, 0, 1, std=0.1, mean=1.0, **kw)[0]
        if m.qkv_bias:                        # separate bq, bk, bv [q_dim], [kv_dim], [kv_dim]
            for n, rows in (("bq", m.q_dim), ("bk", m.kv_dim), ("bv", m.kv_dim)):
                w[f"{L}.{n}"] = draw_rows(f"{L}.{n}", rows, 1, 0, rows, std=0.1, **kw)[:, 0]
        if m.qk_norm:
            for n in ("q_norm", "k_norm"):
                w[f"{L}.{n}"] = draw_rows(f"{L}.{n}", 1, m.head_dim, 0, 1, std=0.1, mean=1.0, **kw)[0]
    return w


def rope_tables(max_seq: int, head_dim: int, device: torch.device | str = "cpu",
                theta: float = ROPE_THETA) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_seq, head_dim] (fp32) for the rotate-half RoPE convention."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    ang = torch.outer(torch.arange(max_seq, dtype=torch.float32, device=device), inv)   # [S, hd/2]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


@dataclass
class RankModel:
    """Everything one rank holds: weight shards, static KV caches, RoPE tables."""

    placement: Placement
    weights: dict[str, torch.Tensor]
    kv: dict[str, tuple[torch.Tensor, torch.Tensor]]   # "L3.kv" -> (K, V) [batch, max_seq, kv_r, hd]
    cos: torch.Tensor                                  # [max_seq, hd] fp32
    sin: torch.Tensor
    batch: int
    max_seq: int
    dtype: torch.dtype
    device: torch.device

    @property
    def model(self) -> ModelSpec:
        return self.placement.model

    def reset_cache(self) -> None:
        for k, v in self.kv.values():
            k.zero_()
            v.zero_()


def build_rank_model(model: ModelSpec, tp: int, rank: int, *, batch: int, max_seq: int,
                     dtype: str = "fp32", device: torch.device | str = "cpu", seed: int = 0,
                     head: str = "replicated") -> RankModel:
    """Weights shard + zeroed static KV cache of `rank` (of `tp`), allocated directly on `device`."""
    p = Placement(model, tp, rank, head)
    td, dev = torch_dtype(dtype), torch.device(device)
    w = build_weights(p, seed=seed, dtype=td, device=dev)
    shape = kv_cache_shape(p, batch, max_seq)
    kv = {f"L{i}.kv": (torch.zeros(shape, dtype=td, device=dev), torch.zeros(shape, dtype=td, device=dev))
          for i in range(model.layers)}
    cos, sin = rope_tables(max_seq, model.head_dim, dev, theta=model.rope_theta)
    return RankModel(p, w, kv, cos, sin, batch, max_seq, td, dev)
