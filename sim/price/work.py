"""What one compute op does on its own, as kernels of FLOPs and bytes (Work), and the roofline time
of a list of them on a profile.

op_work is the unfused picture: eager PyTorch's elementwise kernels, a compiled phase's one fused
kernel per op, or an engine's own fused CUDA ops (Stack.engine_kernels). Ops inside a layer of a
compiled phase are priced from Inductor's own kernels instead (sim/price/fusion.py); sim/price/cost.py decides
which applies, adds measured points and the launch rules.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.price import flash_prefill
from tpsim.sim.stack import sampler
from tpsim.sim.schedule.ir import Op
from tpsim.sim.hardware.profile import Profile
from tpsim.sim.stack.spec import DTYPE_BYTES, FP8, FP8_BYTES


@dataclass(frozen=True)
class Work:
    """One kernel's worth of work: FLOPs, bytes moved, kernels launched."""

    flops: float
    bytes: float
    kernels: int
    matmul: bool = False      # limited by matrix throughput (gemm efficiency) vs memory
    rate: float = 1.0         # the kernel's matrix rate over the efficiency curve's (a causal flash prefill's)


def op_work(op: Op, fused: bool = False, engine: bool = False) -> list[Work]:
    """What one compute op does on its own. Eager PyTorch runs unfused elementwise kernels; a
    compiled (`fused`) phase one fused kernel per op (ops inside a layer of a compiled phase are
    priced from Inductor's own kernels instead, sim/price/fusion.py); an `engine` (Stack.engine_kernels)
    runs its own fused CUDA ops in eager phases: one kernel per norm, with the residual add before it
    inside (fused_add_rmsnorm), one per SwiGLU (silu_and_mul)."""
    e = DTYPE_BYTES[op.dtype]
    a = dict(op.attrs)
    k = op.kind
    if k == "gemm":
        m, n, kk = a["m"], a["n"], a["k"]
        if a.get("fp8"):
            # W8A8: the e4m3 weight [n, k] and input [m, k] at 1 byte, the output [m, n] in the op's
            # 16-bit dtype (CUTLASS scaled-mm applies both scales in its epilogue), on the FP8 peak
            # (matmul_dtype); before it the quantize kernel of the input: read [m, k] 16-bit, write it
            # e4m3 (vLLM ops.scaled_fp8_quant, inside the engines' linear call: what the measured FP8
            # tables time too, sim/hardware/profiles)
            return [Work(2.0 * m * n * kk, FP8_BYTES * (m * kk + kk * n) + e * m * n, 1, matmul=True),
                    Work(float(m * kk), (e + FP8_BYTES) * m * kk, 1)] + separable_work(op, fused)
        return [Work(2.0 * m * n * kk, e * (m * kk + kk * n + m * n), 1, matmul=True)] + separable_work(op, fused)
    if k == "attention":
        return _attention_work(a, e, fused) + separable_work(op, fused, engine)
    if k == "rmsnorm":
        # eager: x.float(), pow, mean, rsqrt, mul, mul(weight), .to(dtype): fp32 passes over [rows, width]
        el = a["rows"] * a["width"]
        if engine and not fused:
            # the engine's norm kernel reads x [rows, width] and writes y once, and reads its weight
            # [width] (vLLM csrc/layernorm_kernels.cu rms_norm_kernel / fused_add_rms_norm_kernel;
            # FlashInfer norm.cuh RMSNorm / FusedAddRMSNorm); a residual add before it rides in it (add)
            return [Work(4.0 * el, 2 * e * el + e * a["width"], 1)]
        return [Work(4.0 * el, 2 * e * el, 1)] if fused else [Work(4.0 * el, 7 * 4 * el, 6)]
    if k == "swiglu":
        el = a["rows"] * a["width"]
        return [Work(4.0 * el, 3 * e * el, 1)] if fused or engine else [Work(4.0 * el, 5 * e * el, 2)]
    if k == "add":
        el = a["rows"] * a["width"]
        if engine and not fused:
            # an engine's residual add rides in the next norm's kernel (fused_add_rms_norm), which moves
            # 4 passes over [rows, width] in all: it reads input and residual, writes the sum back into
            # residual and the normed output into input; the sum never crosses DRAM again (vLLM
            # csrc/layernorm_kernels.cu fused_add_rms_norm_kernel re-reads the row it just wrote, an
            # L1/L2 hit; FlashInfer norm.cuh FusedAddRMSNorm keeps it in shared memory, used by SGLang
            # sgl_fused_add_rmsnorm and TensorRT-LLM flashinfer_fused_add_rmsnorm). The norm charges
            # one read and the output write; the add the other read and the sum's write: 2 passes,
            # no launch of its own
            return [Work(float(el), 2 * e * el, 0)]
        return [Work(float(el), 3 * e * el, 1)]
    if k == "embed":
        el = a["rows"] * a["width"]
        if not a.get("masked"):
            return [Work(0.0, 2 * e * el, 1)]
        # vocab-parallel shard lookup (vllm/model_executor/layers/vocab_parallel_embedding.py forward):
        # compiled, one kernel gathers the shard's rows and zeroes the ids outside it; eager, the mask
        # of the ids (get_masked_input_and_mask: one jit-fused kernel over [rows] int ids, bytes
        # negligible), F.embedding, then masked_fill_ re-reads and writes [rows, width]
        return [Work(0.0, 2 * e * el, 1)] if fused else [Work(0.0, 4 * e * el, 3)]
    if k in ("slice", "shard", "pad"):
        # row bookkeeping of token-split / seq-parallel: a view (no kernel) unless it must copy
        el = a["rows"] * a["width"]
        return [Work(0.0, 2 * e * el, 1)] if a.get("copy") or a.get("pad") else []
    if k == "concat":
        el = a["rows"] * a["width"]
        if a.get("inplace"):                        # the parts were written into the output's slices
            return []
        return [Work(0.0, 2 * e * el, 1)]           # torch.cat of the micro-batches: one copy kernel
    if k == "sum":
        # async TP's local reduce of the n partials: one kernel reading n [rows, w] and writing one
        el, n = a["rows"] * a["width"], a["parts"]
        return [Work(float((n - 1) * el), (n + 1) * e * el, 1)]
    if k == "sample":
        b, v = a["batch"], a["vocab"]
        engine_sampler = sampler.get(a.get("sampler", sampler.REFERENCE))
        if engine_sampler is None:
            # the reference: argmax over the last position's logits per sequence: [batch, vocab]
            return [Work(float(b * v), e * b * v, 2)]
        # an engine's sampler (Stack.sampler): its kernels over [batch, vocab], one Work each (sim/stack/sampler.py)
        return [Work(float(kn.elements(b, v)), float(kn.bytes(b, v, e)), 1) for kn in engine_sampler.kernels]
    raise ValueError(f"no compute cost for op kind {k!r} ({op.name})")


