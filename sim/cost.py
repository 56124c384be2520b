"""Op -> seconds, from a Profile.

Compute ops of a compiled phase (Stack.compiled) inside a layer: the kernels Inductor emits for
that layer (sim/fusion.py): extern matmuls priced as the IR's GEMM (below), generated kernels by
the bytes they read and write (memory roofline with the profile's efficiency curve, or the bytes
they re-read through L2 when that is slower: sim/l2_traffic.py), each kernel
at least its device floor (below; an op the stack's graph_scope leaves outside the graph, e.g. vLLM
V1's LM head, logits all-gather and sampler, is launched eagerly even in a graph-replayed step:
Stack.graphs(phase, op)).

A GEMM with one row in a compiled phase on a GPU (the LM head at batch 1; inside a layer the
table has it) is Inductor's generated GEMV reduction, priced by its bytes (generated_gemv), where
the stack decomposes one-row matmuls (Stack.mm_decompose_m1: the reference's coordinate-descent
Inductor); on a stack that does not (vLLM's, or torch.compile's defaults) it stays cuBLAS
F.linear, priced from the profile's GEMM table like any other GEMM.

Other compute ops: a measured time when the profile has one for the op's exact shape; interpolated
(log-log) along the op's size axis when it has neighbours; otherwise a roofline
max(flops / (peak * eff), bytes / (bw * eff)) per kernel, with the efficiency curves of the
profile. Launch overhead: on a GPU each kernel costs at least its device floor, max(GPU time,
kernels x launch_s["graph"]) (the least one kernel takes on the device with kernels back to back),
however it was launched. Under a CUDA graph (graph phases, ops inside the stack's graph_scope) that
is all. Without a graph the launches are asynchronous (CUDA C++ Programming Guide, "Asynchronous
Concurrent Execution": a launch returns to the host before the device completes it): issue_s is
the CPU's time to launch the op (kernels x launch_s["eager"]), which
the engines chain per rank in issue order (sim/engine.py `issue_s`), so a step is launch-bound only
where the Python thread really falls behind the GPU. On a CPU device launch and compute add up (one
thread does both): GPU time + kernels x launch, and no issue time.

Collectives: sim/collective_cost.py.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from . import flash_decode, fusion, l2_traffic
from .collective_cost import CollectiveCost, loglog
from .profile import Profile
from .schedule import Op, Schedule
from .stack import DTYPE_BYTES, GRAPH_OUTSIDE, Stack

# Kinds whose eager kernels torch.compile fuses: an eager-measured time does not price them in a
# compiled step, nor a compiled-measured one an eager step (GEMMs are the same cuBLAS kernel either
# way). A point's mode "graph" means measured as a compiled step (`tpsim calibrate` times compiled
# steps under CUDA graphs).
FUSED_UNDER_GRAPHS = {"rmsnorm", "swiglu", "attention"}

# Attrs that never change an op's cost (where in the cache a step writes, which sequences of the
# cache a micro-batch reads): not part of a lookup key.
COST_FREE_ATTRS = {"start_pos", "b0"}

# The attr each kind's measured points are interpolated along.
SWEEP_ATTR = {"gemm": "m", "attention": "kv_len", "rmsnorm": "rows", "swiglu": "rows",
              "add": "rows", "embed": "rows", "sample": "rows"}


@dataclass(frozen=True)
class Work:
    """One kernel's worth of work: FLOPs, bytes moved, kernels launched."""

    flops: float
    bytes: float
    kernels: int
    matmul: bool = False      # limited by matrix throughput (gemm efficiency) vs memory


