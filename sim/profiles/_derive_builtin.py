"""Regenerate tpsim's built-in profiles from the aiconfigurator 0.12.0 measured database + the sources in docs/sources.md.

Not part of tpsim at run time (the profiles are data files); kept so every derived number in
sim/profiles/*.json can be regenerated and checked. Needs pandas + pyarrow and the unpacked
aiconfigurator-core 0.12.0 wheel (the measured tables ship inside it):
    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic
    unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl -d /tmp/aic/core
    python sim/profiles/_derive_builtin.py /tmp/aic/core/aiconfigurator_core/systems/data sim/profiles
Run from the tpsim repo root (it imports sim.profile / sim.topology to derive the latency offset).
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, ".")
from sim.profile import parse  # noqa: E402
from sim.topology_price import TopologyModel  # noqa: E402

AIC = "aiconfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0, NVIDIA)"
DATA = Path(sys.argv[1])
OUT = Path(sys.argv[2])


def sv(value, source):
    return {"value": value, "source": source}


# ---------------------------------------------------------------- compute

def gemm_curves(system, rel, kernel, peak_tflops, bw_gbps):
    d = pd.read_parquet(DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
    m, n, k, t = (d[c].to_numpy(float) for c in ("m", "n", "k", "latency"))
    t = t * 1e-3
    flops = 2 * m * n * k
    nbytes = 2 * (m * k + k * n + m * n)
    peak, bw = peak_tflops * 1e12, bw_gbps * 1e9
    comp = flops / peak >= nbytes / bw

    def binned(x, y, lo, hi):
        xs, ys = [], []
        edges = 10 ** np.arange(lo, hi + 0.5, 0.5)
        for a, b in zip(edges, edges[1:]):
            sel = (x >= a) & (x < b)
            if sel.sum() >= 5:
                xs.append(float(f"{math.sqrt(a * b):.3g}"))
                ys.append(round(float(min(1.0, max(1e-4, np.median(y[sel])))), 4))
        return xs, ys

    gx, gy = binned(flops[comp], flops[comp] / t[comp] / peak, 5, 15)
    mem = m <= 16
    mx, my = binned(nbytes[mem], nbytes[mem] / t[mem] / bw, 3, 11)
    src = (f"{AIC} database: systems/data/{system}/gemm/{rel}/gemm_perf.parquet, kernel_source {kernel}, bf16")
    gemm = {"flops": gx, "efficiency": gy,
            "source": f"derived: {src}; {int(comp.sum())} compute-bound shapes (flops/peak >= bytes/bw), "
                      f"median achieved/peak per half-decade of flops"}
    memc = {"bytes": mx, "efficiency": my,
            "source": f"derived: {src}; {int(mem.sum())} memory-bound shapes (m <= 16), median achieved "
                      f"bytes/s / datasheet HBM bandwidth per half-decade of bytes (bytes = 2(mk+kn+mn))"}
    floor_us = round(float(t.min() * 1e6), 2)
    floor_src = (f"derived: smallest kernel time in {src} ({floor_us} us, tiny shapes): the floor one kernel "
                 f"costs when replayed back to back, as aiconfigurator times kernels")
    return gemm, memc, floor_us, floor_src


# m of every GEMM table row: powers of two 1..65536. They hold the decode batches (m = batch:
# 1, 4, 16, 64) and the prefill shapes of the protocol (m = batch x 1024: 1024, 4096, 16384,
# 65536) exactly; cost.py interpolates log-log between them for any other m.
GEMM_M = [2 ** i for i in range(17)]
GEMM_DTYPES = ["fp16", "bf16"]
GEMM_COLLECTOR = ("ai-dynamo/aiconfigurator collector/sglang/collect_gemm.py: bfloat16 rows time "
                  "F.linear(a[m,k], w[n,k]) (cuBLAS), up to 6 weight copies in rotation, device time; its "
                  "earlier versions label the same rows kernel_source 'sglang'")


def ir_gemm_shapes() -> list[tuple[int, int]]:
    """Every (n, k) the IR (sim/schedule.py) emits for a built-in model preset (sim/model.py) at
    each valid TP up to 16: qkv [m, hidden] -> [m, qkv_dim/tp]; attn out [m, q_dim/tp] ->
    [m, hidden]; mlp up (w1 and w3 fused) -> [m, 2 ffn/tp]; down [m, ffn/tp] -> [m, hidden];
    LM head replicated -> [m, vocab] and vocab-parallel -> [m, ceil(vocab/tp)]."""
    from sim.model import MODELS, valid_tp
    shapes = set()
    for model in MODELS.values():
        for tp in valid_tp(model, 16):
            s = model.shard(tp)
            shapes |= {(s.qkv_dim, model.hidden), (model.hidden, s.q_dim), (2 * s.ffn, model.hidden),
                       (model.hidden, s.ffn), (model.vocab, model.hidden)}
            if tp > 1:
                shapes.add((-(-model.vocab // tp), model.hidden))
    return sorted(shapes)


class AicGemm:
    """aiconfigurator's own GEMM query (its compiled engine, shipped in the same wheel as the
    tables), driven through the model-less probe spec its sdk builds (engine.py
    build_database_probe_spec_json): SILICON mode, this version's own rows only.

    What that query does (GemmTable::query, aic-core/rust/aiconfigurator-core/src/perf_database/
    gemm.rs in ai-dynamo/aiconfigurator; the wheel ships it compiled) and what we checked here:
    the table is clamped to >= SOL at load; a collected (n, k) site answers from its own m curve:
    the measured row at a collected m (checked: equal to the parquet row at 300 random rows),
    linear in m between collected m (checked), utilization held beyond the largest m (32768:
    checked t(131072) = 2 t(65536)); an (n, k) that was not collected is transferred from <= 4
    neighbour sites within 2 octaves by log2-inverse-distance weighting of utilization (here within
    +-5% of linear interpolation in n or k between the grid neighbours)."""

    def __init__(self, system: str, backend: str, version: str):
        wheel = DATA.parents[2]                 # .../aiconfigurator_core/systems/data -> wheel root
        sys.path.insert(0, str(wheel))
        import aiconfigurator_core as aic
        sys.path.remove(str(wheel))
        systems = str(DATA.parent)
        engine = {"schema_version": 1, "model_name": "__database_probe__", "system_name": system,
                  "systems_path": systems, "backend": backend, "backend_version": version,
                  "kv_block_size": None, "tp_size": 1, "pp_size": 1, "attention_dp_size": None,
                  "moe_tp_size": None, "moe_ep_size": None, "cp_size": None, "weight_dtype": None,
                  "moe_dtype": None, "activation_dtype": None, "kv_cache_dtype": None,
                  "enable_shared_layer": False, "strict_provenance": False, "database_mode": "SILICON",
                  "transfer_policy": None, "tolerate_dirless_version": False, "extra": {}}
        spec = {"schema_version": aic.engine_spec_schema_version(), "engine": engine,
                "context_ops": [], "generation_ops": []}
        self.engine = aic.AicEngine.from_spec(aic.engine_spec_bincode_from_json(json.dumps(spec)), systems)

    def ms(self, m: int, n: int, k: int) -> float:
        op = [{"Gemm": {"name": "g", "scale_factor": 1.0, "n": n, "k": k, "quant_mode": "bfloat16",
                        "scale_num_tokens": 1, "low_precision_input": False, "seq_split": 1,
                        "below_grid_sol": False}}]
        # context phase, batch 1, s = m tokens: the GEMM runs with m rows
        (_, ms, _, _), = self.engine.evaluate_ops_json(json.dumps(op), True, 1, m, 0, 1.0, None)
        return float(ms)


def gemm_table(system, rel, kernel):
    """compute.gemm_tables entry: one row per IR (n, k), times at GEMM_M, from aiconfigurator's query.

    Kernel: the bf16 torch-linear rows (kernel_source `kernel`), i.e. F.linear -> cuBLAS, the same
    kernel the reference harness runs: its fp16 nn.Linear matmuls compile to Inductor's extern
    mm (cuBLAS) in both phases (docs/sources.md §10; no max-autotune templates), and eager runs the same
    aten mm. fp16 and bf16 run the same tensor-core rate and bytes on Hopper/Ampere/Ada, so the
    bf16 times stand for fp16 too (not measured in fp16: cuBLAS may pick a different tile)."""
    backend, version = rel.split("/")
    d = pd.read_parquet(DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
    sites = set(zip(d.n.astype(int), d.k.astype(int)))
    ms_grid = set(d.m.astype(int))
    nmax, kmax, mmax = int(d.n.max()), int(d.k.max()), max(ms_grid)
    q = AicGemm(system, backend, version)
    rows = []
    for n, k in ir_gemm_shapes():
        row = {"n": n, "k": k, "time_us": [float(f"{q.ms(m, n, k) * 1e3:.5g}") for m in GEMM_M]}
        if (n, k) not in sites:
            row["nk"] = "extrapolated" if n > nmax or k > kmax else "interpolated"
        rows.append(row)
    measured = sum((n, k) in sites for n, k in ir_gemm_shapes())
    # how far apart two neighbouring measurements lie: the database times m and m + 1 (m >= 17) of
    # every site; over the compute-bound ones (>= 1e10 flops) |t(m+1) / t(m) - 1| (tile effects
    # included): a single row can be off by this much
    t = d.set_index(["m", "n", "k"]).latency
    t = t[~t.index.duplicated()]
    spread = [abs(t[(m + 1, n, k)] / t[(m, n, k)] - 1) for m, n, k in t.index
              if m >= 32 and 2 * m * n * k >= 1e10 and (m + 1, n, k) in t.index]
    med, p90 = np.median(spread), np.quantile(spread, 0.9)
    off_m = [m for m in GEMM_M if m not in ms_grid]
    src = (f"{AIC} database: systems/data/{system}/gemm/{rel}/gemm_perf.parquet, kernel_source {kernel}, "
           f"bf16 ({GEMM_COLLECTOR}). Times (us) at each m of 'm' for every (n, k) the IR emits for the "
           f"built-in models at TP <= 16, as aiconfigurator's own GEMM query returns them (its compiled "
           f"engine, SILICON mode): {measured} of {len(rows)} (n, k) rows are collected sites, whose times "
           f"at a collected m are the measured rows; the other rows ('nk': interpolated / extrapolated "
           f"beyond n <= {nmax}, k <= {kmax}) are aiconfigurator's log2-IDW utilization transfer from "
           f"neighbour sites. m not collected ({', '.join(map(str, off_m))}) is linear in m between "
           f"collected m, beyond m = {mmax} utilization held. Row-to-row spread: the m and m+1 rows of "
           f"{len(spread)} compute-bound sites differ by {med:.1%} (median), {p90:.1%} (p90). "
           f"bf16 rows stand for fp16 (same tensor-core "
           f"rate and bytes); the kernel is the cuBLAS GEMM torch runs for nn.Linear, eager and under "
           f"Inductor (extern mm)")
    return {"source": src, "dtypes": GEMM_DTYPES, "m": GEMM_M, "rows": rows}


def eager_launch(system, rel):
    f = DATA / system / "comm" / "vllm" / rel / "custom_allreduce_perf.parquet"
    d = pd.read_parquet(f)
    d = d.assign(num_gpus=d.num_gpus.astype(int), message_size=d.message_size.astype(int))
    small = d[d.message_size <= 2048]
    e = small[small.kernel_source.str.contains("eager")].set_index(["num_gpus", "message_size"]).latency
    g = small[small.kernel_source.str.contains("graph")].set_index(["num_gpus", "message_size"]).latency
    diff = ((e - g).dropna() * 1e3 / 2)
    v = round(float(diff.median()), 2)
    return v, (f"derived: (eager - graph) / 2 kernels for vLLM's custom all-reduce at <= 2048 elements, "
               f"2/4/8 GPUs, median ({AIC} database: systems/data/{system}/comm/vllm/{rel}/"
               f"custom_allreduce_perf.parquet); eager = copy into the registered buffer + the all-reduce "
               f"kernel, launched from Python, so this is per eager kernel launch including Python dispatch "
               f"(an upper estimate for plain torch ops)")


# ---------------------------------------------------------------- collectives

def nccl_tables(system, ver):
    f = DATA / system / "comm" / "nccl" / ver / "nccl_perf.parquet"
    d = pd.read_parquet(f)
    d = d[d.nccl_dtype == "half"]
    out = []
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for n in sorted(d.num_gpus.unique()):
            g = d[(d.op_name == op) & (d.num_gpus == n)].groupby("message_size").latency.median().sort_index()
            out.append({"collective": op, "group": int(n), "scope": "node", "mode": "graph", "impl": "nccl",
                        "bytes": [int(2 * s) for s in g.index], "time_us": [round(float(v) * 1e3, 3) for v in g],
                        "source": f"{AIC} database: systems/data/{system}/comm/nccl/{ver}/nccl_perf.parquet "
                                  f"(NCCL {ver}, fp16, {op}, {n} GPUs); message_size is fp16 elements (nccl-tests "
                                  f"count: busbw at 512 MiB is NVLS-class only if so), all_gather size = gathered "
                                  f"output; back-to-back device time, filed as graph mode (agrees with "
                                  f"sglang#22734 H200 graph-mode NCCL within 10%)"})
    return out


def custom_tables(system, rel):
    f = DATA / system / "comm" / "vllm" / rel / "custom_allreduce_perf.parquet"
    d = pd.read_parquet(f)
    d = d.assign(num_gpus=d.num_gpus.astype(int), message_size=d.message_size.astype(int))
    out = []
    for mode in ("graph", "eager"):
        for n in sorted(d.num_gpus.unique()):
            g = d[(d.kernel_source.str.contains(mode)) & (d.num_gpus == n)].groupby("message_size").latency \
                .median().sort_index()
            out.append({"collective": "all_reduce", "group": int(n), "scope": "node", "mode": mode, "impl": "custom",
                        "bytes": [int(2 * s) for s in g.index], "time_us": [round(float(v) * 1e3, 3) for v in g],
                        "source": f"{AIC} database: systems/data/{system}/comm/vllm/{rel}/custom_allreduce_perf.parquet "
                                  f"(vLLM custom all-reduce, {mode}, bf16, {n} GPUs; message_size in elements)"})
    return out


def nccl_latency():
    return {
        "source": "NCCL src/graph/tuning.cc v2.30 latency constants (docs/sources.md §4): base per algorithm/protocol, "
                  "hop per link class; LL payload 50%, LL128 ~92-95% (0.92 taken)",
        "base_us": {"ring_ll": 6.6, "ring_ll128": 14.0, "ring_simple": 8.4, "tree_ll": 6.8, "nvls": 0.0},
        "hop_us": {"nvlink": {"ll": 0.6, "ll128": 1.9, "simple": 3.4, "tree_ll": 0.6, "nvls": 25.0},
                   "pci": {"ll": 1.0, "ll128": 2.5, "simple": 5.7, "tree_ll": 1.0},
                   "net": {"ll": 2.7, "ll128": 4.0, "simple": 14.0, "tree_ll": 5.0, "nvls": 18.0}},
        "ll_payload": 0.5, "ll128_payload": 0.92,
    }


P2P_MATRIX = Path(__file__).with_name("_data") / "p2pBandwidthLatencyTest-8xH100.txt"


def _matrix(text: str, title: str) -> list[float]:
    """Off-diagonal entries of one 8x8 matrix of a p2pBandwidthLatencyTest output."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip() == title)
    rows = [[float(x) for x in line.split()[1:9]] for line in lines[i + 2:i + 10]]
    return [rows[a][b] for a in range(8) for b in range(8) if a != b]


