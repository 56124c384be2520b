"""The builder: the pieces every schedule's layers are made of (embedding, attention, MLP, norms,
collectives, residual adds, head), appended as IR ops (sim/schedule/ir.py) with one step's shapes.

Each layer kind's body lives with its schedule (sim/schedule/schedules/); sim/schedule/language.py builds a plan
(one layer kind per layer) from them.

Dataflow of each schedule: docs/design.md ("The schedules").
"""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.schedule.ir import TOKENS, Op
from tpsim.sim.model.presets import ModelSpec, Shard
from tpsim.sim.stack.ar_fusion import fused_kernel
from tpsim.sim.stack.sampler import REFERENCE as REFERENCE_SAMPLER
from tpsim.sim.stack.spec import Stack, Step


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a token split: sequences b0..b0+nb at step positions q0..q0+nq."""

    index: int
    b0: int
    nb: int
    q0: int
    nq: int

    @property
    def rows(self) -> int:
        return self.nb * self.nq


class Builder:
    """Appends ops with the shapes of one (model, tp, step, stack). `comm` False (a comm-free schedule,
    ScheduleDef.comm_free): embed() and head() add no collective either."""

    def __init__(self, model: ModelSpec, tp: int, step: Step, stack: Stack, comm: bool = True):
        self.model, self.tp, self.step, self.stack, self.comm = model, tp, step, stack, comm
        self.shard: Shard = model.shard(tp)
        kv_max = max(kv for _, _, kv in step.mix) if step.mix else step.kv_len     # a packed mix: its longest
        if model.sliding_window and kv_max > model.sliding_window:      # Mistral v0.1
            raise ValueError(f"{model.name.split('[:')[0]} attends to its last {model.sliding_window} positions "
                             f"(sliding window); prompt + gen beyond that is not priced (tpsim prices full attention)")
        self.ops: list[Op] = []
        self.notes: list[str] = []
        self.mb: MicroBatch | None = None       # set while building one micro-batch's ops (token-split)
        self._chunk_sdpa: dict[int, str] = {}   # layer -> the previous token chunk's attention output
        # a fused all-reduce + add + RMSNorm (all_reduce(..., fuse=...)): its output, then the add that reads
        # it, then the norm of that add's output run inside the one kernel: the add and the norm are ops of
        # their own (the harness runs the dataflow unfused), marked ("fused", 1) and priced inside the all-reduce
        self._fused_ar: set[str] = set()
        self._fused_sum: set[str] = set()

    @property
    def rows(self) -> int:
        """Activation rows of what is being built: [batch * q_len, hidden], or one micro-batch's."""
        return self.mb.rows if self.mb else self.step.tokens

    def tag(self, i: int) -> str:
        return f"L{i}.mb{self.mb.index}" if self.mb else f"L{i}"

    def add_op(self, name, kind, inputs, outputs, attrs, layer=None, param=None) -> str:
        self.ops.append(Op(name, kind, tuple(inputs), tuple(outputs), tuple(attrs),
                           self.stack.dtype, layer, param))
        return outputs[0]

    # -- pieces shared by every schedule

    def embed(self) -> str:
        """Token ids -> x [tokens, hidden]. Replicated: one lookup of the whole table. Vocab-parallel
        (Stack.embed, TP > 1; vLLM/SGLang VocabParallelEmbedding, TensorRT-LLM Embedding COLUMN mode):
        each rank looks the ids up in its padded shard of ceil(vocab / TP) rows with the ids outside
        it masked to zero (attr masked), then one all-reduce of [tokens, hidden] sums the shards."""
        m = self.model
        if self.stack.embed != "vocab-parallel" or self.tp < 2:
            return self.add_op("embed", "embed", [TOKENS], ["embed.x"],
                               [("rows", self.rows), ("width", m.hidden), ("vocab", m.vocab)], param="embed")
        shard = -(-m.vocab // self.tp)
        x = self.add_op("embed", "embed", [TOKENS], ["embed.partial"],
                        [("rows", self.rows), ("width", m.hidden), ("vocab", shard), ("masked", 1)], param="embed")
        return self.all_reduce("embed.allreduce", x, None) if self.comm else x

    def _attention_attrs(self) -> list[tuple[str, int | str]]:
        """The attention shape of the step, or of the current micro-batch: a micro-batch of sequences
        reads its own rows b0.. of the KV cache; a token chunk writes positions start+q0.. and attends
        to everything before them (the earlier chunks' K/V, already in the cache)."""
        st, s, mb = self.step, self.shard, self.mb
        batch, q_len, q0 = (mb.nb, mb.nq, mb.q0) if mb else (st.batch, st.q_len, 0)
        start = st.start_pos + q0
        kv = st.kv_len if self.stack.kv == "static" else start + q_len
        attrs = [("batch", batch), ("q_len", q_len), ("start_pos", start), ("kv_len", kv),
                 ("heads", s.heads), ("kv_heads", s.kv_heads), ("head_dim", s.head_dim),
                 ("expand_gqa", int(self.stack.expand_gqa)), ("impl", self.attention_impl())]
        if mb and mb.nb < st.batch:
            attrs.append(("b0", mb.b0))
        if self.stack.attention_prep_kernels:          # an engine's own RoPE / cache-write kernels
            attrs.append(("prep", self.stack.attention_prep_kernels))
        if self.stack.kv_dtype == "fp8":                # an e4m3 cache: 1 byte per K/V element
            attrs.append(("kv_dtype", "fp8"))
        return attrs

    def _mix_parts(self) -> list[list[tuple[str, int | str]]]:
        """A mixed step's attention (Step.mix), or the current micro-batch's share of its packed tokens,
        as uniform attention ops: every decode sequence in one op at their mean KV length (a decode's
        attention reads its KV once: FLOPs and bytes are linear in the total KV, which the mean keeps
        up to rounding to a whole token), then one op per prefill chunk (its tokens written at kv_len -
        q_len.., attending to kv_len keys). Each op after the first carries `prep_shared`: its RoPE and
        cache-write work rides in the first op's kernels (one kernel over every token: sim/price/work.py).
        Decode and prefill parts are separate attention kernels, as FlashInfer's decode and prefill
        wrappers and TensorRT-LLM's context and generation kernels run them; vLLM's FA3 runs the
        whole batch in one varlen launch, one launch floor per extra part fewer than priced here."""
        st, mb = self.step, self.mb
        lo, n = (mb.b0 + mb.q0, mb.rows) if mb else (0, st.tokens)       # this op's range of packed tokens
        dec_n = dec_kv = 0
        chunks: list[tuple[int, int]] = []          # (q_len, kv_len) of each prefill piece in the range
        at = 0
        for count, q, kv in st.mix:
            for _ in range(count if q > 1 else 1):
                size = q if q > 1 else count            # a decode group: its sequences, a token each
                a, b = max(lo, at), min(lo + n, at + size)
                if a < b:
                    if q == 1:
                        dec_n, dec_kv = dec_n + b - a, dec_kv + (b - a) * kv
                    else:                               # tokens a-at..b-at of the chunk: causal up to its last
                        chunks.append((b - a, kv - q + b - at))
                at += size
        parts = ([(dec_n, 1, round(dec_kv / dec_n))] if dec_n else []) + [(1, q, kv) for q, kv in chunks]
        base = [("heads", self.shard.heads), ("kv_heads", self.shard.kv_heads), ("head_dim", self.shard.head_dim),
                ("expand_gqa", int(self.stack.expand_gqa)), ("impl", self.attention_impl())]
        if self.stack.attention_prep_kernels:
            base.append(("prep", self.stack.attention_prep_kernels))
        return [[("batch", c), ("q_len", q), ("start_pos", kv - q), ("kv_len", kv)] + base
                + ([("prep_shared", 1)] if j else []) for j, (c, q, kv) in enumerate(parts)]
    def linear_attrs(self) -> list[tuple[str, int | str]]:
        """What a layer linear (qkv, o, gate/up, down) adds to its gemm op's attrs: nothing in 16 bits;
        with FP8 linears (Stack.weight_dtype) ("fp8", 1), plus ("act_scale", "token") where its input is
        quantized per token at run time (a kernel of its own that finds each row's absmax; a static
        scale is one the quantize kernel reads). The op's dtype stays the activations' (its output)."""
        if not self.stack.fp8:
            return []
        return [("fp8", 1)] + ([("act_scale", "token")] if self.stack.fp8_activations == "dynamic" else [])

    def attention_impl(self) -> str:
        """The attention kernel the stack runs for this model: Stack.attention, or its attention_fallback
        for an architecture outside the engine's attention_archs (noted)."""
        st, arch = self.stack, self.model.architecture
        if st.attention_for(arch) == st.attention:
            return st.attention
        self.note(f"attention {st.attention}: the {st.preset} stack picks it for the {len(st.attention_archs)} "
                  f"architectures of its attention_archs only; this model is a {arch}, so it runs "
                  f"{st.attention_fallback} (priced as such)")
        return st.attention_fallback

    def attn(self, i: int, x: str, norm: bool = True) -> str:
        """Attention of layer i on residual x (or on an already-normed x): returns partial P_r."""
        s, p = self.shard, f"{self.tag(i)}.attn"
        n = self.norm(f"{p}.norm", x, i, f"L{i}.attn_norm") if norm else x
        # Qwen2's q/k/v bias is the GEMM's epilogue; Qwen3's q/k RMSNorm runs inside attention
        # (before RoPE): attrs only when present, so Llama ops keep their signatures
        bias = [("bias", 1)] if self.model.qkv_bias else []
        qkv = self.add_op(f"{p}.qkv", "gemm", [n], [f"{p}.qkv_out"],
                          [("m", self.rows), ("n", s.qkv_dim), ("k", s.hidden)] + bias + self.linear_attrs(), i,
                          f"L{i}.wqkv")
        o = self.sdpa(i, qkv)
        return self.add_op(f"{p}.out", "gemm", [o], [f"{p}.partial"],
                           [("m", self.rows), ("n", s.hidden), ("k", s.q_dim)] + self.linear_attrs(), i, f"L{i}.wo")

    def sdpa(self, i: int, qkv: str) -> str:
        """The attention op of layer i (RoPE, cache write, SDPA) on its qkv projection [rows, qkv_dim/tp]:
        returns [rows, q_dim/tp] (attn() wraps it in its two linears; async TP builds those itself)."""
        p = f"{self.tag(i)}.attn"
        ins = [qkv]
        if self.mb and self.mb.q0 > 0:
            # causal prefill chunk: it attends to the earlier chunks' K/V, written by their attention
            ins.append(self._chunk_sdpa[i])
        qk_norm = [("qk_norm", 1)] if self.model.qk_norm else []
        if self.step.mix:               # a serving iteration: each part's attention, in packed order
            o = ins[-1] if len(ins) > 1 else None
            for j, attrs in enumerate(self._mix_parts()):
                o = self.add_op(f"{p}.sdpa" + (f".part{j}" if j else ""), "attention",
                                ins[:1] + ([o] if o else []), [f"{p}.sdpa_out" + (f".part{j}" if j else "")],
                                attrs + qk_norm, i, f"L{i}.kv")
        else:
            o = self.add_op(f"{p}.sdpa", "attention", ins, [f"{p}.sdpa_out"], self._attention_attrs() + qk_norm, i,
                            f"L{i}.kv")
        if self.mb:
            self._chunk_sdpa[i] = o
        return o

    def mlp(self, i: int, x: str, norm: bool = True) -> str:
        """SwiGLU MLP of layer i on residual x: returns partial Z_r."""
        s, p = self.shard, f"{self.tag(i)}.mlp"
        n = self.norm(f"{p}.norm", x, i, f"L{i}.mlp_norm") if norm else x
        up = self.add_op(f"{p}.up", "gemm", [n], [f"{p}.up_out"],
                         [("m", self.rows), ("n", 2 * s.ffn), ("k", s.hidden)] + self.linear_attrs(), i, f"L{i}.w13")
        g = self.add_op(f"{p}.act", "swiglu", [up], [f"{p}.act_out"],
                        [("rows", self.rows), ("width", s.ffn)], i)
        return self.add_op(f"{p}.down", "gemm", [g], [f"{p}.partial"],
                           [("m", self.rows), ("n", s.hidden), ("k", s.ffn)] + self.linear_attrs(), i, f"L{i}.w2")

    def norm(self, name: str, x: str, layer: int | None, param: str, rows: int | None = None) -> str:
        rows = rows or self.rows
        fused = [("fused", 1)] if x in self._fused_sum and rows == self.rows else []   # inside the fused all-reduce
        return self.add_op(name, "rmsnorm", [x], [f"{name}_out"],
                           [("rows", rows), ("width", self.model.hidden)] + fused, layer, param)

    def all_reduce(self, name: str, x: str, layer: int | None, fuse: list | None = None,
                   extra: list | None = None) -> str:
        """An all-reduce of [rows, hidden]; `fuse` (the attrs of a fused kernel: ("fuse", "add_norm"),
        ("kernel", ...)) makes it the fused all-reduce + add + RMSNorm whose add and norm follow it; `extra`
        attrs ride along (a thread hand-off after it: token_split.layers)."""
        out = self.add_op(name, "all_reduce", [x], [f"{name}_out"],
                          [("rows", self.rows), ("width", self.model.hidden), ("group", self.tp)] + (fuse or [])
                          + (extra or []), layer)
        if fuse:
            self._fused_ar.add(out)
        return out

    def add(self, name: str, a: str, b: str, out: str, layer: int | None, rows: int | None = None) -> str:
        fused = [("fused", 1)] if b in self._fused_ar else []
        if fused:
            self._fused_sum.add(out)
        return self.add_op(name, "add", [a, b], [out], [("rows", rows or self.rows), ("width", self.model.hidden)]
                           + fused, layer)

    def ar_fusion(self) -> list | None:
        """The fused-kernel attrs of a sublayer boundary of standard TP under the stack's ar_norm_fusion, at
        this step's (or micro-batch's) rows; None where the engine runs the three ops apart (its window:
        sim/stack/ar_fusion.py). Says once which boundaries fused."""
        engine = self.stack.ar_norm_fusion
        if engine == "none" or not self.comm:
            return None
        k = fused_kernel(engine, self.rows, self.model.hidden, self.tp, self.stack.dtype_bytes)
        if k is None:
            self.note(f"fused all-reduce + RMSNorm ({engine}): {self.step.phase} ({self.rows} token rows) is outside "
                      f"its window: all-reduce and norm run apart")
            return None
        self.note(f"fused all-reduce + RMSNorm ({engine}): {self.step.phase} runs {k} fused kernels; the harness "
                  f"runs their dataflow unfused (all-reduce, add, norm)")
        return [("fuse", "add_norm"), ("kernel", k)]

    def head(self, x: str) -> str:
        """Final norm, LM head (replicated or vocab-parallel + all-gather), sampling by the stack's sampler
        (over the rank's own vocab shard when a comm-free schedule leaves the all-gather out)."""
        m, st = self.model, self.step
        rows = st.batch * st.logits_len      # prefill "last": only the last position per sequence
        n = self.norm("final.norm", x, None, "final_norm", rows)
        vocab_parallel = self.stack.head == "vocab-parallel" and self.tp > 1
        n_vocab = -(-m.vocab // self.tp) if vocab_parallel else m.vocab   # padded shard
        logits = self.add_op("head", "gemm", [n], ["head.logits"],
                             [("m", rows), ("n", n_vocab), ("k", m.hidden)], None, "head")
        if vocab_parallel and self.comm:
            logits = self.add_op("head.allgather", "all_gather", [logits], ["head.logits_all"],
                                 [("rows", rows), ("width", n_vocab), ("group", self.tp)])
        sampled = m.vocab if self.comm else n_vocab
        # an engine's sampler kernels (sim/stack/sampler.py) are named in the op; the reference's argmax is not
        engine = [("sampler", self.stack.sampler)] if self.stack.sampler != REFERENCE_SAMPLER else []
        return self.add_op("sample", "sample", [logits], ["next_tokens"],
                           [("batch", st.seqs), ("rows", rows), ("vocab", sampled)] + engine)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def micro_batches(step: Step, splits: int, along: str | None = None) -> list[MicroBatch]:
    """The micro-batches of a token split of `step` into min(splits, units) pieces: along the batch
    in decode, along the tokens of every sequence in prefill (a single piece: no split); `along`
    "batch" or "tokens" forces one (two micro-batches of sequences: dbo)."""
    along = along or ("batch" if step.phase == "decode" else "tokens")
    if along == "batch":
        pieces = _chunks(step.batch, min(splits, step.batch))
        return [MicroBatch(j, lo, n, 0, step.q_len) for j, (lo, n) in enumerate(pieces)]
    pieces = _chunks(step.q_len, min(splits, step.q_len))
    return [MicroBatch(j, 0, step.batch, lo, n) for j, (lo, n) in enumerate(pieces)]


def _chunks(total: int, n: int) -> list[tuple[int, int]]:
    """`total` units cut into n contiguous (start, size) pieces, the larger ones first: 5, 2 -> (0,3),(3,2)."""
    q, r = divmod(total, n)
    out, lo = [], 0
    for j in range(n):
        size = q + (j < r)
        out.append((lo, size))
        lo += size
    return out


def kind_base(kind: str) -> str:
    """A plan's layer kind without its argument: 'token-split:3' -> 'token-split'."""
    return kind.partition(":")[0]


def runs(plan: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """Maximal runs of equal layer kinds: [(kind, first, end), ...]."""
    out: list[tuple[str, int, int]] = []
    for i, k in enumerate(plan):
        if out and out[-1][0] == k:
            out[-1] = (k, out[-1][1], i + 1)
        else:
            out.append((k, i, i + 1))
    return out


