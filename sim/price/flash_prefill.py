"""Flash prefill attention under a causal mask: the tiles the kernel computes, at its causal rate.

A flash kernel walks q in row blocks of Bm positions and, per row block, the keys in tiles of Bn.
Under a causal mask it stops each row block at its diagonal: row block m (positions m*Bm ..) runs
    min(ceil(kv / Bn), ceil(((m + 1) * Bm + kv - q) / Bn))
key tiles, not all ceil(kv / Bn) (the mask is bottom-right aligned: q's last position sees every key).
  FA2  csrc/flash_attn/src/flash_fwd_kernel.h compute_attn_1rowblock (v2.8.3): n_block_max =
       min(n_block_max, ceil_div((m_block + 1) * kBlockM + seqlen_k - seqlen_q, kBlockN)) if Is_causal;
  FA3  hopper/block.h BlockMN::get_n_block_min_max: the same bound (n_idx = (m_block+1)*kBlockM +
       seqlen_k - seqlen_q);
  FlashInfer include/flashinfer/attention/prefill.cuh: num_iterations = ceil_div(min(chunk_size,
       kv_len - qo_len + (bx + 1) * CTA_TILE_Q / group_size - chunk_start), CTA_TILE_KV) for
       MaskMode::kCausal (its rows pack the query heads of one KV head: a row tile holds
       CTA_TILE_Q / group_size positions).
The tiles on the diagonal are computed whole and masked. So with M row blocks over q = kv = S the
kernel computes (M + 1) / (2M) of the non-causal kernel's tiles (0.5625 at S = 1024, Bm = 128), not
the useful S(S+1)/2 / S^2. Math SDPA is not such a kernel: it computes every score and masks them
(aten _scaled_dot_product_attention_math), so it keeps the full square (sim/price/work.py).

The executed tiles run slower than the non-causal kernel's: diagonal tiles pay the mask, and row
blocks of unequal length leave SMs idle at the end. The FA3 paper (Shah et al. 2024, arXiv 2407.08608,
Fig. 5, H100 80GB SXM5, head dim 128, batch x seqlen = 16k tokens, hidden 2048) gives both kernels'
throughput without and with the causal mask, counted in useful FLOPs (causal credited half: the FA
benchmark's `flops // (2 if causal else 1)`). The rate of the executed tiles relative to the
non-causal kernel at the same length is then 2 f(S) * causal(S) / non_causal(S) (0.84 at 1k, 0.96 at
16k for FA3); `causal_rate` interpolates it in log(kv), held beyond the measured lengths. The
profile's matmul efficiency curve prices the non-causal rate (as before); this ratio scales it.
FlashInfer's prefill has no published causal/non-causal pair found: it takes FA2's ratio (the same
FA2-style kernel design), an assumption.
"""
from __future__ import annotations

import bisect
import math

# Stack.attention -> the kernel whose tiles and causal ratio price its prefill ("flash": PyTorch SDPA's
# flash backend is FA2, aten/src/ATen/native/transformers/cuda/flash_attn)
KERNEL_OF = {"flash": "fa2", "fa2": "fa2", "fa3": "fa3", "flashinfer": "flashinfer"}


def skips_masked_tiles(impl: str) -> bool:
    """Whether the attention `impl` (Stack.attention) runs a causal prefill as the tiles up to the
    diagonal (a flash kernel) rather than every score (math SDPA, or a kernel this module does not know)."""
    return impl in KERNEL_OF