def shm_constants(nccl: dict):
    """Per-step latency and per-flow rate of NCCL's SHM transport (NCCL_P2P_DISABLE=1) on 8xH100,
    from public p2pBandwidthLatencyTest matrices (sim/profiles/_data/, URLs inside).

    A P2P=Disabled copy is staged GPU -> pinned host memory -> GPU; its GPU time over a P2P=Enabled
    copy is what the two PCIe crossings through host memory add. NCCL's SHM LL step is the sender's
    posted write of LL lines into host memory, seen by the receiver that already polls them there
    (shm.cc: buffers in host shared memory, receiver-side locality): taken as one of the four one-way
    GPU<->host-memory traversals of the staged copy (D2H data + its completion, H2D request + data).
    Simple adds NCCL's own Simple-over-LL difference for a PCI step (tuning.cc)."""
    text = P2P_MATRIX.read_text()
    off = statistics.mean(_matrix(text, "P2P=Disabled Latency Matrix (us)"))
    on = statistics.mean(_matrix(text, "P2P=Enabled Latency (P2P Writes) Matrix (us)"))
    bw = statistics.mean(_matrix(text, "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"))
    ll = round((off - on) / 4, 2)
    pci = nccl["hop_us"]["pci"]
    simple = round(ll + pci["simple"] - pci["ll"], 2)
    src = (f"derived (assumption stated): 8xH100 p2pBandwidthLatencyTest, mean off-diagonal GPU latency "
           f"P2P=Disabled {off:.2f} us vs P2P=Enabled {on:.2f} us (sim/profiles/_data/"
           f"p2pBandwidthLatencyTest-8xH100.txt); the staged copy's extra {off - on:.2f} us is 4 one-way "
           f"GPU<->host-memory traversals; an SHM LL step (shm.cc: sender writes LL lines into host memory "
           f"the receiver polls) pays one: {ll} us")
    hops = {"ll": sv(ll, src), "tree_ll": sv(ll, src),
            "simple": sv(simple, f"{src}; Simple: + NCCL tuning.cc PCI Simple-LL hop difference "
                                 f"{pci['simple'] - pci['ll']:.1f} us = {simple} us")}
    gbps = sv(round(bw, 1), f"mean off-diagonal 'Unidirectional P2P=Disabled Bandwidth' of 8x HGX H100 "
                            f"(https://github.com/NVIDIA/nccl/issues/1264): the rate a staged GPU->host->GPU "
                            f"flow reaches; caps each PCIe link of an SHM ring edge")
    return hops, gbps


