"""Flash / paged decode attention -> seconds, from the bandwidth such kernels achieve over the filled KV.

A decode step's attention (q_len 1) reads the filled KV cache once: 2 (K, V) x batch x kv_len x
kv_heads x head_dim x dtype bytes per rank. FlashAttention-2/3 and FlashInfer run it as a split-KV
(flash-decoding) kernel plus its combine; what they achieve is a fraction of HBM peak that grows with
the bytes read (few bytes: the launch, the split/combine and too few CTAs dominate). The public kernel
microbenchmarks below give (bytes read, time); fraction = bytes / time / that GPU's HBM peak. A kernel's
time on a profile: bytes / (fraction(bytes) x the profile's HBM rate), fraction interpolated linearly in
log(bytes) between measured points, held beyond the largest; below the smallest, the smallest point's
time on this profile (a latency floor). The split-KV combine is inside every measured time.

Assumption stated: the fraction of peak transfers across GPUs of the same memory class (points from
H100, H20 and RTX 3090 price every profile), and it depends on the bytes read, not on how batch, context
and heads make them up: the public points agree at equal bytes within ~10% across batch 1 GQA and
batch 16 MHA (FlashInfer: 33.5 MB at 40% on H100, 45% on H20).

Kernels: "fa2" FlashAttention-2 (PyTorch SDPA's flash backend is FA2: aten/src/ATen/native/transformers/
cuda/flash_attn, so plain "flash" prices with it), "fa3" FlashAttention-3 (Hopper; vLLM's FLASH_ATTN
backend on SM90), "flashinfer" FlashInfer's batch decode. bench/validate_flash_decode.py holds the
points marked held_apart against the curve built from the others.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from tpsim.sim.stack.impls import FLASH_DECODE_KERNELS
from tpsim.sim.stack.spec import DTYPE_BYTES


@dataclass(frozen=True)
class Point:
    """One public decode-kernel timing: shape, time, the GPU's HBM peak, where it came from."""

    batch: int
    kv_len: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    time_us: float
    hbm_gbps: float
    source: str
    held_apart: bool = False

    @property
    def kv_bytes(self) -> float:
        return 2.0 * self.batch * self.kv_len * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def fraction(self) -> float:
        return self.kv_bytes / (self.time_us * 1e-6) / (self.hbm_gbps * 1e9)


_H100 = 3350.0      # NVIDIA H100 SXM datasheet: HBM3 3.35 TB/s
_H20 = 4000.0       # NVIDIA H20 datasheet: HBM3 4.0 TB/s
_RTX3090 = 936.0    # NVIDIA RTX 3090 datasheet: GDDR6X 936 GB/s

_VFA63 = ("vllm-project/flash-attention#63 PR description, 'Batch Size == 1 Decode Perf', Main (before the PR), "
          "qwen32b-tp2 (Qwen2.5-32B at TP 2: 4 KV heads x 128 per rank), bf16, P 1 rows; FA3 runs only on "
          "SM90: taken as H100 SXM")
_FA1572_H100 = ("Dao-AILab/flash-attention#1572, comment by TheRainstorm (H100, flash_attention_benchmark.py, "
                "CUDA graph): FA3 paged decode, MHA 32/32 heads x 128, page 8, fp16")
_FA1572_H20 = ("Dao-AILab/flash-attention#1572 description (H20): flashinfer batch decode, MHA 32/32 heads x 128, "
               "page 8, fp16")
_FLAG17 = ("flagos-ai/FlagAttention#17 PR description (RTX 3090, fp16, seqlen_q 1, batch 2): the 'flash-2' "
           "column (FlashAttention-2 with split-KV)")

POINTS: dict[str, tuple[Point, ...]] = {
    "flashinfer": tuple(
        [Point(1, s, 4, 128, 2, t, _H100, _VFA63 + ", FlashInfer column")
         for s, t in ((1024, 12.3), (2048, 14.2), (4096, 15.9), (8192, 18.8), (16384, 25.1))]
        + [Point(16, s, 32, 128, 2, t, _H20, _FA1572_H20, held_apart=s in (128, 4000))
           for s, t in ((128, 18.79), (2000, 164.36), (4000, 321.43), (32000, 2474.93))]),
    "fa3": tuple(
        [Point(1, s, 4, 128, 2, t, _H100, _VFA63 + ", FlashAttn column")
         for s, t in ((1024, 14.8), (2048, 15.6), (4096, 16.5), (8192, 19.1), (16384, 26.3))]
        + [Point(16, s, 32, 128, 2, t, _H100, _FA1572_H100)
           for s, t in ((128, 27.6), (2000, 292.0), (4000, 567.2))]),
    "fa2": tuple(
        [Point(2, n, 32, 64, 2, t, _RTX3090, _FLAG17 + ", head_dim 64 x 32 heads")
         for n, t in ((512, 26.489), (1024, 45.771), (2048, 84.344), (4096, 103.477), (8192, 185.0),
                      (16384, 336.406), (32768, 655.855), (65536, 1299.972), (131072, 2559.437),
                      (262144, 5085.689), (524288, 10183.79))]
        + [Point(2, n, 16, 128, 2, t, _RTX3090, _FLAG17 + ", head_dim 128 x 16 heads", held_apart=True)
           for n, t in ((512, 22.163), (1024, 33.584), (2048, 53.302), (4096, 98.266), (8192, 171.835),
                        (16384, 324.517))]),
}

