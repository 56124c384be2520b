"""Collective constants of the built-in profiles: NCCL and custom all-reduce tables from the
aiconfigurator database, NCCL latencies, the SHM (P2P off) step, in-graph extra, latency offset, overlap
and jitter sections. Imported by derive_builtin.py (run that)."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from tpsim.sim.hardware.profile import parse
from tpsim.sim.price.comm.topology import TopologyModel
from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.calib.custom_allreduce_fit import fit_group
from tpsim.sim.stack.impls import ENGINE_COLLECTIVES
from common import AIC, DATA, GPU_SMS, INPUTS, OUT, sv, svr
from shm import shm_flow_gbps

# ---------------------------------------------------------------- collectives

def nccl_runs(system, ver):
    """Every fp16 row the database holds for NCCL `ver` on `system`, and the folders they came from:
    aiconfigurator files repeated collections of one release under other folder names, whose `version`
    column names the release (h100_sxm/comm/nccl/2.27.3 and h200_sxm/.../2.26.2 hold two runs each of
    NCCL 2.29.2); a folder without that column is the release its name says."""
    frames, dirs = [], []
    for f in sorted((DATA / system / "comm" / "nccl").glob("*/nccl_perf.parquet")):
        d = pd.read_parquet(f)
        d = d[d.version == ver] if "version" in d.columns else (d if f.parent.name == ver else d.iloc[:0])
        d = d[(d.nccl_dtype == "half") & (d.kernel_source == "NCCL")]
        if len(d):
            frames.append(d)
            dirs.append(f.parent.name)
    return pd.concat(frames), dirs


def nccl_tables(system, ver):
    d, dirs = nccl_runs(system, ver)
    where = " + ".join(f"systems/data/{system}/comm/nccl/{x}/nccl_perf.parquet" for x in dirs)
    out = []
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for n in sorted(d.num_gpus.unique()):
            rows = d[(d.op_name == op) & (d.num_gpus == n)]
            g = rows.groupby("message_size").latency.median().sort_index()
            runs = int(rows.groupby("message_size").size().median())
            out.append({"collective": op, "group": int(n), "scope": "node", "mode": "graph", "impl": "nccl",
                        "bytes": [int(2 * s) for s in g.index], "time_us": [round(float(v) * 1e3, 3) for v in g],
                        "source": f"{AIC} database: {where} (NCCL {ver}, fp16, {op}, {n} GPUs; the median of the "
                                  f"{runs} runs of that release the database holds per size, every folder whose "
                                  f"rows say NCCL {ver}); message_size is fp16 elements (nccl-tests "
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
                  "hop per link class; LL payload 50%, LL128 ~92-95% (0.92 taken). Tree LL128/Simple (baseLat "
                  "14.0/8.4; hwLat NVLink 1.25/4.0, PCI 1.9/4.0, NET 8.5/14) and NVLSTree's own columns (hwLat "
                  "NVLink 25, NET 14) as in tuning.cc 2.21-2.30; the tree's LL128/Simple are offered across nodes only",
        "base_us": {"ring_ll": 6.6, "ring_ll128": 14.0, "ring_simple": 8.4, "tree_ll": 6.8, "tree_ll128": 14.0,
                    "tree_simple": 8.4, "nvls": 0.0},
        "hop_us": {"nvlink": {"ll": 0.6, "ll128": 1.9, "simple": 3.4, "tree_ll": 0.6, "tree_ll128": 1.25,
                              "tree_simple": 4.0, "nvls": 25.0, "nvls_tree": 25.0},
                   "pci": {"ll": 1.0, "ll128": 2.5, "simple": 5.7, "tree_ll": 1.0, "tree_ll128": 1.9,
                           "tree_simple": 4.0},
                   "net": {"ll": 2.7, "ll128": 4.0, "simple": 14.0, "tree_ll": 5.0, "tree_ll128": 8.5,
                           "tree_simple": 14.0, "nvls": 18.0, "nvls_tree": 14.0}},
        "ll_payload": 0.5, "ll128_payload": 0.92,
    }


P2P_MATRIX = INPUTS / "p2pBandwidthLatencyTest-8xH100.txt"
NVBW_H800 = INPUTS / "nvbandwidth-8xH800-host.txt"
NVBW_A100 = INPUTS / "nvbandwidth-A100-host-bidirectional.txt"
MIXING_ABLATION = INPUTS / "nccl-graph-mixing-ablation-jacobi.csv"


def _matrix(text: str, title: str) -> list[float]:
    """Off-diagonal entries of one 8x8 matrix of a p2pBandwidthLatencyTest output."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip() == title)
    rows = [[float(x) for x in line.split()[1:9]] for line in lines[i + 2:i + 10]]
    return [rows[a][b] for a in range(8) for b in range(8) if a != b]


