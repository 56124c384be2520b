"""Op -> seconds, from a Profile.

Compute ops of a compiled phase (Stack.compiled) inside a layer: the kernels Inductor emits for
that layer (sim/price/fusion.py): extern matmuls priced as the IR's GEMM (below), generated kernels by
the bytes they read and write (memory roofline with the profile's efficiency curve, or the bytes
they re-read through L2 when that is slower: sim/price/l2_traffic.py), each kernel
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
the engines chain per rank in issue order (sim/engine/simpy_engine.py `issue_s`), so a step is launch-bound only
where the Python thread really falls behind the GPU. On a CPU device launch and compute add up (one
thread does both): GPU time + kernels x launch, and no issue time.

What an op does, as kernels of FLOPs and bytes, and their roofline: sim/price/work.py.
Collectives: sim/price/comm/collective.py.
"""
from __future__ import annotations

import bisect

from tpsim.sim.price import decode_grid, decode_price, flash_decode, fusion, l2_traffic
from tpsim.sim.stack import sampler
from tpsim.sim.price.comm.collective import CollectiveCost, loglog
from tpsim.sim.hardware.profile import Profile
from tpsim.sim.schedule.language import Op, Schedule
from tpsim.sim.stack.spec import DTYPE_BYTES, GRAPH_OUTSIDE, Stack
from tpsim.sim.price.work import SEPARABLE_ATTRS, Work, matmul_dtype, op_work, roofline_s, separable_work

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


# profile numbers no op's price reads (the engines' interference factors; a collective's HBM bytes per bus
# byte, which co-scheduling reads from the simulator's own profile: sim/price/occupancy.py comm_kernel): a
# profile that differs from another only in these prices every op alike (sim/sensitivity.py shares one
# CostModel between such settings; tests/test_sensitivity.py holds it)
UNPRICED = ("overlap.compute_slowdown", "overlap.comm_slowdown", "overlap.gpu.hbm_per_bus_byte",
            # the ranks' arrival jitter: read by the simulation (each collective's expected wait for its last
            # rank, sim/predict.py arrival_wait_s), never by an op's price
            "jitter.arrival.node.mean_us", "jitter.arrival.net.mean_us")


