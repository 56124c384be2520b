"""FP8 in the harness: e4m3 weights stored as such, upcast for compute (W8A8 emulated on any device).

A layer linear of an FP8 run (the IR's gemm op with attr fp8: sim/schedule/builder.py linear_attrs) holds
its weight [out, in] as torch.float8_e4m3fn and one fp32 scale per output row, `NAME.scale` [out] (a
checkpoint's per-tensor scale is broadcast to its rows; a fused qkv or gate/up keeps each part's). The
kernel quantizes its input to e4m3 as the engines do -- per token at run time (`act_scale` token:
scale = row absmax / 448, vLLM dynamic_per_token_scaled_fp8_quant) or with the checkpoint's static
per-tensor `NAME.input_scale` -- then computes x_q * s_x @ (w_q * s_w)^T in the run's dtype: the
numbers an FP8 GEMM sees, at the run's own matmul speed (torch._scaled_mm is a CUDA-only op; timing FP8
kernels is the simulator's job, from measured tables). The all-reduce reads the linear's 16-bit output,
as in the engines.

Drawn weights and 16-bit checkpoints are quantized at load with per-channel scales (row absmax / 448:
compressed-tensors' FP8 channel scheme; vLLM's --quantization fp8 takes one per-tensor scale per shard).
An FP8 KV cache (Stack.kv_dtype fp8) stores K and V as e4m3 with scale 1 (vLLM's default k_scale /
v_scale without checkpoint scales) and reads them back upcast.
"""
from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = float(torch.finfo(E4M3).max)          # 448
_TINY = 1e-12                                    # a zero row's scale (its values quantize to 0 anyway)


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x cast to e4m3, saturating at +-448 (no NaN for an out-of-range value)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (e4m3 weight [out, in], fp32 scale [out]) with scale = row absmax / 448."""
    s = (w.float().abs().amax(dim=1) / E4M3_MAX).clamp(min=_TINY)
    return to_e4m3(w.float() / s[:, None]), s


def dequantize(wq: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """e4m3 [out, in] x fp32 [out] (or a scalar) -> [out, in] in `dtype`."""
    s = scale.float().reshape(-1, 1) if scale.dim() else scale.float()
    return (wq.float() * s).to(dtype)


def qdq_input(x: torch.Tensor, input_scale: torch.Tensor | None) -> torch.Tensor:
    """An FP8 linear's input as the GEMM sees it: quantized to e4m3 and back, per token (row absmax / 448)
    or with a static per-tensor `input_scale`."""
    if input_scale is None:
        s = (x.float().abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=_TINY)       # [rows, 1]
    else:
        s = input_scale.float()
    return (to_e4m3(x.float() / s).float() * s).to(x.dtype)


def linear(x: torch.Tensor, weights: dict[str, torch.Tensor], name: str, dynamic: bool) -> torch.Tensor:
    """The FP8 linear `name` on x [m, k]: [m, n] in x's dtype (+ a bias `name.bias` in x's dtype)."""
    w = dequantize(weights[name], weights[f"{name}.scale"], x.dtype)
    xs = qdq_input(x, None if dynamic else weights[f"{name}.input_scale"])
    return torch.nn.functional.linear(xs, w, weights.get(f"{name}.bias"))


def quantize_linears(w: dict[str, torch.Tensor], names) -> None:
    """Quantize the 16-bit weights `names` of `w` in place: NAME -> e4m3, NAME.scale [out] fp32."""
    for n in names:
        w[n], w[f"{n}.scale"] = quantize_rows(w[n])


def cache_write(cache: torch.Tensor, dim: int, pos: torch.Tensor, x: torch.Tensor) -> None:
    """cache.index_copy_(dim, pos, x) for a 16-bit or an e4m3 cache (CPU has no e4m3 index_copy: through
    a uint8 view of the same bytes)."""
    if cache.dtype != E4M3:
        cache.index_copy_(dim, pos, x)
        return
    cache.view(torch.uint8).index_copy_(dim, pos, to_e4m3(x).view(torch.uint8))


def cache_read(cache: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A cache slice in the compute dtype (an e4m3 cache upcast; scale 1)."""
    return cache if cache.dtype != E4M3 else cache.to(dtype)
