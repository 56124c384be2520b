"""The implementation names a Stack may run: one registry that the stack, the presets (--stack),
the collective pricing and the attention pricing all read.

Collectives: Stack.collective is either "auto" (the profile's default_impl), a measured table's
impl of the profile (nccl, custom, gloo, nccl-p2p-off, ...: priced from that table), or one of the
serving engines' own all-reduce implementations below, each priced from its kernel's mechanism
(sim/price/comm/custom_allreduce.py) with the rules under which its engine refuses it and falls back to NCCL; symm-mem-multimem is no engine's
dispatch but a model file calling torch's multimem kernel itself, which has no fallback.

Attention: Stack.attention names the prefill/decode attention kernel. "math" is the materialized
SDPA of the reference harness; "flash" is a fused kernel priced at the roofline of its bytes and
FLOPs; the named flash kernels price decode from their measured achieved bandwidth over the filled
KV (sim/price/flash_decode.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CollectiveImpl:
    """One serving engine's all-reduce path. `family`: whose kernel and constants
    (profile collectives.custom_allreduce.<family>); `strategy`: "engine" (the engine's own size
    rule picks one-shot / two-shot / NCCL), or a forced kernel ("oneshot", "twoshot")."""

    name: str
    engine: str
    family: str
    strategy: str
    source: str


ENGINE_COLLECTIVES: dict[str, CollectiveImpl] = {c.name: c for c in (
    CollectiveImpl("vllm-custom", "vLLM", "vllm", "engine",
                   "vllm csrc/custom_all_reduce.cuh (cross_device_reduce_1stage / _2stage) + "
                   "vllm/distributed/device_communicators/custom_all_reduce.py (CustomAllreduce)"),
    CollectiveImpl("sglang-custom", "SGLang", "sglang", "engine",
                   "sglang sgl-kernel/csrc/allreduce/custom_all_reduce.cuh (the vLLM kernel, adapted) + "
                   "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py"),
    CollectiveImpl("trtllm-auto", "TensorRT-LLM", "trtllm", "engine",
                   "TensorRT-LLM cpp/tensorrt_llm/common/customAllReduceUtils.h selectStrategyLookUpTable "
                   "(AllReduceStrategy.AUTO) + thop/allreduceOp.cpp ifFallbackToNCCL"),
    CollectiveImpl("trtllm-oneshot", "TensorRT-LLM", "trtllm", "oneshot",
                   "TensorRT-LLM AllReduceStrategy.ONESHOT (thop/allreduceOp.cpp)"),
    CollectiveImpl("trtllm-twoshot", "TensorRT-LLM", "trtllm", "twoshot",
                   "TensorRT-LLM AllReduceStrategy.TWOSHOT (needs tokens >= TP, else ONESHOT)"),
    CollectiveImpl("symm-mem", "PyTorch symmetric memory (as vLLM's SymmMemCommunicator calls it)", "symm-mem",
                   "engine",
                   "torch.distributed._symmetric_memory: torch.ops.symm_mem.multimem_all_reduce_ / "
                   "two_shot_all_reduce_ (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu) + "
                   "vllm/distributed/device_communicators/symm_mem.py"),
    # a model file that keeps its activations in the symmetric buffer and calls the kernel itself: in place,
    # no copy-in/out, no size cap beyond the buffer and no NCCL fallback (it runs multimem or not at all)
    CollectiveImpl("symm-mem-multimem", "PyTorch symmetric memory, multimem called directly", "symm-mem",
                   "multimem",
                   "torch.ops.symm_mem.multimem_all_reduce_(buf, 'sum', group_name) on a tensor in the rendezvoused "
                   "buffer (torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu multimem_all_reduce_: "
                   "in place, barrier -> multimem.ld_reduce / multimem.st of this rank's 1/n slice -> barrier; "
                   "needs the buffer's multicast pointer, bf16/fp32 only)"),
)}

ATTENTION_IMPLS = ("math", "flash", "fa2", "fa3", "flashinfer")
# the attention kernels whose decode is priced from measured achieved bandwidth (sim/price/flash_decode.py);
# "flash" alone keeps the roofline of its bytes
FLASH_DECODE_KERNELS = ("fa2", "fa3", "flashinfer")


def is_flash(attention: str) -> bool:
    """A fused attention kernel (no materialized scores): everything but math SDPA."""
    return attention != "math"


def engine_collective(name: str) -> CollectiveImpl | None:
    return ENGINE_COLLECTIVES.get(name)


def collective_impls(profile) -> list[str]:
    """The Stack.collective names a profile can price: auto, nccl, its measured tables' impls and
    default, and every engine all-reduce (priced from the profile's custom_allreduce constants, or
    as its engine's fallback)."""
    return sorted({t.impl for t in profile.collective_tables} | {profile.default_impl, "nccl", "auto"}) \
        + list(ENGINE_COLLECTIVES)


def check_collective_impl(profile, impl: str, option: str = "--collective") -> None:
    """A user error (ValueError) for an implementation `profile` cannot price."""
    names = collective_impls(profile)
    if impl not in names:
        raise ValueError(f"profile {profile.name} has no collective implementation {impl!r} ({option}); "
                         f"choose from: {', '.join(names)}")
