"""Async TP's ring steps (the IR's `shift` op) -> seconds.

PyTorch's micro-pipelined TP (torch/distributed/_symmetric_memory/__init__.py@006b161f:
fused_all_gather_matmul -> _pipelined_multi_all_gather_and_consume, fused_matmul_reduce_scatter ->
_pipelined_produce_and_all2all; vLLM's AsyncTPPass, vllm/compilation/collective_fusion.py) moves each
rank's row block with a `copy_` from a peer's symmetric buffer: a copy-engine copy over NVLink, no SMs,
behind a signal-pad barrier (symm_mem.barrier) at the start (and the end) of each fused op.

One step: P2P_LAT_US + bytes / P2P_COPY_GBPS, plus the barriers the builder put on it (attr barrier), each
the vLLM custom all-reduce's fitted floor (the same signal-pad flag exchange in a graph-replayed kernel:
collectives.custom_allreduce.vllm.floor_us). Copy rate and latency of H100 SXM over NVSwitch:
  * P2P_COPY_GBPS 375: CUDA p2pBandwidthLatencyTest "Unidirectional P2P=Enabled Bandwidth (P2P Writes)"
    on 8x HGX H100 SXM, 371-377 GB/s off the diagonal (NVIDIA/nccl#1264); the test copies with the copy
    engines, as copy_ does;
  * P2P_LAT_US 2.8: the same test's "P2P=Enabled Latency (P2P Writes)", 2.26-3.35 us off the diagonal
    (sim/hardware/profiles/_data/p2pBandwidthLatencyTest-8xH100.txt).
H200 (the same NVLink4 switch) takes them as they are; another GPU the profile topology's nvlink_gbps as its
copy rate (said in a note). A CPU profile (gloo) prices a step as one of the group-1 steps of its
measured all-gather of the group's rows. Eager (no CUDA graph) adds the profile's eager_extra per step.
"""
from __future__ import annotations

from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.sim.stack.spec import DTYPE_BYTES

P2P_COPY_GBPS = 375.0
P2P_LAT_US = 2.8


def shift_s(cost, op, mode: str) -> float:
    """Seconds of one ring step of `op` (kind shift) on `cost`'s profile."""
    a, prof = dict(op.attrs), cost.profile
    n = a["group"]
    nbytes = float(DTYPE_BYTES[op.dtype] * a["rows"] * a["width"])
    if prof.device != "cuda":
        return cost.collective_s("all_gather", nbytes * n, n, mode) / max(n - 1, 1)
    topo = prof.topology
    if topo is None or topo.intra != "nvswitch" or not topo.p2p:
        raise ValueError(f"async TP copies row blocks between peers' symmetric memory over NVLink (PyTorch "
                         f"symm_mem); profile {prof.name} has no NVSwitch P2P")
    hopper = prof.compute_capability is None or int(prof.compute_capability) == 9
    rate = P2P_COPY_GBPS * 1e9 if hopper else topo.nvlink_gbps * 1e9
    if not hopper:
        cost.note(f"async TP: no copy-engine P2P measurement for {prof.name}; its ring steps copy at the "
                   f"topology's nvlink_gbps ({topo.nvlink_gbps:g} GB/s)")
    c = car.family_consts(prof, "vllm", n)
    barrier = c.floor_s if c is not None else P2P_LAT_US * 1e-6
    t = P2P_LAT_US * 1e-6 + nbytes / rate + a.get("barrier", 0) * barrier
    return t + (prof.eager_extra_s if mode == "eager" else 0.0)
