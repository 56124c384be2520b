"""The schedule IR: one forward pass as an ordered list of ops.

A `Schedule` is what both interpreters run. The simulator (sim.engine.simpy_engine) turns each op into a
timed event; the harness (hw.runner) turns it into a torch kernel or a torch.distributed call.
Ops are listed in *issue order* on each rank. Compute ops run one after another on the compute
stream and each waits until its inputs exist; collectives are issued to the comm stream when
the issue order reaches them (async), start once every rank has issued them, and their output
is awaited only by the op that reads it. So "blocking all-reduce" (standard) and "async
all-reduce awaited later" (ladder) differ only in op order and dataflow, never in op semantics.

The builders that make these lists: sim/schedule/builder.py; the schedule language: sim/schedule/language.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.stack.spec import Stack, Step

COMPUTE, COMM = "compute", "comm"


# kind -> stream. The harness implements each kind; the cost model prices each kind.
KINDS = {
    "embed": COMPUTE,       # token ids [B, S] -> x [B, S, hidden] (whole table, or attr masked: the vocab shard)
    "rmsnorm": COMPUTE,     # [rows, width] -> [rows, width]
    "gemm": COMPUTE,        # [m, k] @ [k, n] -> [m, n]; param names the weight shard
    "attention": COMPUTE,   # qkv [B, S, qkv_dim/tp] -> o [B, S, q_dim/tp]; RoPE, cache write, SDPA
    "swiglu": COMPUTE,      # [rows, 2*width] -> silu(a) * b [rows, width]
    "add": COMPUTE,         # a + b, both [rows, width]
    "sample": COMPUTE,      # logits [B, vocab] -> next token ids [B] (greedy argmax; attr sampler: an
                            # engine's sampler kernels, sim/stack/sampler.py -- the harness runs the argmax)
    "standin": COMPUTE,     # local stand-in of given cost (attr cost_ns): [rows, w] -> [rows, width], the
                            # input itself or tiled to width (what an all-gather's output looks like)
    "wait": COMPUTE,        # explicit wait: done once its input (a collective's output) exists; no work
    # row bookkeeping of token-split and seq-parallel (a view where the rows are contiguous, else a copy):
    "slice": COMPUTE,       # [>= batch*q_len, w] laid out [batch, q_len] -> sequences b0..b0+nb, positions
                            # q0..q0+nq: [nb*nq, w] (attr copy: 1 when the rows are not contiguous)
    "concat": COMPUTE,      # micro-batches -> [batch*q_len, w], joined along axis "batch" or "tokens"; axis
                            # "ring" (async TP): part s is the rows block of rank (rank + s) % group, put in rank
                            # order; attr inplace 1: the parts were written into the output's slices (no copy)
    "pad": COMPUTE,         # [rows - pad, w] -> [rows, w], zero rows appended (a reduce-scatter's input)
    "shard": COMPUTE,       # [n, w] -> this rank's block of rows [rows, w] of the input padded to group*rows
                            # (attr offset k: the block of rank (rank + k) % group)
    "sum": COMPUTE,         # attr parts k: k inputs [rows, w] -> their sum [rows, w], one kernel (async TP's
                            # local reduce)
    "all_reduce": COMM,     # sum over the TP group, [rows, width] in and out
    "all_gather": COMM,     # concat over the TP group along the last dim (attr dim=0: along rows, [group*rows, w])
    "reduce_scatter": COMM, # sum over the TP group, rank r keeps rows block r: [rows, w] -> [rows/group, w]
    "shift": COMM,          # a ring step of async TP: rank r sends its [rows, w] to rank (r - offset) % group and
                            # receives rank (r + offset) % group's (a copy-engine pull from a peer's symmetric buffer)
}


GIVEN_COST = ("standin", "wait")      # kinds that carry their own cost (sim.schedule.transform builds them)


TOKENS = "tokens"           # the one external input of every forward pass


@dataclass(frozen=True)
class Op:
    """One kernel or collective of one rank's forward pass."""

    name: str                                   # unique, e.g. "L3.attn.allreduce"
    kind: str                                   # a key of KINDS
    inputs: tuple[str, ...]                     # value names read (must exist before it runs)
    outputs: tuple[str, ...]                    # value names written
    attrs: tuple[tuple[str, int | str], ...]    # shapes and options, e.g. (("m", 4), ("n", 1280), ("k", 8192))
    dtype: str = "fp16"
    layer: int | None = None                    # transformer layer, None for embed/head/sample
    param: str | None = None                    # weight or state the op uses, e.g. "L3.wqkv", "L3.kv"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op {self.name}: unknown kind {self.kind!r}; choose from {', '.join(KINDS)}")

    @property
    def stream(self) -> str:
        return KINDS[self.kind]

    @property
    def is_comm(self) -> bool:
        return KINDS[self.kind] == COMM      # self.stream's, without its call: asked of every op of every pass

    def attr(self, key: str) -> int | str:
        for k, v in self.attrs:
            if k == key:
                return v
        raise KeyError(f"op {self.name} has no attr {key!r}")

    def get(self, key: str, default: int | str) -> int | str:
        """An optional attr (e.g. b0, the first sequence of a micro-batch)."""
        return next((v for k, v in self.attrs if k == key), default)

    @property
    def given_cost_s(self) -> float | None:
        """The cost a stand-in or wait carries itself (attr cost_ns); None for ops a profile prices."""
        return self.attr("cost_ns") * 1e-9 if self.kind in GIVEN_COST else None

    @property
    def signature(self) -> tuple:
        """What determines the op's cost: equal signatures cost the same."""
        return (self.kind, self.attrs, self.dtype)


@dataclass(frozen=True)
class Schedule:
    """One forward pass (prefill or one decode step) of one schedule, as every rank runs it."""

    name: str                   # the spec it was built from, e.g. "ladder:16"
    model: ModelSpec
    tp: int
    step: Step
    stack: Stack
    ops: tuple[Op, ...]
    plan: tuple[str, ...] = ()      # the kind of each layer (sim/schedule/schedules layer kinds; "kind:arg" for a kind with an argument)
    notes: tuple[str, ...] = ()     # what the builder chose that the user should see (e.g. a fallback)
    producer: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        seen: dict[str, Op] = {}
        names = set()
        for op in self.ops:
            if op.name in names:
                raise ValueError(f"schedule {self.name}: duplicate op name {op.name}")
            names.add(op.name)
            for v in op.inputs:
                if v != TOKENS and v not in seen:
                    raise ValueError(f"schedule {self.name}: op {op.name} reads {v!r} before any op writes it")
            for v in op.outputs:
                seen[v] = op
        self.producer.update(seen)

    @property
    def ladder_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.plan) if k == "ladder")

    @property
    def spd_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.plan) if k == "spd")

    @property
    def collectives(self) -> list[Op]:
        return [op for op in self.ops if op.is_comm]

    def deps(self, op: Op) -> list[Op]:
        """The ops whose outputs `op` waits for."""
        return [self.producer[v] for v in op.inputs if v != TOKENS]

    def layer_ops(self, layer: int) -> list[Op]:
        return [op for op in self.ops if op.layer == layer]