class CostModel(CollectiveCost):
    """Prices the ops of one workload on one profile; caches by op signature. Compute ops here,
    collectives in CollectiveCost (sim/price/comm/collective.py)."""

    def __init__(self, profile: Profile, stack: Stack, gpus_per_node: int | None = None):
        self.profile, self.stack = profile, stack
        self.gpus_per_node = gpus_per_node or profile.gpus_per_node
        self._cache: dict = {}
        self._last_lookup: tuple | None = None      # kernels_of's last (schedule, op, answer)
        # measured points by the mode they price: keyed by "compiled" (fused kernels) or not
        self._points = _indexes(profile)
        # compute.l2 (sim/price/l2_traffic.py): a CUDA profile without it prices DRAM bytes only, noted once
        self._l2 = profile.l2 if profile.device == "cuda" else None
        self._l2_bw = self._l2.bytes_per_s if self._l2 is not None else None

    # -- compute

    def works(self, op: Op, fused: bool) -> list[Work]:
        """op_work for this stack (an engine's own eager kernels: Stack.engine_kernels)."""
        return op_work(op, fused, self.stack.engine_kernels)

    def compute_s(self, op: Op, phase: str, sched: Schedule | None = None) -> float:
        """Seconds of one compute op. With the op's schedule, an op inside a layer of a compiled
        phase is priced from Inductor's kernels for that layer (sim/price/fusion.py)."""
        if op.given_cost_s is not None:          # a stand-in or wait (sim.schedule.transform): its own cost
            return op.given_cost_s
        if op.get("fused", 0):                   # an add / norm inside a fused all-reduce: priced there
            return 0.0
        fused, graphs = self.stack.compiled(phase), self.stack.graphs(phase, op.name)
        hit = self.kernels_of(sched, op) if (fused and sched is not None) else None
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
        split = fusion.outside_norm_split(sched, op, self.profile.device) if fused else []
        if split:                                 # the final norm's split reduction (fusion.outside_norm_split)
            key = ("norm-split", op.signature, sched.step, sched.model, sched.tp, graphs)
            extra = self._cache.get(key)
            if extra is None:
                extra = self._cache[key] = self._kernels_s(op, split, sched, graphs)
            t += extra
        return t

    def kernels_of(self, sched: Schedule, op: Op) -> tuple[str, str, str] | None:
        """fusion.lookup of `op` in `sched` on this profile's device. The last answer is kept (by identity): the
        simulator prices an op's time and then its launch (compute_s, issue_s), and both ask it."""
        last = self._last_lookup
        if last is not None and last[0] is sched and last[1] is op:
            return last[2]
        hit = fusion.lookup(sched, op, self.profile.device)
        self._last_lookup = (sched, op, hit)
        return hit

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
        x launch_s["eager"] (Stack.launch_host_s instead where the engine launches from C++) -- the kernels
        compute_s prices, counted the same way; 0 under a CUDA graph (the replay's launch is the host lane's,
        sim/stack/host_lane.py), on a CPU device (_floor adds the launches to the op) and for a stand-in (a
        given cost). An eager collective costs one launch: its eager time (an eager table, timed per
        Python-issued call, or a graph table plus eager_extra, sim/price/comm/collective.py) already holds that
        call on the GPU side, so it is not added to the collective's time again -- it only delays what this
        thread issues after it. A collective over a group of 1 exchanges nothing (priced "local", 0) and
        launches nothing. An eager phase's attention op also carries the layer's Python beyond its launches
        (Stack.layer_host_s), and an op where a schedule's micro-batch threads hand over ("yield":
        Stack.ubatch_switch_s) or start ("ubatch_start": Stack.ubatch_start_s) that CPU time (dbo; a graph
        replay runs neither). An engine sampler's kernels launched by its logits processor (sim/stack/sampler.py
        in_logits: the fp32 cast) are captured with the LM head where the head is inside the graph."""
        if (self.profile.device != "cuda" or op.given_cost_s is not None or self.stack.graphs(phase, op.name)
                or op.get("fused", 0)):
            return 0.0
        if op.is_comm and op.attr("group") == 1:
            return 0.0
        fused = self.stack.compiled(phase)
        hit = self.kernels_of(sched, op) if (fused and sched is not None and not op.is_comm) else None
        key = ("issue", op.signature, phase, hit)
        t = self._cache.get(key)
        if t is None:
            n = self._kernel_count(op, fused, hit, sched)
            engine_sampler = sampler.get(op.get("sampler", sampler.REFERENCE)) if op.kind == "sample" else None
            if engine_sampler is not None and self.stack.graphs(phase, "head"):
                # the cast in the engine's logits processor is captured with the LM head (graph_scope "logits")
                n -= engine_sampler.logits_kernels
            t = n * (self.stack.launch_host_s or self._launch_s(False))
            t += op.get("yield", 0) * self.stack.ubatch_switch_s + op.get("ubatch_start", 0) * self.stack.ubatch_start_s
            if op.kind == "attention" and not fused and not op.get("prep_shared", 0):
                # the layer's Python beyond its launches (Stack.layer_host_s), once per layer: at its attention
                # (a mixed step's later attention parts, prep_shared, are the same call's: its first part pays)
                t += self.stack.layer_host_s
            self._cache[key] = t
        return t

    def _kernel_count(self, op: Op, fused: bool, hit, sched: Schedule | None = None) -> int:
        """Kernels `op` launches, as compute_s prices it: Inductor's kernels charged to it in a compiled
        layer (`hit`; kernel_terms: one launch each, those that run at this step's shapes), one for a
        collective or a generated GEMV, else op_work's."""
        if op.is_comm:
            return 1
        if hit is not None:
            sym = fusion.symbols(sched, op)
            return sum(1 for k in fusion.kernels(hit) if k.kind != "collective" and k.runs(sym))
        if self.generated_gemv(op, fused):
            return 1
        split = fusion.outside_norm_split(sched, op, self.profile.device) if fused else []
        sym = fusion.symbols(sched, op) if split else {}
        grid = self.decode_attention(op, False) if op.kind == "attention" else None    # its combine etc.
        return (sum(w.kernels for w in self.works(op, fused)) + sum(1 for k in split if k.runs(sym))
                + (grid[0].extra_kernels if grid else 0))

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
                and dict(op.attrs).get("m") == 1 and op.name not in GRAPH_OUTSIDE[self.stack.graph_scope]
                and not op.get("fp8", 0))        # a scaled-mm is not decomposed (fusion.variant)

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
        # GQA expand, qk-norm) plus the attention kernel (the op's one matmul Work): the larger of its
        # measured-curve (or roofline) time and what its grid's CTAs need (sim/price/decode_grid.py)
        cc = self.profile.compute_capability if self.profile.device == "cuda" else None
        fallback = self.stack.attention_fallback
        flash = flash_decode.attention_kernel(op, self.profile.mem_bytes_per_s, cc, fallback)
        terms = self.decode_attention(op, graphs)
        if flash is not None or terms is not None:
            others = [w for w in works if not w.matmul]
            if flash is not None:
                self._note(flash[1])
            t = terms[1].s if terms is not None else flash[0]
            extra = terms[0].extra_kernels if terms is not None else 0
            return self._floor(roofline_s(self.profile, others, op.dtype) + t, sum(w.kernels for w in works) + extra,
                               graphs)
        return self._floor(roofline_s(self.profile, works, matmul_dtype(op)), sum(w.kernels for w in works), graphs)

    def decode_attention(self, op: Op, graphs: bool) -> tuple | None:
        """(Grid, Terms) of a decode-step attention's kernel on this profile: its grid as the stack's kernel
        rule picks it (sim/price/decode_grid.py) and the priced limits (decode_price.py); None for any other op, math
        SDPA, a CPU device, or a profile without compute.decode_attention (noted once: its decode is then
        priced by the bytes alone)."""
        if self.profile.device != "cuda":
            return None
        cc = self.profile.compute_capability
        spec = self.profile.decode_attention
        key = ("decode-grid", op.signature, graphs)
        if key in self._cache:
            return self._cache[key]
        grid = decode_grid.grid_of(op, self.stack, spec.sms if spec else 0, graphs, cc) if spec else None
        if spec is None and decode_grid.grid_of(op, self.stack, 1, graphs, cc) is not None:
            self._note(f"profile {self.profile.name} has no compute.decode_attention (SM count, per-CTA rate): "
                       f"decode attention is priced by its bytes alone, not by the CTAs its kernel launches")
        out = None
        if grid is not None:
            shape = decode_grid.shape_of(op)
            curve = flash_decode.attention_kernel(op, self.profile.mem_bytes_per_s, cc, self.stack.attention_fallback)
            main = [w for w in self.works(op, False) if w.matmul]
            bw = curve[0] if curve is not None else roofline_s(self.profile, main, op.dtype)
            rate = spec.cta_bytes_per_s
            out = (grid, decode_price.price(grid, shape, bw, rate, decode_price.combine_s(grid, self.profile, rate),
                                           curve is not None))
        self._cache[key] = out
        return out

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
        re-reads at the L2 rate when slower (sim/price/l2_traffic.py). Every kernel costs at least one
        launch; collectives are priced as the IR's comm op (not here)."""
        sym = fusion.symbols(sched, op)
        act = DTYPE_BYTES[op.dtype]
        out = []
        for k in kernels:
            if k.kind == "collective" or not k.runs(sym):
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
                # plus the whole further sweeps of a buffer re-read one sweep after another (a weight
                # read once per batch row), each from L2 while it fits (l2_traffic)
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

    def _note_no_fp8_table(self) -> None:
        """One note that FP8 linears went to the roofline (a profile without a measured FP8 GEMM table)."""
        self._note(f"profile {self.profile.name} has no measured FP8 GEMM table (compute.gemm_tables with "
                   f"quant fp8): FP8 linears are priced at the roofline of their bytes and the FP8 peak, with the "
                   f"16-bit GEMM efficiency curve")

    def _resweep_s(self, nbytes: float, extra: float) -> float:
        """`extra` further sweeps over `nbytes` (sim/price/l2_traffic.py resweep_s): hits at the L2
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
        if not pts and op.kind == "gemm" and attrs.get("fp8"):
            self._note_no_fp8_table()
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
            r_here = roofline_s(self.profile, self.works(op, fused), matmul_dtype(op))
            r_near = roofline_s(self.profile, self.works(near_op, fused), matmul_dtype(op))
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


def _index_points(profile: Profile, graphs: bool) -> _Index:
    """(kind, dtype, attrs without the sweep attr) -> sorted [(sweep value, time_s)]; first wins.

    Points are kept for the mode they describe: eager-measured fusable ops do not price a
    graph-mode step, and graph-measured ones do not price eager."""
    groups: dict = {}
    for p in profile.compute_points:
        if p.kind in FUSED_UNDER_GRAPHS and p.mode not in ("any", "graph" if graphs else "eager"):
            continue
        sweep = SWEEP_ATTR.get(p.kind)
        attrs = dict(p.attrs)
        if sweep not in attrs:
            continue
        rest = tuple((k, v) for k, v in p.attrs if k != sweep and k not in COST_FREE_ATTRS)
        groups.setdefault((p.kind, p.dtype, rest), []).append(((attrs[sweep],), (p.time_s,)))
    # the GEMM tables after the points (calibrated points win): mode any, swept along m; an FP8 table
    # (quant fp8) prices the gemm ops of FP8 linears (attr fp8, sim.schedule.builder.Builder.linear_attrs).
    # A row is kept as it is, (m, times), and read into points only when a prediction looks its key up
    for t in profile.gemm_tables:
        quant = (("fp8", 1),) if t.quant == "fp8" else ()
        for n, k, times in t.rows:
            for dt in t.dtypes:
                groups.setdefault(("gemm", dt, quant + (("k", k), ("n", n))), []).append((t.m, times))
    return _Index(groups)


class _Index:
    """_index_points' mapping, each key's sorted points made at its first lookup (a prediction reads
    a few dozen of a built-in profile's ~1,200 (n, k, dtype) rows): the points of a key in the order
    the profile lists them (compute points, then each GEMM table's rows), the first time at each
    sweep value kept."""

    def __init__(self, groups: dict):
        self._groups, self._made = groups, {}

    def get(self, key, default=None):
        out = self._made.get(key)
        if out is None:
            parts = self._groups.get(key)
            if parts is None:
                return default
            at: dict = {}
            for xs, ts in parts:                # (sweep values, times): a point's, or a table row's
                for x, t in zip(xs, ts):
                    at.setdefault(x, t)
            out = self._made[key] = sorted(at.items())
        return out

    def __getitem__(self, key):
        out = self.get(key)
        if out is None:
            raise KeyError(key)
        return out