def shm_constants(nccl: dict):
    """Per-step latency (us) of NCCL's SHM transport (NCCL_P2P_DISABLE=1) on 8xH100 from public
    p2pBandwidthLatencyTest matrices, and the per-GPU SHM flow rate per GPU generation
    (shm_flow_gbps, nvbandwidth; sim/hardware/profiles/_data/, URLs inside).

    A P2P=Disabled copy is staged GPU -> pinned host memory -> GPU; its GPU time over a P2P=Enabled
    copy is what the two PCIe crossings through host memory add. NCCL's SHM LL step is the sender's
    posted write of LL lines into host memory, seen by the receiver that already polls them there
    (shm.cc: buffers in host shared memory, receiver-side locality): taken as one of the four one-way
    GPU<->host-memory traversals of the staged copy (D2H data + its completion, H2D request + data).
    Simple adds NCCL's own Simple-over-LL difference for a PCI step (tuning.cc)."""
    text = P2P_MATRIX.read_text()
    off = statistics.mean(_matrix(text, "P2P=Disabled Latency Matrix (us)"))
    on = statistics.mean(_matrix(text, "P2P=Enabled Latency (P2P Writes) Matrix (us)"))
    ll = round((off - on) / 4, 2)
    pci = nccl["hop_us"]["pci"]
    simple = round(ll + pci["simple"] - pci["ll"], 2)
    src = (f"derived (assumption stated): 8xH100 p2pBandwidthLatencyTest, mean off-diagonal GPU latency "
           f"P2P=Disabled {off:.2f} us vs P2P=Enabled {on:.2f} us (sim/hardware/profiles/_data/"
           f"p2pBandwidthLatencyTest-8xH100.txt); the staged copy's extra {off - on:.2f} us is 4 one-way "
           f"GPU<->host-memory traversals; an SHM LL step (shm.cc: sender writes LL lines into host memory "
           f"the receiver polls) pays one: {ll} us")
    hops = {"ll": sv(ll, src), "tree_ll": sv(ll, src),
            "simple": sv(simple, f"{src}; Simple: + NCCL tuning.cc PCI Simple-LL hop difference "
                                 f"{pci['simple'] - pci['ll']:.1f} us = {simple} us")}
    return hops, shm_flow_gbps(NVBW_H800.read_text(), NVBW_A100.read_text())


def graph_extra(floor_us: float, system: str):
    """What a compiled functional all-reduce adds inside a CUDA-graph step over the bare NCCL kernel:
    no kernel (derived from Inductor's output code; floor_us and system are kept for the source)."""
    return sv(0.0, (
        "code: no copy kernel. Under torch.compile the reference stack's all-reduce is the functional "
        "_c10d_functional.all_reduce, which Inductor lowers as clone(input) + in-place all_reduce_ + wait_tensor "
        "(torch/_inductor/comm_lowering.py _all_reduce: 'in most cases, this clone is eliminated via in-place "
        "reuse'). Inductor's output code for the reference's compiled decode steps (hw/derive/inductor_overlap.py "
        "all_reduce_producers: the dense model at batch 7 and 1 and the other two reference models; torch "
        "2.5.1 + triton 3.1.0, the reference's, and torch 2.13) launches each all_reduce_ right after the kernel "
        "that writes its buffer: the wo / w2 extern mm (out=buf), the batch-1 GEMV reduction or the sum of the "
        "two partials, the clone fused into it "
        "or elided; no copy kernel in between (one would have cost this profile's graph-replay floor, "
        f"{floor_us} us, {system}). ProcessGroupNCCL's side-stream fork/join and wait_tensor become graph "
        "edges (no kernels): counted 0"))