def tiles(kernel: str, head_dim: int, group: int = 1) -> tuple[int, int]:
    """(Bm positions, Bn keys) of the kernel's causal forward in 16-bit at this head dim.
    FA2: csrc/flash_attn/src/flash_fwd_launch_template.h run_mha_fwd_hdim* (sm80/sm90): 128 x 128 at
    hdim <= 64, 128 x 64 at 96-192, 64 x 64 at 256 on H100 (its smem rule). FA3: hopper/tile_size.h
    tile_size_fwd_sm90 with is_causal: 192 x 128 at hdim <= 64, 192 x 144 at <= 96, 128 x 128 at <= 192,
    128 x 80 above. FlashInfer: CTA_TILE_Q 128 packed rows (its planner's tile for long prompts,
    flashinfer utils FinalizeCTATileQ) over `group` query heads per KV head, 64 keys per tile."""
    if kernel == "fa3":
        if head_dim <= 64:
            return 192, 128
        if head_dim <= 96:
            return 192, 144
        return (128, 128) if head_dim <= 192 else (128, 80)
    if kernel == "flashinfer":
        return max(1, 128 // max(1, group)), 64
    if head_dim <= 64:
        return 128, 128
    return (128, 64) if head_dim <= 192 else (64, 64)


def executed_fraction(q: int, kv: int, bm: int, bn: int) -> float:
    """The causal kernel's key tiles over the non-causal kernel's, for q queries (the last q of the kv
    keys) in row blocks of bm over key tiles of bn (module docstring). 1 at q = 1 (decode)."""
    n = -(-kv // bn)
    rows = -(-q // bm)
    run = sum(min(n, -(-((m + 1) * bm + kv - q) // bn)) for m in range(rows))
    return run / (rows * n)


# FA3 paper Fig. 5, head dim 128, H100 80GB SXM5 (module docstring): TFLOP/s in useful FLOPs at
# seqlen 512, 1k, 2k, 4k, 8k, 16k, (non-causal, causal) per kernel
_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PUBLISHED_TFLOPS = {
    "fa3": ((467, 565, 625, 638, 646, 648), (292, 423, 521, 579, 602, 616)),
    "fa2": ((309, 350, 362, 368, 370, 370), (191, 260, 298, 319, 333, 335)),
}
SOURCE = ("FA3 paper (Shah et al. 2024, arXiv 2407.08608) Fig. 5: attention forward speed, head dim 128, "
          "H100 80GB SXM5, without and with causal mask")


def causal_curve(kernel: str) -> list[tuple[int, float]]:
    """[(seqlen, rate of the executed tiles / the non-causal kernel's rate)] from PUBLISHED_TFLOPS,
    with the executed fraction at hdim 128's tiles."""
    non, causal = PUBLISHED_TFLOPS[kernel]
    bm, bn = tiles(kernel, 128)
    return [(s, 2.0 * executed_fraction(s, s, bm, bn) * c / nc) for s, nc, c in zip(_SEQLENS, non, causal)]


def causal_rate(kernel: str, kv: int) -> float:
    """The executed tiles' rate over the non-causal rate at `kv` keys (log-linear between the published
    lengths, held beyond them); FlashInfer takes FA2's curve."""
    pts = causal_curve("fa2" if kernel == "flashinfer" else kernel)
    xs = [s for s, _ in pts]
    if kv <= xs[0]:
        return pts[0][1]
    if kv >= xs[-1]:
        return pts[-1][1]
    i = bisect.bisect_left(xs, kv)
    (x0, r0), (x1, r1) = pts[i - 1], pts[i]
    w = (math.log(kv) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return r0 + w * (r1 - r0)


def causal(impl: str, q: int, start: int, kv: int, head_dim: int, group: int = 1) -> tuple[float, float] | None:
    """(executed tile fraction, rate) of a flash kernel's causal prefill/chunk of q queries at positions
    start.. over the kv keys it is handed, or None where the kernel runs as non-causal: a decode step
    (q = 1: every key tile runs), math SDPA, or keys beyond the filled ones (a static cache masked
    explicitly: the kernel is not told where the diagonal is)."""
    kernel = KERNEL_OF.get(impl)
    if kernel is None or q <= 1 or kv != start + q:
        return None
    bm, bn = tiles(kernel, head_dim, group)
    return executed_fraction(q, kv, bm, bn), causal_rate(kernel, kv)
