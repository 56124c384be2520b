"""What each compute op and collective occupies on a GPU: the kernels sim/price/coschedule.py schedules.

A compute op's kernels are the ones its price comes from (sim/price/cost.py): Inductor's kernels for an
op of a compiled layer (sim/price/fusion.py), else the op's Work items; each kernel's share of the op's
time is its own price over the op's. Grids, by rule where nothing measured gives them:

- GEMM (the IR's gemm, Inductor's extern mm): the grid table the profile names
  (overlap.gpu.gemm_grids, sim/hardware/gemm_grids.py): "cublas-sm90" gives decode m <= 64 the
  64-feature tiles public Hopper traces show (ceil(n / 64) CTAs, no split-K), larger m the rule;
  "rule" (the fallback) 128 x 128 output tiles, one CTA per SM, no split-K. Extern bmm of math
  SDPA: the rule's tiles per (batch, head) over its [q, kv] output (no trace sources its grid).
- Inductor generated kernel: a reduction (it reads >= 32x the elements it writes) runs one program
  per output row at 8 warps (8 CTAs per SM, 2048 threads / 256); a pointwise kernel one program per
  1024 output elements at 4 warps (16 CTAs per SM) -- Inductor's triton_heuristics defaults before
  autotuning (a rule).
- Any other Work: the pointwise rule over bytes / (2 x element size) elements (one read, one write).

A kernel is tile-bound when its FLOP time at the profile's GEMM efficiency exceeds its byte time at
the memory efficiency (the roofline's own max). Its HBM demand is bytes / its time; what HBM gives
all kernels together is memory_gbps x the memory-efficiency curve's plateau (a small kernel's lower
efficiency is its own latency, not a share of HBM others could take).

A collective's CTAs are NCCL 2.21's channel count for the algorithm the tuner picks
(src/enqueue.cc getChannnelThreadInfo): NVLS / NVLSTree `nvlsChannels`; Ring / Tree start from
the profile's coll channels and drop one while nBytes < nc x nThreads x threadThreshold
(nThreads: LL 512, LL128 640, Simple 512, src/include/device.h; thresholds LL 8, LL128 8,
Simple 64 bytes per thread, src/include/comm.h, Ring LL x nRanks, src/graph/tuning.cc). Its HBM
demand: the profile's hbm_per_bus_byte x bus bytes / its time (bus bytes: nccl-tests convention).
"""
from __future__ import annotations

import math

from tpsim.sim.price import fusion
from tpsim.sim.price.coschedule import Comm, CoSchedule, Kernel
from tpsim.sim.hardware.schema import GpuSpec
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import Work, roofline_s
from tpsim.sim.hardware.gemm_grids import RULE, gemm_tile
from tpsim.sim.schedule.language import Op, Schedule
from tpsim.sim.stack.spec import DTYPE_BYTES

REDUCTION_RATIO = 32       # reads / writes at or above which a generated kernel is a reduction
NCCL_THREADS = {"ll": 512, "ll128": 640, "simple": 512}
NCCL_THRESHOLD = {"ll": 8, "ll128": 8, "simple": 64}


def _memory(cost: CostModel, nbytes: float, time_s: float, flops: float = 0.0, dtype: str = "fp16") -> dict:
    p = cost.profile
    at_size = p.mem_bytes_per_s * p.memory_efficiency(max(nbytes, 1.0))
    t_bytes = nbytes / at_size if at_size > 0 else 0.0
    cap = p.mem_bytes_per_s * max(p.memory_efficiency.y)     # what HBM delivers at all (the curve's plateau)
    peak = p.peak_flops.get(dtype) or max(p.peak_flops.values())
    t_flops = flops / (peak * p.gemm_efficiency(max(flops, 1.0))) if flops > 0 else 0.0
    return {"tile_bound": t_flops > t_bytes, "hbm_gbps": nbytes / time_s / 1e9 if time_s > 0 else 0.0,
            "hbm_cap_gbps": cap / 1e9}


def _linear_grid(cost: CostModel, m: float, n: float) -> dict:
    """F.linear's extern GEMM at [m, n]: the profile's grid table (sim/hardware/gemm_grids.py)."""
    gpu = cost.profile.coschedule
    tile = gemm_tile(gpu.gemm_grids if gpu is not None else "rule", m)
    return {"ctas": tile.ctas(m, n), "per_sm": tile.per_sm}


def _bmm_grid(q: float, kv: float, batch: float) -> dict:
    return {"ctas": RULE.ctas(q, kv, batch), "per_sm": RULE.per_sm}


def _pointwise(elements: float) -> tuple[int, int]:
    return max(1, math.ceil(elements / 1024)), 16


def op_kernels(cost: CostModel, sched: Schedule, op: Op) -> tuple[Kernel, ...]:
    """The kernels of compute op `op` in `sched` (shares of its time, summing to 1), () if none runs."""
    if op.given_cost_s is not None or op.is_comm:
        return ()                       # a stand-in (sim.schedule.transform) holds no SMs of its own
    phase = sched.step.phase
    fused, graphs = cost.stack.compiled(phase), cost.stack.graphs(phase, op.name)
    hit = fusion.lookup(sched, op, cost.profile.device) if (fused and op.given_cost_s is None) else None
    key = ("occupancy", op.signature, hit, sched.step, sched.model, sched.tp, graphs) if hit else \
        ("occupancy", op.signature, phase, graphs)
    got = cost._cache.get(key)
    if got is None:
        got = cost._cache[key] = _normalise(_compiled(cost, sched, op, hit, graphs) if hit else
                                            _works(cost, op, fused, graphs))
    return got