# Stack.attention -> the kernel whose curve prices its decode ("flash": PyTorch SDPA's FA2 backend)
KERNEL_OF = {"flash": "fa2", **{k: k for k in FLASH_DECODE_KERNELS}}

# FlashAttention-3 is built for Hopper only (Dao-AILab/flash-attention README, FlashAttention-3:
# "Requirements: H100 / H800 GPU"), and vLLM picks the version by the GPU it runs on
# (vllm/attention/utils/fa_utils.py get_flash_attn_version: "if hopper default to FA3, otherwise stick
# to FA2", device_capability.major == 9).
FA3_MAJOR = 9


def kernel_on(impl: str, compute_capability: float | None, fallback: str = "fa2") -> tuple[str | None, str]:
    """(the kernel whose curve prices `impl`'s decode on a GPU of `compute_capability`, a note): fa3 on
    a GPU known not to be Hopper runs as the stack's `fallback` (Stack.attention_fallback: vLLM FA2,
    SGLang FlashInfer) and the note says so; an unknown capability (a profile that does not state it)
    keeps fa3. (None, "") for an impl without a curve (math)."""
    kernel = KERNEL_OF.get(impl)
    if kernel == "fa3" and compute_capability is not None and int(compute_capability) != FA3_MAJOR:
        return fallback, (f"attention fa3: FlashAttention-3 runs on Hopper (compute capability 9.x) only; on this "
                          f"GPU ({compute_capability:.1f}) the stack runs {fallback} instead, as the engines pick it "
                          f"(vLLM FA2: fa_utils.get_flash_attn_version; SGLang FlashInfer: server_args auto-select), "
                          f"so decode attention is priced as {fallback}")
    return kernel, ""


def curve(kernel: str, held_apart: bool = False) -> list[tuple[float, float]]:
    """Sorted (kv bytes, fraction of HBM peak) of a kernel's fitted points (held_apart: those instead)."""
    pts = sorted((p.kv_bytes, p.fraction) for p in POINTS[kernel] if p.held_apart == held_apart)
    out: list[tuple[float, float]] = []
    for b, f in pts:                    # equal bytes from two sources: their mean
        if out and out[-1][0] == b:
            out[-1] = (b, (out[-1][1] + f) / 2)
        else:
            out.append((b, f))
    return out


def fraction(kernel: str, kv_bytes: float) -> float:
    """Achieved fraction of HBM peak at `kv_bytes` (clamped to the measured range)."""
    pts = curve(kernel)
    xs = [b for b, _ in pts]
    if kv_bytes <= xs[0]:
        return pts[0][1]
    if kv_bytes >= xs[-1]:
        return pts[-1][1]
    i = bisect.bisect_left(xs, kv_bytes)
    (x0, f0), (x1, f1) = pts[i - 1], pts[i]
    w = (math.log(kv_bytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return f0 + w * (f1 - f0)


def kernel_s(kernel: str, kv_bytes: float, hbm_bytes_per_s: float) -> float:
    """Seconds of one decode attention kernel (split-KV + combine) reading `kv_bytes` of KV."""
    b0 = curve(kernel)[0][0]
    b = max(kv_bytes, b0)               # below the smallest point: its time (latency floor)
    return b / (fraction(kernel, b) * hbm_bytes_per_s)


def attention_kernel(op, hbm_bytes_per_s: float, compute_capability: float | None = None,
                     fallback: str = "fa2") -> tuple[float, str] | None:
    """The hook sim/price/cost.py calls for a compute op: (seconds, note) of the attention kernel of a
    decode-step attention (q_len 1) under a flash stack, from its measured curve (the kernel kernel_on
    picks for the GPU, and its note: "" unless a fallback runs; cost adds the op's other kernels at
    their roofline); None for anything else (priced as before)."""
    if op.kind != "attention":
        return None
    a = dict(op.attrs)
    kernel, note = kernel_on(a.get("impl"), compute_capability, fallback)
    if kernel is None or a["q_len"] != 1:
        return None
    hkv = a["heads"] if a["expand_gqa"] and a["kv_heads"] < a["heads"] else a["kv_heads"]
    # an fp8 cache (attr kv_dtype) reads 1 byte per element: the same curve at those bytes (issue 45)
    elem = 1 if a.get("kv_dtype") == "fp8" else DTYPE_BYTES[op.dtype]
    kv_bytes = 2.0 * a["batch"] * a["kv_len"] * hkv * a["head_dim"] * elem
    return kernel_s(kernel, kv_bytes, hbm_bytes_per_s), note
