"""A compiled layer as the kernels Inductor emits for it (sim/price/compiled_kernels.json).

The table is derived from Inductor itself by `python -m tpsim.hw.derive.inductor_kernels` (torch needed there,
never here): one layer of each schedule kind compiled for each variant (prefill; decode on the
GPU path at batch > 1 and at batch 1; decode on the CPU C++ backend). Each kernel is attributed to
the one IR op that is latest in issue order among those it fuses (the op's inputs imply the
others'), by role, the op name without its layer ("attn.norm"); every other IR op of the fusion
costs nothing extra. A kernel lists the buffers it reads and writes with their element counts
as products of symbols:

  b batch, q q_len, L kv_len (the static cache), kvh KV heads per rank, G = heads / kvh,
  G2 = G + 2 (q, k, v heads per KV head), hidden, ffn (per rank), dh = head_dim / 2, 2;
  tp, and rs = ceil(b * q / tp), the token rows of a seq-parallel rank's shard; nrows, the rows a
  norm of the layer reduces (rs in a seq-parallel layer, else b * q); pv_splits and norm_splits, the
  parts of a split p@v or norm (GPU decode: pv_splits_at, norm_splits_at), which a kernel's `when`
  names.

Token-split layers: roles carry the micro-batch ("mb1.attn.norm"), and b and q are the
micro-batch's own (sequences in decode, tokens in prefill), so one table prices any split size;
tables exist for 2 and 4 micro-batches (another count takes the nearest: first, middle and last
micro-batches keep their place). A step that cannot split runs standard layers, priced as such.

So a buffer [b, heads, q, L] is "b*q*L*kvh*G"; an fp32 one keeps 4 bytes per element, one in
the activation dtype takes the stack's. docs/compiled-stack-reference.md explains the derivation and where
the CPU backend's fusion may differ from Triton's.

GPU profiles price decode from the CPU-derived table's cuda-target variants with what the GPU
table (sim/compiled_kernels_gpu.json: the reference harness's own decode graph lowered by
Inductor's Triton path for an H100, hw/derive/inductor_gpu.py) shows the Triton path does differently:
its attention kernels and the L2 re-reads (gpu_overlay). The same for every schedule kind (the
GPU table is derived for the reference's dense and comm-free graphs only, and a speedup must
compare schedules priced from one table). Prefill and CPU / gloo profiles (decode-cpu) use the
CPU-derived table as derived. Buffers may carry `passes` (re-reads through L2, sim/price/l2_traffic.py).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
import json
import math
from dataclasses import dataclass
from pathlib import Path

from tpsim.sim.schedule.builder import MicroBatch, kind_base, micro_batches
from tpsim.sim.schedule.schedules import dbo, tokenweave
from tpsim.sim.price.l2_traffic import SEQUENTIAL_PASSES, has_symbol, l2_bytes, mark_rereads
from tpsim.sim.schedule.language import Op, Schedule
from tpsim.sim.stack.spec import Step

TABLE_PATH = Path(__file__).with_name("compiled_kernels.json")
# The GPU decode table: the reference harness's decode graph through Inductor's Triton path
# (`python -m tpsim.hw.derive.inductor_gpu`); its variants are looked up as "gpu:decode", "gpu:decode-m1"
GPU_TABLE_PATH = Path(__file__).with_name("compiled_kernels_gpu.json")
GPU_PREFIX = "gpu:"

# element sizes of the table's dtypes; the activation dtype (float16 in the table) takes the stack's
_DTYPE_BYTES = {"float32": 4, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}
ACT_DTYPE = "float16"


@dataclass(frozen=True)
class Buffer:
    mode: str               # read | write
    dtype: str              # torch dtype name as derived (float16 = the activation dtype)
    numel: str              # product of symbols, e.g. "b*q*hidden"
    passes: str = "1"       # times the kernel loads it through L2 ("G": once per query head, GQA)
    run_bytes: float | None = None  # contiguous bytes per row a program reads (None: whole sectors)


@dataclass(frozen=True)
class Kernel:
    role: str               # the IR op it is charged to, without the layer ("attn.sdpa")
    kind: str               # generated | matmul (extern) | extern | collective
    name: str               # Inductor's kernel name (documentation)
    fuses: tuple[str, ...]  # the other IR ops whose work it does ("prev:mlp.add": the previous layer's)
    buffers: tuple[Buffer, ...]
    when: str | None = None  # a symbol: the kernel launches only where it is > 1 (a split's combine)

    def runs(self, sym: dict[str, float]) -> bool:
        return self.when is None or sym.get(self.when, 1.0) > 1.0

    def bytes(self, sym: dict[str, float], act_bytes: int) -> float:
        return sum(numel(b.numel, sym) * (act_bytes if b.dtype == ACT_DTYPE else _DTYPE_BYTES[b.dtype])
                   for b in self.buffers)

    def l2_bytes(self, sym: dict[str, float], act_bytes: int) -> float:
        """Bytes through L2 (sim/price/l2_traffic.py): 0 when no buffer is re-read (DRAM bytes price it)."""
        if all(b.passes == "1" for b in self.buffers):
            return 0.0
        return l2_bytes(self.buffers,
                        lambda b: numel(b.numel, sym) * (act_bytes if b.dtype == ACT_DTYPE else _DTYPE_BYTES[b.dtype]),
                        lambda b: numel(b.passes, sym))

    def sweeps(self, sym: dict[str, float], act_bytes: int) -> list[tuple[float, float]]:
        """(bytes, further sweeps) of each buffer re-read in whole sweeps one after another
        (passes in l2_traffic.SEQUENTIAL_PASSES: a weight read once per batch row): its
        passes - 1 re-reads, which l2_bytes also counts."""
        return [(numel(b.numel, sym) * (act_bytes if b.dtype == ACT_DTYPE else _DTYPE_BYTES[b.dtype]),
                 numel(b.passes, sym) - 1.0)
                for b in self.buffers if b.passes in SEQUENTIAL_PASSES and numel(b.passes, sym) > 1]

    def matmul_dtype(self) -> str:
        """The dtype an extern matmul computes in: its first read's (fp32 when SDPA upcast)."""
        reads = [b.dtype for b in self.buffers if b.mode == "read"]
        return "fp32" if reads and reads[0] == "float32" else "act"