def graph_extra(floor_us: float, system: str):
    """What a compiled functional all-reduce adds inside a CUDA-graph step over the bare NCCL kernel."""
    return sv(floor_us, (
        f"derived: one graph-replayed copy kernel ({floor_us} us, this profile's compute.launch_us.graph "
        f"floor, {system}). Under torch.compile the reference stack's all-reduce is the functional "
        f"_c10d_functional.all_reduce, which Inductor lowers as clone(input) + in-place all_reduce_ + "
        f"wait_tensor (torch/_inductor/comm_lowering.py _all_reduce; with reorder_for_compute_comm_overlap=True, "
        f"which the reference sets, the clone is realized and kept out of fusion); the copy is the known "
        f"funcol all-reduce copy (pytorch/pytorch#138773). ProcessGroupNCCL's side-stream fork/join and "
        f"wait_tensor become graph edges (no kernels): counted 0. The measured NCCL tables time the bare "
        f"kernel back to back, so they lack this"))


def latency_offset(prof: dict, tables: list, where: str):
    """The shift o minimizing the largest relative error max |(model + o) / measured - 1| over the small
    all-reduce points (<= 4 KiB): the same metric the topology tests report."""
    p = parse(json.loads(json.dumps(prof)), where)
    tm = TopologyModel(p.topology)
    pts = []
    for t in tables:
        if t["collective"] != "all_reduce" or t["impl"] != "nccl" or t["mode"] != "graph":
            continue
        for b, us in zip(t["bytes"], t["time_us"]):
            if b <= 4096:
                pts.append((tm.collective_s("all_reduce", b, t["group"]) * 1e6, us))
    best = min((max(abs((m + o) / y - 1) for m, y in pts), o)
               for o in np.arange(-5.0, 10.0, 0.01) if all(m + o > 0 for m, _ in pts))
    return round(float(best[1]), 2), len(pts), best[0]


