"""What a serving engine's sampler launches per step over the logits [batch, vocab], on the path of
the engine's own latency benchmark (what the presets model: "a step of `vllm bench latency`,
SGLang's bench_one_batch, `trtllm-bench latency`"), from the engines' source code only.

A sampler is a list of kernels, each described by the bytes it moves: passes over the head's output
[batch, vocab] in the model dtype, passes over fp32 [batch, vocab] tensors (4 bytes an element, a
read or a write each), and bytes per sequence of [batch]-sized token-id tensors. sim.price.work.op_work
turns them into one Work each (memory roofline at the profile's bandwidth and efficiency curve);
sim.price.cost gives the op its launch floor and, where the stack's graph_scope leaves the sampler
outside the CUDA graph, one eager launch per kernel (CostModel.issue_s). A kernel `in_logits` is
launched by the engine's logits processor, right after the LM head and its all-gather: it is
captured with the head (graph_scope "logits": SGLang, TensorRT-LLM), so it pays no eager launch
there (SAMPLERS[name].logits_kernels).

The reference harness (Stack.sampler "argmax", the default) keeps op_work's own sample Work: one
argmax over the logits in the model dtype (hw/kernels.py _sample), unchanged here. Data only: no
imports from sim (sim.stack.spec validates the names, sim.price.work prices the kernels).

Sources: beside each kernel, and each sampler's `path` names the benchmark's sampling parameters
and what the code skips on them (vLLM 0.11 line, vLLM 0.6.3 (V0), SGLang 0.4/0.5 line, TensorRT-LLM 1.x PyTorch
backend; a commit is the stored version of the file that was read).
"""
from __future__ import annotations

from dataclasses import dataclass

REFERENCE = "argmax"        # Stack.sampler default: op_work's own sample Work (the reference harness)


@dataclass(frozen=True)
class SamplerKernel:
    """One kernel of a sampler. Bytes: batch * vocab * (logits_reads * dtype bytes + 4 * fp32_passes)
    + batch * row_bytes."""

    name: str
    logits_reads: int = 0       # reads of the head's output [batch, vocab] in the model dtype
    fp32_passes: int = 0        # fp32 [batch, vocab] tensors read or written
    row_bytes: int = 0          # bytes per sequence of [batch] tensors (temperatures, token ids)
    in_logits: bool = False     # launched by the engine's logits processor (captured with the LM head)
    source: str = ""

    def bytes(self, batch: int, vocab: int, dtype_bytes: int) -> int:
        return batch * vocab * (self.logits_reads * dtype_bytes + 4 * self.fp32_passes) + batch * self.row_bytes

    def elements(self, batch: int, vocab: int) -> int:
        """Elements the kernel computes over ([batch, vocab], or [batch] for a token-id kernel)."""
        return batch * vocab if self.logits_reads or self.fp32_passes else batch


@dataclass(frozen=True)
class Sampler:
    """An engine's sampler on its latency benchmark's path: its kernels in launch order."""

    name: str
    engine: str
    path: str                   # the sampling parameters that pick this path, and what they skip
    kernels: tuple[SamplerKernel, ...]

    @property
    def logits_kernels(self) -> int:
        """Kernels launched by the logits processor (inside a "logits"-scope graph with the head)."""
        return sum(k.in_logits for k in self.kernels)


_V_SAMPLER = "vllm/v1/sample/sampler.py@3e342658"
_V_TOPK = "vllm/v1/sample/ops/topk_topp_sampler.py@01fa3fe7"
_V0 = "vllm/model_executor/layers/sampler.py@v0.6.3.post1"
_SG_LOGITS = "python/sglang/srt/layers/logits_processor.py@5993251f LogitsProcessor._get_logits"
_TR_SAMPLER = "tensorrt_llm/_torch/pyexecutor/sampler.py@28edbcdb"