def numel(expr: str, sym: dict[str, float]) -> float:
    return math.prod(2.0 if s == "2" else sym[s] for s in expr.split("*") if s != "1")


@functools.cache
def _document(path: str) -> dict:
    """The table file as JSON, read once. A missing table is an error, never an empty table: pricing
    without it silently takes the analytic fused model, other numbers than the derived kernels give
    (an install whose wheel lacked compiled_kernels_gpu.json printed other predictions than the README)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"tpsim's kernel table {p} is missing: this install of tpsim is incomplete "
                                "(reinstall it: pip install --force-reinstall tpsim)")
    with open(p) as f:
        return json.load(f)


def _kernel(k: dict) -> Kernel:
    return Kernel(k["role"], k["kind"], k["kernel"], tuple(k["fuses"]),
                  tuple(Buffer(b["mode"], b["dtype"], b["numel"], b.get("passes", "1"), b.get("run_bytes"))
                        for b in k["buffers"]), k.get("when"))


@functools.cache
def table(path: str = str(TABLE_PATH), gpu_path: str | None = str(GPU_TABLE_PATH)) -> Mapping:
    """The derived tables by (kind, variant) (gpu_path None: without the GPU table). The CPU-derived
    table's cuda-target decode variants carry the GPU path's mechanisms (gpu_overlay, from the GPU
    table when there is one); the GPU table itself is also there, by (kind, "gpu:" + variant), as derived. Each entry is built when first read."""
    gpu = _document(gpu_path).get("layers", {}) if gpu_path else {}
    splits = _document(gpu_path).get("splits") if gpu_path else None
    out: dict = {}
    for p, prefix in ((path, ""), (gpu_path, GPU_PREFIX)):
        for kind, variants in (_document(p).get("layers", {}) if p else {}).items():
            for variant, ks in variants.items():
                if not prefix and variant == "decode":
                    out[(kind, EXTERN_DECODE)] = functools.partial(gpu_overlay, ks, EXTERN_DECODE, None)
                if not prefix and variant in GPU_OVERLAY:
                    out[(kind, variant)] = functools.partial(gpu_overlay, ks, variant,
                                                             gpu.get("standard", {}).get(variant), splits)
                else:
                    out[(kind, prefix + variant)] = functools.partial(list, ks)
    return _Layers(out)


class _Layers(Mapping):
    """(kind, variant) -> {role: [Kernel]}, each built from its JSON kernels on first access: a
    prediction reads a few of the table's ~100 layers."""

    def __init__(self, build: dict):
        self._build, self._built = build, {}

    def __getitem__(self, key):
        if key not in self._built:
            self._built[key] = _roles(self._build[key]())
        return self._built[key]

    def __contains__(self, key) -> bool:
        # a layer built already, without Mapping's way through __getitem__ (lookup asks it of every op priced)
        return key in self._built or super().__contains__(key)

    def __iter__(self):
        return iter(self._build)

    def __len__(self) -> int:
        return len(self._build)