def op_work(op: Op, fused: bool = False, engine: bool = False) -> list[Work]:
    """What one compute op does on its own. Eager PyTorch runs unfused elementwise kernels; a
    compiled (`fused`) phase one fused kernel per op (ops inside a layer of a compiled phase are
    priced from Inductor's own kernels instead, sim/fusion.py); an `engine` (Stack.engine_kernels)
    runs its own fused CUDA ops in eager phases: one kernel per norm, with the residual add before it
    inside (fused_add_rmsnorm), one per SwiGLU (silu_and_mul)."""
    e = DTYPE_BYTES[op.dtype]
    a = dict(op.attrs)
    k = op.kind
    if k == "gemm":
        m, n, kk = a["m"], a["n"], a["k"]
        return [Work(2.0 * m * n * kk, e * (m * kk + kk * n + m * n), 1, matmul=True)] + separable_work(op, fused)
    if k == "attention":
        return _attention_work(a, e, fused) + separable_work(op, fused, engine)
    if k == "rmsnorm":
        # eager: x.float(), pow, mean, rsqrt, mul, mul(weight), .to(dtype): fp32 passes over [rows, width]
        el = a["rows"] * a["width"]
        return [Work(4.0 * el, 2 * e * el, 1)] if fused or engine else [Work(4.0 * el, 7 * 4 * el, 6)]
    if k == "swiglu":
        el = a["rows"] * a["width"]
        return [Work(4.0 * el, 3 * e * el, 1)] if fused or engine else [Work(4.0 * el, 5 * e * el, 2)]
    if k == "add":
        el = a["rows"] * a["width"]
        # an engine's residual add rides in the next norm's kernel (fused_add_rmsnorm): no launch of its own
        return [Work(float(el), 3 * e * el, 0 if engine and not fused else 1)]
    if k == "embed":
        el = a["rows"] * a["width"]
        if not a.get("masked"):
            return [Work(0.0, 2 * e * el, 1)]
        # vocab-parallel shard lookup (vllm/model_executor/layers/vocab_parallel_embedding.py forward):
        # compiled, one kernel gathers the shard's rows and zeroes the ids outside it; eager, the mask
        # of the ids (get_masked_input_and_mask: one jit-fused kernel over [rows] int ids, bytes
        # negligible), F.embedding, then masked_fill_ re-reads and writes [rows, width]
        return [Work(0.0, 2 * e * el, 1)] if fused else [Work(0.0, 4 * e * el, 3)]
    if k in ("slice", "shard", "pad"):
        # row bookkeeping of token-split / seq-parallel: a view (no kernel) unless it must copy
        el = a["rows"] * a["width"]
        return [Work(0.0, 2 * e * el, 1)] if a.get("copy") or a.get("pad") else []
    if k == "concat":
        el = a["rows"] * a["width"]
        return [Work(0.0, 2 * e * el, 1)]           # torch.cat of the micro-batches: one copy kernel
    if k == "sample":
        # argmax over the last position's logits per sequence: [batch, vocab]
        return [Work(float(a["batch"] * a["vocab"]), e * a["batch"] * a["vocab"], 2)]
    raise ValueError(f"no compute cost for op kind {k!r} ({op.name})")


# Attrs that add a separable piece to an op (sim.schedule sets them only when a model has them):
# tables measured without them (a database's plain GEMMs, a Llama calibration) still price the
# op, plus the roofline of the piece (separable_work).
SEPARABLE_ATTRS = {"gemm": ("bias",), "attention": ("qk_norm",)}


def separable_work(op: Op, fused: bool, engine: bool = False) -> list[Work]:
    """The work that `bias` (gemm) and `qk_norm` (attention) add to an op (`engine`: op_work's)."""
    e = DTYPE_BYTES[op.dtype]
    a = dict(op.attrs)
    out = []
    if op.kind == "gemm" and a.get("bias"):
        # Qwen2's qkv bias [n]: cuBLASLt's bias epilogue (eager addmm) or a fused pointwise under
        # torch.compile -- one more add per output element, the bias read once, no extra kernel
        out.append(Work(float(a["m"] * a["n"]), e * a["n"], 0))
    if op.kind == "attention" and a.get("qk_norm"):
        # Qwen3's RMSNorm over head_dim on q [b, q, H, d] and k [b, q, Hk, d] before RoPE: eager runs
        # the same six fp32 passes as the layer norms (cost.op_work "rmsnorm"), per tensor; compiled,
        # it fuses into the RoPE kernel (one more read and write of q and k); an engine's eager phase
        # runs its RMSNorm kernel once per tensor (vLLM / SGLang Qwen3Attention q_norm, k_norm: 2 kernels)
        el = a["batch"] * a["q_len"] * (a["heads"] + a["kv_heads"]) * a["head_dim"]
        if fused:
            out.append(Work(4.0 * el, 2 * e * el, 0))
        elif engine:
            out.append(Work(4.0 * el, 2 * e * el, 2))
        else:
            out.append(Work(4.0 * el, 7 * 4 * el, 12))
    return out