# Attrs that add a separable piece to an op (sim.schedule.language sets them only when a model has them):
# tables measured without them (a database's plain GEMMs, a Llama calibration) still price the
# op, plus the roofline of the piece (separable_work).
SEPARABLE_ATTRS = {"gemm": ("bias", "act_scale"), "attention": ("qk_norm",)}


def separable_work(op: Op, fused: bool, engine: bool = False) -> list[Work]:
    """The work that `bias` (gemm) and `qk_norm` (attention) add to an op (`engine`: op_work's)."""
    e = DTYPE_BYTES[op.dtype]
    a = dict(op.attrs)
    out = []
    if op.kind == "gemm" and a.get("bias"):
        # Qwen2's qkv bias [n]: cuBLASLt's bias epilogue (eager addmm) or a fused pointwise under
        # torch.compile -- one more add per output element, the bias read once, no extra kernel
        out.append(Work(float(a["m"] * a["n"]), e * a["n"], 0))
    if op.kind == "gemm" and a.get("act_scale") == "token":
        # FP8 input scaled per token at run time: a reduction kernel finds each row's absmax over
        # [m, k] before the quantize kernel reads the scales (vLLM ops.scaled_fp8_quant(...,
        # use_per_token_if_dynamic=True): dynamic_per_token_scaled_fp8_quant; aiconfigurator's
        # vllm computescale table times that difference, 1.1-4.5 us on H100): one more read of [m, k]
        out.append(Work(float(a["m"] * a["k"]), e * a["m"] * a["k"], 1))
    if op.kind == "attention" and a.get("qk_norm"):
        # Qwen3's RMSNorm over head_dim on q [b, q, H, d] and k [b, q, Hk, d] before RoPE: eager runs
        # the same six fp32 passes as the layer norms (op_work "rmsnorm"), per tensor; compiled,
        # it fuses into the RoPE kernel (one more read and write of q and k); an engine's eager phase
        # runs its RMSNorm kernel once per tensor (vLLM / SGLang Qwen3Attention q_norm, k_norm: 2 kernels)
        el = a["batch"] * a["q_len"] * (a["heads"] + a["kv_heads"]) * a["head_dim"]
        if fused:
            out.append(Work(4.0 * el, 2 * e * el, 0))
        elif engine:
            out.append(Work(4.0 * el, 2 * e * el, 2))
        else:
            out.append(Work(4.0 * el, 7 * 4 * el, 12))
    return out