def _normalise(parts: list[tuple[float, dict]]) -> tuple[Kernel, ...]:
    total = sum(t for t, _ in parts)
    if total <= 0:
        return ()
    return tuple(Kernel(share=t / total, **kw) for t, kw in parts)


def _compiled(cost: CostModel, sched: Schedule, op: Op, hit, graphs: bool) -> list[tuple[float, dict]]:
    sym = fusion.symbols(sched, op)
    act = DTYPE_BYTES[op.dtype]
    a = dict(op.attrs)
    out = []
    for k, t in cost.kernel_prices(op, fusion.kernels(hit), sched, graphs):
        nbytes = k.bytes(sym, act)
        if k.kind == "matmul" and op.kind == "gemm":
            flops = 2.0 * a["m"] * a["n"] * a["k"]
            kw = _linear_grid(cost, a["m"], a["n"])
            nbytes = act * (a["m"] * a["k"] + a["k"] * a["n"] + a["m"] * a["n"])
        elif k.kind == "matmul":                       # extern bmm of math SDPA
            flops = 2.0 * a["batch"] * a["heads"] * a["q_len"] * a["kv_len"] * a["head_dim"]
            kw = _bmm_grid(a["q_len"], a["kv_len"], a["batch"] * a["heads"])
        else:
            flops = 0.0
            wrote = max((fusion.numel(b.numel, sym) for b in k.buffers if b.mode == "write"), default=1.0)
            read = sum(fusion.numel(b.numel, sym) for b in k.buffers if b.mode == "read")
            if read >= REDUCTION_RATIO * wrote:
                kw = {"ctas": max(1, int(wrote)), "per_sm": 8}
            else:
                c, per = _pointwise(wrote)
                kw = {"ctas": c, "per_sm": per}
        out.append((t, {**kw, **_memory(cost, nbytes, t, flops, op.dtype)}))
    return out


def _works(cost: CostModel, op: Op, fused: bool, graphs: bool) -> list[tuple[float, dict]]:
    """An op priced without Inductor's table: its Work items, each kernel-ful one a kernel, their
    roofline times scaled to the op's price (a measured point may differ from the roofline)."""
    try:
        works = [w for w in cost.works(op, fused) if w.kernels]
    except ValueError:                  # a kind with no compute model holds no SMs here
        return []
    if not works:
        return []
    price = cost._compute_s(op, fused, graphs)
    times = [roofline_s(cost.profile, [w], op.dtype) for w in works]
    scale = price / sum(times) if sum(times) > 0 else 0.0
    a = dict(op.attrs)
    out = []
    for w, t in zip(works, times):
        out.append((t * scale, {**_grid(cost, op, a, w), **_memory(cost, w.bytes, t * scale, w.flops if w.matmul else 0.0,
                                                                 op.dtype)}))
    return out


def _grid(cost: CostModel, op: Op, a: dict, w: Work) -> dict:
    if w.matmul and op.kind == "gemm":
        return _linear_grid(cost, a["m"], a["n"])
    if w.matmul and op.kind == "attention":
        return _bmm_grid(a["q_len"], a["kv_len"], a["batch"] * a["heads"])
    c, per = _pointwise(w.bytes / (2 * DTYPE_BYTES[op.dtype]))
    return {"ctas": c, "per_sm": per}


def nccl_channels(gpu: GpuSpec, algo: str, nbytes: float, group: int) -> int:
    """CTAs of one NCCL collective kernel (module docstring): `algo` is the topology model's pick,
    "ring/ll", "nvls", "tree/simple", ..."""
    name, _, proto = algo.partition("/")
    if name.startswith("nvls"):
        return gpu.nvls_channels
    proto = proto or "simple"
    thr = NCCL_THRESHOLD.get(proto, 64) * (group if name == "ring" and proto == "ll" else 1)
    per = NCCL_THREADS.get(proto, 512) * thr
    return max(1, min(gpu.coll_channels, int(nbytes // per)))


def comm_kernel(cost: CostModel, gpu: GpuSpec, op: Op, time_s: float) -> Comm:
    """The NCCL kernel of collective `op` taking `time_s`; an async-TP ring step (shift) is a copy-engine
    copy (no SMs; its bytes through HBM), a kernel given its CTAs (TokenWeave's, attr ctas) holds those."""
    a = dict(op.attrs)
    p = a["group"]
    nbytes = DTYPE_BYTES[op.dtype] * a["rows"] * a["width"] * (p if op.kind == "all_gather" else 1)
    if op.kind == "shift" or a.get("ctas"):
        moved = 2.0 * nbytes if op.kind == "shift" else nbytes * 2.0 * (p - 1) / p
        hbm = gpu.hbm_per_bus_byte * moved / time_s / 1e9 if time_s > 0 else 0.0
        return Comm(0 if op.kind == "shift" else a["ctas"], hbm)
    topo = cost.topology()
    algo = topo.pick(op.kind, nbytes, p, cost.gpus_per_node)[0] if topo is not None and p > 1 else "ring/simple"
    bus = nbytes * (2.0 * (p - 1) / p if op.kind == "all_reduce" else (p - 1) / p)
    hbm = gpu.hbm_per_bus_byte * bus / time_s / 1e9 if time_s > 0 else 0.0
    return Comm(nccl_channels(gpu, algo, nbytes, p), hbm)


def coschedule(cost: CostModel, gpu: GpuSpec, comm_s) -> CoSchedule:
    """The engines' hook for a workload priced by `cost`; `comm_s(op, phase)` times its collectives."""
    return CoSchedule(gpu, lambda sched, op: op_kernels(cost, sched, op),
                      lambda sched, op: comm_kernel(cost, gpu, op, comm_s(op, sched.step.phase)))
