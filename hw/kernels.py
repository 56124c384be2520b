"""The kernels of the harness: one torch function per IR compute kind (sim/schedule/ir.py KINDS), called by
hw.runner.Runner as KERNELS[op.kind](ctx, op, *inputs). Activations are 2-D
[rows = batch * q_len, width], as the IR's attrs say.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from tpsim.hw import fp8
from tpsim.sim.stack.impls import is_flash
from tpsim.sim.schedule.ir import Op, Schedule

if TYPE_CHECKING:
    from tpsim.hw.runner import Runner


class KernelCtx:
    """What kernels need besides their inputs: the rank's model and the pass's positions."""

    def __init__(self, runner: Runner, sched: Schedule, start_pos: int | torch.Tensor):
        self.rm = runner.rm
        self.rank = runner.rank                 # the TP rank: which block of rows a seq-parallel shard holds
        self.step = sched.step
        self.stack = sched.stack
        q = sched.step.q_len
        self.arange = runner._arange                                    # [max_seq]
        if isinstance(start_pos, torch.Tensor):
            if sched.stack.kv != "static":
                raise ValueError("a device-tensor start_pos (CUDA graphs) needs kv='static'")
            self.positions = start_pos + runner._arange[:q]             # [q_len]
            self.kv_len = self.rm.max_seq
        else:
            if start_pos + q > self.rm.max_seq:
                raise ValueError(f"positions up to {start_pos + q} exceed the KV cache ({self.rm.max_seq})")
            self.positions = runner._arange[start_pos:start_pos + q]
            self.kv_len = self.rm.max_seq if sched.stack.kv == "static" else start_pos + q


def _embed(ctx: KernelCtx, op: Op, tokens: torch.Tensor) -> torch.Tensor:
    """Token ids [batch, q_len] -> [rows, hidden]. Replicated: one lookup in the whole table.
    Masked (the IR's vocab-parallel embed, attr masked): this rank's partial rows, as vLLM's
    VocabParallelEmbedding.forward (get_masked_input_and_mask, F.embedding, masked_fill_): ids outside
    the rank's rows [lo, min(lo + shard, vocab)) look up local row 0 and come out zero; the
    embed.allreduce op that follows sums the ranks' partials (each id is inside exactly one shard)."""
    ids = tokens.reshape(-1)                                                  # [rows]
    table = ctx.rm.weights["embed"]                                           # [vocab or shard, hidden]
    if not op.get("masked", 0):
        return F.embedding(ids, table)
    if ctx.rm.placement.embed_rows == ctx.rm.model.vocab:      # the all-reduce would sum TP whole lookups
        raise ValueError(f"op {op.name}: a vocab-parallel lookup, but this rank holds the whole table "
                         f"(build_rank_model(..., embed='vocab-parallel'))")
    lo = ctx.rm.placement.embed_vocab.start
    local = ids - lo
    outside = (local < 0) | (local >= min(table.shape[0], ctx.rm.model.vocab - lo))     # [rows] bool
    x = F.embedding(local.masked_fill(outside, 0), table)                     # [rows, hidden]
    return x.masked_fill(outside[:, None], 0)


def _rmsnorm(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    rows = op.attr("rows")
    if x.shape[0] != rows:               # final norm with last-position logits: [B*S, H] -> [B, H]
        x = x.view(ctx.step.batch, -1, x.shape[-1])[:, -1]
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.rm.model.norm_eps)
    return y.to(x.dtype) * ctx.rm.weights[op.param]


def _gemm(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    # [m, k] @ W[n, k]^T (+ bias [n], Qwen2's qkv: the IR's bias attr) -> [m, n]
    if op.get("fp8", 0):        # an FP8 linear: e4m3 weight and input, upcast (hw/fp8.py)
        return fp8.linear(x, ctx.rm.weights, op.param, op.get("act_scale", "") == "token")
    return F.linear(x, ctx.rm.weights[op.param], ctx.rm.weights.get(f"{op.param}.bias"))


def _head_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3's q/k norm: RMSNorm over head_dim of [B, S, h, D], weight [D]."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _swiglu(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)                               # [rows, 2f] -> [rows, f]
    return F.silu(a) * b


def _add(ctx: KernelCtx, op: Op, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def _standin(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    """A collective's output computed locally: x itself, x [rows, w] tiled to [rows, width] or to
    [rows, width] with more rows (a row all-gather), or its first rows (a reduce-scatter)."""
    cost_s = op.attr("cost_ns") * 1e-9
    if cost_s > 0:
        if x.is_cuda:
            raise ValueError(f"op {op.name}: a stand-in with a cost runs on CPU only")
        end = time.perf_counter() + cost_s
        while time.perf_counter() < end:            # busy, as the compute it stands for would be
            pass
    rows, width = op.attr("rows"), op.attr("width")
    if op.get("dim", -1) == 0:                      # seq-parallel: gathered token rows, or one block of them
        return x.repeat(rows // x.shape[0], 1) if x.shape[0] < rows else x[:rows]
    return x if x.shape[-1] == width else x.repeat(1, width // x.shape[-1])


def _wait(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    return x                                        # the runner waited before calling this


def _slice(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    """Rows of sequences b0..b0+nb at positions q0..q0+nq of x laid out [batch, q_len] (padding rows
    beyond batch*q_len dropped): a view when contiguous, else a copy."""
    B, S, w = op.attr("batch"), op.attr("q_len"), x.shape[-1]
    b0, nb, q0, nq = op.attr("b0"), op.attr("nb"), op.attr("q0"), op.attr("nq")
    if nq == S:
        return x[b0 * S:(b0 + nb) * S]
    return x[:B * S].view(B, S, w)[b0:b0 + nb, q0:q0 + nq].reshape(nb * nq, w)


def _concat(ctx: KernelCtx, op: Op, *parts: torch.Tensor) -> torch.Tensor:
    """Micro-batches back to [batch * q_len, w]: along the batch, or along each sequence's tokens; async
    TP's ring (part s is the rows block of rank (rank + s) % group) back in rank order."""
    if op.attr("axis") == "ring":
        g = len(parts)
        return torch.cat([parts[(j - ctx.rank) % g] for j in range(g)], dim=0)
    if op.attr("axis") == "batch":
        return torch.cat(parts, dim=0)
    B, w = op.attr("batch"), parts[0].shape[-1]
    return torch.cat([p.view(B, -1, w) for p in parts], dim=1).reshape(-1, w)


def _pad(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (0, 0, 0, op.attr("rows") - x.shape[0]))        # zero rows appended


def _shard(ctx: KernelCtx, op: Op, x: torch.Tensor) -> torch.Tensor:
    """This rank's block of rows [rs, w] of x padded to group * rs rows (seq-parallel's residual); with
    attr offset k, the block of rank (rank + k) % group (async TP's GEMM + reduce-scatter)."""
    rs, r = op.attr("rows"), (ctx.rank + op.get("offset", 0)) % op.attr("group")
    block = x[r * rs:(r + 1) * rs]
    return block if block.shape[0] == rs else F.pad(block, (0, 0, 0, rs - block.shape[0]))


def _sum(ctx: KernelCtx, op: Op, *parts: torch.Tensor) -> torch.Tensor:
    """Async TP's local reduce: the sum of the partials of this rank's rows."""
    out = parts[0].clone()
    for p in parts[1:]:
        out += p
    return out


def _sample(ctx: KernelCtx, op: Op, logits: torch.Tensor) -> torch.Tensor:
    b = op.attr("batch")
    last = logits.view(b, -1, logits.shape[-1])[:, -1, :op.attr("vocab")]   # drop vocab padding
    return last.argmax(dim=-1)                                              # [batch]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def _sdpa_flash(qh, keys, vals, keep) -> torch.Tensor:
    """F.scaled_dot_product_attention with the bool mask (PyTorch picks its fused kernel)."""
    return F.scaled_dot_product_attention(qh, keys, vals, attn_mask=keep, enable_gqa=keys.shape[1] != qh.shape[1])


def _sdpa_math(qh, keys, vals, keep) -> torch.Tensor:
    """Materialized scores, heads grouped by KV head: [B, KVH', G, S, L] softmax in fp32."""
    B, H, S, D = qh.shape
    G = H // keys.shape[1]
    qg = qh.reshape(B, keys.shape[1], G, S, D)
    s = torch.matmul(qg, keys.unsqueeze(2).transpose(-1, -2)) / math.sqrt(D)     # [B, KVH', G, S, L]
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(qh.dtype)
    return torch.matmul(p, vals.unsqueeze(2)).reshape(B, H, S, D)


def _sdpa_math_op(qh, keys, vals, keep) -> torch.Tensor:
    """PyTorch's math SDPA op itself, as the reference harness's compiled runs force it (docs/sources.md
    §10): calling the op, not F.sdpa, keeps Inductor on CPU from picking its fused flash kernel; under
    compile Inductor decomposes it (q, k, v upcast to fp32, scaled, q@k^T + mask, softmax, @v, cast back).
    F.sdpa turns a bool mask into an additive one in the query's dtype first (convert_boolean_attn_mask);
    the op adds whatever it gets, so the mask is made additive here."""
    mask = torch.zeros(keep.shape, dtype=qh.dtype, device=qh.device).masked_fill(~keep, float("-inf"))[None, None]
    return torch.ops.aten._scaled_dot_product_attention_math(
        qh, keys, vals, attn_mask=mask, enable_gqa=keys.shape[1] != qh.shape[1])[0]


# The SDPA implementations attention runs, by name: the op's `impl` attr picks flash or math; a
# compiled pass (Runner.functional_pass) runs math as the op (`math-op`), everything else the same.
SDPA: dict[str, Callable] = {"flash": _sdpa_flash, "math": _sdpa_math, "math-op": _sdpa_math_op}


def attention(ctx: KernelCtx, op: Op, qkv: torch.Tensor, *after: torch.Tensor, sdpa: str | None = None) -> torch.Tensor:
    """qkv [rows, (H + 2*KVH) * D] -> o [rows, H * D]: Qwen3's q/k norm, RoPE, cache write, causal
    SDPA over the cache. `sdpa` names the SDPA implementation (SDPA; default the op's impl attr):
    the only thing eager and compiled passes do differently.

    A token-split micro-batch is sequences b0..b0+B of the cache (attr b0) at step positions
    q0..q0+S (q0 = its start_pos - the step's); `after` (an earlier token chunk's output) only
    orders it after the chunk whose K/V it attends to."""
    rm = ctx.rm
    B, S = op.attr("batch"), op.attr("q_len")
    b0, q0 = op.get("b0", 0), op.attr("start_pos") - ctx.step.start_pos
    H, KVH, D = op.attr("heads"), op.attr("kv_heads"), op.attr("head_dim")
    x = qkv.view(B, S, H + 2 * KVH, D)
    q, k, v = x.split([H, KVH, KVH], dim=2)                 # [B, S, h, D]
    if dict(op.attrs).get("qk_norm"):
        q = _head_norm(q, rm.weights[f"L{op.layer}.q_norm"], rm.model.norm_eps)
        k = _head_norm(k, rm.weights[f"L{op.layer}.k_norm"], rm.model.norm_eps)
    pos = ctx.positions if (q0 == 0 and S == ctx.step.q_len) else ctx.positions[q0:q0 + S]   # [S]
    cos, sin = rm.cos[pos][None, :, None, :], rm.sin[pos][None, :, None, :]
    q = (q.float() * cos + rotate_half(q.float()) * sin).to(qkv.dtype)
    k = (k.float() * cos + rotate_half(k.float()) * sin).to(qkv.dtype)
    kc, vc = rm.kv[op.param]                                # [batch, max_seq, KVH, D]
    if b0 or B != kc.shape[0]:
        kc, vc = kc[b0:b0 + B], vc[b0:b0 + B]               # this micro-batch's sequences (a view)
    fp8.cache_write(kc, 1, pos, k)                          # an e4m3 cache (kv_dtype fp8) stores e4m3
    fp8.cache_write(vc, 1, pos, v)
    # the filled cache ends with this chunk; the static one is attended whole (masked)
    L = ctx.kv_len if ctx.stack.kv == "static" else ctx.kv_len - (ctx.step.q_len - q0 - S)
    keys = fp8.cache_read(kc[:, :L], qkv.dtype).transpose(1, 2)          # [B, KVH, L, D]
    vals = fp8.cache_read(vc[:, :L], qkv.dtype).transpose(1, 2)
    keep = ctx.arange[:L][None, :] <= pos[:, None]                        # [S, L] causal over the cache
    expand = bool(op.attr("expand_gqa"))
    if expand and H != KVH:
        keys = keys.repeat_interleave(H // KVH, dim=1)                    # [B, H, L, D]
        vals = vals.repeat_interleave(H // KVH, dim=1)
    # fa2 / fa3 / flashinfer run as PyTorch's fused SDPA here (is_flash); math materializes the scores
    impl = "flash" if is_flash(op.attr("impl")) else "math"
    o = SDPA[sdpa or impl](q.transpose(1, 2), keys, vals, keep)            # [B, H, S, D]
    return o.transpose(1, 2).reshape(B * S, H * D)


def _attention_compiled(ctx: KernelCtx, op: Op, qkv: torch.Tensor, *after: torch.Tensor) -> torch.Tensor:
    """attention with math SDPA as the op (a compiled pass); flash stays flash."""
    return attention(ctx, op, qkv, *after, sdpa="math-op" if op.attr("impl") == "math" else "flash")


KERNELS: dict[str, Callable] = {
    "embed": _embed, "rmsnorm": _rmsnorm, "gemm": _gemm, "attention": attention,
    "swiglu": _swiglu, "add": _add, "sample": _sample, "standin": _standin, "wait": _wait,
    "slice": _slice, "concat": _concat, "pad": _pad, "shard": _shard, "sum": _sum,
}


# The kernels of a compiled pass (Runner.functional_pass): the same functions, math SDPA as the op.
COMPILED_KERNELS: dict[str, Callable] = KERNELS | {"attention": _attention_compiled}


COMPILABLE_KINDS = ("rmsnorm", "swiglu", "attention")