def matmul_dtype(op: Op) -> str:
    """The dtype whose matrix peak prices `op`'s matmul: fp8 for an FP8 linear (attr fp8), else the op's."""
    return FP8 if op.kind == "gemm" and op.get("fp8", 0) else op.dtype


def kv_elem_bytes(a: dict, e: int) -> int:
    """Bytes of one K/V cache element of an attention op's attrs `a`: 1 for an fp8 cache (attr
    kv_dtype), else the activations' `e`."""
    return FP8_BYTES if a.get("kv_dtype") == FP8 else e


def _attention_work(a: dict, e: int, fused: bool) -> list[Work]:
    """RoPE + KV-cache write (+ GQA expand) + SDPA over kv_len keys. Per rank:
    q [b, q, H, d], cache [b, kv, Hk, d]; math SDPA materializes scores [b, H, q, kv] and computes
    all of them; a flash kernel under the causal mask only its tiles up to the diagonal
    (sim/price/flash_prefill.py). An engine's own prep kernels (attr "prep", Stack.attention_prep_kernels) do the RoPE and the cache write
    in that many kernels, compiled or not."""
    b, q, kv = a["batch"], a["q_len"], a["kv_len"]
    h, hk, d = a["heads"], a["kv_heads"], a["head_dim"]
    kve = kv_elem_bytes(a, e)                       # an fp8 cache: 1 byte per element written and read
    rope = Work(6.0 * b * q * (h + hk) * d, 2 * e * b * q * (h + hk) * d, 1 if fused else 8)    # RoPE on q, k
    cache = Work(0.0, 2 * (e + kve) * b * q * hk * d, 2)                                         # cache write k, v
    n = a.get("prep", 0)
    if n == 1:                  # one kernel rotates q, k and writes the cache (TensorRT-LLM)
        out = [Work(rope.flops, rope.bytes + cache.bytes, 1)]
    elif n:                     # RoPE in one kernel, the cache write in the others
        out = [Work(rope.flops, rope.bytes, 1), Work(0.0, cache.bytes, n - 1)]
    else:
        out = [rope, cache]
    if a.get("prep_shared"):
        # a mixed step's later attention part (sim.schedule.builder.Builder._mix_parts): its RoPE and
        # cache write run inside the first part's kernels, over every token of the step at once
        out = [Work(w.flops, w.bytes, 0) for w in out]
    hkv = hk
    kv_read = kve
    if a["expand_gqa"] and hk < h:
        out.append(Work(0.0, 2 * b * kv * d * (kve * hk + e * h), 2))   # repeat_interleave K, V (to 16 bits)
        hkv, kv_read = h, e
    flops = 4.0 * b * h * q * kv * d                                    # QK^T and PV
    qo_kv = e * 2 * b * h * q * d + kv_read * 2 * b * hkv * kv * d
    if a["impl"] == "math":
        scores = b * h * q * kv
        # bmm -> scale/mask -> softmax (fp32) -> cast -> bmm: ~6 passes over the score matrix
        out.append(Work(flops, qo_kv + 6 * e * scores, 1 if fused else 6, matmul=True))
        return out
    # a flash kernel under the causal mask computes only the key tiles up to each row block's diagonal,
    # at its causal rate (sim/price/flash_prefill.py); K/V still cross DRAM once (the last row block
    # reads every key), so the bytes stay
    tiled = flash_prefill.causal(a["impl"], q, a.get("start_pos", kv - q), kv, d, max(1, h // hkv))
    frac, rate = tiled if tiled is not None else (1.0, 1.0)
    out.append(Work(flops * frac, qo_kv, 1, matmul=True, rate=rate))
    return out


def roofline_s(profile: Profile, works: list[Work], dtype: str) -> float:
    peak = profile.peak_flops.get(dtype) or max(profile.peak_flops.values())
    t = 0.0
    for w in works:
        if not w.kernels:       # rides in another kernel (a GEMM's bias epilogue): no small-kernel efficiency
            t += max(w.flops / (peak * w.rate) if w.matmul else 0.0, w.bytes / profile.mem_bytes_per_s)
            continue
        t_flops = w.flops / (peak * profile.gemm_efficiency(max(w.flops, 1.0)) * w.rate) if w.matmul else 0.0
        t_bytes = w.bytes / (profile.mem_bytes_per_s * profile.memory_efficiency(max(w.bytes, 1.0)))
        t += max(t_flops, t_bytes)
    return t