SAMPLERS: dict[str, Sampler] = {s.name: s for s in (
    Sampler(
        "vllm-v1-random", "vLLM 0.11 (V1)",
        "vllm/benchmarks/latency.py@00cae075 main: SamplingParams(temperature=1.0, top_p=1.0, ignore_eos=True, "
        "max_tokens=output_len); vllm/v1/worker/gpu_input_batch.py@a9e3b0a0 InputBatch.add_request: not greedy -> "
        "random_reqs (all_random), top_p < 1 false -> no top_p_reqs, top_k -1 -> no top_k_reqs (top_k, top_p None). "
        f"Skipped on it: the greedy argmax ({_V_SAMPLER} Sampler.sample: all_random -> greedy_sampled = None), "
        "logprobs (max_num_logprobs None), penalties (no_penalties), allowed-token mask and bad words (None), the "
        "built-in logits processors (vllm/v1/sample/logits_processor/builtin.py@0272a72c MinP / LogitBias / "
        "MinTokens .apply return the logits untouched when no request sets them), FlashInfer's top-k/top-p kernel "
        f"({_V_TOPK} TopKTopPSampler.forward_cuda: k and p both None -> forward_native). The docstring's step "
        "list (fp32, processors, penalties, greedy unless all_random, temperature, top-k/top-p, sample) is the "
        "same on docs.vllm.ai v0.10.2, v0.19.0, v0.20.0 and v0.22.1, which bracket v0.11",
        (SamplerKernel("to_fp32", logits_reads=1, fp32_passes=1,
                       source=f"{_V_SAMPLER} Sampler.forward: logits = logits.to(torch.float32) (bf16 in: "
                              "vllm/model_executor/layers/logits_processor.py returns the head's dtype)"),
         SamplerKernel("temperature", fp32_passes=2, row_bytes=4,
                       source=f"{_V_SAMPLER} Sampler.apply_temperature(logits, temp, all_random): all_random skips "
                              "the torch.where, then logits.div_(temp.unsqueeze(dim=1)) runs at temperature 1.0 "
                              "too (no short-circuit): read and write fp32 [batch, vocab], temp [batch] fp32"),
         SamplerKernel("softmax", fp32_passes=2,
                       source=f"{_V_TOPK} forward_native: apply_top_k_top_p returns the logits when k and p are "
                              "None; probs = logits.softmax(dim=-1, dtype=torch.float32)"),
         SamplerKernel("exponential", fp32_passes=1,
                       source=f"{_V_TOPK} random_sample: q = empty_exponential_noise_like(probs) (torch.empty: "
                              "no kernel), q.exponential_() (no per-request generators): writes fp32 [batch, vocab]"),
         SamplerKernel("div_noise", fp32_passes=3,
                       source=f"{_V_TOPK} sample_with_exponential_noise: probs.div_(q) (reads probs and q, writes "
                              "probs); vllm/v1/sample/sampler.py@00ec9781 random_sample: the same "
                              "probs.div_(q).argmax(dim=-1)"),
         SamplerKernel("argmax", fp32_passes=1, row_bytes=8,
                       source=f"{_V_TOPK} sample_with_exponential_noise: .argmax(dim=-1).view(-1): int64 ids"),
         SamplerKernel("to_int32", row_bytes=12,
                       source=f"{_V_SAMPLER} Sampler.forward: sampled.long() (argmax's int64 already: no kernel), "
                              "then sampled.to(torch.int32) ('Use int32 to reduce the tensor size'): int64 in, "
                              "int32 out")),
    ),
    Sampler(
        "vllm-v0-random", "vLLM 0.6 (V0)",
        "benchmarks/benchmark_latency.py@v0.6.3.post1: SamplingParams(temperature=1.0, top_p=1.0, ignore_eos=True); "
        f"{_V0} Sampler.forward: no penalties (do_penalties False), top-p/top-k and min-p skipped "
        "(do_top_p_top_k, do_min_p False), then softmax and log_softmax over fp32, _sample_with_torch's random "
        "branch (_multinomial, no per-request generators); get_logprobs skips the whole logprob calculation "
        "(largest_num_logprobs -1: no logprobs requested); sampled_token_ids_tensor None (no spec decode). Runs on "
        "the driver only, after the logits gather",
        (SamplerKernel("to_fp32", logits_reads=1, fp32_passes=1,
                       source=f"{_V0} Sampler.forward: logits = logits.to(torch.float) (bf16 from the LM head)"),
         SamplerKernel("temperature", fp32_passes=2, row_bytes=4,
                       source=f"{_V0} Sampler.forward: logits.div_(sampling_tensors.temperatures.unsqueeze(dim=1)), "
                              "at temperature 1.0 too"),
         SamplerKernel("softmax", fp32_passes=2,
                       source=f"{_V0} Sampler.forward: probs = torch.softmax(logits, dim=-1, dtype=torch.float)"),
         SamplerKernel("log_softmax", fp32_passes=2,
                       source=f"{_V0} Sampler.forward: logprobs = torch.log_softmax(logits, dim=-1, "
                              "dtype=torch.float), computed on every step"),
         SamplerKernel("index_probs", fp32_passes=2, row_bytes=8,
                       source=f"{_V0} _sample_with_torch: probs[long_sample_indices] (advanced indexing: a copy of "
                              "fp32 [batch, vocab], int64 indices)"),
         SamplerKernel("exponential", fp32_passes=1,
                       source=f"{_V0} _multinomial: q = torch.empty_like(probs); q.exponential_()"),
         SamplerKernel("div_noise", fp32_passes=3,
                       source=f"{_V0} _multinomial: probs.div_(q) (reads probs and q, writes probs)"),
         SamplerKernel("argmax", fp32_passes=1, row_bytes=8,
                       source=f"{_V0} _multinomial: .argmax(dim=1).view(-1, num_samples): int64 ids")),
    ),
    Sampler(
        "sglang-greedy", "SGLang 0.4/0.5",
        "python/sglang/bench_one_batch.py@00944150 prepare_synthetic_inputs_for_latency_test: "
        "SamplingParams(temperature=0, max_new_tokens=output_len), and decode() runs model_runner.forward then "
        "model_runner.sample: temperature 0 is top_k 1, so sampling_info.is_all_greedy. Skipped on it: the "
        "temperature div, softmax and FlashInfer sampling of the non-greedy branch, logprobs (return_logprob "
        "False), custom logit processors (none registered), NaN detection (enable_nan_detection False)",
        (SamplerKernel("to_fp32", logits_reads=1, fp32_passes=1, in_logits=True,
                       source=f"{_SG_LOGITS}: after tensor_model_parallel_all_gather, logits = logits[:, : "
                              "self.config.vocab_size].float() (or logits_buffer.copy_ of that slice into an fp32 "
                              "buffer): one cast kernel, inside the captured decode graph"),
         SamplerKernel("argmax", fp32_passes=1, row_bytes=8,
                       source="python/sglang/srt/layers/sampler.py@584f55d1 Sampler.forward: if "
                              "sampling_info.is_all_greedy: batch_next_token_ids = torch.argmax(logits, -1) "
                              "(the same branch in the v0.5 line's Sampler.forward after _preprocess_logits)")),
    ),
    Sampler(
        "trtllm-torch-greedy", "TensorRT-LLM 1.x (PyTorch backend)",
        "tensorrt_llm/bench/benchmark/low_latency.py@000a01de latency_command: SamplingParams(end_id, pad_id, "
        "n=beam_width, use_beam_search=beam_width > 1): no temperature, top_k or top_p, so "
        "tensorrt_llm/_torch/pyexecutor/sampling_utils.py@053c42c9 resolve_sampling_strategy returns GREEDY; "
        "tensorrt_llm/llmapi/llm_args.py sampler_type default SamplerType.auto: 'TorchSampler unless BeamSearch "
        f"is requested'. Skipped on it ({_TR_SAMPLER} TorchSampler._process_requests): the embedding bias "
        "(_apply_embedding_bias returns when no request has one), the min-length penalty (none), logprobs "
        "(return_log_probs False), draft probs (speculation_needs_probs False: no draft logits). The host-device "
        "copies of _unbatch_sampling_results (destination indices in, new tokens out) are memcpys, not kernels",
        (SamplerKernel("to_fp32", logits_reads=1, fp32_passes=1, in_logits=True,
                       source="tensorrt_llm/_torch/modules/logits_processor.py@0d4c7ac8 LogitsProcessor.forward: "
                              "logits = lm_head(hidden_states) (gather_output: the vocab all-gather), then "
                              "logits = logits.float(): inside the captured graph"),
         SamplerKernel("argmax", fp32_passes=1, row_bytes=8,
                       source="tensorrt_llm/_torch/pyexecutor/sampling_utils.py@053c42c9 "
                              "SimpleGroupedStrategySampler.sample_grouped_strategies -> sample(GREEDY) -> "
                              "greedy_search_sampling_batch(logits, return_probs=False): torch.argmax(logits, "
                              "dim=-1), no softmax"),
         SamplerKernel("copy_tokens", row_bytes=12,
                       source=f"{_TR_SAMPLER} _sample_batched_by_strategy: batch_next_tokens_cuda_int[...].copy_("
                              "group_next_tokens_cuda): int64 ids into the int32 token buffer"),
         SamplerKernel("scatter_tokens", row_bytes=16,
                       source=f"{_TR_SAMPLER} _unbatch_sampling_results: new_tokens_cuda.view(...)[:, beam, ...]"
                              ".scatter_(0, batch_dest_indices_1d_cuda, batch_next_tokens_cuda_int): int64 "
                              "indices and int32 ids read, int32 written")),
    ),
)}

SAMPLER_NAMES = (REFERENCE, *SAMPLERS)


def get(name: str) -> Sampler | None:
    """The engine sampler `name`, or None for the reference's argmax (op_work's own Work)."""
    if name == REFERENCE:
        return None
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose from: {', '.join(SAMPLER_NAMES)}")
    return SAMPLERS[name]
