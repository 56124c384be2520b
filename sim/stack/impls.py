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
KV (sim/price/flash_decode.py). A decode kernel's grid (how many CTAs stream the KV, and how much
each) comes from its split rule (sim/price/decode_grid.py) with the knobs a stack sets (ATTENTION_KNOBS).
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

ATTENTION_IMPLS = ("math", "flash", "fa2", "fa3", "flashinfer", "xqa", "vllm-paged")
# the attention kernels whose decode is priced from measured achieved bandwidth (sim/price/flash_decode.py);
# "flash" alone keeps the roofline of its bytes
FLASH_DECODE_KERNELS = ("fa2", "fa3", "flashinfer")

# The decode kernels whose grid (CTAs per sequence, KV head and KV split) sim/price/decode_grid.py reads
# from the kernel's code, and the knobs through which an engine or a version line calls each one:
# kernel -> knob -> (default, type or the allowed strings, what it is). A stack names its kernel
# (Stack.attention: "flash" is PyTorch SDPA's FA2) and sets the knobs that differ from the defaults
# (Stack.attention_knobs, each sourced in its preset). "graph_*" knobs act only in a CUDA-graph phase:
# where the engine fixes the split at capture or passes a bound only under graphs.
ATTENTION_KNOBS: dict[str, dict[str, tuple]] = {
    "fa2": {
        "sm_factor": (2, int, "num_splits_heuristic runs on multiProcessorCount x this (2 from FlashAttention "
                              "v2.5.7: '128 threads per block'; 1 in v2.2.0-v2.5.6)"),
        "graph_table_kv_len": (0, int, "under CUDA graphs the heuristic reads the block table's width in tokens, "
                                       "not the sequence's length (vLLM V0: max_seq_len_to_capture); 0: the step's"),
        "graph_len_model": (False, bool, "the table's width is min(graph_table_kv_len, the model's context) (vLLM V0: "
                                         "min(max_seq_len_to_capture, max_model_len)); a model stating no context "
                                         "keeps graph_table_kv_len (Stack.for_model)"),
    },
    "fa3": {
        "graph_num_splits": (0, int, "the num_splits the engine passes under CUDA graphs, a static bound the "
                                     "per-sequence dynamic split stays under; 0: the heuristic picks it"),
        "graph_table_kv_len": (0, int, "under CUDA graphs the static heuristic reads the page table's width in "
                                       "tokens (SGLang: the model's context length); 0: the step's own length"),
        "graph_len_model": (False, bool, "graph_table_kv_len is the model's context (SGLang's page table spans the "
                                         "server's context length, the model's by default); a model stating none "
                                         "keeps the number given (Stack.for_model). Set it false to give your own"),
        "block_m": (128, int, "packed query rows per tile at head_dim 128 (128 upstream; 64 in vLLM's fork for "
                              "decode, use_one_mma_wg)"),
        "prepare_per_call": (False, bool, "the split-scheduling kernel runs inside every call (the engine passes "
                                          "no precomputed scheduler_metadata)"),
    },
    "flashinfer": {
        "page_size": (1, int, "KV tokens per page (the 128-token chunk floor is max(128 // page_size, 1) pages)"),
        "ctas_per_sm": (2, int, "the split plan's grid bound, CTAs per SM"),
    },
    "xqa": {
        "multi_block": (True, bool, "multi-block mode: several CTAs per (sequence, KV head), merged in-kernel"),
        "heuristic": ("sqrt", ("sqrt", "cap8"), "computeMultiBlockCount: 'sqrt' (128 tokens per CTA, at most "
                                                "round(sqrt(8 M)) CTAs) or the older runners' 'cap8' (512 tokens "
                                                "per CTA, at most 8)"),
        "graph_capture_kv_len": (0, int, "under CUDA graphs the CTA count is computed once, at capture, from this "
                                         "past length in tokens; 0: from the step's own"),
        "graph_len_model": (False, bool, "graph_capture_kv_len is the model's context - 1 (TensorRT-LLM 1.x captures at "
                                         "max_seq_len - 1, max_seq_len the model's by default); a model stating none "
                                         "keeps the number given (Stack.for_model). Set it false to give your own"),
    },
    "vllm-paged": {},
}


def normalize_knobs(value) -> tuple[tuple[str, object], ...]:
    """A stack's attention_knobs as sorted ("kernel.knob", value) pairs, from a {kernel: {knob: value}}
    object (a preset, a stack file), flat {"kernel.knob": value} or the pairs themselves; ValueError
    naming the first unknown kernel or knob or a value of the wrong type."""
    if isinstance(value, dict):
        flat = {}
        for k, v in value.items():
            if isinstance(v, dict):
                flat |= {f"{k}.{n}": x for n, x in v.items()}
            else:
                flat[k] = v
        pairs = list(flat.items())
    elif isinstance(value, (tuple, list)) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in value):
        pairs = list(dict(tuple(p) for p in value).items())        # a knob given twice: the later one
    else:
        raise ValueError(f"attention_knobs must be an object {{kernel: {{knob: value}}}}, got {value!r}")
    for key, v in pairs:
        kernel, _, knob = str(key).partition(".")
        if kernel not in ATTENTION_KNOBS:
            raise ValueError(f"attention_knobs: unknown kernel {kernel!r}; choose from: {', '.join(ATTENTION_KNOBS)}")
        if knob not in ATTENTION_KNOBS[kernel]:
            raise ValueError(f"attention_knobs: {kernel} has no knob {knob!r}; its knobs: "
                             f"{', '.join(ATTENTION_KNOBS[kernel]) or 'none'}")
        _, kind, _ = ATTENTION_KNOBS[kernel][knob]
        ok = (v in kind if isinstance(kind, tuple) else
              isinstance(v, bool) if kind is bool else
              isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 24)
        if not ok:
            want = f"one of {', '.join(kind)}" if isinstance(kind, tuple) else \
                "true or false" if kind is bool else "a whole number 0..16777216"
            raise ValueError(f"attention_knobs: {key} must be {want}, got {v!r}")
    return tuple(sorted((str(k), v) for k, v in pairs))


def knobs_of(pairs: tuple[tuple[str, object], ...], kernel: str) -> dict:
    """Every knob of `kernel`: its default, or the value the stack's normalized pairs give."""
    out = {knob: default for knob, (default, _, _) in ATTENTION_KNOBS.get(kernel, {}).items()}
    out |= {k.partition(".")[2]: v for k, v in pairs if k.partition(".")[0] == kernel}
    return out


# kernel -> (the length knob a model's context sets, that length from the context and the knob's own number)
MODEL_LENGTH_KNOBS = {
    "fa2": ("graph_table_kv_len", lambda ctx, own: min(own, ctx) if own else ctx),
    "fa3": ("graph_table_kv_len", lambda ctx, own: ctx),
    "xqa": ("graph_capture_kv_len", lambda ctx, own: ctx - 1),
}


def knobs_for_model(pairs: tuple[tuple[str, object], ...], max_context: int) -> tuple[tuple[str, object], ...]:
    """The normalized knob pairs with each kernel's graph_len_model applied for a model whose context is
    `max_context` tokens (ModelSpec.max_context; 0: not stated, the pairs unchanged)."""
    if max_context <= 0:
        return pairs
    out = dict(pairs)
    for kernel, (knob, length) in MODEL_LENGTH_KNOBS.items():
        k = knobs_of(pairs, kernel)
        if k["graph_len_model"]:
            out[f"{kernel}.{knob}"] = length(max_context, k[knob])
    return tuple(sorted(out.items()))


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
