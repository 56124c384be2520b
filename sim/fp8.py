"""FP8 across the model, the stack and the hardware: where an FP8 checkpoint sets the stack's linears,
and which GPUs can run FP8 at all.

What FP8 changes is said where it is priced: the linears' gemm ops (sim/schedule/builder.py
linear_attrs: e4m3 weights and inputs, 16-bit output), their measured FP8 GEMM tables and roofline
(sim/price/cost.py, work.py), the KV cache's bytes (Stack.kv_dtype), and the memory estimate
(sim/memory.py). The all-reduce stays 16-bit: every engine reduces the row-parallel linear's bf16 output
(vLLM Fp8LinearMethod's out_dtype = torch.get_default_dtype(); the fusion passes' comment in
vllm/compilation/collective_fusion.py, "input goes through allreduce first, always 16-bit"; TensorRT-LLM's
AUTO strategies reduce bf16, its FP8 LOWPRECISION all-reduce is opt-in).
"""
from __future__ import annotations

from tpsim.sim.hardware.schema import Profile
from tpsim.sim.model.spec import ModelSpec
from tpsim.sim.stack.spec import FP8, Stack

# FP8 tensor cores: compute capability 8.9 (Ada: L40S) and 9.0 (Hopper) and up (NVIDIA CUDA C++
# Programming Guide, "Compute Capabilities": __nv_fp8_e4m3 MMA from sm_89)
FP8_MIN_CAPABILITY = 8.9


def model_given(model: ModelSpec, given: dict) -> dict:
    """`given` (make_stack's explicit values) with what an FP8 checkpoint fixes: its linears are FP8
    whatever --dtype says (--dtype then names the 16-bit activations, as vLLM's --dtype does for an
    FP8 checkpoint), with the checkpoint's input-scale scheme unless given."""
    if not model.quant.startswith(FP8):
        return given
    out = dict(given)
    if out.get("weight_dtype") is None:
        out["weight_dtype"] = FP8
    if out.get("fp8_activations") is None:
        out["fp8_activations"] = model.quant.split("-", 1)[1]
    return out


def check_profile(profile: Profile, stack: Stack) -> None:
    """ValueError (one line) where `profile`'s GPU cannot run the stack's FP8 linears."""
    if not stack.fp8:
        return
    cc = profile.compute_capability
    if cc is not None and cc < FP8_MIN_CAPABILITY:
        raise ValueError(
            f"FP8 linears need FP8 tensor cores (compute capability {FP8_MIN_CAPABILITY}+: Ada, Hopper); profile "
            f"{profile.name} is {cc:.1f}. There vLLM and SGLang run an FP8 checkpoint weight-only through the "
            f"Marlin kernel (vllm fp8.py Fp8LinearMethod: use_marlin without capability 8.9), which tpsim does not "
            f"price: give --dtype bf16, or a profile of an FP8 GPU")
    if FP8 not in profile.peak_flops:
        raise ValueError(f"profile {profile.name} has no FP8 matrix peak (compute.matmul_tflops.fp8): add it, "
                         f"with its source, to price FP8 linears")