def _roles(ks: list[dict]) -> dict[str, list[Kernel]]:
    roles: dict[str, list[Kernel]] = {}
    for k in ks:
        roles.setdefault(k["role"], []).append(_kernel(k))
    return roles


def meta(path: str = str(TABLE_PATH)) -> dict:
    """The table's provenance (torch version, command, notes): everything but the layers."""
    return {k: v for k, v in _document(path).items() if k != "layers"}


# The CPU-derived table's cuda-target decode variants (GPU profiles): what Inductor's Triton path
# does differently for the reference harness's graph (hw/derive/inductor_gpu.py, the GPU table), applied
# to every schedule kind alike, so schedules are compared on one table
GPU_OVERLAY = ("decode", "decode-m1")
# A GPU decode step of a stack that keeps one-row matmuls extern (Stack.mm_decompose_m1 False: no
# coordinate-descent decomposition): the CPU-derived table's cuda-target "decode" kernels at every
# batch -- extern mm for every linear (an extern kernel is a fusion barrier, so the pointwise kernels
# around it are the same at M == 1 as at M > 1), wo an extern mm too (no bmm decomposition), no
# GPU-table attention (derived with the q-len-1 bmm's decomposed: lookup leaves attention to the
# analytic model)
EXTERN_DECODE = "decode-extern"


def gpu_overlay(ks: list[dict], variant: str, gpu_standard: list[dict] | None,
                splits: dict | None = None) -> list[dict]:
    """One layer's kernels (JSON form) for a GPU profile: the attention (role attn.sdpa) as the GPU
    table's standard layer runs it (its kernels, with their GQA re-reads: passes G), then, where the
    table derived the real shapes' split reductions (its `splits` section), p@v's combine kernel,
    which launches where the step's shapes split p@v (symbol pv_splits > 1: pv_splits_at), and each
    norm's combine and apply, which launch where the norm's reduction splits (norm_splits > 1:
    norm_splits_at); other generated kernels with their re-reads marked (token-split's micro-batch
    attention keeps its own kernels, passes G); the extern matmuls as derived (at batch > 1 every
    linear, wo included, is cuBLAS on the GPU path too: the GPU table). EXTERN_DECODE (no GPU table:
    a stack that compiles with a symbolic batch, which Inductor never splits): the kernels as
    derived, re-reads marked, every matmul extern."""
    gpu_attn = [_one_head_fuses_rope(k) for k in (gpu_standard or []) if k["role"] == "attn.sdpa"]
    out = []
    for k in ks:
        if k["role"] == "attn.sdpa" and gpu_attn:
            continue                                    # replaced below, once
        out.append(mark_rereads(json.loads(json.dumps(k))))
    if gpu_attn and any(k["role"] == "attn.sdpa" for k in ks):
        out += [json.loads(json.dumps(k)) for k in gpu_attn]
        if splits and splits.get("combine"):
            out.append(json.loads(json.dumps(splits["combine"])))
    if gpu_attn and splits and splits.get("norm"):
        for role in _norm_roles(ks):
            out += [json.loads(json.dumps(dict(k, role=role))) for k in splits["norm"]]
    return out