# GPU of each aiconfigurator system measured by the graph-mixing ablation (others: not set)
_MIXING_GPU = {"h100_sxm": "H100", "h200_sxm": "H200"}


def _mixing_deltas(gpu: str) -> dict[int, float]:
    """{GPU count: us of NCCL's graph-mixing nodes per captured NCCL launch} of one GPU's arms of the
    ablation (graph_nccl_node's statistic)."""
    d = pd.read_csv(MIXING_ABLATION, comment="#")
    d = d[(d.gpu == gpu) & (d.nx == 128)]
    deltas = {}
    for n, g in d.groupby("num_gpus"):
        fastest = g.groupby("nccl_graph_mixing").runtime_s.min()
        deltas[int(n)] = round(float(fastest[1] - fastest[0]) / int(g.niter.iloc[0]) * 1e6, 3)
    return deltas


_MIXING_SRC = (
    "from the public nccl_graphs/jacobi ablation in C-TC/multi-gpu-programming-models "
    "repro/nccl_graph_ablation (sim/hardware/profiles/_data/nccl-graph-mixing-ablation-jacobi.csv; the author calls it "
    "'~1 us' on H100, 'sub-us' on H200, near the noise floor). Mechanism, NCCL 2.21 strongstream.cc/enqueue.cc: "
    "with mixing on every captured NCCL kernel is followed by an event-record node on the comm's serialEvent "
    "that the comm's next captured NCCL kernel depends on (plus one external event-wait node per graph); "
    "NCCL_GRAPH_MIXING_SUPPORT=0 removes them (vllm#32106, sglang#27089, TensorRT-LLM#13511 turn it off for "
    "the bubble before NCCL kernels in graphs). The kernel launch itself (cudaLaunchKernelEx with cluster and "
    "mem-sync-domain attributes) is the same captured or not, so the tables' bare kernel time holds")


def graph_nccl_node(system: str, floor_us: float):
    """What NCCL's graph-mixing nodes cost one captured collective inside a CUDA graph, from the public
    NCCL_GRAPH_MIXING_SUPPORT=1 vs 0 ablation of NVIDIA's nccl_graphs/jacobi (sim/hardware/profiles/_data/
    nccl-graph-mixing-ablation-jacobi.csv, URL inside). A GPU it did not measure (A100, L40S) takes the median
    of every measured arm, with a range from the lowest arm to the profile's graph-replay floor `floor_us`.

    Mechanism (NCCL 2.21 src/misc/strongstream.cc + src/enqueue.cc; the same in 2.29/2.30): with mixing
    on (the default), ncclLaunchFinish -> ncclStrongStreamRelease adds a cudaGraphAddEventRecordNode on
    the comm's serialEvent after every captured NCCL kernel, and the next captured NCCL kernel of the
    comm depends on that record node (ncclLaunchPrepare: launch stream waits on deviceStream's tip);
    ncclStrongStreamAcquire adds one external cudaGraphAddEventWaitNode per graph. With mixing off none
    of these nodes exist. Statistic: per (GPU count) the fastest of 5 reps of each arm (the author's),
    (mixing on - off) / 5000 iterations, at nx=128 only: there the halo branch (boundary kernels ->
    NCCL kernel -> record node) is the graph's critical path; at nx=512 the interior Jacobi kernel on
    the other stream outlasts it and hides the node. Median over the 4- and 8-GPU arms."""
    gpu = _MIXING_GPU.get(system)
    if gpu is None:
        arms = {f"{g} {n} GPUs": v for g in ("H100", "H200") for n, v in sorted(_mixing_deltas(g).items())}
        us = round(statistics.median(arms.values()), 2)
        lo, hi = round(min(arms.values()), 2), round(max(floor_us, max(arms.values())), 2)
        shown = ", ".join(f"{k} {v} us" for k, v in arms.items())
        return svr(us, lo, hi, (
            f"transferred (no measurement on this GPU): the nodes are CUDA-graph event nodes the driver runs the "
            f"same way on every GPU, so the median of every measured arm [{shown}] of the NCCL_GRAPH_MIXING_SUPPORT=1 "
            f"(default) minus =0 ablation (fastest of 5 reps per arm, /5000 iterations, nx=128); range from the "
            f"lowest arm to this profile's graph-replay floor {floor_us} us (an event-record node runs no kernel, "
            f"so it is taken to cost at most a tiny kernel node replayed back to back: an assumption that "
            f"widens the measured spread by the transfer), " + _MIXING_SRC))
    deltas = _mixing_deltas(gpu)
    us = round(statistics.median(deltas.values()), 2)
    shown = ", ".join(f"{n} GPUs {v} us" for n, v in sorted(deltas.items()))
    return sv(us, (
        f"derived: NCCL_GRAPH_MIXING_SUPPORT=1 (default) minus =0 per graph-captured NCCL launch, {gpu}, median of "
        f"[{shown}] (fastest of 5 reps per arm, /5000 iterations, nx=128 where the NCCL branch is the graph's critical "
        f"path) " + _MIXING_SRC))