OVERLAP = {
    "compute_slowdown": sv(1.21, "docs/sources.md §7: Concerto measured an 18-24% slowdown of work overlapped with "
                                 "communication (A800); midpoint 21% taken (measured on A800, applied to this GPU). "
                                 "Worst case not modelled: a 132-block GEMM with a concurrent 24-block NCCL kernel "
                                 "nearly doubled on H100 (second wave)"),
    "comm_slowdown": sv(1.21, "docs/sources.md §7: Concerto's 18-24% slowdown of overlapped work (A800), midpoint 21%, "
                              "applied to the collective too (it loses SMs and HBM bandwidth to the GEMM)"),
}
JITTER = {"arrival": {scope: {"dist": "exponential", "mean_us": sv(0.0, (
    f"not modelled: no public measurement of per-rank arrival spread at {what} collectives on this box "
    "was found (NCCL / nccl-tests issues discuss it only qualitatively; vLLM PR #57037 injects delays rather "
    "than measuring natural skew); 0 means --exact adds none, not that real ranks have none. "
    "`tpsim calibrate` measures it on your cluster"))} for scope, what in (("node", "one-node"), ("net", "cross-node"))}}


def write(name, prof):
    """indent=1, but lists of numbers on one line (tables stay readable in a diff)."""
    import re
    text = json.dumps(prof, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*([-0-9.e+,\s]+?)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text)
    (OUT / f"{name}.json").write_text(text + "\n")