def _norm_roles(ks: list[dict]) -> list[str]:
    """The layer's norm ops (their roles, "attn.norm", "mb1.mlp.norm", "norm"), whichever kernel they
    were fused into: a kernel's own role or an op it fuses (not the previous layer's)."""
    names = {k["role"] for k in ks} | {f for k in ks for f in k["fuses"] if not f.startswith("prev:")}
    return sorted(n for n in names if n.rsplit(".", 1)[-1] == "norm")


def _one_head_fuses_rope(k: dict) -> dict:
    """The attention's q-RoPE kernel (it reads no cache row and writes q in fp32, [b, heads, 1, D])
    launches only where a KV head has more than one query head (`when: "G"`): with one (G = 1, every
    MHA model) Inductor fuses it with the K/V cache write into one kernel, one launch a layer fewer
    than the GQA probe shows (the GPU table's `splits` rows: other_launches -3 over the 3-layer step
    at every such shape). Its few bytes (q in fp16 read, fp32 written) are then left out."""
    writes = [b for b in k["buffers"] if b["mode"] == "write"]
    if (k["kind"] == "generated" and len(writes) == 1 and writes[0]["dtype"] == "float32"
            and writes[0]["numel"].endswith("kvh*G*dh")
            and not any(has_symbol(b["numel"], "L") for b in k["buffers"])):
        return dict(k, when="G")
    return k


@functools.cache
def _norm_parts(gpu_path: str) -> dict[int, int]:
    """hidden -> the parts a norm over it splits into (the rows agree at every derived batch: a test)."""
    return {r["hidden"]: r["norm_splits"] for r in _document(gpu_path).get("splits", {}).get("shapes", [])
            if "norm_splits" in r}


def norm_splits_at(rows: int, hidden: int, gpu_path: str = str(GPU_TABLE_PATH)) -> int:
    """Parts Inductor splits an RMSNorm's reduction over `hidden` columns into, for `rows` rows (the
    GPU table's `splits`: derived at every hidden size of the built-in models, 1-64 rows). Inductor
    splits an inner reduction only while the rows are fewer than 2 x SMs (torch/_inductor/ir.py
    Reduction.num_splits, inner_reduction_splits: `numel_hint >= 2 * num_sm`: no split; 264 on the
    table's H100), so more rows than that never split. 1 at a hidden size not derived."""
    sms = _document(gpu_path).get("device", {}).get("sms", 132)
    return _norm_parts(gpu_path).get(hidden, 1) if rows < 2 * sms else 1


@functools.cache
def _pv_parts(gpu_path: str) -> dict[tuple[int, int, int, int], int]:
    """(batch, heads, kv_heads, head_dim) -> p@v's parts (the rows also carry hidden, which does not
    change p@v: tests/test_gpu_decode.py holds them to one count per attention shape)."""
    return {(r["b"], r["heads"], r["kv_heads"], r["head_dim"]): r["pv_splits"]
            for r in _document(gpu_path).get("splits", {}).get("shapes", [])}


def pv_splits_at(batch: int, heads: int, kv_heads: int, head_dim: int, gpu_path: str = str(GPU_TABLE_PATH)) -> int:
    """Parts Inductor splits decode p@v's reduction over the cache into at these per-rank attention
    shapes (the GPU table's `splits`: derived at every attention shape of the built-in models at TP
    1-16 and batch 1/4/16/64, with the reference's 1536-row cache; hw/derive/inductor_splits.py).
    The count is the one derived at that cache for any cache length: whether Inductor splits does not
    depend on it past 32 rows (ir.Reduction.num_splits: the outputs' count and the reads' strides
    decide), only how many parts. 1 (no split, the probe's one kernel) at a shape not derived."""
    return _pv_parts(gpu_path).get((batch, heads, kv_heads, head_dim), 1)


# Ops at the boundary of a run of token-split / seq-parallel layers (once per pass, outside the
# kept layer of the derivation): priced by the analytic fused model
BOUNDARY_ROLES = frozenset({"split", "merge", "sp.shard", "sp.gather", "sp.gather.unpad"})


