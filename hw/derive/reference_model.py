"""The reference harness's decode forward, as one function of FakeTensor-friendly aten calls.

A transcription of mayank31398/ladder-residual-inference `gpt_fast/gpt_dense_TP.py` (GPTDense,
DenseTransformerBlock) and `gpt_fast/utils.py` (RMSNorm, apply_rotary_emb, KVCache.update,
Attention, FeedForward) on its compiled path, for hw/derive/inductor_gpu.py:

  mask = causal_mask[None, None, input_pos]          once per model: [1, 1, q, S] bool
  freqs_cis = freqs_cis[input_pos]                    once per model: [q, D/2, 2] fp16
  x = tok_embeddings(idx)
  per layer: x = x + all_reduce(attention(attention_norm(x)));  x = x + all_reduce(ffn(ffn_norm(x)))
  attention: wqkv -> split q, k, v -> RoPE on q and k (pairs (2i, 2i+1), fp32, back to fp16)
             -> transpose to [B, h, q, D] -> k_cache[:, :, input_pos] = k (cache [B, KVH, S, D])
             -> repeat_interleave(G, dim=1) -> F.sdpa(q, k, v, attn_mask=mask), math backend only
             -> transpose, wo
  ffn: w1 ([2 * ffn]) -> chunk u, g -> w2(silu(g) * u)

Python indexing (x[..., 0], k_cache[:, :, pos] = k) needs a device guard that a CPU-only build
has not got for "cuda", so each is written as the aten op it dispatches to (select, index,
index_put_): the traced graph is the same. The math SDPA is called as F.sdpa does under
`sdp_kernel(enable_math=True)` only: a bool mask becomes an additive one in the query's dtype
(convert_boolean_attn_mask), then `_scaled_dot_product_attention_math`. Each op's nodes carry its IR
name (annotate {"tpsim_op": "L1.attn.sdpa"}) for the kernel attribution of hw.derive.inductor_kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from tpsim.hw.torch_compat import annotate

aten = torch.ops.aten


@dataclass(frozen=True)
class Shapes:
    """One rank's shapes: batch, static cache length S, heads / KV heads per rank, head_dim D."""

    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    ffn: int
    vocab: int
    layers: int


def params(s: Shapes, device="cuda", dtype=torch.float16) -> dict:
    """The model's weights and buffers (FakeTensors when called under a FakeTensorMode)."""
    D, qkv = s.head_dim, (s.heads + 2 * s.kv_heads) * s.head_dim
    p = {"embed": torch.empty(s.vocab, s.hidden, device=device, dtype=dtype),
         "norm": torch.empty(s.hidden, device=device, dtype=dtype),
         "output": torch.empty(s.vocab, s.hidden, device=device, dtype=dtype),
         "freqs_cis": torch.empty(s.seq, D // 2, 2, device=device, dtype=dtype),
         "causal_mask": torch.empty(s.seq, s.seq, device=device, dtype=torch.bool)}
    for i in range(s.layers):
        p |= {f"L{i}.attention_norm": torch.empty(s.hidden, device=device, dtype=dtype),
              f"L{i}.wqkv": torch.empty(qkv, s.hidden, device=device, dtype=dtype),
              f"L{i}.wo": torch.empty(s.hidden, s.heads * D, device=device, dtype=dtype),
              f"L{i}.ffn_norm": torch.empty(s.hidden, device=device, dtype=dtype),
              f"L{i}.w1": torch.empty(2 * s.ffn, s.hidden, device=device, dtype=dtype),
              f"L{i}.w2": torch.empty(s.hidden, s.ffn, device=device, dtype=dtype),
              f"L{i}.k_cache": torch.empty(s.batch, s.kv_heads, s.seq, D, device=device, dtype=dtype),
              f"L{i}.v_cache": torch.empty(s.batch, s.kv_heads, s.seq, D, device=device, dtype=dtype)}
    return p


def params_order(s: Shapes) -> list[str]:
    """The parameter names in the order params() returns them (the graph's inputs after idx, pos)."""
    return list(params(s, device="meta"))


def _rmsnorm(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + eps)).type_as(x) * w


def _rope(x, freqs):
    """apply_rotary_emb: x [B, q, h, D], freqs [q, D/2, 2]."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs.view(1, xs.size(1), 1, xs.size(3), 2)
    x0, x1 = aten.select(xs, -1, 0), aten.select(xs, -1, 1)
    f0, f1 = aten.select(f, -1, 0), aten.select(f, -1, 1)
    out = torch.stack([x0 * f0 - x1 * f1, x1 * f0 + x0 * f1], -1)
    return out.flatten(3).type_as(x)


def _sdpa_math(q, k, v, mask):
    """F.sdpa with only the math backend: bool mask -> additive in q's dtype, then the math op."""
    add = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(mask.logical_not(), float("-inf"))
    return aten._scaled_dot_product_attention_math(q, k, v, attn_mask=add)[0]


