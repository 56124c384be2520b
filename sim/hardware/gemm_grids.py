"""The grids of F.linear's extern GEMM (cuBLAS) by shape class: what sim/price/occupancy.py gives the
co-scheduling (sim/price/coschedule.py) for a GEMM op. A table is named by a GPU profile's
`overlap.gpu.gemm_grids`; "rule" (the fallback, and every class a table leaves open) is a rule, not
a measurement.

Reading a cuBLAS kernel name as a grid. PyTorch's F.linear (at::addmm / at::mm, aten/src/ATen/native/
cuda/Blas.cpp) computes the row-major [m, n] output as its column-major transpose: cublasGemmEx with
op(A) = the weight transposed ("t"), op(B) = the activations ("n") -- the "tn" of the names -- so
cuBLAS's M is F.linear's out-features n and its N the tokens m. A kernel
`sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize{TM}x{TN}x{TK}_warpgroupsize1x1x1_execute_segment_k_off`
tiles the output TM features x TN tokens per CTA with no split of K ("segment_k_off"; "_on" splits
it), so it launches ceil(n / TM) x ceil(m / TN) CTAs; one CTA per SM (a rule: a TMA multi-stage
Hopper GEMM's shared memory leaves room for one).

"cublas-sm90" (H100 / H200, fp16, CUDA 12.x cuBLAS as PyTorch 2.5 ships it):
- m <= 64 (decode): 64-feature tiles, no split-K. Public traces of fp16/bf16 decode on Hopper show
  cuBLAS's skinny-M GEMMs as `..._tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_..`
  and `..._tilesize64x64x64_..._segment_k_off_..` (found by exact-string search of public code; the
  search index names no repository for them, so they are cited by content and by the index's file
  ids, reopenable with its read_file: 65906974386, 71221855876, 69131327655):
  * a Llama-style FFN reproduction script (hidden 4096, intermediate 14336, fp16 F.linear, 1 token:
    gate/up n 14336 k 4096, down n 4096 k 14336) naming exactly these two kernels as the cuBLAS
    kernels its real layer trace showed;
  * a torch 2.5.1+cu124 profile of Llama-3.1-8B plain decode (batch 1) on H200 NVL: the same two
    kernel families are its top aten::mm kernels (with gemvx and an sm80 32x32x64 for small shapes);
  * nsys summaries of vLLM bf16 serving on H100 listing both among the top GEMM kernels.
  Either kernel puts m <= 64 tokens in one CTA row: ceil(n / 64) CTAs. So 70B TP8 decode: qkv
  (n 1280) 20 CTAs, o (n 8192) 128, fused gate/up (n 7168) 112, down (n 8192) 128; 8B TP8: qkv
  (768) 12, o (4096) 64, gate/up (3584) 56, down (4096) 64. What no public source settles: which of
  the two kernels (the grid is the same at m <= 64), and whether cuBLAS's heuristic splits K for the
  narrowest shapes (70B TP8 qkv, n 1280 k 8192: 20 CTAs; a split there would hold more SMs) -- the
  GPU check of issue 25 item 6 (`F.linear` at m 1/4/16/64 under the profiler, its grid) settles both.
- m > 64: the rule (prefill is compute-bound; its grids matter for wave quantization, not sourced here).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class GemmTile:
    """One shape class of a grid table: output features and tokens per CTA, K splits, CTAs per SM."""

    n_tile: int        # out-features per CTA (cuBLAS's M)
    m_tile: int        # tokens per CTA (cuBLAS's N)
    split_k: int = 1   # CTAs sharing one output tile along K
    per_sm: int = 1    # CTAs resident per SM
    source: str = ""

    def ctas(self, m: float, n: float, batch: float = 1.0) -> int:
        return max(1, int(batch * math.ceil(m / self.m_tile) * math.ceil(n / self.n_tile) * self.split_k))


RULE = GemmTile(128, 128, 1, 1, "a rule: cuBLAS-style 128 x 128 output tiles, one CTA per SM, no split-K")
_SM90_SKINNY = GemmTile(64, 64, 1, 1, "public Hopper fp16/bf16 decode traces: cuBLAS sm90_xmma tilesize64x128x64 / "
                                      "64x64x64 segment_k_off (module docstring)")

# name -> ((largest m of the class, tile), ...) in increasing m; the last class is open-ended
GEMM_GRIDS: dict[str, tuple[tuple[float, GemmTile], ...]] = {
    "rule": ((math.inf, RULE),),
    "cublas-sm90": ((64, _SM90_SKINNY), (math.inf, RULE)),
}


def gemm_tile(table: str, m: float) -> GemmTile:
    """The tile of F.linear's GEMM at `m` tokens under grid table `table` (a name of GEMM_GRIDS)."""
    for upto, tile in GEMM_GRIDS[table]:
        if m <= upto:
            return tile
    return RULE
