"""Fused all-reduce + residual add + RMSNorm (Stack.ar_norm_fusion): where an engine replaces
all_reduce(P) -> add(X, .) -> rmsnorm(.) at a sublayer boundary by one kernel, and which kernel.

The kernel is TensorRT-LLM's allreduce fusion (cpp/tensorrt_llm/kernels/communicationKernels/
allReduceFusionKernels.cu), as FlashInfer ships it (include/flashinfer/comm/trtllm_allreduce_fusion.cuh,
flashinfer.comm.trtllm_allreduce_fusion) and vLLM and SGLang call it:
  * one-shot (allreduce_fusion_kernel_oneshot_lamport): every rank pulls every peer's whole message,
    reduces, adds the residual and normalizes all T rows;
  * two-shot (allreduce_fusion_kernel_twoshot_sync): reduce-scatter of T/n rows, add + norm of the rank's
    rows, all-gather.
Above an engine's size window the engine runs its plain all-reduce and a separate norm (unfused): the
builder then emits the three ops as before.

Windows, by message bytes S = tokens x hidden x 2 (bf16) on SM90 (Hopper):
  * "vllm": the AllReduceFusionPass (PassConfig.fuse_allreduce_rms; vllm/compilation/collective_fusion.py at
    the v0.11/v0.12 line, commits 0248dcdf / 002284db): TP 2, 4, 8 only; fused while S <= FI_ALLREDUCE_
    FUSION_MAX_SIZE_MB[90][tp] = {2: 64, 4: 2, 8: 1} MiB, one-shot while S <= _FI_ALLREDUCE_ONE_SHOT_MAX_
    SIZES_MB[90][tp] = {2: 32, 4: 2, 8: 1} MiB, else two-shot. Off by default at v0.11 (on at -O2 from
    vllm-project/vllm#34299, 2026-02, where TP8's window became 0.5 MiB).
  * "sglang": --enable-flashinfer-allreduce-fusion (off by default for Llama: server_args.py auto-enables it
    for a list of MoE architectures only); python/sglang/srt/layers/communicator.py: fused while
    0 < tokens <= FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048; FlashInfer's use_oneshot: tokens <= 128
    (kOneShotMaxToken, flashinfer/comm/trtllm_ar.py OneShotMaxToken), else two-shot.
The price of the fused kernel: sim/price/comm/fused_allreduce.py.
"""
from __future__ import annotations

MiB = 1 << 20
AR_NORM_FUSIONS = ("none", "vllm", "sglang")

VLLM_SM90_MAX = {2: 64 * MiB, 4: 2 * MiB, 8: 1 * MiB}
VLLM_SM90_ONESHOT_MAX = {2: 32 * MiB, 4: 2 * MiB, 8: 1 * MiB}
SGLANG_MAX_TOKENS = 2048
ONESHOT_MAX_TOKENS = 128


def fused_kernel(engine: str, tokens: int, hidden: int, tp: int, elem_bytes: int = 2) -> str | None:
    """The fused kernel `engine` runs for one boundary of `tokens` rows ("oneshot" | "twoshot"), or None
    where it runs the all-reduce and the norm apart (outside its window, or TP 1)."""
    if engine == "none" or tp < 2:
        return None
    nbytes = tokens * hidden * elem_bytes
    if engine == "vllm":
        if tp not in VLLM_SM90_MAX or nbytes > VLLM_SM90_MAX[tp]:
            return None
        return "oneshot" if nbytes <= VLLM_SM90_ONESHOT_MAX[tp] else "twoshot"
    if engine == "sglang":
        if not 0 < tokens <= SGLANG_MAX_TOKENS:
            return None
        return "oneshot" if tokens <= ONESHOT_MAX_TOKENS else "twoshot"
    raise ValueError(f"unknown ar_norm_fusion {engine!r}; choose from: {', '.join(AR_NORM_FUSIONS)}")