def _attention_work(a: dict, e: int, fused: bool) -> list[Work]:
    """RoPE + KV-cache write (+ GQA expand) + SDPA over kv_len keys. Per rank:
    q [b, q, H, d], cache [b, kv, Hk, d]; math SDPA materializes scores [b, H, q, kv]. An engine's
    own prep kernels (attr "prep", Stack.attention_prep_kernels) do the RoPE and the cache write
    in that many kernels, compiled or not."""
    b, q, kv = a["batch"], a["q_len"], a["kv_len"]
    h, hk, d = a["heads"], a["kv_heads"], a["head_dim"]
    rope = Work(6.0 * b * q * (h + hk) * d, 2 * e * b * q * (h + hk) * d, 1 if fused else 8)    # RoPE on q, k
    cache = Work(0.0, 4 * e * b * q * hk * d, 2)                                                 # cache write k, v
    n = a.get("prep", 0)
    if n == 1:                  # one kernel rotates q, k and writes the cache (TensorRT-LLM)
        out = [Work(rope.flops, rope.bytes + cache.bytes, 1)]
    elif n:                     # RoPE in one kernel, the cache write in the others
        out = [Work(rope.flops, rope.bytes, 1), Work(0.0, cache.bytes, n - 1)]
    else:
        out = [rope, cache]
    hkv = hk
    if a["expand_gqa"] and hk < h:
        out.append(Work(0.0, 2 * e * b * kv * d * (hk + h), 2))        # repeat_interleave K, V
        hkv = h
    flops = 4.0 * b * h * q * kv * d                                    # QK^T and PV
    qo_kv = e * (2 * b * h * q * d + 2 * b * hkv * kv * d)
    if a["impl"] == "math":
        scores = b * h * q * kv
        # bmm -> scale/mask -> softmax (fp32) -> cast -> bmm: ~6 passes over the score matrix
        out.append(Work(flops, qo_kv + 6 * e * scores, 1 if fused else 6, matmul=True))
    else:
        out.append(Work(flops, qo_kv, 1, matmul=True))
    return out


def roofline_s(profile: Profile, works: list[Work], dtype: str) -> float:
    peak = profile.peak_flops.get(dtype) or max(profile.peak_flops.values())
    t = 0.0
    for w in works:
        if not w.kernels:       # rides in another kernel (a GEMM's bias epilogue): no small-kernel efficiency
            t += max(w.flops / peak if w.matmul else 0.0, w.bytes / profile.mem_bytes_per_s)
            continue
        t_flops = w.flops / (peak * profile.gemm_efficiency(max(w.flops, 1.0))) if w.matmul else 0.0
        t_bytes = w.bytes / (profile.mem_bytes_per_s * profile.memory_efficiency(max(w.bytes, 1.0)))
        t += max(t_flops, t_bytes)
    return t