# torchcomms#1203 / #3646: the only public timings of a host node in a replayed CUDA graph
GRAPH_NET_HOST = svr(26.0, 13.0, 85.0, (
    "derived from a public measurement of the same mechanism: NCCL adds one host node per collective that crosses "
    "the network to a captured CUDA graph (src/enqueue.cc: a plan with proxy ops launches hostStreamPlanCallback "
    "with cudaLaunchHostFunc on its host stream and the kernel waits for it; skipped inside a node, "
    "NVIDIA/nccl#1805); the nodes chain per rank from the graph's launch (the simulator's host lane, "
    "sim/engine/simpy_engine.py host_s). One captured cudaLaunchHostFunc per graph replay costs a CPU round trip "
    "of ~26 us (meta-pytorch/torchcomms#1203, which replaced its per-replay host callback by a device counter "
    "for that reason): 26 us. Range 13-85 us: low, half of it (a host node whose predecessor is a host node may "
    "skip one of the round trip's two crossings, the GPU's notification of the CPU: an assumption); high, "
    "meta-pytorch/torchcomms#3646 on GB200, where moving each collective's captured host node from inline on "
    "the launch stream to NCCL's chained placement saved 52-85 us per collective replay (a host node in the "
    "kernel's way costs up to that; NCCL's chained one is taken as at most it)"))


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
    "compute_slowdown": svr(1.21, 1.18, 1.24, "docs/sources.md §7: Concerto measured an 18-24% slowdown of work overlapped with "
                                 "communication (A800); midpoint 21% taken (measured on A800, applied to this GPU). "
                                 "Worst case not modelled: a 132-block GEMM with a concurrent 24-block NCCL kernel "
                                 "nearly doubled on H100 (second wave)"),
    "comm_slowdown": svr(1.21, 1.18, 1.24, "docs/sources.md §7: Concerto's 18-24% slowdown of overlapped work (A800), midpoint 21%, "
                              "applied to the collective too (it loses SMs and HBM bandwidth to the GEMM)"),
}
# Per-kernel co-scheduling (sim/price/coschedule.py, sim/price/occupancy.py) for GPUs whose SM count and NCCL
# channel counts are sourced; the flat factors above stay for the others (A100, L40S: no public
# NCCL channel log found) and for CPU/gloo profiles (measured by `tpsim calibrate`).
_P5_LOG = ("public NCCL INFO log of an 8x H100 SXM p5.48xlarge, one node (an AWS 'NCCL Tests on EKS' README): "
           "'24 coll channels, 16 nvls channels', threadThresholds 8/8/64 | 64/8/64 (Ring LL 8 x 8 ranks)")
_GPCS = ([16] * 6 + [18] * 2,
         "8 GPCs, 66 TPCs, 132 SMs (NVIDIA 'Hopper Architecture In-Depth' / whitepaper, quoted in NVIDIA/cutlass#1921: "
         "'8 GPCs, 66 TPCs (uneven TPC for GPCs?), 132 SMs'); at most 9 TPCs = 18 SMs per GPC (full GH100; CUTLASS "
         "tile_scheduler_params.h 'max_sm_per_gpc = 18'). Which TPCs are fused off varies by die and is not published "
         "(one H100's driver SM->GPC table shows a 16-SM GPC, accel-sim/gpu-app-collection#87): 6 x 16 + 2 x 18 is the "
         "most even split into whole TPCs, an assumption within those totals (sim/hardware/gpc.py)")