# Layer kinds built from token-split's micro-batches with a split of their own (issue 45): their compiled
# layers are priced from the token-split tables role by role (the micro-batch's own b and q), and, where a
# step is not split, from the standard table. async-tp reorders seq-parallel's layer: its norms, attention,
# activation and adds from the seq-parallel table; its per-block GEMMs (extern matmuls either way), ring
# steps' bookkeeping and sum by the analytic fused model.
SPLITS = {"dbo": dbo.split, "tokenweave": tokenweave.split}
SEQ_PARALLEL_LIKE = ("seq-parallel", "async-tp")


def layer_split(sched: Schedule, layer: int) -> tuple[MicroBatch, ...] | None:
    """The micro-batches of the step in `layer`'s kind (token-split, dbo, tokenweave), None unsplit."""
    return _split(sched.plan[layer], sched.step)


@functools.lru_cache(maxsize=4096)
def _split(kind: str, step: Step) -> tuple[MicroBatch, ...] | None:
    """layer_split's, once per (layer kind, step): pricing asks it of every op of a split layer, twice."""
    base = kind_base(kind)
    if base == "token-split":
        return tuple(micro_batches(step, int(kind.partition(":")[2] or 2)))
    if base in SPLITS:
        mbs = SPLITS[base](step)
        return tuple(mbs) if mbs is not None else None
    return None


def micro_batch(sched: Schedule, op: Op) -> MicroBatch | None:
    """The micro-batch `op` works on ("L3.mb1.attn.qkv"), None outside one."""
    if op.layer is None or not sched.plan or kind_base(sched.plan[op.layer]) not in ("token-split", *SPLITS):
        return None
    tag = op.name.split(".")[1] if op.name.count(".") >= 2 else ""
    if not (tag.startswith("mb") and tag[2:].isdigit()):
        return None
    mbs = layer_split(sched, op.layer)
    return mbs[int(tag[2:])] if mbs else None


def variant(sched: Schedule, device: str, op: Op | None = None) -> str:
    """Which Inductor path the step takes: prefill (M > 1 everywhere); decode on the GPU path
    (bmm with one query row decomposed into a generated reduction; at batch 1 -- a micro-batch
    of 1 sequence for a token-split op -- the linear layers' mm too: `decode-m1`); decode on the
    GPU path of a stack without that decomposition (Stack.mm_decompose_m1 False: EXTERN_DECODE
    at every batch); decode on the CPU C++ backend (its own CPU decompositions, whatever the
    flag)."""
    st = sched.step
    if st.q_len > 1:
        return "prefill"
    if device == "cpu":
        return "decode-cpu"
    if not sched.stack.mm_decompose_m1 or sched.stack.fp8:
        # FP8 linears are scaled-mm ops (torch._scaled_mm, the engines' cutlass_scaled_mm), which
        # Inductor's one-row decomposition (decomposition.py `mm`: aten.mm only) leaves extern
        return EXTERN_DECODE
    mb = micro_batch(sched, op) if op is not None else None
    return "decode-m1" if (mb.nb if mb else st.batch) == 1 else "decode"