class CostModel(CollectiveCost):
    """Prices the ops of one workload on one profile; caches by op signature. Compute ops here,
    collectives in CollectiveCost (sim/collective_cost.py)."""

    def __init__(self, profile: Profile, stack: Stack, gpus_per_node: int | None = None):
        self.profile, self.stack = profile, stack
        self.gpus_per_node = gpus_per_node or profile.gpus_per_node
        self._cache: dict = {}
        # measured points by the mode they price: keyed by "compiled" (fused kernels) or not
        self._points = _indexes(profile)
        # compute.l2 (sim/l2_traffic.py): a CUDA profile without it prices DRAM bytes only, noted once
        self._l2 = profile.l2 if profile.device == "cuda" else None
        self._l2_bw = self._l2.bytes_per_s if self._l2 is not None else None

    # -- compute

    def works(self, op: Op, fused: bool) -> list[Work]:
        """op_work for this stack (an engine's own eager kernels: Stack.engine_kernels)."""
        return op_work(op, fused, self.stack.engine_kernels)

    def compute_s(self, op: Op, phase: str, sched: Schedule | None = None) -> float:
        """Seconds of one compute op. With the op's schedule, an op inside a layer of a compiled
        phase is priced from Inductor's kernels for that layer (sim/fusion.py)."""
        if op.given_cost_s is not None:          # a stand-in or wait (sim.transform): its own cost
            return op.given_cost_s
        fused, graphs = self.stack.compiled(phase), self.stack.graphs(phase, op.name)
        hit = fusion.lookup(sched, op, self.profile.device) if (fused and sched is not None) else None
        if hit is not None:
            # the micro-batch's size is in the op's signature (its m / rows / batch / q_len attrs)
            key = ("compiled", op.signature, hit, sched.step, sched.model, sched.tp, graphs)
            t = self._cache.get(key)
            if t is None:
                t = self._cache[key] = self._kernels_s(op, fusion.kernels(hit), sched, graphs)
            return t
        key = (op.signature, phase, graphs)      # graphs: an op left outside the graph pays eager launches
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._compute_s(op, fused, graphs)
        return t

    def _launch_s(self, graphs: bool) -> float:
        return self.profile.launch_s["graph" if graphs else "eager"]

    def _floor(self, gpu_s: float, kernels: int, graphs: bool) -> float:
        """The one launch rule (module docstring): on a GPU an op costs at least its kernels' device
        floor, launch_s["graph"] each (the least one kernel takes on the device with kernels back to
        back: how the profile measures it), whether a graph replays it or Python launched it ahead;
        an eager op's launches themselves are CPU time (issue_s, on the rank's launch chain). A CPU
        device does both in turn (sum)."""
        if self.profile.device != "cuda":
            return gpu_s + kernels * self._launch_s(graphs)
        return max(gpu_s, kernels * self._launch_s(True))

    def issue_s(self, op: Op, phase: str, sched: Schedule | None = None) -> float:
        """CPU seconds the rank's Python thread spends launching `op`: on a GPU, for an op launched
        eagerly (an eager phase, or an op the stack's graph_scope leaves outside the graph), its kernels
        x launch_s["eager"] -- the kernels compute_s prices, counted the same way; 0 under a CUDA graph
        (the replay's launch is the host lane's, sim/host_lane.py), on a CPU device (_floor adds the
        launches to the op) and for a stand-in (a given cost). An eager collective costs one launch:
        its eager time (an eager table, timed per Python-issued call, or a graph table plus
        eager_extra, sim/collective_cost.py) already holds that call on the GPU side, so it is not
        added to the collective's time again -- it only delays what this thread issues after it. A
        collective over a group of 1 exchanges nothing (priced "local", 0) and launches nothing."""
        if self.profile.device != "cuda" or op.given_cost_s is not None or self.stack.graphs(phase, op.name):
            return 0.0
        if op.is_comm and op.attr("group") == 1:
            return 0.0
        fused = self.stack.compiled(phase)
        hit = fusion.lookup(sched, op, self.profile.device) if (fused and sched is not None and not op.is_comm) else None
        key = ("issue", op.signature, phase, hit)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._kernel_count(op, fused, hit) * self._launch_s(False)
        return t

    def _kernel_count(self, op: Op, fused: bool, hit) -> int:
        """Kernels `op` launches, as compute_s prices it: Inductor's kernels charged to it in a compiled
        layer (`hit`; kernel_terms: one launch each), one for a collective or a generated GEMV, else
        op_work's."""
        if op.is_comm:
            return 1
        if hit is not None:
            return sum(1 for k in fusion.kernels(hit) if k.kind != "collective")
        if self.generated_gemv(op, fused):
            return 1
        return sum(w.kernels for w in self.works(op, fused))

    def generated_gemv(self, op: Op, fused: bool) -> bool:
        """A GEMM with one row (m == 1) in a compiled phase on a GPU, inside the compiled region
        (not an op the stack's graph_scope leaves to eager code, e.g. vLLM's LM head), on a stack
        that decomposes one-row matmuls (Stack.mm_decompose_m1): Inductor's `mm` decomposition
        (torch/_inductor/decomposition.py, coordinate_descent_tuning on and a non-CPU device:
        self.shape[0] == 1) makes it a generated mul + sum reduction, not cuBLAS. Inside a layer
        the kernel table already holds that reduction (fusion 'decode-m1'; a stack without it
        looks up fusion.EXTERN_DECODE, whose extern matmuls price from the GEMM table); this is the
        rule for the GEMMs outside layers: the reference's LM head at batch 1 (the harness
        compiles decode_one_token whole, model.output included)."""
        return (fused and self.stack.mm_decompose_m1 and op.kind == "gemm" and self.profile.device == "cuda"
                and dict(op.attrs).get("m") == 1 and op.name not in GRAPH_OUTSIDE[self.stack.graph_scope])

    def _compute_s(self, op: Op, fused: bool, graphs: bool) -> float:
        if self.generated_gemv(op, fused):
            # the generated reduction streams the weight once: its bytes at the memory roofline
            # (no tensor cores: matmul False), one launch; a bias rides in it (separable_work)
            a, e = dict(op.attrs), DTYPE_BYTES[op.dtype]
            w = Work(2.0 * a["n"] * a["k"], e * (a["k"] + a["n"] * a["k"] + a["n"]), 1)
            return self._floor(roofline_s(self.profile, [w] + separable_work(op, True), op.dtype), 1, graphs)
        measured = self._measured(op, fused, graphs)
        if measured is not None:
            return measured
        works = self.works(op, fused)
        # a decode-step attention under a flash stack: its other kernels' roofline (RoPE, cache write, any
        # GQA expand, qk-norm) plus the measured-curve time of the attention kernel (the op's one matmul Work)
        cc = self.profile.compute_capability if self.profile.device == "cuda" else None
        fallback = self.stack.attention_fallback
        flash_s = flash_decode.attention_kernel_s(op, self.profile.mem_bytes_per_s, cc, fallback)
        if flash_s is not None:
            self._note(flash_decode.kernel_on(op.attr("impl"), cc, fallback)[1])
            others = [w for w in works if not w.matmul]
            return self._floor(roofline_s(self.profile, others, op.dtype) + flash_s, sum(w.kernels for w in works),
                               graphs)
        return self._floor(roofline_s(self.profile, works, op.dtype), sum(w.kernels for w in works), graphs)

    def _kernels_s(self, op: Op, kernels: list, sched: Schedule, graphs: bool) -> float:
        """The kernels Inductor charges to `op` (none: its work is fused into another op's kernel),
        summed: see kernel_terms."""
        return sum(t["s"] for t in self.kernel_terms(op, kernels, sched, graphs))

    def kernel_prices(self, op: Op, kernels: list, sched: Schedule, graphs: bool) -> list[tuple]:
        """[(kernel, seconds)] of kernel_terms, one per kernel that runs (collectives left out)."""
        return [(t["kernel"], t["s"]) for t in self.kernel_terms(op, kernels, sched, graphs)]

    def kernel_terms(self, op: Op, kernels: list, sched: Schedule, graphs: bool) -> list[dict]:
        """Per kernel charged to `op`: {name, kind, dram_bytes, l2_bytes, s}. Extern matmuls of a
        GEMM op: the GEMM's own price (measured points or roofline); the extern bmm's of math SDPA:
        2 b H q L d FLOPs each, in fp32 when SDPA upcast (the profile's fp32 matmul peak if it has
        one), plus their bytes; generated kernels: bytes at the memory roofline, or their L2
        re-reads at the L2 rate when slower (sim/l2_traffic.py). Every kernel costs at least one
        launch; collectives are priced as the IR's comm op (not here)."""
        sym = fusion.symbols(sched, op)
        act = DTYPE_BYTES[op.dtype]
        out = []
        for k in kernels:
            if k.kind == "collective":
                continue
            nbytes, l2 = k.bytes(sym, act), 0.0
            if k.kind == "matmul" and op.kind == "gemm":
                t = self._compute_s(op, True, graphs)
            elif k.kind == "matmul":
                # an extern bmm of math SDPA: [b, H, q, d] x [b, H, d, L], at the attention op's own
                # shape (a token-split micro-batch's sequences or tokens)
                a = dict(op.attrs)
                flops = 2.0 * a["batch"] * a["heads"] * a["q_len"] * a["kv_len"] * a["head_dim"]
                dtype = "fp32" if k.matmul_dtype() == "fp32" else op.dtype
                w = Work(flops, nbytes, 1, matmul=True)
                peak_dtype = dtype if dtype in self.profile.peak_flops else op.dtype
                t = self._floor(roofline_s(self.profile, [w], peak_dtype), 1, graphs)
            else:
                # DRAM bytes at the roofline, or the bytes it re-reads through L2 (GQA) when slower;
                # plus the whole further sweeps of a buffer re-read one sweep after another (the
                # reference wo's weight at batch > 1), each from L2 while it fits (l2_traffic)
                l2 = k.l2_bytes(sym, act)
                if l2 > nbytes and self._l2_bw is None and self.profile.device == "cuda":
                    self._note_no_l2()
                dram_s = roofline_s(self.profile, [Work(0.0, nbytes, 1)], op.dtype)
                sweeps = k.sweeps(sym, act) if self._l2_bw else []
                t = l2_traffic.kernel_s(dram_s, l2 - sum(b * x for b, x in sweeps), self._l2_bw)
                t += sum(self._resweep_s(b, x) for b, x in sweeps)
                t = self._floor(t, 1, graphs)
            out.append({"kernel": k, "name": k.name, "kind": k.kind, "dram_bytes": nbytes, "l2_bytes": l2, "s": t})
        return out

    def _note_no_l2(self) -> None:
        """One note that the L2 re-reads went unpriced."""
        self._note(f"profile {self.profile.name} has no compute.l2 (L2 bandwidth): the GQA K/V re-reads and "
                   f"weight re-sweeps are priced at the DRAM bytes only")

    def _resweep_s(self, nbytes: float, extra: float) -> float:
        """`extra` further sweeps over `nbytes` (sim/l2_traffic.py resweep_s): hits at the L2
        rate, misses at this profile's DRAM rate for a kernel moving that many bytes; no sweep
        curve in the profile's compute.l2: all from L2."""
        hit = l2_traffic.l2_hit_fraction(self._l2, nbytes)
        dram = self.profile.mem_bytes_per_s * self.profile.memory_efficiency(max(nbytes, 1.0))
        return l2_traffic.resweep_s(nbytes, extra, 1.0 if hit is None else hit, self._l2_bw, dram)

    def _measured(self, op: Op, fused: bool, graphs: bool | None = None) -> float | None:
        """A measured time for `op`: points indexed by whether the phase is compiled (`fused`:
        fusable kernels measured eager do not price a compiled step); the launch floor follows
        whether the step replays a CUDA graph (`graphs`, default: as `fused`)."""
        graphs = fused if graphs is None else graphs
        sweep = SWEEP_ATTR.get(op.kind)
        attrs = dict(op.attrs)
        if sweep is None or sweep not in attrs:
            return None
        rest = tuple(sorted((k, v) for k, v in op.attrs if k != sweep and k not in COST_FREE_ATTRS))
        pts = self._points[fused].get((op.kind, op.dtype, rest))
        extra = SEPARABLE_ATTRS.get(op.kind, ())
        if not pts and any(attrs.get(x) for x in extra):
            # measured without the separable piece: look the plain op up, price the piece apart
            plain = Op(op.name, op.kind, op.inputs, op.outputs,
                       tuple((k, v) for k, v in op.attrs if k not in extra), op.dtype)
            t = self._measured(plain, fused, graphs)
            if t is None:
                return None
            works = separable_work(op, fused, self.stack.engine_kernels)
            return t + self._floor(roofline_s(self.profile, works, op.dtype), sum(w.kernels for w in works), graphs)
        if not pts:
            return None
        xs = [p[0] for p in pts]
        x = attrs[sweep]
        i = bisect.bisect_left(xs, x)
        if i < len(xs) and xs[i] == x:
            t = pts[i][1]
        elif 0 < i < len(xs):
            t = loglog(x, pts[i - 1], pts[i])
        else:
            # outside the measured range: the roofline's shape, anchored on the nearest measured point
            near = pts[0] if i == 0 else pts[-1]
            near_op = Op(op.name, op.kind, op.inputs, op.outputs,
                         tuple((k, near[0] if k == sweep else v) for k, v in op.attrs), op.dtype)
            r_here = roofline_s(self.profile, self.works(op, fused), op.dtype)
            r_near = roofline_s(self.profile, self.works(near_op, fused), op.dtype)
            t = near[1] * (r_here / r_near if r_near > 0 else 1.0)
        if op.kind == "gemm" and self.profile.device == "cuda":
            # a GEMM is one kernel; database times are device time (kernels back to back), so a GEMM
            # shorter than the device floor costs the floor, as on the roofline path (launched eagerly,
            # its launch is CPU time: issue_s)
            t = self._floor(t, 1, graphs)
        return t


