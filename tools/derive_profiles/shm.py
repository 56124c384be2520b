"""The per-GPU rate of NCCL's SHM transport (P2P off) from public nvbandwidth runs. Kept apart
from collectives.py (which needs pandas for the database) so the tests can check it with
the project's own dependencies."""
from __future__ import annotations

import statistics

from common import sv


def nvbandwidth_row(text: str, test: str) -> list[float]:
    """The per-GPU row of one nvbandwidth host test ('Running <test>.', a title line, a header
    line of GPU indices, then '0  v0 v1 ...')."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip() == f"Running {test}.")
    return [float(x) for x in lines[i + 3].split()[1:]]


def shm_flow_gbps(h800_text: str, a100_text: str) -> dict:
    """Per-GPU rate of an NCCL SHM ring flow, per GPU generation (GB/s), from public nvbandwidth runs.

    Mechanism (NCCL 2.21 src/transport/shm.cc): NCCL_SHM_USE_CUDA_MEMCPY defaults to 0, so the SMs of
    the NCCL kernel move the data; NCCL_SHM_LOCALITY defaults to the receiver side, so the buffer lives
    in host memory the sender's threads store into (GPU->host) and the receiver's threads load from
    (host->GPU). In a ring every GPU does both at once, all GPUs together: nvbandwidth's
    *_all_bidirectional_* pattern. The flow runs at the slower direction, host->GPU.
    - Hopper (PCIe Gen5): 8x H800 (HGX H100 host side), mean host_to_all_bidirectional_memcpy_sm.
    - Ampere (PCIe Gen4): no posted *_all_bidirectional_memcpy_sm of an 8x A100 SXM box was found.
      nvbandwidth#53 (8x A100-SXM4-80GB, GPUs in PXB pairs as in DGX A100): one GPU's host->GPU copy
      with a GPU->host copy running drops to ~11 GB/s; both GPUs of a PCIe switch share its uplink to
      the CPU, so ~11 / 2 per GPU when every GPU is busy. nvbandwidth#11 measured that directly with
      copy engines on A100 (host_to_all_bidirectional_memcpy_ce 'about 5-6GB/s')."""
    h2d = nvbandwidth_row(h800_text, "host_to_all_bidirectional_memcpy_sm")
    d2h = nvbandwidth_row(h800_text, "all_to_host_bidirectional_memcpy_sm")
    hop = round(statistics.mean(h2d), 1)
    ce_ratio = statistics.mean(h2d) / statistics.mean(nvbandwidth_row(h800_text, "host_to_all_bidirectional_memcpy_ce"))
    assert "H2D drops to ~11 GB/s" in a100_text and "about 5-6GB/s" in a100_text, "A100 source text changed"
    single_bidir_h2d, gpus_per_uplink = 11.0, 2
    amp = round(single_bidir_h2d / gpus_per_uplink, 2)
    src_h = (f"derived: mean per-GPU host_to_all_bidirectional_memcpy_sm of a public 8x H800 nvbandwidth run "
             f"(HGX H100 host side, PCIe Gen5; sim/hardware/profiles/_data/nvbandwidth-8xH800-host.txt, URL inside): "
             f"{[round(x, 2) for x in h2d]} -> {hop} GB/s (GPU->host direction of the same test: mean "
             f"{statistics.mean(d2h):.1f}). An NCCL SHM step is SM-driven (shm.cc NCCL_SHM_USE_CUDA_MEMCPY=0): "
             f"the sender's threads store into host memory while the receiver's threads load from it, every GPU "
             f"of the ring at once -- this test's pattern; the host->GPU direction is the slower. Per-flow cap")
    src_a = (f"derived: {single_bidir_h2d:g} GB/s host->GPU with a GPU->host copy running on one 8x A100-SXM4-80GB "
             f"GPU (NVIDIA/nvbandwidth#53: 'H2D drops to ~11 GB/s while D2H maintains ~25 GB/s'; GPUs in PXB "
             f"pairs) / {gpus_per_uplink} GPUs sharing each PCIe switch uplink = {amp} GB/s per GPU when all are "
             f"busy, as in an SHM ring; agrees with NVIDIA/nvbandwidth#11's A100 host_to_all_bidirectional_memcpy_ce "
             f"'about 5-6GB/s' (copy engines; on the H800 run SM copies reach {ce_ratio:.2f}x of CE in that test, so the "
             f"SM rate may be lower still). sim/hardware/profiles/_data/nvbandwidth-A100-host-bidirectional.txt. Per-flow cap")
    return {"hopper": sv(hop, src_h), "ampere": sv(amp, src_a)}


# NCCL 2.21 src/graph/topo.h l. 19-27 and topo.cc ncclTopoGetInterCpuBw (l. 63-83), ncclTopoAddCpu (l. 492-503):
# the bandwidth NCCL gives the CPU <-> CPU (SYS) link by the CPU it detects. Intel x86 with family 6 and
# model >= 0x55 (Skylake-SP and later) is NCCL_TOPO_CPU_TYPE_SKL -> SKL_QPI_BW; AMD x86 -> AMD_BW.
NCCL_INTER_CPU = {
    "intel-xeon-8480c": (10.0, "SKL_QPI_BW = 10.0 GB/s: Xeon Platinum 8480C is Sapphire Rapids, CPUID family 6 "
                               "model 0x8F (Linux arch/x86/include/asm/intel-family.h INTEL_FAM6_SAPPHIRERAPIDS_X), "
                               ">= 0x55, so topo.cc ncclTopoAddCpu types it NCCL_TOPO_CPU_TYPE_SKL"),
    "amd-epyc-7742": (16.0, "AMD_BW = 16.0 GB/s: EPYC 7742 reports vendor AuthenticAMD (topo.cc kvDictCpuVendor), "
                            "so ncclTopoGetInterCpuBw returns AMD_BW"),
}


def nccl_cpu_link(cpu: str) -> dict:
    """NCCL's own rating of the inter-CPU link for this host CPU ({value, source}). Not a hardware
    bandwidth (the profile's cpu_link_gbps is that): the number NCCL compares against the NIC path
    to decide SHM or NET for a P2P-off pair (sim/hardware/topology.py nccl_net_pair)."""
    gbps, why = NCCL_INTER_CPU[cpu]
    return sv(gbps, f"NCCL 2.21 src/graph/topo.h/topo.cc ncclTopoGetInterCpuBw: {why}. Used only with P2P "
                    f"off: paths.cc ncclTopoComputePaths routes every GPU pair through the CPU, and shm.cc "
                    f"shmCanConnect -> ncclTopoCheckNet sends a pair over NET when both GPUs reach a NIC "
                    f"faster than each other")


# NCCL's CPU nodes are NUMA domains (topo.h: `#define CPU 3 // Actually NUMA domains`; topo.cc ncclTopoAddCpu keys
# each on its numaid). A DGX A100's EPYC 7742s run 4 NUMA nodes per socket: NCCL's own topology dump of one
# (NVIDIA/nccl#1505) lists <cpu numaid="0"> ... <cpu numaid="7">, and its 4 GPU PCIe switches (2 GPUs each) hang
# off 4 of them (GPU NUMA affinity 3, 1, 7, 5 on the same board layout: upb-pc2 "NVIDIA A100 40GB with NVLINK"
# page, one GPU per switch shown). So P2P off, GPUs behind different switches cross a SYS link (AMD_BW 16 GB/s)
# that NCCL rates below the GPU -> NIC path (min(PCIe Gen4 24, 200 Gb/s = 25) = 24).
NCCL_CPU_NODES_DGX_A100 = sv(4, "derived: NCCL's CPU nodes are NUMA domains (topo.h `#define CPU 3 // Actually "
                                "NUMA domains`); a DGX A100 topology dump by NCCL (NVIDIA/nccl#1505) shows numaid 0-7 "
                                "(EPYC 7742 at 4 NUMA nodes per socket) with the 4 GPU PCIe switches (2 GPUs + 2 NICs "
                                "each) on 4 of them (GPU NUMA affinity 3/1/7/5, upb-pc2 A100 NVLink node page): one "
                                "CPU node per PCIe switch for the P2P-off SHM/NET decision")
