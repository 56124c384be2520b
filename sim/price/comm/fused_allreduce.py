"""Fused all-reduce + residual add + RMSNorm kernels -> seconds: the engines' one-shot / two-shot kernel
(Stack.ar_norm_fusion, sim/stack/ar_fusion.py) and TokenWeave's multimem kernel on a few CTAs
(the tokenweave schedule). The builder marks such an all-reduce ("fuse", "add_norm") and the add and norm
after it ("fused", 1): those cost nothing of their own (sim/price/cost.py), this prices the one kernel.

FlashInfer / TensorRT-LLM kernel (kernel "oneshot" | "twoshot"): the all-reduce part is the TensorRT-LLM
custom all-reduce's mechanism (one-shot: (n-1) S remote bytes; two-shot: 2 (n-1) S / n), priced with the
profile's `trtllm` constants (collectives.custom_allreduce.trtllm, fitted on aiconfigurator's TRT-LLM
AllReduce rows: sim/price/comm/custom_allreduce.py); FlashInfer's trtllm_allreduce_fusion.cuh is that
kernel family with the epilogue added. The epilogue reads the residual and writes the residual and the
normalized rows: 3 x (the rows it normalizes) bytes at the HBM roofline, one-shot every rank all T rows
(S), two-shot its T/n (S/n). How much of that hides under the kernel's own loads is not measured:
Stack.ar_norm_epilogue_share 1 (none hidden), range [0, 1] (sim.stack.spec.DEFAULT_RANGES); TokenWeave's fused-minus-plain multimem kernel, +0.5 to
+2.2 us from 64 to 16384 tokens at 8x H100 (artifact/csvs/figure_4.csv), sits inside that range.
Public microbenchmarks disagree on whether it beats all-reduce + norm at all (vllm-project/vllm#22086: not
faster on H100 TP2; #44079: 1.9-4.3 us/op slower than multimem + norm at 256-512 KB on H200 TP8):
validation only (bench/validate_papers.py), never a constant here.

TokenWeave's kernel (kernel "multimem", attr ctas c; microsoft/tokenweave@f483d1c csrc/
tokenweave_fused_kernels.cu fused_rs_ln_ag_cta): multimem.ld_reduce of the rank's T/n rows (the NVSwitch
reduces), add + RMSNorm of them, multimem.st to every GPU, on c CTAs. time = floor + S x 2(n-1)/n /
busbw(c), both fitted on the fused kernel's own times (its epilogue inside them), from its CTA sweep (artifact/csvs/figure_10.csv,
8x H100 SXM, hidden 8192, bf16, eager, L2 flushed, clocks locked at TDP, median of 100): the bus rate at
32768 tokens per CTA count, scaled by the profile's NVLS bus rate over the 476 GB/s it reached, and the
floor as the 64-token time less its bytes at that rate (11.1-14.0 us over the CTA counts, median 13.25:
Stack.tokenweave_floor_s, with that range).
No graph-mode measurement of the kernel exists: decode (TokenWeave's fuse-only path, under CUDA graphs in
vLLM) pays the eager floor, an upper bound.
"""
from __future__ import annotations

import bisect

from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.sim.stack.spec import DTYPE_BYTES

_TW = "microsoft/tokenweave@f483d1c artifact/csvs/figure_10.csv (8x H100 SXM, hidden 8192, bf16)"
# CTAs -> bus GB/s of the fused kernel at 32768 tokens (939,524,096 bus bytes): 6240.8, 3558.4, 2184.0,
# 1972.1, 1965.6 us at 2, 4, 8, 16, 32 CTAs
MULTIMEM_BUSBW_GBPS = {2: 150.5, 4: 264.0, 8: 430.2, 16: 476.4, 32: 478.0}
MULTIMEM_REF_NVLS_GBPS = 476.4


def message_bytes(op) -> float:
    a = dict(op.attrs)
    return float(DTYPE_BYTES[op.dtype] * a["rows"] * a["width"])


