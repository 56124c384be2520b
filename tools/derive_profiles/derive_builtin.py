"""Regenerate tpsim's built-in profiles from the aiconfigurator 0.12.0 measured database + the sources in docs/sources.md.

Not part of tpsim at run time (the profiles are data files); kept so every derived number in
sim/hardware/profiles/*.json can be regenerated and checked. Needs pandas + pyarrow and the unpacked
aiconfigurator-core 0.12.0 wheel (the measured tables ship inside it):
    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic
    unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl -d /tmp/aic/core
    python tools/derive_profiles/derive_builtin.py /tmp/aic/core/aiconfigurator_core/systems/data sim/hardware/profiles
Runs from anywhere: it imports this checkout as tpsim (tpsim.sim.hardware.profile / tpsim.sim.hardware.topology derive the latency
offset), as the bench scripts do; its parts (common, compute, collectives, shm) sit beside it. Not in the wheel.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))      # the checkout root
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from common import sv, svr  # noqa: E402
from compute import eager_launch, fp8_gemm_table, gemm_curves, gemm_table  # noqa: E402
from l2 import l2_section  # noqa: E402
from collectives import (GRAPH_NET_HOST, JITTER, OVERLAP, P2P_OFF_CHANNELS, custom_allreduce_section,  # noqa: E402
                         custom_tables, graph_extra, graph_nccl_node, overlap_gpu,
                         latency_offset, nccl_latency, nccl_tables, shm_constants, write)
from shm import NCCL_CPU_NODES_DGX_A100, nccl_cpu_link  # noqa: E402

# ---------------------------------------------------------------- boxes


def as_base(leaf: dict, base: str, why: str) -> dict:
    """A twin profile's copy of its base's number (value, range if any), its source saying so."""
    return {**leaf, "source": f"as {base} ({why}): " + leaf["source"]}


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

# Dense FP8 (e4m3) tensor-core peaks, the datasheets' numbers without sparsity. A100 (sm80) has none:
# no fp8 entry, and sim/fp8.py refuses FP8 linears there (what vLLM runs instead, weight-only Marlin,
# is not priced).
FP8_TFLOPS = {
    "h100_sxm": (1979.0, "NVIDIA H100 SXM5 datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity, 1,979 dense"),
    "h200_sxm": (1979.0, "NVIDIA H200 SXM datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity, 1,979 dense"),
    "l40s": (733.0, "NVIDIA L40S datasheet: FP8 Tensor Core 1,466 TFLOPS with sparsity, 733 dense"),
}

# what the engines' per-architecture choices read (vLLM's FlashAttention version: sim/price/flash_decode.py)
_CC = "NVIDIA CUDA GPUs compute capability table (developer.nvidia.com/cuda-gpus)"
COMPUTE_CAPABILITY = {
    "h100_sxm": (9.0, f"{_CC}: H100 9.0 (Hopper)"),
    "h200_sxm": (9.0, f"{_CC}: H200 9.0 (Hopper)"),
    "a100_sxm": (8.0, f"{_CC}: A100 8.0 (Ampere)"),
    "l40s": (8.9, f"{_CC}: L40S 8.9 (Ada Lovelace)"),
}


# compute.decode_attention (sim/price/decode_grid.py): the SMs the decode kernels' split rules read, and the
# rate one split-KV decode CTA streams its KV share at. The rate is kernel-level: marginal times of whole
# per-layer decode attention ops (CUDA graphs, the engines' own attention modules) in the aiconfigurator
# tables below, at a fixed grid (the CTAs and each one's tokens from the kernel's split rule), not end to end.
_AIC = "aiconfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0, NVIDIA) systems/data"
_FA3_GRID = ("FA3 under vLLM's full graphs, num_splits 32, dynamic split: 8 q / 1 KV heads at batch 1 = 32 CTAs, "
             "16/2, 8/2 or 8/1 at batch 2 = 64 CTAs; 1024 -> 2048 -> 4096 tokens per CTA from past length 32767 -> "
             "65535 -> 131071")
DECODE_ATTENTION = {
    "h100_sxm": {
        "sms": sv(132, "NVIDIA H100 SXM5 datasheet / Hopper whitepaper: 132 SMs"),
        "cta_gbps": svr(48, 28, 60, (
            f"kernel-level: marginal per-CTA rates from {_AIC}/h100_sxm/attention/vllm/0.24.0/"
            f"generation_attention_perf.parquet (bf16 KV, head_dim 128; {_FA3_GRID}). Value: the three "
            "marginals whose both ends are beyond L2 (KV 67 -> 134 MB, 64 CTAs, +1 MB per CTA): 48.0 (16/2), "
            "45.8 (8/2), 47.7 (8/1 batch 2) GB/s, median 48. High end: 32 CTAs (8/1 batch 1) 34 -> 67 MB, "
            "55.3 GB/s, and the same FA3 on H200 (h200-sxm: 47-65). Low end: TensorRT-LLM 1.3.0rc20 XQA "
            "(trtllm/1.3.0rc20, 8/1 batch 1, 32767 -> 65535: 45 -> 64 CTAs of 768 -> 1024 tokens, +4.7 us: 28 "
            "GB/s, the grid changing between the points) and FA3's steps from an L2-resident start (34 -> 67 MB: "
            "29.5-32.6). Marginals with 100+ CTAs (SGLang FA3: 17-27 GB/s each, 1.8-3.0 TB/s together) are the "
            "aggregate bandwidth's limit, which the bandwidth-bound term prices, not this one")),
    },
    "h200_sxm": {
        "sms": sv(132, "NVIDIA H200 SXM: the GH100 die of H100 SXM5 with 132 SMs enabled (Hopper whitepaper)"),
        "cta_gbps": svr(54, 28, 65, (
            f"kernel-level: marginal per-CTA rates from {_AIC}/h200_sxm/attention/vllm/0.24.0/"
            f"generation_attention_perf.parquet, kernel_source vllm_flash_attn_fa3 (bf16 KV, head_dim 128; "
            f"{_FA3_GRID}). Value: the marginals whose both ends are beyond L2 (KV 67 -> 134 MB, 64 CTAs, +1 MB "
            "per CTA): 54.0 (16/2, +19.4 us), 47.5 (8/2, +22.1 us), 64.7 (8/1 batch 2, +16.2 us) GB/s, median 54; "
            "32 CTAs (8/1 batch 1, 34 -> 67 MB): 51.3. Range: those (47.5-64.7), the low end taken from h100-sxm's "
            "(TensorRT-LLM XQA's 28 GB/s per CTA, same SM)")),
    },
}


def nvswitch_box(name, desc, system, nccl_ver, gemm_rel, vllm_rel, mem_gib, mem_src, tflops, tflops_src,
                 hbm, hbm_src, topo, extra_tables=(), eager_extra=None):
    kernel = "sglang_torch_linear" if system != "a100_sxm" else "sglang"
    gemm, memc, floor_us, floor_src = gemm_curves(system, gemm_rel, kernel, tflops, hbm, mem_gib)
    eager_us, eager_src = eager_launch(system, vllm_rel)
    tables = list(extra_tables) + nccl_tables(system, nccl_ver) + custom_tables(system, vllm_rel)
    prof = {
        "format": "tpsim-profile", "version": 1, "name": name, "description": desc, "device": "cuda",
        "gpus_per_node": sv(8, topo.pop("_gpus_src")),
        "memory_gib": sv(mem_gib, mem_src),
        "compute_capability": sv(*COMPUTE_CAPABILITY[system]),
        "compute": {
            "matmul_tflops": {"fp16": sv(tflops, tflops_src), "bf16": sv(tflops, tflops_src),
                              "fp32": sv(*FP32_TFLOPS[system]),
                              **({"fp8": sv(*FP8_TFLOPS[system])} if system in FP8_TFLOPS else {})},
            "memory_gbps": sv(hbm, hbm_src),
            "gemm_efficiency": gemm, "memory_efficiency": memc,
            "launch_us": {"eager": sv(eager_us, eager_src), "graph": sv(floor_us, floor_src)},
            # the GPU's L2 rate and sweep curve (l2.py), where gpu-benches measured that GPU
            **({"l2": l2_section(system)} if l2_section(system) else {}),
            **({"decode_attention": DECODE_ATTENTION[system]} if system in DECODE_ATTENTION else {}),
            "gemm_tables": [gemm_table(system, gemm_rel, kernel)]
                           + ([fp8_gemm_table(system)] if system in FP8_TFLOPS else []),
        },
        "collectives": {"eager_extra_us": eager_extra, "graph_extra_us": graph_extra(floor_us, system),
                        "graph_nccl_node_us": graph_nccl_node(system, floor_us),
                        "graph_net_host_us": GRAPH_NET_HOST, "tables": tables,
                        "custom_allreduce": custom_allreduce_section(system)},
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
        "ll_busbw_cap_multi_node_gbps": sv(39.0, "NCCL tuning.cc llMaxBws[index1][index2]: across nodes index1 is the "
                                                 "CPU vendor, not the GPU (Intel: row 0 'Volta-N1/Intel-N2/Intel-N4'); "
                                                 "DGX H100's Xeon 8480C at 2 nodes: 39.0 GB/s (20.4 beyond 2 nodes is "
                                                 "not modelled). The Hopper row (141/45/35) is read only in one node"),
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
        "ll_busbw_cap_multi_node_gbps": sv(22.5, "NCCL tuning.cc llMaxBws[index1][index2]: across nodes index1 is "
                                                 "the CPU vendor (AMD: row 1 'Ampere-N1/AMD-N2/AMD-N4'); DGX A100's "
                                                 "EPYC 7742 at 2 nodes: 22.5 GB/s ('avg of ring & tree'); 19.0 beyond "
                                                 "2 nodes is not modelled"),
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
        "ll_busbw_cap_multi_node_gbps": sv(39.0, "NCCL tuning.cc llMaxBws[index1][index2]: across nodes index1 is the "
                                                 "CPU vendor (Intel: row 0 'Volta-N1/Intel-N2/Intel-N4'); the assumed "
                                                 "Xeon host at 2 nodes: 39.0 GB/s"),
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
    gemm, memc, floor_us, floor_src = gemm_curves("l40s", "sglang/0.5.14", "sglang_torch_linear", 362.05, 864, 48)
    eager_us, eager_src = eager_launch("l40s", "0.22.0")
    tables = nccl_tables("l40s", "2.27.3") + custom_tables("l40s", "0.22.0")
    l40 = {
        "format": "tpsim-profile", "version": 1, "name": "l40s-pcie",
        "description": "8x L40S 48GB PCIe per node (no NVLink: NCCL over PCIe), 400 Gb/s NIC per GPU",
        "device": "cuda",
        "gpus_per_node": sv(8, l40_topo.pop("_gpus_src")),
        "memory_gib": sv(48, "NVIDIA L40S datasheet: 48 GB GDDR6"),
        "compute_capability": sv(*COMPUTE_CAPABILITY["l40s"]),
        "compute": {
            "matmul_tflops": {"fp16": sv(362.05, "NVIDIA L40S datasheet: FP16/BF16 Tensor 362.05 TFLOPS dense "
                                                 "(733 with sparsity)"),
                              "bf16": sv(362.05, "NVIDIA L40S datasheet: BF16 Tensor 362.05 TFLOPS dense"),
                              "fp32": sv(*FP32_TFLOPS["l40s"]), "fp8": sv(*FP8_TFLOPS["l40s"])},
            "memory_gbps": sv(864, "NVIDIA L40S datasheet: GDDR6 864 GB/s"),
            "gemm_efficiency": gemm, "memory_efficiency": memc,
            "launch_us": {"eager": sv(eager_us, eager_src), "graph": sv(floor_us, floor_src)},
            "l2": l2_section("l40s"),
            "gemm_tables": [gemm_table("l40s", "sglang/0.5.14", "sglang_torch_linear"), fp8_gemm_table("l40s")],
        },
        "collectives": {"eager_extra_us": sv(h100_extra["value"], "transferred from h100-sxm (host software "
                                                                   "overhead): " + h100_extra["source"]),
                        "graph_extra_us": graph_extra(floor_us, "l40s"),
                        "graph_nccl_node_us": graph_nccl_node("l40s", floor_us),
                        "graph_net_host_us": GRAPH_NET_HOST, "tables": tables,
                        "custom_allreduce": custom_allreduce_section("l40s")},
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
        topo["shm_gbps"] = shm_gbps["hopper" if base == "h100-sxm" else "ampere"]
        topo["nccl_cpu_link_gbps"] = nccl_cpu_link("intel-xeon-8480c" if base == "h100-sxm" else "amd-epyc-7742")
        if base == "a100-sxm":
            topo["nccl_cpu_nodes"] = NCCL_CPU_NODES_DGX_A100
        twin = {
            "format": "tpsim-profile", "version": 1, "extends": base, "name": f"{base}-p2p-off",
            "description": f"{base} with NCCL_P2P_DISABLE=1: ring/tree steps through host shared memory "
                           f"(PCIe {pcie} x16 to the CPU and back; no LL128); NVLS stays on (NCCL 2.21 "
                           f"ncclNvlsInit has no P2P condition) inside one NCCL node; pairs across "
                           f"{'sockets' if base == 'h100-sxm' else 'NUMA nodes (PCIe switches)'} go NET/IB "
                           f"(shmCanConnect -> ncclTopoCheckNet), so TP8 is "
                           f"{'2' if base == 'h100-sxm' else '4'} NCCL nodes, NVLS off; NCCL's tuner still "
                           f"prices an SHM step as a PCI hop when it picks the algorithm",
            "topology": topo,
            "collectives": {
                "replace": True,
                "eager_extra_us": sv(prof["collectives"]["eager_extra_us"]["value"],
                                     f"as {base} (host software overhead, independent of the transport)"),
                # a code proof stays one: "code:" leads the source (sim/silent_zeros.py)
                "graph_extra_us": sv(prof["collectives"]["graph_extra_us"]["value"],
                                     f"code: as {base} (the functional collective's copy, independent of the "
                                     f"transport): " + prof["collectives"]["graph_extra_us"]["source"].removeprefix(
                                         "code: ")),
                "graph_nccl_node_us": as_base(prof["collectives"]["graph_nccl_node_us"], base,
                                              "NCCL's graph-capture nodes, independent of the transport"),
                # NCCL_P2P_DISABLE=1 splits the box into several NCCL nodes: its collectives carry NET proxy
                # ops, so their host nodes are paid inside the box (CostModel.host_s)
                "graph_net_host_us": as_base(prof["collectives"]["graph_net_host_us"], base,
                                             "NCCL's host node per network collective, independent of the "
                                             "transport"),
                "tables": [],
            },
        }
        write(f"{base}-p2p-off", twin)

    # Per-kernel co-scheduling of a collective beside compute (sim/price/coschedule.py), opt in: the same boxes
    # with overlap.gpu in place of the flat factors. Not the default because the grid of a skinny decode
    # GEMM (cuBLAS split-K) is not sourced: the stated 128x128-tile rule leaves SMs free for NCCL's CTAs
    # and prices overlap as nearly free (docs/design.md, "Overlap the GPU allows").
    for base, system, channels in (("h100-sxm", "h100_sxm", None), ("h200-sxm", "h200_sxm", None),
                                   ("h100-sxm-p2p-off", "h100_sxm", P2P_OFF_CHANNELS)):
        write(f"{base}-coschedule", {
            "format": "tpsim-profile", "version": 1, "extends": base, "name": f"{base}-coschedule",
            "description": f"{base} with a collective co-scheduled beside compute per kernel (overlap.gpu: SMs, "
                           f"NCCL channels, HBM sharing) instead of the flat overlap factors",
            "overlap": overlap_gpu(system, channels)})


if __name__ == "__main__":
    main()
