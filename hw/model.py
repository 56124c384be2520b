"""Random-weight Llama shards for one TP rank, identical full weights at every TP degree (or, with
build_rank_model(checkpoint=DIR), a Hugging Face snapshot's weights in the same layout:
hw/checkpoint.py), and the RoPE tables of the model's own rope (rope_inv_freq).

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
  embed [vocab, hidden] replicated or (Stack.embed vocab-parallel) the padded vocab shard the head's
  would be, rows p.embed_vocab; head [vocab, hidden] replicated or a padded vocab shard (p.vocab).
  Tied embeddings with the same rows on both sides share one tensor (Placement.tied_shared).
  Qwen2: L{i}.wqkv.bias [q_r + 2*kv_r] = [bq | bk | bv] of rank r; Qwen3: L{i}.q_norm, L{i}.k_norm [hd].
Scales: N(0, 1/fan_in) for gemms so every matmul output is O(1), N(0, 1) embeddings, norm
weights 1 + N(0, 0.1^2): activations stay O(sqrt(layers)) and finite in fp16 at 126 layers.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from tpsim.sim.model.presets import ModelSpec, RopeSpec
from tpsim.hw import fp8 as hwfp8
from tpsim.hw.checkpoint import open_for, rank_weights
from tpsim.sim.memory import Placement, is_linear, kv_cache_shape, local_param_shapes

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
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
    e = p.embed_vocab                                             # all rows, or this rank's shard
    w["embed"] = draw_rows("embed", m.vocab, h, e.start, e.stop, std=1.0, **kw)
    head_src = "embed" if m.tied_embeddings else "head"
    head_std = 1.0 if m.tied_embeddings else col
    v = p.vocab
    if p.tied_shared:
        w["head"] = w["embed"]                                    # tied, the same rows: same tensor
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


def rope_inv_freq(rope: RopeSpec, head_dim: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim / 2] (fp32) and the cos/sin scale of `rope`, computed as
    transformers 5.x does (modeling_rope_utils.ROPE_INIT_FUNCTIONS and the models'
    compute_default_rope_parameters, in the same fp32 ops so the tables agree to the last bits;
    tests/test_rope.py holds them equal). Dynamic NTK is its init table (= default below
    max_position_embeddings; RopeSpec.check_positions refuses longer runs)."""
    d, theta, p = head_dim, rope.theta, dict(rope.params)
    exps = torch.arange(0, d, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / d      # [d/2]
    inv = 1.0 / (theta ** exps)
    if rope.type in ("default", "dynamic"):
        return inv, 1.0
    factor = p["factor"]
    if rope.type == "linear":
        return inv / factor, 1.0
    if rope.type == "llama3":
        low, high, old = p["low_freq_factor"], p["high_freq_factor"], p["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)        # long wavelengths: / factor
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) * ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled), 1.0
    if rope.type == "yarn":
        return _yarn(p, d, theta, device)
    raise ValueError(f"rope type {rope.type!r}: no frequency table")


def _yarn(p: dict, d: int, theta: float, device) -> tuple[torch.Tensor, float]:
    """YaRN (arXiv 2309.00071) as transformers' _compute_yarn_parameters: interpolate the frequencies
    whose wavelength exceeds the original context, keep the fast ones, ramp between, scale cos/sin."""
    factor, orig = p["factor"], p["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
    att = p.get("attention_factor")
    if att is None:
        att = (float(mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"]))
               if p.get("mscale") and p.get("mscale_all_dim") else mscale(factor))
    fast, slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def corr(rot: float) -> float:                # the dimension that turns `rot` times over `orig`
        return (d * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))
    lo, hi = corr(fast), corr(slow)
    if p.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1).to(device)
    pos = theta ** (torch.arange(0, d, 2).to(device=device, dtype=torch.float) / d)
    keep = 1 - ramp                                 # 1: extrapolate (fast dims), 0: interpolate
    return (1.0 / (factor * pos)) * (1 - keep) + (1.0 / pos) * keep, float(att)


def rope_tables(max_seq: int, head_dim: int, device: torch.device | str = "cpu",
                rope: RopeSpec = RopeSpec()) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_seq, head_dim] (fp32) for the rotate-half RoPE convention, of the model's rope
    (its attention factor folded in, as transformers' rotary embedding does)."""
    rope.check_positions(max_seq)
    inv, scale = rope_inv_freq(rope, head_dim, device)
    ang = torch.arange(max_seq, dtype=torch.float32, device=device)[:, None] * inv[None, :]   # [S, hd/2]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos() * scale, ang.sin() * scale


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
                     head: str = "replicated", checkpoint: str | None = None,
                     embed: str = "replicated", fp8: bool = False, kv_fp8: bool = False) -> RankModel:
    """Weights shard + zeroed static KV cache of `rank` (of `tp`), allocated directly on `device`:
    drawn (seeded, build_weights), or read from the Hugging Face snapshot `checkpoint`
    (hw.checkpoint.rank_weights: only this rank's slices). `head` / `embed`: the Stack's (the rows
    of the LM head and of the input embedding this rank holds: sim.memory.Placement). `fp8`: the layer
    linears held in e4m3 with per-row scales (an FP8 checkpoint's own, else quantized at load:
    hw/fp8.py); `kv_fp8`: an e4m3 KV cache."""
    p = Placement(model, tp, rank, head, embed)
    td, dev = torch_dtype(dtype), torch.device(device)
    if checkpoint:
        w = rank_weights(open_for(checkpoint, model), p, dtype=td, device=dev)
    else:
        w = build_weights(p, seed=seed, dtype=td, device=dev)
    if fp8:             # an FP8 checkpoint's linears are e4m3 already; anything else is quantized here
        hwfp8.quantize_linears(w, [n for n in local_param_shapes(p) if is_linear(n) and w[n].dtype != hwfp8.E4M3])
    elif any(t.dtype == hwfp8.E4M3 for t in w.values()):
        raise ValueError(f"{checkpoint}: an FP8 checkpoint runs with FP8 linears (its config's "
                         f"quantization_config); this run asked for none")
    shape = kv_cache_shape(p, batch, max_seq)
    kd = hwfp8.E4M3 if kv_fp8 else td
    kv = {f"L{i}.kv": (torch.zeros(shape, dtype=kd, device=dev), torch.zeros(shape, dtype=kd, device=dev))
          for i in range(model.layers)}
    cos, sin = rope_tables(max_seq, model.head_dim, dev, rope=model.rope)
    return RankModel(p, w, kv, cos, sin, batch, max_seq, td, dev)