def epilogue_s(profile, normed_bytes: float, share: float) -> float:
    """Residual read, residual and norm written for `normed_bytes` of rows, at the HBM roofline, the
    `share` of it not hidden under the kernel's loads (Stack.ar_norm_epilogue_share)."""
    moved = 3.0 * normed_bytes
    return share * moved / (profile.mem_bytes_per_s * profile.memory_efficiency(max(moved, 1.0)))


def _hopper(profile, what: str) -> None:
    """ValueError unless `profile` is a Hopper-class GPU whose peers are reached over NVLink P2P (the
    kernels load peers' buffers through CUDA IPC / multicast mappings: a box without GPU P2P, or one
    that runs with it off, has none -- as vLLM's and TensorRT-LLM's custom all-reduces refuse there)."""
    cc = profile.compute_capability
    if profile.device != "cuda" or (cc is not None and int(cc) < 9):
        raise ValueError(f"{what} needs a Hopper-class GPU (compute capability 9.0+: the engines enable it on "
                         f"SM90/SM100 only); profile {profile.name} is "
                         f"{'a CPU' if profile.device != 'cuda' else f'compute capability {cc:.1f}'}")
    topo = profile.topology
    if topo is None or topo.intra != "nvswitch" or not topo.p2p:
        raise ValueError(f"{what} loads peers' buffers over NVLink P2P; profile {profile.name} has no NVSwitch "
                         f"P2P (P2P off, or PCIe)")


def fused_s(cost, op, mode: str) -> float:
    """Seconds of one fused all-reduce + add + RMSNorm op (attr kernel) on `cost`'s profile."""
    a, prof = dict(op.attrs), cost.profile
    n, nbytes, kernel = a["group"], message_bytes(op), a["kernel"]
    if kernel == "multimem":
        return multimem_s(prof, nbytes, n, a["ctas"], cost.stack.tokenweave_floor_s)
    _hopper(prof, "the fused all-reduce + RMSNorm (FlashInfer trtllm_allreduce_fusion)")
    g = car.kernel_s(prof, "trtllm", kernel, nbytes, n)
    if g is None:
        raise ValueError(f"profile {prof.name} holds no measured TensorRT-LLM all-reduce constants for {n} ranks "
                         f"(collectives.custom_allreduce.trtllm) to price the fused all-reduce + RMSNorm kernel")
    if mode == "eager":
        g, _ = car.eager_s(prof, "trtllm", kernel, g, nbytes, n)
    return g + epilogue_s(prof, nbytes if kernel == "oneshot" else nbytes / n, cost.stack.ar_norm_epilogue_share)


def multimem_busbw(profile, ctas: int) -> float:
    """Bytes/s of bus traffic TokenWeave's kernel moves on `ctas` CTAs on this profile's NVSwitch."""
    cs = sorted(MULTIMEM_BUSBW_GBPS)
    c = min(max(ctas, cs[0]), cs[-1])
    i = bisect.bisect_left(cs, c)
    if cs[i] == c:
        g = MULTIMEM_BUSBW_GBPS[c]
    else:
        lo, hi = cs[i - 1], cs[i]
        g = MULTIMEM_BUSBW_GBPS[lo] + (c - lo) / (hi - lo) * (MULTIMEM_BUSBW_GBPS[hi] - MULTIMEM_BUSBW_GBPS[lo])
    return g * 1e9 * profile.topology.nvls_busbw_gbps / MULTIMEM_REF_NVLS_GBPS


def multimem_s(profile, nbytes: float, n: int, ctas: int, floor_s: float) -> float:
    """TokenWeave's fused multimem all-reduce + add + RMSNorm of `nbytes` over `n` ranks on `ctas` CTAs, its
    floor `floor_s` (Stack.tokenweave_floor_s)."""
    _hopper(profile, "TokenWeave's multimem all-reduce + RMSNorm")
    topo = profile.topology
    if topo is None or topo.intra != "nvswitch" or topo.nvls_busbw_gbps <= 0:
        raise ValueError(f"TokenWeave's multimem kernel needs NVLS multicast (NVSwitch, an nvls_busbw_gbps in the "
                         f"profile's topology); profile {profile.name} has none")
    bus = nbytes * 2.0 * (n - 1) / n
    return floor_s + bus / multimem_busbw(profile, ctas)     # the epilogue is inside these times