# ---------------------------------------------------------------- boxes

# FP32 (non-tensor-core) peaks: math SDPA upcasts to fp32 and its bmm's run in fp32. PyTorch's
# default keeps TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32 = False since 1.12),
# so the datasheet's plain FP32 number applies, not its TF32 tensor-core number.
_FP32_NOTE = "; fp32 matmuls (math SDPA's upcast bmm) run without TF32 under PyTorch's default"
FP32_TFLOPS = {
    "h100_sxm": (67.0, "NVIDIA H100 SXM5 datasheet: FP32 67 TFLOPS" + _FP32_NOTE),
    "h200_sxm": (67.0, "NVIDIA H200 SXM datasheet: FP32 67 TFLOPS" + _FP32_NOTE),
    "a100_sxm": (19.5, "NVIDIA A100 SXM datasheet: FP32 19.5 TFLOPS" + _FP32_NOTE),
    "l40s": (91.6, "NVIDIA L40S datasheet: FP32 91.6 TFLOPS" + _FP32_NOTE),
}

def nvswitch_box(name, desc, system, nccl_ver, gemm_rel, vllm_rel, mem_gib, mem_src, tflops, tflops_src,
                 hbm, hbm_src, topo, extra_tables=(), eager_extra=None):
    kernel = "sglang_torch_linear" if system != "a100_sxm" else "sglang"
    gemm, memc, floor_us, floor_src = gemm_curves(system, gemm_rel, kernel, tflops, hbm)
    eager_us, eager_src = eager_launch(system, vllm_rel)
    tables = list(extra_tables) + nccl_tables(system, nccl_ver) + custom_tables(system, vllm_rel)
    prof = {
        "format": "tpsim-profile", "version": 1, "name": name, "description": desc, "device": "cuda",
        "gpus_per_node": sv(8, topo.pop("_gpus_src")),
        "memory_gib": sv(mem_gib, mem_src),
        "compute": {
            "matmul_tflops": {"fp16": sv(tflops, tflops_src), "bf16": sv(tflops, tflops_src),
                              "fp32": sv(*FP32_TFLOPS[system])},
            "memory_gbps": sv(hbm, hbm_src),
            "gemm_efficiency": gemm, "memory_efficiency": memc,
            "launch_us": {"eager": sv(eager_us, eager_src), "graph": sv(floor_us, floor_src)},
            "gemm_tables": [gemm_table(system, gemm_rel, kernel)],
        },
        "collectives": {"eager_extra_us": eager_extra, "graph_extra_us": graph_extra(floor_us, system),
                        "tables": tables},
        "topology": topo,
        "overlap": OVERLAP, "jitter": JITTER,
    }
    off, npts, err = latency_offset(prof, tables, name)
    prof["topology"]["latency_offset_us"] = sv(off, (
        f"derived: the shift minimizing the largest relative error (then {err:.0%}) of the topology "
        f"model against {npts} small all-reduce points (<= 4 KiB, 2/4/8 GPUs) of the aiconfigurator NCCL "
        f"table above"))
    return prof