def symbols(sched: Schedule, op: Op | None = None) -> dict[str, float]:
    """The table's symbols at this step's shapes; b and q a token-split micro-batch's own for its ops."""
    s, st = sched.model.shard(sched.tp), sched.step
    g = s.heads / s.kv_heads
    mb = micro_batch(sched, op) if op is not None else None
    b, q = (mb.nb, mb.nq) if mb else (st.batch, st.q_len)
    rs = -(-st.tokens // sched.tp)
    seq_parallel = op is not None and op.layer is not None and sched.plan \
        and kind_base(sched.plan[op.layer]) in SEQ_PARALLEL_LIKE
    nrows = rs if seq_parallel else b * q            # the rows a norm of this layer reduces
    return {"b": b, "q": q, "L": st.kv_len, "kvh": s.kv_heads, "G": g, "G2": g + 2,
            "hidden": s.hidden, "ffn": s.ffn, "dh": s.head_dim / 2, "vocab": s.vocab,
            "tp": sched.tp, "rs": rs, "nrows": nrows,
            "pv_splits": pv_splits_at(b, s.heads, s.kv_heads, s.head_dim) if q == 1 else 1,
            "norm_splits": norm_splits_at(nrows, s.hidden) if q == 1 else 1}


def role_of(op: Op) -> str:
    return op.name.split(".", 1)[1]


def lookup(sched: Schedule, op: Op, device: str) -> tuple[str, str, str] | None:
    """(table kind, variant, role) whose kernels price `op` in a compiled phase, or None where the
    table has none (non-layer ops, run-boundary ops, a flash-attention or unexpanded-GQA stack's
    attention it was not derived for): those ops are priced by the analytic fused model
    (sim.price.work.op_work). An op whose role has no kernel under the key costs nothing (fused)."""
    if op.layer is None or not sched.plan:
        return None
    role = role_of(op)
    if op.kind == "attention" and sched.step.mix:
        return None             # a mixed step's attention parts (Step.mix): the tables hold uniform batches only
    if role.endswith("attn.sdpa") and (sched.stack.attention != "math" or not sched.stack.expand_gqa):
        return None
    kind = sched.plan[op.layer]
    var = variant(sched, device, op)
    if role.endswith("attn.sdpa") and var == EXTERN_DECODE:
        return None             # the tables' decode attention is the decomposed-bmm one
    if kind_base(kind) == "async-tp":
        # its norms, attention, activation and adds (module comment above SPLITS); its own roles (the
        # per-block GEMMs, ring bookkeeping, the sum) are no role of that table: the analytic model
        key = ("seq-parallel", variant(sched, device, op))
        return key + (role,) if key in table() and role in table()[key] else None
    if kind_base(kind) in ("token-split", *SPLITS):
        mb = micro_batch(sched, op)
        if mb is None:
            if role in BOUNDARY_ROLES:
                return None
            kind = "standard"        # a step that cannot split runs standard layers
        else:
            rest = role.split(".", 1)[1]
            if rest in BOUNDARY_ROLES:
                return None
            n = len(layer_split(sched, op.layer))
            derived = _derived_splits(var)
            if not derived:
                return None
            m, j = _nearest_split(n, mb.index, derived)
            kind, role = f"token-split:{m}", f"mb{j}.{rest}"
    elif role in BOUNDARY_ROLES:
        return None
    return (kind, var, role) if (kind, var) in table() else None


@functools.cache
def _derived_splits(var: str) -> tuple[int, ...]:
    """The split counts m of the table's token-split:m layers derived for variant `var` (asked per op)."""
    return tuple(int(k.partition(":")[2]) for k, v in table() if k.startswith("token-split:") and v == var)


def _nearest_split(n: int, j: int, derived: tuple[int, ...]) -> tuple[int, int]:
    """Micro-batch j of an n-way split -> (m, j') of the derived m-way table nearest n (the larger
    on a tie): the first and the last micro-batch keep their place, a middle one takes a middle
    one (with m = 2, the last: like it, it waits behind an earlier micro-batch)."""
    m = min(derived, key=lambda d: (abs(d - n), -d))
    if j == 0:
        return m, 0
    if j == n - 1:
        return m, m - 1
    return m, (min(j, m - 2) if m > 2 else 1)


def outside_norm_split(sched: Schedule | None, op: Op, device: str) -> list[Kernel]:
    """The split RMSNorm's combine and apply (the GPU table's `splits.norm`, each launching where
    norm_splits > 1: hidden > 8192 at fewer than 2 x SMs rows) for an RMSNorm outside the layers (the
    final norm) in a GPU decode step Inductor compiles at static shapes. A layer's norms carry them
    through gpu_overlay; the final norm is priced by the analytic fused model (one kernel, the first
    stage), so its split's two launches are added here. [] elsewhere: inside a layer, prefill, the C++
    backend, a symbolic-batch stack (EXTERN_DECODE: Inductor never splits there), no GPU table."""
    if sched is None or op.layer is not None or op.kind != "rmsnorm" or variant(sched, device) not in GPU_OVERLAY:
        return []
    return _outside_norm_split(str(GPU_TABLE_PATH))


@functools.cache
def _outside_norm_split(gpu_path: str) -> list[Kernel]:
    return [_kernel(k) for k in (_document(gpu_path).get("splits") or {}).get("norm", [])]


def kernels(key: tuple[str, str, str]) -> list[Kernel]:
    """The kernels charged to role key[2] of layer kind key[0], variant key[1] ([]: fused away)."""
    return table()[key[:2]].get(key[2], [])