_CLUSTERS = (4, "NCCL 2.21 src/init.cc line 1737 NCCL_CONFIG_DEFAULT(cgaClusterSize, ..., 4); src/enqueue.cc "
                "ncclLaunchKernel lines 1365-1386: on compCap 90 the kernel is launched in clusters of cgaClusterSize "
                "CTAs (1 when the channel count does not divide by it), a cluster on SMs of one GPC (sim/hardware/gpc.py)")
_PLACEMENT = ("packed", "NOT SOURCED, a named option (sim/hardware/gpc.py): CUDA documents no CTA -> SM order, so where a "
                        "compute wave leaves its idle SMs is unknown; 'packed' (idle SMs counted per GPU, the best case "
                        "and the rule before GPCs were modelled) keeps the timelines unchanged; 'spread' (busy SMs dealt "
                        "round-robin over the GPCs) is the alternative a profile extending this one can name")
_GPU = {
    "h100_sxm": {"sms": GPU_SMS["h100_sxm"], "coll_channels": (24, _P5_LOG), "gpc_sms": _GPCS},
    "h200_sxm": {"sms": GPU_SMS["h200_sxm"],
                 "coll_channels": (24, "transferred from h100-sxm (the same NVLink4 x18 / 4x NVSwitch graph, so "
                                       "NCCL's ring search finds the same channels; no H200 log found): " + _P5_LOG),
                 "gpc_sms": (_GPCS[0], "as h100-sxm (the same GH100 die with 132 SMs): " + _GPCS[1])},
}


def overlap_gpu(system: str, coll_channels: tuple | None = None) -> dict:
    """The overlap section of a GPU box with sourced SM and channel counts: flat factors 1.0 because
    the per-kernel mechanism of overlap.gpu replaces them (zero is not assumed: the mechanism is)."""
    g = _GPU[system]
    cc = coll_channels or g["coll_channels"]
    why = ("1.0 because overlap.gpu replaces the flat factor: a collective beside compute is co-scheduled per "
           "kernel (sim/price/coschedule.py: SMs it waits for, wave quantization of tile-bound kernels on the SMs left, "
           "HBM shared by demand); Concerto's 18-24% (A800, docs/sources.md §7) is no longer applied on top")
    return {
        "compute_slowdown": sv(1.0, why), "comm_slowdown": sv(1.0, why),
        "gpu": {
            "sms": sv(*g["sms"]),
            "coll_channels": sv(*cc),
            "nvls_channels": sv(16, "NCCL 2.21 src/transport/nvls.cc NCCL_PARAM(NvlsChannels, \"NVLS_NCHANNELS\", 16); "
                                    "enqueue.cc getChannnelThreadInfo: NVLS/NVLSTree run nc = comm->nvlsChannels "
                                    "('16 nvls channels' in the p5.48xlarge log)"),
            "hbm_per_bus_byte": svr(3.0, 2.0, 3.0, "NVIDIA/nccl#1428 (sjeaugey): a collective's link bandwidth 'needs to be "
                                        "multiplied by at least 2x for memory bandwidth, as we need to store to memory, "
                                        "then read back from it. If you add reading from or writing to user data, it "
                                        "can be 3x' -- 3x taken (the reference's all-reduce reads and writes user "
                                        "buffers)"),
            "nccl_high_priority": sv(False, "PyTorch default: ProcessGroupNCCL::Options is_high_priority_stream = false "
                                            "unless TORCH_NCCL_HIGH_PRIORITY=1; the reference harness does not set it "
                                            "(calib/collectives.py records it when set)"),
            "gemm_grids": sv("cublas-sm90", "sim/hardware/gemm_grids.py: F.linear's cuBLAS grids at decode m <= 64 "
                                            "from public Hopper fp16/bf16 traces (sm90_xmma tilesize64x128x64 / "
                                            "64x64x64 segment_k_off: ceil(n / 64) CTAs, no split-K); larger m "
                                            "keeps the 128 x 128 rule"),
            "sm_hbm_gbps": sv(50.0, "zejia-lin/BulletServe#1 (maintainer, from SM-restricted decode kernels on "
                                    "an H100 PCIe): 'Before ~40 Streaming Multiprocessors (SMs), I believe the "
                                    "memory bandwidth is not yet saturated' -- the H100 PCIe's 2000 GB/s "
                                    "(datasheet) over 40 SMs = 50 GB/s per SM, an SM property carried to the "
                                    "SXM parts (same Hopper SM); sglang-omni#1934 (H200, green contexts: a b16 "
                                    "decode step 1.06x on 96 of 132 SMs) bounds what SM loss costs a whole step"),
            "gpc_sms": sv(*g["gpc_sms"]),
            "nccl_cluster_size": sv(*_CLUSTERS),
            "idle_sm_placement": sv(*_PLACEMENT),
        },
    }