def main():
    h100_eager = [1024, 16384, 65536, 262144, 1048576], [19.35, 20.7, 23.1, 24.8, 32.4]
    t_eager_h100 = {"collective": "all_reduce", "group": 8, "scope": "node", "mode": "eager", "impl": "nccl",
                    "bytes": h100_eager[0], "time_us": h100_eager[1],
                    "source": "Triton-distributed#57: 8xH100 torch.distributed all_reduce, eager (docs/sources.md §6; "
                              "the <=1 KB range 19.2-19.5 and 16-64 KiB range 20.7-23.1 as end points)"}
    # eager extra for H100: Triton-distributed#57 eager minus aiconfigurator graph at the same sizes (8 GPUs)
    g8 = [t for t in nccl_tables("h100_sxm", "2.29.2") if t["collective"] == "all_reduce" and t["group"] == 8][0]
    gi = dict(zip(g8["bytes"], g8["time_us"]))
    diffs = [e - gi[b] for b, e in zip(*h100_eager) if b in gi]
    h100_extra = sv(round(statistics.median(diffs), 2),
                    f"derived: median over {len(diffs)} sizes (1 KiB-1 MiB) of Triton-distributed#57 8xH100 eager "
                    f"all_reduce minus the aiconfigurator 0.12.0 h100_sxm NCCL 2.29.2 table (graph), diffs "
                    f"{[round(x, 2) for x in diffs]} us")

    nvl_lat = nccl_latency()
    h100_topo = {
        "_gpus_src": "NVIDIA DGX H100 datasheet: 8x H100 SXM5 per system",
        "intra": sv("nvswitch", "NVIDIA DGX H100 datasheet: 4x NVSwitch (NVLink4), all 8 GPUs one hop apart"),
        "p2p": sv(True, "NCCL default (NCCL_P2P_DISABLE unset): P2P transport over NVLink"),
        "nvlink_gbps": sv(367, "ring busbw NCCL reaches on 8xH100 SXM over NVLink: 365-370 GB/s (NVIDIA/nccl#1455, "
                               "nccl-tests#212); matches NCCL's own 18 links x 20.6 GB/s (tuning, docs/sources.md §4)"),
        "nvls_busbw_gbps": sv(480, "NVLS all-reduce busbw ~480 GB/s at 8xH100 (NVIDIA/nccl#1455, nccl-tests#212)"),
        "ll_busbw_cap_gbps": sv(141, "NCCL tuning.cc LL cap on a single Hopper node: 141 GB/s busbw (docs/sources.md §4)"),
        "ll_busbw_cap_multi_node_gbps": sv(45, "NCCL tuning.cc llMaxBws, Hopper, 2 nodes: 45 GB/s ('avg of ring & "
                                               "tree'); 35 beyond 2 nodes is not modelled"),
        "pcie_gbps": sv(48, "NCCL's PCIe Gen5 x16 bandwidth (docs/sources.md §4); H100 SXM host link is PCIe Gen5 x16"),
        "gpus_per_pcie_switch": sv(2, "DGX H100 user guide system topology: GPUs in pairs behind 4 PCIe switches, "
                                      "each with its NICs"),
        "sockets": sv(2, "NVIDIA DGX H100 datasheet: 2x Intel Xeon Platinum 8480C"),
        "host_mem_gbps": sv(307, "theoretical per socket: 8 channels DDR5-4800 x 8 B (Xeon 8480C, Intel ark)"),
        "cpu_link_gbps": sv(128, "theoretical: 4 UPI links at 16 GT/s, ~32 GB/s each per direction (Xeon 8480C, "
                                 "Intel ark); never the bottleneck in these paths"),
        "nic_gbps": sv(50, "NVIDIA DGX H100 datasheet: ConnectX-7 400 Gb/s InfiniBand = 50 GB/s per NIC"),
        "nics_per_node": sv(8, "NVIDIA DGX H100 datasheet: 8x single-port ConnectX-7 for the compute fabric"),
        "nccl": nvl_lat,
    }
    h100 = nvswitch_box(
        "h100-sxm", "8x H100 SXM5 80GB per node (DGX H100: NVSwitch, NCCL over NVLink in a node, 8x400 Gb/s "
                    "InfiniBand across nodes); PyTorch eager or CUDA graphs",
        "h100_sxm", "2.29.2", "sglang/0.5.14", "0.24.0", 80, "NVIDIA H100 SXM5 datasheet: 80 GB HBM3",
        989.4, "NVIDIA H100 SXM5 datasheet: dense FP16/BF16 Tensor Core 989.4 TFLOPS",
        3350, "NVIDIA H100 SXM5 datasheet: HBM3 3.35 TB/s", h100_topo, [t_eager_h100], h100_extra)
    write("h100-sxm", h100)

    # H200: same box as DGX H100 with H200 GPUs
    h200_topo = json.loads(json.dumps(h100_topo))
    h200_topo.pop("latency_offset_us")
    h200_topo["_gpus_src"] = "NVIDIA DGX H200 datasheet: 8x H200 SXM per system"
    h200_topo["intra"]["source"] = "NVIDIA DGX H200 datasheet: 4x NVSwitch (NVLink4, 900 GB/s per GPU)"
    h200_topo["nvlink_gbps"] = sv(367, "ring busbw 367 GB/s at 8xH200 (docs/sources.md §6: NVIDIA/nccl#1455, nccl-tests#212)")
    h200_topo["nvls_busbw_gbps"] = sv(482, "NVLS all-reduce busbw 482 GB/s at 8xH200 (docs/sources.md §6)")
    h200_topo["sockets"]["source"] = "NVIDIA DGX H200 datasheet: 2x Intel Xeon Platinum 8480C"
    h200_topo["nic_gbps"]["source"] = "NVIDIA DGX H200 datasheet: ConnectX-7 400 Gb/s = 50 GB/s per NIC"
    h200_topo["nics_per_node"]["source"] = "NVIDIA DGX H200 datasheet: 8x single-port ConnectX-7"
    # sglang#22734 H200 eager NCCL (docs/sources.md §6), range end points at the range's end sizes
    s_eager = ([2048, 8192, 16384, 65536, 262144, 1048576], [17.2, 19.8, 18.8, 22.4, 19.5, 25.9])
    s_graph = ([2048, 8192, 16384, 65536, 262144, 1048576], [16.8, 17.2, 17.8, 19.9, 20.3, 27.0])
    t_eager_h200 = {"collective": "all_reduce", "group": 8, "scope": "node", "mode": "eager", "impl": "nccl",
                    "bytes": s_eager[0], "time_us": s_eager[1],
                    "source": "sglang#22734: 8xH200 NCCL all_reduce through torch, eager (docs/sources.md §6; ranges "
                              "2-8 KiB and 16-64 KiB taken as their end points)"}
    d = [e - g for e, g in zip(s_eager[1], s_graph[1])]
    h200_extra = sv(round(statistics.median(d), 2), f"derived: median of eager - graph NCCL all_reduce in "
                                                     f"sglang#22734 (8xH200, same sizes): {[round(x, 2) for x in d]} us")
    h200 = nvswitch_box(
        "h200-sxm", "8x H200 SXM 141GB per node (DGX H200: NVSwitch, NCCL over NVLink, 8x400 Gb/s InfiniBand)",
        "h200_sxm", "2.29.2", "sglang/0.5.14", "0.24.0", 141, "NVIDIA H200 datasheet: 141 GB HBM3e",
        989.4, "NVIDIA H200 SXM datasheet: dense FP16/BF16 Tensor Core 989 TFLOPS (1,979 with sparsity)",
        4800, "NVIDIA H200 datasheet: HBM3e 4.8 TB/s", h200_topo, [t_eager_h200], h200_extra)
    write("h200-sxm", h200)

    a100_topo = {
        "_gpus_src": "NVIDIA DGX A100 datasheet: 8x A100 SXM4 per system",
        "intra": sv("nvswitch", "NVIDIA DGX A100 datasheet: 6x NVSwitch (NVLink3, 600 GB/s per GPU)"),
        "p2p": sv(True, "NCCL default (NCCL_P2P_DISABLE unset): P2P transport over NVLink"),
        "nvlink_gbps": sv(204, "ring busbw NCCL reaches on 8xA100 SXM: ~200-208 GB/s (docs/sources.md §6, public "
                               "nccl-tests); NCCL's own 12 links x 20 GB/s = 240 overstates it"),
        "ll_busbw_cap_gbps": sv(87.7, "NCCL tuning.cc llMaxBws, Ampere single node: 87.7 GB/s"),
        "ll_busbw_cap_multi_node_gbps": sv(22.5, "NCCL tuning.cc llMaxBws, Ampere, 2 nodes: 22.5 GB/s ('avg of "
                                                 "ring & tree'); 19.0 beyond 2 nodes is not modelled"),
        "pcie_gbps": sv(24, "NCCL's PCIe Gen4 x16 bandwidth (docs/sources.md §4); A100 SXM4 host link is PCIe Gen4 x16"),
        "gpus_per_pcie_switch": sv(2, "DGX A100 user guide system topology: 4 PCIe Gen4 switches, 2 GPUs + 2 NICs each"),
        "sockets": sv(2, "NVIDIA DGX A100 datasheet: 2x AMD EPYC 7742"),
        "host_mem_gbps": sv(204.8, "theoretical per socket: 8 channels DDR4-3200 x 8 B (EPYC 7742, AMD spec)"),
        "cpu_link_gbps": sv(128, "theoretical: EPYC 7742 socket-to-socket xGMI, 4 x16 links ~32 GB/s each per "
                                 "direction (AMD spec); never the bottleneck in these paths"),
        "nic_gbps": sv(25, "NVIDIA DGX A100 datasheet: ConnectX-6 200 Gb/s HDR InfiniBand = 25 GB/s per NIC"),
        "nics_per_node": sv(8, "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 for the compute fabric"),
        "nccl": nvl_lat,
    }
    a100 = nvswitch_box(
        "a100-sxm", "8x A100 SXM4 80GB per node (DGX A100: NVSwitch, NCCL over NVLink, 8x200 Gb/s InfiniBand)",
        "a100_sxm", "2.27.3", "sglang/0.5.10", "0.14.0", 80, "NVIDIA A100 datasheet: 80 GB HBM2e",
        312, "NVIDIA A100 datasheet: dense FP16/BF16 Tensor Core 312 TFLOPS",
        2039, "NVIDIA A100 80GB SXM datasheet: HBM2e 2,039 GB/s", a100_topo, [],
        sv(h100_extra["value"], "transferred from h100-sxm (eager overhead is host software, not the GPU): "
                                + h100_extra["source"]))
    write("a100-sxm", a100)

    l40_topo = {
        "_gpus_src": "aiconfigurator 0.12.0 systems/l40s.yaml: num_gpus_per_node 8 (the measured server)",
        "intra": sv("pcie", "NVIDIA L40S datasheet: no NVLink; GPUs talk over PCIe Gen4 x16"),
        "p2p": sv(True, "NCCL default: P2P over PCIe where the platform allows it; the aiconfigurator l40s system "
                        "file models intra-node traffic at PCIe bandwidth"),
        "ll_busbw_cap_gbps": sv(87.7, "NCCL tuning.cc llMaxBws, Ampere-class index (Ada, sm89) single node: 87.7 GB/s"),
        "ll_busbw_cap_multi_node_gbps": sv(22.5, "NCCL tuning.cc llMaxBws, Ampere-class index, 2 nodes: 22.5 GB/s"),
        "pcie_gbps": sv(24, "NCCL's PCIe Gen4 x16 bandwidth (docs/sources.md §4); L40S is PCIe Gen4 x16 (datasheet)"),
        "gpus_per_pcie_switch": sv(2, "assumed: a typical 8-GPU PCIe server puts 2 GPUs behind each of 4 PCIe "
                                      "switches; the measured server's layout is not published"),
        "sockets": sv(2, "assumed: 2-socket host (typical 8-GPU PCIe server); not given by aiconfigurator"),
        "host_mem_gbps": sv(307, "assumed: Xeon 8480-class host, 8 channels DDR5-4800 x 8 B per socket"),
        "cpu_link_gbps": sv(128, "assumed: 4 UPI links at 16 GT/s (~32 GB/s each per direction), Xeon 8480-class"),
        "nic_gbps": sv(50, "aiconfigurator 0.12.0 systems/l40s.yaml: inter_node_bw 50e9 B/s per GPU (1:1 CX7 NDR "
                           "400 Gb/s, as aiconfigurator assumes)"),
        "nics_per_node": sv(8, "aiconfigurator 0.12.0 systems/l40s.yaml: one 400 Gb/s NIC per GPU (1:1)"),
        "nccl": nvl_lat,
    }
    gemm, memc, floor_us, floor_src = gemm_curves("l40s", "sglang/0.5.14", "sglang_torch_linear", 362.05, 864)
    eager_us, eager_src = eager_launch("l40s", "0.22.0")
    tables = nccl_tables("l40s", "2.27.3") + custom_tables("l40s", "0.22.0")
    l40 = {
        "format": "tpsim-profile", "version": 1, "name": "l40s-pcie",
        "description": "8x L40S 48GB PCIe per node (no NVLink: NCCL over PCIe), 400 Gb/s NIC per GPU",
        "device": "cuda",
        "gpus_per_node": sv(8, l40_topo.pop("_gpus_src")),
        "memory_gib": sv(48, "NVIDIA L40S datasheet: 48 GB GDDR6"),
        "compute": {
            "matmul_tflops": {"fp16": sv(362.05, "NVIDIA L40S datasheet: FP16/BF16 Tensor 362.05 TFLOPS dense "
                                                 "(733 with sparsity)"),
                              "bf16": sv(362.05, "NVIDIA L40S datasheet: BF16 Tensor 362.05 TFLOPS dense"),
                              "fp32": sv(*FP32_TFLOPS["l40s"])},
            "memory_gbps": sv(864, "NVIDIA L40S datasheet: GDDR6 864 GB/s"),
            "gemm_efficiency": gemm, "memory_efficiency": memc,
            "launch_us": {"eager": sv(eager_us, eager_src), "graph": sv(floor_us, floor_src)},
            "gemm_tables": [gemm_table("l40s", "sglang/0.5.14", "sglang_torch_linear")],
        },
        "collectives": {"eager_extra_us": sv(h100_extra["value"], "transferred from h100-sxm (host software "
                                                                   "overhead): " + h100_extra["source"]),
                        "graph_extra_us": graph_extra(floor_us, "l40s"), "tables": tables},
        "topology": l40_topo, "overlap": OVERLAP, "jitter": JITTER,
    }
    off, npts, err = latency_offset(l40, tables, "l40s-pcie")
    l40["topology"]["latency_offset_us"] = sv(off, (
        f"derived: the shift minimizing the largest relative error (then {err:.0%}) of the topology "
        f"model against {npts} small all-reduce points (<= 4 KiB, 2/4/8 GPUs) of the aiconfigurator l40s NCCL "
        f"table above"))
    write("l40s-pcie", l40)

    shm_hops, shm_gbps = shm_constants(nvl_lat)
    for base, pcie, prof in (("h100-sxm", "Gen5", h100), ("a100-sxm", "Gen4", a100)):
        topo = {"p2p": sv(False, "NCCL_P2P_DISABLE=1 (NCCL docs): P2P transport off; ring/tree edges inside "
                                 "a node use the SHM transport through host memory (docs/sources.md §4, shm.cc)"),
                "shm_hop_us": shm_hops if base == "h100-sxm" else
                {k: sv(v["value"], "transferred from h100-sxm-p2p-off (a GPU<->host-memory traversal is a "
                                   "PCIe/host property, not a GPU one): " + v["source"]) for k, v in shm_hops.items()}}
        if base == "h100-sxm":
            topo["shm_gbps"] = shm_gbps
        twin = {
            "format": "tpsim-profile", "version": 1, "extends": base, "name": f"{base}-p2p-off",
            "description": f"{base} with NCCL_P2P_DISABLE=1: ring/tree steps through host shared memory "
                           f"(PCIe {pcie} x16 to the CPU and back; no LL128); NVLS stays on (NCCL 2.21 "
                           f"ncclNvlsInit has no P2P condition); NCCL's tuner still prices an SHM step as a "
                           f"PCI hop when it picks the algorithm",
            "topology": topo,
            "collectives": {
                "replace": True,
                "eager_extra_us": sv(prof["collectives"]["eager_extra_us"]["value"],
                                     f"as {base} (host software overhead, independent of the transport)"),
                "graph_extra_us": sv(prof["collectives"]["graph_extra_us"]["value"],
                                     f"as {base} (the functional collective's copy, independent of the transport): "
                                     + prof["collectives"]["graph_extra_us"]["source"]),
                "tables": [],
            },
        }
        write(f"{base}-p2p-off", twin)


if __name__ == "__main__":
    main()
