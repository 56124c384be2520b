"""The KV cache one TP rank of an engine holds, from tpsim's memory model (sim/memory.py), by each engine's
own rule for what it gives the cache:

  vLLM V1   total x gpu_memory_utilization (0.9, vllm/config/cache.py) - weights - the peak activations
            of a forward pass of max_num_batched_tokens tokens (gpu_worker.py determine_available_memory
            profiles one) - non-torch memory (NCCL, cuBLAS: tpsim's workspace estimate)
  SGLang    total x mem_fraction_static - weights - workspace (model_runner profile_max_num_token: the
            rest after loading the weights, less total x (1 - mem_fraction_static); activations and CUDA
            graphs live in that last share); mem_fraction_static = (total - reserved) / total with
            reserved MiB = 512 + 1.5 max(chunked_prefill_size, 2048) + 2 cuda_graph_max_bs + 1024 tp / 8
            (server_args.py _handle_gpu_memory_settings, v0.5.9)
  TRT-LLM   free_gpu_memory_fraction (0.9, llm_args.py KvCacheConfig) x (total - peak of a profiling run:
            weights + activations + workspace) (tensorrt_llm/_torch/pyexecutor/_util.py
            KvCacheCreator._cal_max_memory)

The activation peak and the non-torch memory are what the engines measure at start-up; no code
constant pins them, so they are tpsim's estimates (sim/memory.py: activations of the pass, workspace
WORKSPACE_BYTES), and `--kv-cache-gib` sets the cache directly (vLLM's --kv-cache-memory-bytes).
"""
from __future__ import annotations

from dataclasses import replace

from tpsim.sim.memory import GIB, WORKSPACE_BYTES, Placement, estimate
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.stack.spec import Stack

MIB = 1 << 20
VLLM_UTILIZATION = 0.9          # vllm/config/cache.py CacheConfig.gpu_memory_utilization
TRTLLM_FRACTION = 0.9           # tensorrt_llm/llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction


def kv_bytes_per_token(model: ModelSpec, tp: int, stack: Stack) -> int:
    """K and V of one token over every layer on one rank: 2 x layers x KV heads per rank x head_dim x
    dtype bytes (vllm kv_cache_interface.py page_size_bytes per token; SGLang's cell_size)."""
    p = Placement(model, tp, 0)
    return 2 * model.layers * len(p.kv_heads) * model.head_dim * stack.dtype_bytes


def sglang_mem_fraction(total_mib: float, chunk: int, graph_bs: int, tp: int) -> float:
    """mem_fraction_static as SGLang derives it when not given (server_args.py, v0.5.9)."""
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graph_bs + tp / 8 * 1024
    return round((total_mib - reserved) / total_mib, 3)


def kv_cache_bytes(engine: str, model: ModelSpec, tp: int, stack: Stack, memory_gib: float, device: str,
                   pass_tokens: int, sglang_fraction: float = 0.0) -> tuple[int, dict]:
    """(KV bytes on one rank, the terms that made it) for `engine` (vllm | sglang | trtllm); the
    activations are those of one pass of `pass_tokens` tokens (the engine's token budget)."""
    st = replace(stack, kv="filled", prefill_logits="last")
    est = estimate(model, tp, 1, pass_tokens, 1, st, device)
    total = int(memory_gib * GIB)
    weights = est.layer_weights_bytes + est.embed_head_bytes
    work = WORKSPACE_BYTES.get(device, WORKSPACE_BYTES["cuda"])
    act = est.activations_bytes
    if engine == "vllm":
        kv = int(total * VLLM_UTILIZATION) - weights - act - work
        terms = {"rule": f"{VLLM_UTILIZATION} x total - weights - activations - workspace"}
    elif engine == "sglang":
        kv = int(total * sglang_fraction) - weights - work
        terms = {"rule": f"mem_fraction_static {sglang_fraction} x total - weights - workspace"}
    else:
        kv = int(TRTLLM_FRACTION * (total - weights - act - work))
        terms = {"rule": f"{TRTLLM_FRACTION} x (total - weights - activations - workspace)"}
    terms |= {"total_bytes": total, "weights_bytes": weights, "activations_bytes": act, "workspace_bytes": work,
              "kv_bytes": kv}
    return kv, terms
