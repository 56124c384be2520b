"""Each serving engine's scheduler, one module each (vllm.py: vLLM V1; sglang.py; trtllm.py), and the
constants it runs with on a given GPU and model (`setup`): its token budget, running cap, KV block and
KV cache, each with where it comes from. The stack preset (`--stack`, or the preset a stack file
extends) names the engine, so it decides the scheduler.

A scheduler is a small object with schedule(engine) -> Batch (one iteration, reserving its KV),
held(engine, request) (the KV slots a request holds, freed when it leaves) and finished(engine,
request); it keeps no request state of its own beyond its engine's flags (sim/serve/engine.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tpsim.sim.hardware.profile import Profile
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.serve.kv import kv_bytes_per_token, kv_cache_bytes, sglang_mem_fraction
from tpsim.sim.serve.scheduler.sglang import CLIP, SGLang
from tpsim.sim.serve.scheduler.trtllm import TrtLlm
from tpsim.sim.serve.scheduler.vllm import VllmV1, cdiv
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import Stack

ENGINES = ("vllm", "sglang", "trtllm")
GIB = 1 << 30

# the router in front of --replicas N instances, as each engine's own data-parallel front end routes
ROUTERS = ("round-robin", "least-loaded")
ROUTER_OF = {
    "vllm": ("least-loaded", "vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request: the "
                             "engine with the least waiting x 4 + running (the coordinator's counts, refreshed "
                             "every 100 ms there; exact here)"),
    "sglang": ("round-robin", "python/sglang/srt/server_args.py load_balance_method 'round_robin' "
                              "(managers/data_parallel_controller.py)"),
    "trtllm": ("round-robin", "no router in TensorRT-LLM for separate instances: tpsim's choice, stated"),
}


def engine_of(stack_name: str | None) -> str:
    """The engine whose scheduler a --stack preset (or the preset its stack file extends) runs."""
    if stack_name is None:
        raise ValueError("serve needs a serving engine's stack: --stack vllm, sglang or trtllm (or a stack file "
                         "extending one); the reference harness has no request scheduler")
    engine = load_stack(stack_name).engine
    for name, prefix in (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM")):
        if engine.startswith(prefix):
            return name
    raise ValueError(f"--stack {stack_name} describes {engine}, which has no request scheduler in tpsim; serve "
                     f"takes an engine's stack: vllm, sglang or trtllm (or a stack file extending one)")


@dataclass(frozen=True)
class Setup:
    """What one engine instance runs with: its scheduler's constants and its KV cache."""

    engine: str
    budget: int              # tokens per iteration: vLLM max_num_batched_tokens, SGLang chunked_prefill_size,
                             # TensorRT-LLM max_num_tokens
    max_seqs: int            # running requests: max_num_seqs, max_running_requests, max_batch_size
    block_tokens: int        # KV block: vLLM 16, SGLang 1 (page_size), TensorRT-LLM 32
    slots: int               # KV blocks (token slots for SGLang) on each rank
    kv_bytes: int
    bytes_per_token: int
    max_len: int             # the longest request (prompt + output): the model's context
    router: str
    sources: dict = field(default_factory=dict)
    kv_terms: dict = field(default_factory=dict)
    max_prefill: int = 0     # SGLang max_prefill_tokens

    @property
    def kv_tokens(self) -> int:
        return self.slots * self.block_tokens

    def scheduler(self, fast: bool = True):
        """A fresh scheduler for one engine instance (fast False: vLLM's walks every step, for tests)."""
        if self.engine == "vllm":
            return VllmV1(self.budget, self.max_seqs, self.block_tokens, self.max_len, fast)
        if self.engine == "sglang":
            return SGLang(self.budget, self.max_prefill, self.max_seqs)
        return TrtLlm(self.budget, self.max_seqs, self.block_tokens)

    def check(self, prompt: int, output: int, where: str) -> None:
        """ValueError (one line) for a request this engine can never run."""
        if prompt + output > self.max_len:
            raise ValueError(f"{where}: prompt {prompt} + output {output} tokens is longer than the model's context "
                             f"({self.max_len}, --max-model-len)")
        e = self.engine
        need = (cdiv(prompt + output, self.block_tokens) if e != "sglang" else
                max(prompt + min(output, CLIP) + 1, prompt + output))
        if need > self.slots:
            raise ValueError(f"{where}: the KV cache is too small for a single request: prompt {prompt} + output "
                             f"{output} tokens need {need * self.block_tokens} KV tokens, one {e} rank holds "
                             f"{self.kv_tokens} ({self.kv_bytes / GIB:.2f} GiB at {self.bytes_per_token} B/token)")
        if e == "trtllm" and prompt > self.budget:
            raise ValueError(f"{where}: prompt {prompt} is longer than TensorRT-LLM's max_num_tokens {self.budget} "
                             f"(context chunking is off by default: enable_chunked_prefill False)")

    def to_dict(self) -> dict:
        return {"engine": self.engine, "budget_tokens": self.budget, "max_running": self.max_seqs,
                "kv_block_tokens": self.block_tokens, "kv_slots": self.slots, "kv_tokens": self.kv_tokens,
                "kv_bytes_per_rank": self.kv_bytes, "kv_bytes_per_token": self.bytes_per_token,
                "max_model_len": self.max_len, "router": self.router, "sources": dict(self.sources),
                "kv": dict(self.kv_terms)}


