"""Whether a collective's kernel, launched in thread-block clusters, finds room beside a compute
kernel: the idle SMs it needs counted per GPC (sim/price/coschedule.py's start rule, docs/design.md
"Overlap the GPU allows").

Facts, each with its source:
- NCCL 2.21 launches its kernel in clusters on sm90: src/enqueue.cc ncclLaunchKernel (v2.21.5-1
  lines 1365-1386) takes `clusterSize = (compCap == 90) ? comm->config.cgaClusterSize : 0`, falls
  back to 1 when the grid (= the plan's channel count, line 1355) does not divide by it (line 1382,
  "if (grid.x % clusterSize) clusterSize = 1"), and launches with cudaLaunchAttributeClusterDimension
  {clusterSize, 1, 1} and cudaClusterSchedulingPolicySpread; src/init.cc sets the default
  (line 1737, NCCL_CONFIG_DEFAULT(..., cgaClusterSize, NCCL_CONFIG_UNDEF_INT, 4, ...)) and lets
  NCCL_CGA_CLUSTER_SIZE override it up to NCCL_MAX_CGA_CLUSTER_SIZE = 8 (lines 1429-1433, 1610-1616).
  So a 24-channel all-reduce on H100 is 6 clusters of 4 CTAs, a 2-channel one 2 clusters of 1.
- A cluster's CTAs run at once on SMs of one GPC: NCCL's own comment there ("A cluster of blocks
  are guaranteed to be concurrently scheduled onto a group of SMs"); cuda-python's LaunchConfig docs
  ("Group of blocks (Thread Block Cluster) that will execute on the same GPU Processing Cluster
  (GPC)"), the CUDA programming guide's "Thread Block Clusters" section they follow; measured by
  accel-sim/gpu-app-collection#87 ("CHECK every cluster -> single GPC" on an H100, from %smid and
  the driver's SM -> GPC table NV2080_CTRL_CMD_GR_GET_SM_TO_GPC_TPC_MAPPINGS). NCCL holds one CTA per SM (NVIDIA/nccl#689), so a cluster
  of k needs k idle SMs of one GPC, and the kernel starts when all its clusters are placed (the
  start rule of sim/price/coschedule.py: a collective needs all its CTAs' SMs).
- H100 SXM5: 8 GPCs, 66 TPCs, 132 SMs (NVIDIA's "Hopper Architecture In-Depth" blog / whitepaper,
  quoted in NVIDIA/cutlass#1921: "8 GPCs, 66 TPCs (uneven TPC for GPCs?), 132 SMs"); the full GH100
  has 9 TPCs = 18 SMs per GPC, so no GPC has more (CUTLASS tile_scheduler_params.h:
  "max_sm_per_gpc = 18"). Which TPCs are fused off differs by die and is not published; one H100's
  driver table shows a 16-SM GPC (#87). The profile's `gpc_sms` (6 x 16 + 2 x 18 on the built-ins)
  is the most even split of 132 SMs into 8 GPCs of whole TPCs, at most 18: an assumption within the
  sourced totals, settled per box by cudaOccupancyMaxActiveClusters at cluster sizes 1..16 or by #87's tool.

Not sourced -- where a normal kernel's CTAs leave its idle SMs. CUDA documents no CTA -> SM order
(NVIDIA forums, "What is the sequence of SM launching?": "It's not documented"). Indirect
evidence only: on Fermi the thread block scheduler picked SMs "mostly round-robin" (S. Pai, "How
the Fermi Thread Block Scheduler Works", %smid timelines), and on H100 consecutive %smid values
lie in different GPCs (#87: GPC 0 holds smids 0, 16, 32, 48, ...), so a round-robin over SM ids
would spread a kernel over the GPCs. The profile names one of two placements (`idle_sm_placement`):
- "packed" (best case; the rule before GPCs were modelled, so its timelines are unchanged): the
  idle SMs counted per GPU, floor(idle / k) clusters;
- "spread": the busy SMs dealt one at a time round-robin over the GPCs in the profile's order
  (a full GPC skipped), so each GPC keeps size - its share idle and hosts floor(that / k) clusters.
  A 112-CTA GEMM on 6 x 16 + 2 x 18 SMs: 14 busy in each GPC, 2 or 4 idle: 2 clusters of 4, where
  "packed" counts 20 idle SMs as 5.
"""
from __future__ import annotations

from functools import lru_cache

PLACEMENTS = ("packed", "spread")


def cluster_size(ctas: int, size: int) -> int:
    """CTAs per cluster of an NCCL kernel of `ctas` CTAs under cgaClusterSize `size`: 1 unless the
    grid divides by it (enqueue.cc line 1382)."""
    return size if size > 1 and ctas % size == 0 else 1


@lru_cache(maxsize=4096)
def spread_idle(busy: int, gpc_sms: tuple[int, ...]) -> tuple[int, ...]:
    """Idle SMs per GPC when `busy` SMs are dealt round-robin over the GPCs (module docstring)."""
    used = [0] * len(gpc_sms)
    left = min(busy, sum(gpc_sms))
    while left > 0:
        for i, size in enumerate(gpc_sms):
            if left and used[i] < size:
                used[i] += 1
                left -= 1
    return tuple(size - u for size, u in zip(gpc_sms, used))


def clusters_free(busy: int, k: int, sms: int, gpc_sms: tuple[int, ...], placement: str) -> int:
    """Clusters of `k` CTAs (one per SM) that fit on the SMs a kernel holding `busy` SMs leaves."""
    if k <= 1 or not gpc_sms or placement == "packed":
        return max(sms - busy, 0) // max(k, 1)
    return sum(idle // k for idle in spread_idle(busy, gpc_sms))


def fits(ctas: int, busy: int, sms: int, gpc_sms: tuple[int, ...] = (), cga: int = 1,
         placement: str = "packed") -> bool:
    """Whether an NCCL kernel of `ctas` CTAs (clusters of cluster_size(ctas, cga)) starts beside a
    kernel holding `busy` of `sms` SMs. With clusters of 1 or "packed": sms - busy >= ctas."""
    k = cluster_size(ctas, cga)
    return clusters_free(busy, k, sms, gpc_sms, placement) >= ctas // k