def prologue(p: dict, s: Shapes, idx, input_pos):
    """GPT*.forward's model-level part before the layers: (mask [1, 1, q, S], freqs [q, D/2, 2],
    x = tok_embeddings(idx) [B, q, hidden])."""
    # no IR op of its own: fused into the attention kernels that read them
    with annotate({"tpsim_op": "model.index"}):
        mask = aten.index(p["causal_mask"], [input_pos]).unsqueeze(0).unsqueeze(0)    # [1, 1, q, S]
        freqs = aten.index(p["freqs_cis"], [input_pos])                             # [q, D/2, 2]
    with annotate({"tpsim_op": "embed"}):
        x = F.embedding(idx, p["embed"])                                            # [B, q, hidden]
    return mask, freqs, x


def attention(p: dict, s: Shapes, L: str, x, freqs, mask, input_pos, norm: str = "attention_norm", wqkv=None):
    """Attention(attention_norm(x)) of layer L (utils.Attention on the compiled, non-flash path):
    the partial output wo(y) [B, q, hidden]. wqkv: the fused projection's q, k, v columns when the
    caller ran it (gpt_parallel's FuseAttentionMLP), else this layer's wqkv on norm(x)."""
    B, q = x.shape[:2]
    H, KVH, D = s.heads, s.kv_heads, s.head_dim
    G = H // KVH
    if wqkv is None:
        with annotate({"tpsim_op": f"{L}.attn.norm"}):
            h = _rmsnorm(x, p[f"{L}.{norm}"])
        with annotate({"tpsim_op": f"{L}.attn.qkv"}):
            wqkv = F.linear(h, p[f"{L}.wqkv"])
    with annotate({"tpsim_op": f"{L}.attn.sdpa"}):
        qh, kh, vh = wqkv.split([H * D, KVH * D, KVH * D], dim=-1)
        qh, kh, vh = qh.view(B, q, H, D), kh.view(B, q, KVH, D), vh.view(B, q, KVH, D)
        qh, kh = _rope(qh, freqs), _rope(kh, freqs)
        qh, kh, vh = qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2)
        kc = aten.index_put_(p[f"{L}.k_cache"], [None, None, input_pos], kh)
        vc = aten.index_put_(p[f"{L}.v_cache"], [None, None, input_pos], vh)
        ke, ve = kc.repeat_interleave(G, dim=1), vc.repeat_interleave(G, dim=1)
        y = _sdpa_math(qh, ke, ve, mask).transpose(1, 2).contiguous().view(B, q, H * D)
    with annotate({"tpsim_op": f"{L}.attn.out"}):
        return F.linear(y, p[f"{L}.wo"])


def swiglu_down(p: dict, L: str, ug):
    """FeedForward's tail: w2(silu(g) * u) from w1's output ug [B, q, 2 * ffn]."""
    with annotate({"tpsim_op": f"{L}.mlp.act"}):
        u, g = ug.chunk(2, dim=-1)
        a = F.silu(g) * u
    with annotate({"tpsim_op": f"{L}.mlp.down"}):
        return F.linear(a, p[f"{L}.w2"])


def feed_forward(p: dict, L: str, x):
    """FeedForward(ffn_norm(x)) of layer L: the partial output [B, q, hidden]."""
    with annotate({"tpsim_op": f"{L}.mlp.norm"}):
        h = _rmsnorm(x, p[f"{L}.ffn_norm"])
    with annotate({"tpsim_op": f"{L}.mlp.up"}):
        ug = F.linear(h, p[f"{L}.w1"])
    return swiglu_down(p, L, ug)


def epilogue(p: dict, x):
    """norm, output head on the last position, greedy sample: the token ids [B]."""
    with annotate({"tpsim_op": "final.norm"}):
        x = _rmsnorm(aten.select(x, 1, -1), p["norm"])
    with annotate({"tpsim_op": "head"}):
        logits = F.linear(x, p["output"])
    with annotate({"tpsim_op": "sample"}):
        return logits.argmax(-1)


def all_reduce(y, name: str, group, comm: bool = True):
    """utils.all_reduce_func under compile: funcol.all_reduce (traced as all_reduce + wait_tensor)."""
    with annotate({"tpsim_op": name}):
        return funcol.all_reduce(y, "sum", group) if comm else y


def forward(p: dict, s: Shapes, idx, input_pos, group=None, comm: bool = True):
    """One decode step (q = idx.shape[1]); returns logits [B, vocab] of the last position.
    comm: the dense model's all-reduces (the comm-free upper bound drops them)."""
    mask, freqs, x = prologue(p, s, idx, input_pos)
    for i in range(s.layers):
        L = f"L{i}"
        y = all_reduce(attention(p, s, L, x, freqs, mask, input_pos), f"{L}.attn.allreduce", group, comm)
        with annotate({"tpsim_op": f"{L}.attn.add"}):
            x = x + y
        y = all_reduce(feed_forward(p, L, x), f"{L}.mlp.allreduce", group, comm)
        with annotate({"tpsim_op": f"{L}.mlp.add"}):
            x = x + y
    return epilogue(p, x)
