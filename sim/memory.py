"""Per-rank memory: what one TP rank holds, estimated before anything is allocated.

Pure arithmetic on model shapes (no torch): the simulator refuses a workload that will not fit,
and the harness checks the same estimate before it allocates. hw.model takes the
local parameter shapes from `local_param_shapes`, so the estimate and the allocation agree
by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.stack.spec import Stack

GIB = 1024 ** 3

# What the framework itself takes besides tensors we allocate: CUDA context, cuBLAS and NCCL
# buffers (NCCL alone is a few hundred MiB per communicator), allocator fragmentation slack.
WORKSPACE_BYTES = {"cuda": int(1.5 * GIB), "cpu": int(0.25 * GIB)}


class DoesNotFit(ValueError):
    """The run needs more memory per rank than the device has."""


@dataclass(frozen=True)
class Placement:
    """Which slice of the full model rank `rank` of `tp` holds (Megatron column/row split).

    Query heads and FFN columns are split evenly. KV heads are split when kv_heads >= tp; when
    kv_heads < tp each rank holds one replicated KV head, kv head `rank * kv_heads // tp` (the one
    its query heads use under GQA). With a vocab-parallel head each rank holds ceil(vocab / tp)
    rows of it (the last rank's tail is zero padding); with a vocab-parallel input embedding
    (Stack.embed) the same rows of the embedding table. Tied embeddings hold one tensor when both
    take the same rows (both replicated, or both vocab-parallel: vLLM's ParallelLMHead.tie_weights
    shares embed_tokens' shard), else two.
    """

    model: ModelSpec
    tp: int
    rank: int
    head: str = "replicated"
    embed: str = "replicated"

    def __post_init__(self) -> None:
        self.model.shard(self.tp)      # raises ValueError when the model does not split over tp
        if not 0 <= self.rank < self.tp:
            raise ValueError(f"rank {self.rank} outside 0..{self.tp - 1}")

    @property
    def heads(self) -> range:
        n = self.model.heads // self.tp
        return range(self.rank * n, (self.rank + 1) * n)

    @property
    def kv_heads(self) -> range:
        m, tp = self.model, self.tp
        if m.kv_heads >= tp:
            n = m.kv_heads // tp
            return range(self.rank * n, (self.rank + 1) * n)
        first = self.rank * m.kv_heads // tp
        return range(first, first + 1)

    @property
    def ffn(self) -> range:
        n = self.model.ffn // self.tp
        return range(self.rank * n, (self.rank + 1) * n)

    @property
    def vocab_rows(self) -> int:
        """Rows of the LM head on this rank (padded shard when vocab-parallel)."""
        return self._shard_rows(self.head)

    @property
    def vocab(self) -> range:
        """Head rows [lo, hi) of the full vocab this rank holds (may run past vocab: padding)."""
        return self._rows(self.vocab_rows)

    @property
    def embed_rows(self) -> int:
        """Rows of the input embedding on this rank: the head's padded shard when vocab-parallel."""
        return self._shard_rows(self.embed)

    @property
    def embed_vocab(self) -> range:
        """Embedding rows [lo, hi) of the full vocab this rank holds (may run past vocab: padding)."""
        return self._rows(self.embed_rows)

    @property
    def tied_shared(self) -> bool:
        """Tied embeddings whose head is the embedding tensor itself (the same rows on this rank)."""
        return self.model.tied_embeddings and self.vocab == self.embed_vocab

    def _shard_rows(self, mode: str) -> int:
        """The rows of a [vocab, hidden] table this rank holds: ceil(vocab / TP) when `mode` is
        vocab-parallel (TP > 1), else all of them."""
        if mode == "vocab-parallel" and self.tp > 1:
            return -(-self.model.vocab // self.tp)
        return self.model.vocab

    def _rows(self, n: int) -> range:
        lo = self.rank * n if n != self.model.vocab else 0
        return range(lo, lo + n)


def local_param_shapes(p: Placement) -> dict[str, tuple[int, ...]]:
    """Local weight shapes by the schedule IR's param names (gemm weights as [out, in])."""
    m = p.model
    hd, h = m.head_dim, m.hidden
    q, kv, f = len(p.heads) * hd, len(p.kv_heads) * hd, len(p.ffn)
    shapes: dict[str, tuple[int, ...]] = {"embed": (p.embed_rows, h), "final_norm": (h,)}
    if not p.tied_shared:                    # tied, same rows: the head is the embedding tensor
        shapes["head"] = (p.vocab_rows, h)
    for i in range(m.layers):
        shapes[f"L{i}.attn_norm"] = (h,)
        shapes[f"L{i}.wqkv"] = (q + 2 * kv, h)
        shapes[f"L{i}.wo"] = (h, q)
        shapes[f"L{i}.mlp_norm"] = (h,)
        shapes[f"L{i}.w13"] = (2 * f, h)
        shapes[f"L{i}.w2"] = (h, f)
        if m.qkv_bias:                       # Qwen2: [bq_r | bk_r | bv_r], split like wqkv's rows
            shapes[f"L{i}.wqkv.bias"] = (q + 2 * kv,)
        if m.qk_norm:                        # Qwen3: one weight per head dim, shared by all heads
            shapes[f"L{i}.q_norm"] = (hd,)
            shapes[f"L{i}.k_norm"] = (hd,)
    return shapes


# the layer linears' weights (gemm weights [out, in]): what FP8 stores in e4m3
LINEARS = ("wqkv", "wo", "w13", "w2")


def is_linear(name: str) -> bool:
    """A layer linear's weight (L{i}.wqkv, .wo, .w13, .w2), not its bias, a norm or the embedding/head."""
    return name.rpartition(".")[2] in LINEARS and name.startswith("L")


def elem_bytes(name: str, stack: Stack) -> int:
    """Bytes per element of local weight `name`: 1 for a layer linear under FP8 (Stack.weight_dtype), else
    the stack's dtype. The LM head and the embedding stay 16-bit (vLLM's Fp8Config quantizes LinearBase
    layers only; compressed-tensors FP8 checkpoints ignore lm_head)."""
    return 1 if stack.fp8 and is_linear(name) else stack.dtype_bytes


def scale_bytes(name: str, shape: tuple[int, ...], stack: Stack) -> int:
    """The fp32 scales beside an FP8 linear's weight [out, in]: one per output row (per-channel, the larger
    of the two layouts; a per-tensor scale is one number); 0 elsewhere."""
    return 4 * shape[0] if stack.fp8 and is_linear(name) else 0


def kv_cache_shape(p: Placement, batch: int, max_seq: int) -> tuple[int, int, int, int]:
    """One layer's K (or V) cache on one rank: [batch, max_seq, kv_heads_per_rank, head_dim]."""
    return (batch, max_seq, len(p.kv_heads), p.model.head_dim)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs; `total_bytes` is compared against the device capacity."""

    model: str
    tp: int
    layer_weights_bytes: int      # sharded transformer-layer weights (+ norms)
    embed_head_bytes: int         # replicated embedding + LM head (or its vocab shard)
    kv_cache_bytes: int           # static K and V caches, all layers
    activations_bytes: int        # peak live activations of the largest pass (prefill)
    workspace_bytes: int          # framework overhead (context, collective buffers, slack)

    @property
    def total_bytes(self) -> int:
        return (self.layer_weights_bytes + self.embed_head_bytes + self.kv_cache_bytes
                + self.activations_bytes + self.workspace_bytes)

    def lines(self) -> list[str]:
        g = lambda b: f"{b / GIB:8.2f} GiB"  # noqa: E731
        return [f"  layer weights (shard)  {g(self.layer_weights_bytes)}",
                f"  embed + head           {g(self.embed_head_bytes)}",
                f"  KV cache               {g(self.kv_cache_bytes)}",
                f"  activations (peak)     {g(self.activations_bytes)}",
                f"  workspace              {g(self.workspace_bytes)}",
                f"  total per rank         {g(self.total_bytes)}"]

    def to_dict(self) -> dict:
        return {"layer_weights_bytes": self.layer_weights_bytes, "embed_head_bytes": self.embed_head_bytes,
                "kv_cache_bytes": self.kv_cache_bytes, "activations_bytes": self.activations_bytes,
                "workspace_bytes": self.workspace_bytes, "total_bytes": self.total_bytes}


def estimate(model: ModelSpec, tp: int, batch: int, prompt_len: int, gen_len: int,
             stack: Stack = Stack(), device: str = "cuda") -> MemoryEstimate:
    """Per-rank bytes of a prefill + decode run; rank 0 is the largest (it holds no less than others)."""
    p = Placement(model, tp, 0, stack.head, stack.embed)
    b = stack.dtype_bytes
    # a vocab-parallel embedding (the engines' VocabParallelEmbedding) is ceil(vocab / tp) rows here, as
    # hw.model allocates it
    shapes = local_param_shapes(p)
    embed_head = sum(_numel(s) for k, s in shapes.items() if k in ("embed", "head", "final_norm")) * b
    layers = sum(_numel(s) * elem_bytes(k, stack) + scale_bytes(k, s, stack) for k, s in shapes.items()
                 if k not in ("embed", "head", "final_norm"))
    max_seq = prompt_len + gen_len
    kv = 2 * model.layers * _numel(kv_cache_shape(p, batch, max_seq)) * stack.kv_bytes
    return MemoryEstimate(model.name, tp, layers, embed_head, kv,
                          _prefill_activation_bytes(p, batch, prompt_len, gen_len, stack),
                          WORKSPACE_BYTES.get(device, WORKSPACE_BYTES["cuda"]))


def _prefill_activation_bytes(p: Placement, batch: int, prompt: int, gen: int, stack: Stack) -> int:
    """Peak live activations in prefill (the runner frees each value after its last reader)."""
    m, b = p.model, stack.dtype_bytes
    rows = batch * prompt
    heads, kvh, hd, f = len(p.heads), len(p.kv_heads), m.head_dim, len(p.ffn)
    kv_len = prompt + gen if stack.kv == "static" else prompt
    # Residual-sized values alive at once: x, h, a norm output, a partial and (ladder) two
    # all-reduces in flight, [rows, hidden] each.
    residual = 6 * rows * m.hidden * b
    qkv = rows * (heads + 2 * kvh) * hd * b * 2                 # qkv gemm output + rotated copies
    kv_read = 2 * batch * (heads if stack.expand_gqa else kvh) * kv_len * hd * b
    if stack.attention == "math":                               # materialized scores + softmax (fp32)
        scores = batch * heads * prompt * kv_len * (b + 4)
    else:
        scores = 0
    attn = qkv + kv_read + scores + 2 * rows * heads * hd * b
    mlp = rows * 3 * f * b + rows * f * b                        # up [rows, 2f], act [rows, f], temporaries
    logit_rows = batch * (prompt if stack.prefill_logits == "all" else 1)
    logits = logit_rows * p.vocab_rows * b
    if p.vocab_rows != m.vocab:                                  # all-gathered copy
        logits += logit_rows * p.vocab_rows * p.tp * b
    return residual + max(attn, mlp) + logits


def check_fits(est: MemoryEstimate, capacity_bytes: int, where: str = "the device") -> None:
    """Raise DoesNotFit, listing the numbers, when `est` exceeds `capacity_bytes`."""
    if est.total_bytes <= capacity_bytes:
        return
    raise DoesNotFit(
        f"{est.model} at TP {est.tp} needs {est.total_bytes / GIB:.2f} GiB per rank but {where} has "
        f"{capacity_bytes / GIB:.2f} GiB:\n" + "\n".join(est.lines()) +
        "\nUse a higher TP degree, a smaller batch/prompt, or only the first K layers "
        "(--layers K in the harness, --model NAME[:K] in the simulator).")