def setup(engine: str, model: ModelSpec, tp: int, profile: Profile, stack: Stack, *, budget: int | None = None,
          max_seqs: int | None = None, kv_gib: float | None = None, max_len: int | None = None,
          router: str | None = None) -> Setup:
    """The engine's constants on this GPU and model; the keyword arguments override them (the CLI's flags)."""
    mem_gib, src = profile.memory_gib, {}
    max_len = max_len or model.max_context
    if not max_len:
        raise ValueError(f"model {model.name} states no context length (max_position_embeddings): give --max-model-len")
    if model.max_context and max_len > model.max_context:
        raise ValueError(f"--max-model-len {max_len} is longer than {model.name}'s context {model.max_context}")
    bpt = kv_bytes_per_token(model, tp, stack)
    sg_fraction, max_prefill = 0.0, 0
    if engine == "vllm":
        big = mem_gib >= 70 and "a100" not in (profile.name + " " + profile.description).lower()
        b, s, block = (8192, 1024, 16) if big else (2048, 256, 16)
        src["budget"] = ("vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: max_num_batched_tokens 8192 for "
                         "`vllm serve` on a GPU of >= 70 GiB that is not an A100, else 2048")
        src["max_seqs"] = ("same: max_num_seqs 1024 (>= 70 GiB, not A100) else 256, then min(max_num_seqs, "
                           "max_num_batched_tokens)")
        src["block"] = "vllm/platforms/cuda.py: block_size 16"
        b = budget or b
        s = min(max_seqs or s, b)
    elif engine == "sglang":
        mib = mem_gib * 1024
        b = 2048 if mib < 35 * 1024 else 4096 if mib < 60 * 1024 else 8192 if mib < 160 * 1024 else 16384
        graph_bs = (256 if tp < 4 else 512) if mib < 160 * 1024 else 512
        src["budget"] = ("python/sglang/srt/server_args.py _handle_gpu_memory_settings (v0.5.9): chunked_prefill_size "
                         "by GPU memory (< 35 GB 2048, < 60 GB 4096, < 160 GB 8192, else 16384)")
        src["block"] = "server_args.py: page_size 1"
        src["max_prefill"] = "server_args.py: max_prefill_tokens 16384"
        b = budget or b
        sg_fraction = sglang_mem_fraction(mib, b, graph_bs, tp)
        max_prefill, block, s = max(16384, b), 1, 0
    else:
        b, s, block = 8192, 2048, 32
        src["budget"] = "tensorrt_llm/llmapi/llm_args.py: max_num_tokens 8192"
        src["max_seqs"] = "llm_args.py: max_batch_size 2048"
        src["block"] = "llm_args.py KvCacheConfig.tokens_per_block 32"
        b = budget or b
        s = max_seqs or s
    if kv_gib is not None:
        kv, terms = int(kv_gib * GIB), {"rule": "--kv-cache-gib", "kv_bytes": int(kv_gib * GIB)}
    else:
        kv, terms = kv_cache_bytes(engine, model, tp, stack, mem_gib, profile.device, b, sg_fraction)
    if kv <= 0:
        raise ValueError(f"the KV cache is too small for a single request: {model.name} at TP {tp} leaves no memory "
                         f"for it on one {profile.name} GPU ({terms['rule']} = {kv / GIB:.2f} GiB); use a higher TP "
                         f"degree or --kv-cache-gib")
    slots = kv // (bpt * block)
    if engine == "sglang":
        pool = min(max(int(slots / max_len * 512), 2048), 4096)
        s = max_seqs or min(slots // 2, pool)
        src["max_seqs"] = ("model_executor/model_runner.py: max_running_requests = min(max_total_num_tokens // 2, "
                           "req_to_token_pool size = min(max(tokens / context_len x 512, 2048), 4096))")
    router = router or ROUTER_OF[engine][0]
    src["router"] = ROUTER_OF[engine][1] if router == ROUTER_OF[engine][0] else "--router"
    for key, flag in (("budget", budget), ("max_seqs", max_seqs)):
        if flag is not None:
            src[key] = "given (command line)"
    return Setup(engine, b, s, block, slots, kv, bpt, max_len, router, src, terms, max_prefill)