_INDEXES: dict = {}     # (id(compute_points), id(gemm_tables)) -> (those tuples, {graphs: index})


def _indexes(profile: Profile) -> dict:
    """{graphs: _index_points(profile, graphs)}, built once per (compute_points, gemm_tables):
    a built-in profile holds ~11k GEMM times, and every Simulator builds a CostModel."""
    pts, tabs = profile.compute_points, profile.gemm_tables
    hit = _INDEXES.get((id(pts), id(tabs)))
    if hit is None or hit[0] is not pts or hit[1] is not tabs:
        if len(_INDEXES) >= 32:
            _INDEXES.clear()
        hit = _INDEXES[(id(pts), id(tabs))] = (pts, tabs, {g: _index_points(profile, graphs=g)
                                                           for g in (False, True)})
    return hit[2]


def _index_points(profile: Profile, graphs: bool) -> dict:
    """(kind, dtype, attrs without the sweep attr) -> sorted [(sweep value, time_s)]; first wins.

    Points are kept for the mode they describe: eager-measured fusable ops do not price a
    graph-mode step, and graph-measured ones do not price eager."""
    idx: dict = {}
    for p in profile.compute_points:
        if p.kind in FUSED_UNDER_GRAPHS and p.mode not in ("any", "graph" if graphs else "eager"):
            continue
        sweep = SWEEP_ATTR.get(p.kind)
        attrs = dict(p.attrs)
        if sweep not in attrs:
            continue
        rest = tuple((k, v) for k, v in p.attrs if k != sweep and k not in COST_FREE_ATTRS)
        idx.setdefault((p.kind, p.dtype, rest), {}).setdefault(attrs[sweep], p.time_s)
    # the GEMM tables after the points (calibrated points win): mode any, swept along m
    for t in profile.gemm_tables:
        for n, k, times in t.rows:
            for dt in t.dtypes:
                at = idx.setdefault(("gemm", dt, (("k", k), ("n", n))), {})
                for m, time_s in zip(t.m, times):
                    at.setdefault(m, time_s)
    return {k: sorted(v.items()) for k, v in idx.items()}