P2P_OFF_CHANNELS = (2, "NVIDIA/nccl-tests#228: an 8-GPU NVSwitch box whose rings run through host memory "
                       "(NCCL INFO 'Channel 00' and 'Channel 01' ... 'via SHM/direct/direct': 2 ring channels), as "
                       "NCCL_P2P_DISABLE=1 makes every GPU-GPU edge")


# Per-rank arrival at each collective, GPU side (the per-step spread of the ranks' starts is the stack's
# host lane). In a CUDA-graph pass of a dense model every rank runs the same kernels and each collective
# re-aligns them, so what remains is each GPU's own speed over the compute between two collectives: a
# rank slower by a fraction e of a segment of T arrives e T late. The spread of e: Sinha et al., "Not All
# GPUs Are Created Equal" (SC'22, arXiv 2208.11035): 8% average (max 22%) performance variation among
# same-SKU GPUs across whole clusters (V100, MI60; compute-bound kernels under power management); within
# one box and for decode's memory-bound kernels (HBM clock fixed) smaller: taken as sd 1%, range 0.3-3%,
# an assumption. Written as the profile's iid exponential per rank (what --exact and `tpsim calibrate`
# use) with the same expected wait of the last of 8 ranks: m H_8 = sd E[Z_(8:8)] T, so m = sd x 1.4236 x T
# / 2.7179 (Harter's normal order statistics; H_8). T: the comm-free decode step over its collectives
# (tpsim predict --schedule upper-bound, TP8): 60 us for 70B at batch 1 on h100-sxm -> 0.31 us; 29 us for
# 8B at batch 1 with sd 0.3% -> 0.05 us; 133 us for 405B at batch 16 on h200-sxm with sd 3% -> 2.1 us.
_ARRIVAL_SRC = (
    "derived, an assumption within a published spread: each GPU's own speed over the compute between two "
    "collectives (a CUDA-graph pass launches nothing from the host inside it; the per-step spread of the ranks' "
    "starts is the stack's host lane). Sinha et al. SC'22 (arXiv 2208.11035): 8% average (max 22%) performance "
    "variation among same-SKU GPUs across clusters (compute-bound, power-managed); taken as sd 1% (range 0.3-3%) "
    "within one box for memory-bound decode. As iid exponential per rank with the same expected wait of the "
    "last of 8: m = sd x E[Z_(8:8)] 1.4236 x T / H_8 2.7179, T the comm-free decode step per collective: 60 us "
    "(70B TP8 batch 1) -> 0.3 us; range from sd 0.3% at 8B TP8 batch 1 (T 29 us: 0.05 us) to sd 3% at 405B "
    "TP8 batch 16 (T 133 us: 2.1 us). No per-collective arrival measurement of a dense graph on H100/H200 was "
    "found (the public skews are MoE or host-paced eager runs: 1Cat-vLLM#173, vllm#52911, vllm#52777). "
    "The net scope takes this (a scope left out takes the other's): the network's own latency is priced in the "
    "collective. `tpsim calibrate` measures it on your cluster")
JITTER = {"arrival": {"node": {"dist": "exponential", "mean_us": svr(0.3, 0.05, 2.1, _ARRIVAL_SRC)}}}


def write(name, prof):
    """indent=1, but lists of numbers on one line (tables stay readable in a diff)."""
    text = json.dumps(prof, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*([-0-9.e+,\s]+?)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text)
    (OUT / f"{name}.json").write_text(text + "\n")


# ---------------------------------------------------------------- engine all-reduce kernels

