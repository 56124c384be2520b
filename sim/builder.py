"""The builders: one forward pass of a layer plan (one layer kind per layer) as IR ops.

`LAYER_KINDS` is the registry of layer kinds: each builds a run of layers of its kind (standard,
ladder, spd, parallel, upper-bound, token-split, seq-parallel) from the ops of sim/ir.py. The
schedule language (sim/schedule.py) turns a spec like "ladder:16" into a plan of these kinds.

Dataflow of each schedule: docs/design.md ("The schedules").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .ir import TOKENS, Op
from .model import ModelSpec, Shard
from .stack import Stack, Step


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
    """Appends ops with the shapes of one (model, tp, step, stack)."""

    def __init__(self, model: ModelSpec, tp: int, step: Step, stack: Stack):
        self.model, self.tp, self.step, self.stack = model, tp, step, stack
        self.shard: Shard = model.shard(tp)
        if model.sliding_window and step.kv_len > model.sliding_window:      # Mistral v0.1
            raise ValueError(f"{model.name.split('[:')[0]} attends to its last {model.sliding_window} positions "
                             f"(sliding window); prompt + gen beyond that is not priced (tpsim prices full attention)")
        self.ops: list[Op] = []
        self.notes: list[str] = []
        self.mb: MicroBatch | None = None       # set while building one micro-batch's ops (token-split)
        self._chunk_sdpa: dict[int, str] = {}   # layer -> the previous token chunk's attention output

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
        return self.add_op("embed", "embed", [TOKENS], ["embed.x"],
                           [("rows", self.rows), ("width", self.model.hidden), ("vocab", self.model.vocab)],
                           param="embed")

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
                 ("expand_gqa", int(self.stack.expand_gqa)), ("impl", self.stack.attention)]
        if mb and mb.nb < st.batch:
            attrs.append(("b0", mb.b0))
        return attrs

    def attn(self, i: int, x: str, norm: bool = True) -> str:
        """Attention of layer i on residual x (or on an already-normed x): returns partial P_r."""
        s, p = self.shard, f"{self.tag(i)}.attn"
        n = self.norm(f"{p}.norm", x, i, f"L{i}.attn_norm") if norm else x
        # Qwen2's q/k/v bias is the GEMM's epilogue; Qwen3's q/k RMSNorm runs inside attention
        # (before RoPE): attrs only when present, so Llama ops keep their signatures
        bias = [("bias", 1)] if self.model.qkv_bias else []
        qkv = self.add_op(f"{p}.qkv", "gemm", [n], [f"{p}.qkv_out"],
                          [("m", self.rows), ("n", s.qkv_dim), ("k", s.hidden)] + bias, i, f"L{i}.wqkv")
        ins = [qkv]
        if self.mb and self.mb.q0 > 0:
            # causal prefill chunk: it attends to the earlier chunks' K/V, written by their attention
            ins.append(self._chunk_sdpa[i])
        qk_norm = [("qk_norm", 1)] if self.model.qk_norm else []
        o = self.add_op(f"{p}.sdpa", "attention", ins, [f"{p}.sdpa_out"], self._attention_attrs() + qk_norm, i,
                        f"L{i}.kv")
        if self.mb:
            self._chunk_sdpa[i] = o
        return self.add_op(f"{p}.out", "gemm", [o], [f"{p}.partial"],
                           [("m", self.rows), ("n", s.hidden), ("k", s.q_dim)], i, f"L{i}.wo")

    def mlp(self, i: int, x: str, norm: bool = True) -> str:
        """SwiGLU MLP of layer i on residual x: returns partial Z_r."""
        s, p = self.shard, f"{self.tag(i)}.mlp"
        n = self.norm(f"{p}.norm", x, i, f"L{i}.mlp_norm") if norm else x
        up = self.add_op(f"{p}.up", "gemm", [n], [f"{p}.up_out"],
                         [("m", self.rows), ("n", 2 * s.ffn), ("k", s.hidden)], i, f"L{i}.w13")
        g = self.add_op(f"{p}.act", "swiglu", [up], [f"{p}.act_out"],
                        [("rows", self.rows), ("width", s.ffn)], i)
        return self.add_op(f"{p}.down", "gemm", [g], [f"{p}.partial"],
                           [("m", self.rows), ("n", s.hidden), ("k", s.ffn)], i, f"L{i}.w2")

    def norm(self, name: str, x: str, layer: int | None, param: str, rows: int | None = None) -> str:
        return self.add_op(name, "rmsnorm", [x], [f"{name}_out"],
                           [("rows", rows or self.rows), ("width", self.model.hidden)], layer, param)

    def all_reduce(self, name: str, x: str, layer: int | None) -> str:
        return self.add_op(name, "all_reduce", [x], [f"{name}_out"],
                           [("rows", self.rows), ("width", self.model.hidden), ("group", self.tp)], layer)

    def add(self, name: str, a: str, b: str, out: str, layer: int | None, rows: int | None = None) -> str:
        return self.add_op(name, "add", [a, b], [out], [("rows", rows or self.rows), ("width", self.model.hidden)],
                           layer)

    def head(self, x: str) -> str:
        """Final norm, LM head (replicated or vocab-parallel + all-gather), greedy sampling."""
        m, st = self.model, self.step
        rows = st.batch * st.logits_len      # prefill "last": only the last position per sequence
        n = self.norm("final.norm", x, None, "final_norm", rows)
        vocab_parallel = self.stack.head == "vocab-parallel" and self.tp > 1
        n_vocab = -(-m.vocab // self.tp) if vocab_parallel else m.vocab   # padded shard
        logits = self.add_op("head", "gemm", [n], ["head.logits"],
                             [("m", rows), ("n", n_vocab), ("k", m.hidden)], None, "head")
        if vocab_parallel:
            logits = self.add_op("head.allgather", "all_gather", [logits], ["head.logits_all"],
                                 [("rows", rows), ("width", n_vocab), ("group", self.tp)])
        return self.add_op("sample", "sample", [logits], ["next_tokens"],
                           [("batch", st.batch), ("rows", rows), ("vocab", m.vocab)])

    # -- layer bodies (docs/design.md, "The schedules"); x is the layer's input residual, the return its output

    def standard_layer(self, i: int, x: str, comm: bool = True) -> str:
        p = self.attn(i, x)
        if comm:
            p = self.all_reduce(f"L{i}.attn.allreduce", p, i)
        h = self.add(f"L{i}.attn.add", x, p, f"L{i}.h", i)
        z = self.mlp(i, h)
        if comm:
            z = self.all_reduce(f"L{i}.mlp.allreduce", z, i)
        return self.add(f"L{i}.mlp.add", h, z, f"L{i}.x", i)

    def spd_layer(self, i: int, x: str) -> str:
        """SPD block: rank r feeds its MLP X + P_r; one all-reduce of P_r + Z_r; X added after it."""
        p = self.attn(i, x)
        h = self.add(f"L{i}.attn.add", x, p, f"L{i}.h", i)        # local: no sync point
        z = self.mlp(i, h)
        s = self.add(f"L{i}.mlp.sum", p, z, f"L{i}.pz", i)         # P_r + Z_r
        s = self.all_reduce(f"L{i}.mlp.allreduce", s, i)
        return self.add(f"L{i}.mlp.add", x, s, f"L{i}.x", i)

    def parallel_layer(self, i: int, x: str) -> str:
        """PaLM/GPT-J: attn and mlp both read norm(x); one all-reduce of their summed partials."""
        n = self.norm(f"L{i}.norm", x, i, f"L{i}.attn_norm")
        p = self.attn(i, n, norm=False)
        z = self.mlp(i, n, norm=False)
        s = self.add(f"L{i}.mlp.sum", p, z, f"L{i}.pz", i)
        s = self.all_reduce(f"L{i}.allreduce", s, i)
        return self.add(f"L{i}.add", x, s, f"L{i}.x", i)

    def ladder_layers(self, first: int, end: int, x: str) -> str:
        """Ladder on layers first..end-1, as the Ladder authors' TP inference code runs it.

        Module m reads a residual that lacks module m-1's output; m-1's all-reduce is awaited
        just before the add that needs it, so it overlaps m's compute. The first ladder layer
        sees zeros as the previous modules' outputs; after the last, both pending sums are added.
        """
        r, pending = x, None      # pending: (layer, attn all-reduce value, mlp all-reduce value)
        for i in range(first, end):
            if pending:
                r = self.add(f"L{pending[0]}.attn.add", r, pending[1], f"L{pending[0]}.h", pending[0])
            a = self.all_reduce(f"L{i}.attn.allreduce", self.attn(i, r), i)          # launched async
            if pending:
                r = self.add(f"L{pending[0]}.mlp.add", r, pending[2], f"L{pending[0]}.x", pending[0])
            m = self.all_reduce(f"L{i}.mlp.allreduce", self.mlp(i, r), i)            # launched async
            pending = (i, a, m)
        i, a, m = pending
        r = self.add(f"L{i}.attn.add", r, a, f"L{i}.h", i)
        return self.add(f"L{i}.mlp.add", r, m, f"L{i}.x", i)

    def token_split_layers(self, first: int, end: int, x: str, splits: int = 2) -> str:
        """Token-split overlap (NanoFlow, TokenWeave) on layers first..end-1: standard math per micro-batch.

        The step is cut into micro-batches along the batch (decode) or the prompt tokens (prefill);
        each sublayer (attention, then MLP) is issued for micro-batch 0, 1, ..., and a micro-batch's
        all-reduce is awaited only by its own residual add, issued just before its next sublayer. So
        micro-batch j's all-reduce overlaps the compute of micro-batches j+1.. (and, for the last,
        the next sublayer of micro-batch 0). Costs the split adds are the IR's own: GEMMs at m/N,
        N x the kernels, the slice/concat copies, and compute slowed while a collective runs
        (the engine's Interference). Where the step cannot be split (decode at batch 1, a 1-token
        prefill) the layers are standard and the schedule says so in its notes."""
        st = self.step
        along = "batch" if st.phase == "decode" else "tokens"
        units = st.batch if along == "batch" else st.q_len
        k = min(splits, units)
        if k < 2:
            self.note(f"{st.phase} of {units} {'sequence' if along == 'batch' else 'token'}{'s' * (units != 1)} "
                      f"cannot be split along {along}: runs standard")
            return LAYER_KINDS["standard"](self, first, end, x)
        if k < splits:
            self.note(f"{st.phase} splits into {k}, not {splits} (only {units} along {along})")
        mbs = micro_batches(st, k)
        xs = []
        for mb in mbs:      # a view along the batch; a strided copy along the tokens of several sequences
            copy = int(along == "tokens" and st.batch > 1)
            xs.append(self.add_op(f"L{first}.mb{mb.index}.split", "slice", [x], [f"L{first}.mb{mb.index}.x_in"],
                                  [("rows", mb.rows), ("width", self.model.hidden), ("batch", st.batch),
                                   ("q_len", st.q_len), ("b0", mb.b0), ("nb", mb.nb), ("q0", mb.q0),
                                   ("nq", mb.nq), ("copy", copy)], first))
        pending: list[tuple | None] = [None] * k     # per micro-batch: (add name, output, layer, all-reduce value)
        for i in range(first, end):
            for half in ("attn", "mlp"):
                for j, mb in enumerate(mbs):
                    self.mb = mb
                    if pending[j]:
                        name, out, layer, ar = pending[j]
                        xs[j] = self.add(name, xs[j], ar, out, layer)
                    part = self.attn(i, xs[j]) if half == "attn" else self.mlp(i, xs[j])
                    t = self.tag(i)
                    ar = self.all_reduce(f"{t}.{half}.allreduce", part, i)       # async; awaited by the add
                    pending[j] = ((f"{t}.attn.add", f"{t}.h", i, ar) if half == "attn"
                                  else (f"{t}.mlp.add", f"{t}.x", i, ar))
                    self.mb = None
        for j, mb in enumerate(mbs):
            name, out, layer, ar = pending[j]
            self.mb = mb
            xs[j] = self.add(name, xs[j], ar, out, layer)
            self.mb = None
        return self.add_op(f"L{end - 1}.merge", "concat", xs, [f"L{end - 1}.x"],
                           [("rows", st.tokens), ("width", self.model.hidden), ("batch", st.batch),
                            ("q_len", st.q_len), ("axis", along)], end - 1)

    def seq_parallel_layers(self, first: int, end: int, x: str) -> str:
        """Megatron sequence parallelism on layers first..end-1 (Korthikanti et al. 2022).

        Between layers each rank holds 1/TP of the token rows of the residual, [rows/TP, hidden]
        (padded to TP x rows/TP rows when tokens do not divide, e.g. decode at batch < TP). Each
        sublayer: norm on the shard -> all-gather of the rows -> the TP GEMMs/attention on all rows
        -> reduce-scatter of the partial sums (rank r keeps rows block r) -> residual add on the
        shard. Same bytes as the all-reduce it replaces (a ring all-reduce is a reduce-scatter then
        an all-gather) plus the padding, all blocking; the norms and adds are 1/TP of the rows."""
        st, hidden, g = self.step, self.model.hidden, self.tp
        rows = st.tokens
        rs = -(-rows // g)                   # rows of each rank's shard
        padded = rs * g
        pad = padded - rows
        if pad:
            self.note(f"{st.phase} pads {rows} token row{'s' * (rows != 1)} to {padded} (TP {g}): "
                      f"every all-gather / reduce-scatter moves {padded} rows, {pad} of them padding")

        def gather(name: str, v: str, layer: int) -> str:
            out = self.add_op(name, "all_gather", [v], [f"{name}_out"],
                              [("rows", rs), ("width", hidden), ("group", g), ("dim", 0)], layer)
            if pad:                              # drop the padding rows: a view
                out = self.add_op(f"{name}.unpad", "slice", [out], [f"{name}.unpad_out"],
                                  [("rows", rows), ("width", hidden), ("batch", st.batch), ("q_len", st.q_len),
                                   ("b0", 0), ("nb", st.batch), ("q0", 0), ("nq", st.q_len), ("copy", 0)], layer)
            return out

        def scatter(name: str, v: str, layer: int) -> str:
            if pad:
                v = self.add_op(f"{name}.pad", "pad", [v], [f"{name}.pad_out"],
                                [("rows", padded), ("width", hidden), ("pad", pad)], layer)
            return self.add_op(name, "reduce_scatter", [v], [f"{name}_out"],
                               [("rows", padded), ("width", hidden), ("group", g)], layer)

        r = self.add_op(f"L{first}.sp.shard", "shard", [x], [f"L{first}.sp.x_in"],
                        [("rows", rs), ("width", hidden), ("group", g), ("pad", pad)], first)
        for i in range(first, end):
            n = self.norm(f"L{i}.attn.norm", r, i, f"L{i}.attn_norm", rs)
            p = self.attn(i, gather(f"L{i}.attn.allgather", n, i), norm=False)
            h = self.add(f"L{i}.attn.add", r, scatter(f"L{i}.attn.reducescatter", p, i), f"L{i}.h", i, rs)
            n = self.norm(f"L{i}.mlp.norm", h, i, f"L{i}.mlp_norm", rs)
            z = self.mlp(i, gather(f"L{i}.mlp.allgather", n, i), norm=False)
            r = self.add(f"L{i}.mlp.add", h, scatter(f"L{i}.mlp.reducescatter", z, i), f"L{i}.x", i, rs)
        return gather(f"L{end - 1}.sp.gather", r, end - 1)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def layers(self, plan: tuple[str, ...]) -> str:
        """Embedding, the layers as `plan` says (one LAYER_KINDS entry per layer), head."""
        x = self.embed()
        for kind, first, end in runs(plan):
            x = layer_builder(kind)(self, first, end, x)
        return self.head(x)


def micro_batches(step: Step, splits: int) -> list[MicroBatch]:
    """The micro-batches of a token split of `step` into min(splits, units) pieces: along the batch
    in decode, along the tokens of every sequence in prefill (a single piece: no split)."""
    if step.phase == "decode":
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


def _each(layer: Callable[[Builder, int, str], str]) -> Callable[[Builder, int, int, str], str]:
    """A layer kind whose layers are built one at a time (all but ladder)."""
    def build(b: Builder, first: int, end: int, x: str) -> str:
        for i in range(first, end):
            x = layer(b, i, x)
        return x
    return build


# Layer kind -> builder of a run of such layers: (builder, first layer, end layer, input residual)
# -> output residual. A new kind of layer is one entry here (and its plan function in SCHEDULES).
LAYER_KINDS: dict[str, Callable[[Builder, int, int, str], str]] = {
    "standard": _each(Builder.standard_layer),
    "ladder": Builder.ladder_layers,
    "spd": _each(Builder.spd_layer),
    "parallel": _each(Builder.parallel_layer),
    "upper-bound": _each(lambda b, i, x: b.standard_layer(i, x, comm=False)),
    "token-split": Builder.token_split_layers,          # "token-split:N" in a plan: N micro-batches
    "seq-parallel": Builder.seq_parallel_layers,
}


def kind_base(kind: str) -> str:
    """A plan's layer kind without its argument: 'token-split:3' -> 'token-split'."""
    return kind.partition(":")[0]


def layer_builder(kind: str) -> Callable[[Builder, int, int, str], str]:
    """The builder of a run of layers of `kind` ('kind' or 'kind:N' for a kind that takes a count)."""
    base, _, arg = kind.partition(":")
    build = LAYER_KINDS.get(base)
    if build is None:
        raise ValueError(f"unknown layer kind {kind!r}; choose from {', '.join(LAYER_KINDS)}")
    if not arg:
        return build
    n = int(arg)
    return lambda b, first, end, x: build(b, first, end, x, n)


def runs(plan: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """Maximal runs of equal layer kinds: [(kind, first, end), ...]."""
    out: list[tuple[str, int, int]] = []
    for i, k in enumerate(plan):
        if out and out[-1][0] == k:
            out[-1] = (k, out[-1][1], i + 1)
        else:
            out.append((k, i, i + 1))
    return out