# The engine releases each profile's custom all-reduce constants are fitted from (aiconfigurator's
# newest table of that engine for the system; the older ones are held apart by
# bench/validate_custom_allreduce.py), and what the engines' enable checks see on that box.
CUSTOM_AR_RELEASES = {
    "h100_sxm": {"vllm": "vllm/0.24.0", "sglang": "sglang/0.5.14", "trtllm": "trtllm/1.3.0rc20"},
    "h200_sxm": {"vllm": "vllm/0.24.0", "sglang": "sglang/0.5.14", "trtllm": "trtllm/1.3.0rc20"},
    "a100_sxm": {"vllm": "vllm/0.14.0", "sglang": "sglang/0.5.10", "trtllm": "trtllm/1.0.0"},
    "l40s": {"vllm": "vllm/0.22.0", "sglang": "sglang/0.5.14", "trtllm": "trtllm/1.3.0rc20"},
}
# full NVLink, P2P, NVLS multicast (SM90 + NVSwitch), one node
CUSTOM_AR_HW = {"h100_sxm": (True, True, True, True), "h200_sxm": (True, True, True, True),
                "a100_sxm": (True, True, False, True), "l40s": (False, True, False, True)}
_FAMILY_IMPL = {"vllm": "vllm-custom", "sglang": "sglang-custom", "trtllm": "trtllm-auto"}


def engine_ar_points(system: str, rel: str, data: Path | None = None) -> dict:
    """{(group, mode): [(bytes, us)]} of one aiconfigurator custom_allreduce_perf table (median per size;
    message_size is bf16 elements; kernel_source names graph / eager, TensorRT-LLM's is graph only)."""
    d = pd.read_parquet((data or DATA) / system / "comm" / rel / "custom_allreduce_perf.parquet")
    out = {}
    for (n, src), g in d.groupby(["num_gpus", "kernel_source"]):
        mode = "eager" if "eager" in str(src).lower() else "graph"
        s = g.groupby("message_size").latency.median().sort_index()
        out[(int(n), mode)] = [(int(2 * k), float(v) * 1e3) for k, v in s.items()]
    return out


def custom_allreduce_section(system: str) -> dict:
    """collectives.custom_allreduce: per engine family and group size, the mechanism's constants
    (sim/price/comm/custom_allreduce.py) fitted on half of the sizes (calib/custom_allreduce_fit.py) of that
    engine's aiconfigurator table, at the points where the engine's own rule ran its own kernel."""
    hw = car.Hardware(*CUSTOM_AR_HW[system])
    out = {}
    for family, rel in CUSTOM_AR_RELEASES[system].items():
        pts = engine_ar_points(system, rel)
        impl = ENGINE_COLLECTIVES[_FAMILY_IMPL[family]]
        groups, skipped = {}, []
        for n in sorted({g for g, _ in pts}):
            def kernel_of(b, n=n):
                return car.pick(impl, b, n, hw).kernel
            f = fit_group(pts[(n, "graph")], kernel_of, n, pts.get((n, "eager")))
            if f is None:
                skipped.append(n)
                continue
            fit = f.pop("fit_bytes")
            groups[str(n)] = {k: v for k, v in f.items() if v is not None} | {"fit_points": len(fit)}
        why = (f"; no constants for {', '.join(map(str, skipped))} GPUs: the engine runs NCCL there on this box "
               f"(its own enable rule), so the table is NCCL's" if skipped else "")
        out[family] = {"groups": groups, "source": (
            f"derived: calib/custom_allreduce_fit.py on the even-log2 sizes of {AIC} database: systems/data/{system}/"
            f"comm/{rel}/custom_allreduce_perf.parquet (bf16; graph = CUDA-graph replay of 5 calls, eager = Python "
            f"calls with a clone each, aiconfigurator collector/network/collect_all_reduce.py; TensorRT-LLM with "
            f"AllReduceStrategy.AUTO and the autotuner off, shape (size/4096, 4096)). floor_us: fastest time <= 4 KiB "
            f"(launch + the kernel's flag barriers); oneshot_gbps / twoshot_gbps: achieved per-rank link rate of "
            f"that kernel's remote loads (least squares over its fit points >= 64 KiB; two-shot with its own intercept, "
            f"twoshot_extra_us: its middle barrier); eager_floor_us: median "
            f"eager call <= 4 KiB (host-bound). Points where {impl.engine}'s rule ran another path are not fitted"
            + why)}
    return out
