"""SGLang (v0.4/v0.5 line; python/sglang/srt/server_args.py defaults).

Every TP rank runs its own Scheduler process (python/sglang/srt/managers/scheduler.py
run_scheduler_process per tp_rank), so the batch is scheduled on each rank and no SchedulerOutput is
handed to workers; new requests reach the other ranks through broadcast_pyobj over the CPU group.
The overlap ("zero-overhead") scheduler is on by default: the CPU schedules batch j+1 while the GPU
runs batch j (scheduler.py event_loop_overlap). No public profiler measurement of SGLang's per-step
host time on CUDA was found: its scheduler terms are 0 (say so), the overlap mechanism stands, and
`tpsim profiles import-engine-bench` fits the terms from bench_one_batch output. The terms that grow with
TP carry values and ranges: the per-step request broadcast's tree hop is a host microbenchmark
(bench/gloo_broadcast_hops.py, labelled a proxy), the ranks' spread another Python engine's measured one;
the rest is proved absent by the code (sources "code:"). Source read at v0.4.6.post5 and v0.5.23 (PyPI).
SGLang's bench_one_batch runs the model runner without the scheduler (bench_one_batch.py: no
broadcast_pyobj, no overlap): the tree and the overlap do not apply to its rows.
"""
from tpsim.sim.stack.evidence import eager_layer_python


NAME, LINE = "sglang", "0.5"
CURRENT = True          # `--stack sglang`
ENGINE = "SGLang 0.4.6-0.5.x (server scheduler, overlap on)"
_SA = "python/sglang/srt/server_args.py"
AR_FUSION = ("sglang", "--enable-flashinfer-allreduce-fusion (python/sglang/srt/server_args.py: off by default for Llama; sim/stack/ar_fusion.py)")
STACK = {
    "dtype": ("bf16", f"{_SA} dtype: str = 'auto': the model config's torch_dtype (configs/model_config.py "
                      "_get_and_verify_dtype), bfloat16 for Llama 3.x, Qwen2.5 and Qwen3 (give --dtype fp16 for an "
                      "fp16 checkpoint)"),
    "fp8_activations": ("dynamic", "with FP8 linears: python/sglang/srt/layers/quantization/fp8_utils.py apply_fp8_linear: "
                                   "no input_scale -> sglang_per_token_quant_fp8 (per-token dynamic), then "
                                   "sgl_kernel.fp8_scaled_mm (CUTLASS) with the input's 16-bit dtype as output, so the "
                                   "all-reduce stays bf16; priced with vLLM's measured CUTLASS scaled-mm table (the same "
                                   "kernel family; aiconfigurator's SGLang fp8 rows are not carried). --kv-cache-dtype "
                                   "fp8_e4m3 (--kv-dtype fp8): an e4m3 cache"),
    "attention": ("fa3", f"{_SA} ServerArgs._handle_attention_backend_compatibility (v0.5 line; model_runner.py "
                         "model_specific_adjustment from v0.4.6): with no --attention-backend, an MHA model "
                         "(is_fa3_default_architecture: LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, Gemma2/3, ...) on "
                         "Hopper (is_hopper_with_cuda_12_3) gets \"fa3\", anything else \"flashinfer\"; sgl-project/"
                         "sglang#5064: 'sm80, sm86, sm89 -> FlashInfer, sm90 -> FA3 (Llama, Qwen, Gemma)'. Decode "
                         "priced from FA3's measured bandwidth (sim/price/flash_decode.py); Mistral/Mixtral stay on FlashInfer "
                         "on Hopper (sglang#27633): attention_archs below"),
    "attention_archs": (("Llama4ForConditionalGeneration", "LlamaForCausalLM", "Olmo2ForCausalLM", "Gemma2ForCausalLM",
                         "Gemma3ForConditionalGeneration", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                         "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", "Glm4MoeForCausalLM",
                         "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration",
                         "Step3VLForConditionalGeneration"),
                        "python/sglang/srt/utils.py is_fa3_default_architecture (v0.5 line, after sgl-project/sglang#9245 "
                        "added Glm4vMoe): the auto-select above gives fa3 only when the config's architectures[0] is in "
                        "this set; any other architecture (MistralForCausalLM among tpsim's presets) gets \"flashinfer\", "
                        "the attention_fallback, on Hopper too"),
    "attention_fallback": ("flashinfer", f"{_SA} the same auto-select: off Hopper (A100 8.0, L40S 8.9) the default is "
                                         "\"flashinfer\" (is_flashinfer_available), priced from FlashInfer's "
                                         "batch-decode curve"),
    "attention_knobs": ({"fa3": {"graph_table_kv_len": 131072, "graph_len_model": True, "prepare_per_call": True}},
                        "python/sglang/srt/layers/attention/flashattention_backend.py (v0.5 line): num_splits = 0 "
                        "(1 only with enable_deterministic_inference) and no scheduler_metadata, so FA3's split "
                        "heuristic and its prepare kernel (flash_prepare_scheduler.cu) run inside every call; "
                        "max_seqlen_k is not passed, so FA3 takes seqlen_k = page_table.size(1) x page_size "
                        "(hopper/flash_api.cpp mha_fwd), and under CUDA graphs the page table is init_cuda_graph_"
                        "state's [max_bs, ceil(max_context_len / page_size)] buffer: the static split bound comes "
                        "from the model's context length (graph_len_model: ModelSpec.max_context, max_position_embeddings "
                        "of its config.json, what the server's context_length defaults to; 131072 for a model that "
                        "states none, Llama 3.1's; a server started with --context-length N: a stack file with "
                        "graph_len_model false and graph_table_kv_len N). FlashInfer (the "
                        "fallback) keeps its defaults: page_size 1 (server_args _handle_page_size)"),
    "attention_prep_kernels": (3, "python/sglang/srt/layers/rotary_embedding.py RotaryEmbedding.forward_cuda: one "
                                  "kernel for q and k (apply_rope_with_cos_sin_cache_inplace); python/sglang/srt/"
                                  "mem_cache/memory_pool.py MHATokenToKVPool.set_kv_buffer: k_buffer[loc] = cache_k and "
                                  "v_buffer[loc] = cache_v, two index_put kernels (the V copy on an alternate stream "
                                  "while capturing: not priced as overlapped)"),
    "engine_kernels": (True, "python/sglang/srt/layers/layernorm.py RMSNorm.forward_cuda: fused_add_rmsnorm(x, residual, "
                             "weight, eps) (sgl_kernel: the residual add inside the norm kernel, models/llama.py "
                             "LlamaDecoderLayer passes the residual to each norm) / rmsnorm; layers/activation.py "
                             "SiluAndMul.forward_cuda: silu_and_mul"),
    "kv": ("filled", "both backends read each request's filled KV only: FlashInfer paged decode its kv_indptr range, "
                     "FA3 its page table up to cache_seqlens (python/sglang/srt/layers/attention/flashinfer_backend.py, "
                     "flashattention_backend.py)"),
    "expand_gqa": (False, "FlashInfer's BatchDecodeWithPagedKVCacheWrapper and FA3 take num_kv_heads (native GQA)"),
    "prefill_logits": ("last", "python/sglang/srt/layers/logits_processor.py: prefill prunes hidden states to "
                               "each request's last token before the LM head (no return_logprob)"),
    "head": ("vocab-parallel", "python/sglang/srt/layers/vocab_parallel_embedding.py ParallelLMHead; "
                               "logits_processor.py all-gathers the vocab shards"),
    "embed": ("vocab-parallel", "python/sglang/srt/layers/vocab_parallel_embedding.py VocabParallelEmbedding (vLLM's): "
                                "masked lookup of the rank's vocab shard, then tensor_model_parallel_all_reduce of "
                                "[tokens, hidden] (models/llama.py LlamaModel.embed_tokens)"),
    "graph_scope": ("logits", "python/sglang/srt/model_executor/cuda_graph_runner.py: the captured forward is the "
                              "model's forward, which ends in logits_processor (LM head + all-gather); replay returns "
                              "LogitsProcessorOutput(next_token_logits=...) from the output buffers, and "
                              "model_runner.sample runs the sampler eagerly after it"),
    "compile_prefill": (False, f"{_SA} enable_torch_compile: bool = False"),
    "compile_decode": (False, f"{_SA} enable_torch_compile: bool = False"),
    "mm_decompose_m1": (True, "only read with --enable-torch-compile (off by default): python/sglang/srt/compilation/"
                              "torch_compile_decoration.py@v0.5.23:71-75 set_torch_compile_config sets torch._inductor."
                              "config.coordinate_descent_tuning = True (model_executor/runner/decode_cuda_graph_runner.py:446-447 calls it), "
                              "and patch_model (:43-61) compiles each captured decode batch size with dynamic=False (not HIP) "
                              "(mode max-autotune-no-cudagraphs): at batch 1 the linears' M == 1 is static, so "
                              "decomposition.py mm decomposes them; UnquantizedLinearMethod.apply is F.linear on "
                              "CUDA fp16 (layers/quantization/unquant.py:614)"),
    "decode_graphs": (True, f"{_SA} disable_cuda_graph: bool = False (decode batches up to cuda_graph_max_bs "
                            "replay CUDA graphs)"),
    "prefill_graphs": (False, "python/sglang/srt/model_executor/cuda_graph_runner.py captures decode only"),
    "layer_host_s": eager_layer_python("counted on vLLM's layer: SGLang's eager LlamaDecoderLayer calls the same modules (norms, QKVParallelLinear, get_rope, RadixAttention -> attn_backend.forward, RowParallelLinear, SiluAndMul) with its own views, taken as the same count"),
    "sampler": ("sglang-greedy", "sim/stack/sampler.py SAMPLERS['sglang-greedy']: bench_one_batch samples at temperature=0 (is_all_greedy), so python/sglang/srt/layers/sampler.py Sampler.forward runs one torch.argmax over the fp32 logits that logits_processor.py _get_logits cast with .float() inside the graph"),
    "collective": ("sglang-custom", f"{_SA} disable_custom_all_reduce: bool = False (sgl-kernel's custom all-reduce, "
                             "vLLM's design; priced by sim/price/comm/custom_allreduce.py)"),
}
HOST = {
    "overlap": (True, f"{_SA} disable_overlap_schedule: bool = False (scheduler.py event_loop_overlap)"),
    "schedule_s": (71e-6, "a PROXY: no public profiler measurement of SGLang's scheduler step found; another Python "
                          "engine's scheduler step measured here (bench/engine_host_path.py, vLLM v0.32.0 CPU build: "
                          "Scheduler.schedule's intercept 71.3 us, sim/stack/presets/vllm.py): SGLang's event loop "
                          "(managers/scheduler.py event_loop_overlap: recv_requests, get_next_batch_to_run, "
                          "process_batch_result) is other Python doing the same kinds of work per iteration. Range: "
                          "that measurement's low end, 35 us, to twice its high end, 290 us (the loop does more "
                          "than vLLM's schedule call: its result processing too). Overlapped, it hides under the "
                          "pass unless longer", (35e-6, 290e-6)),
    "handoff_tree_hop_s": (255.3e-6, "python/sglang/srt/managers/scheduler.py recv_requests: at tp_size > 1 every "
                                     "loop iteration calls broadcast_pyobj(recv_reqs, ..., self.tp_cpu_group); with no "
                                     "new request (steady decode) that is one gloo broadcast of an int64 [1] tensor "
                                     "(utils broadcast_pyobj), a binomial tree (gloo/broadcast.cc; sim.stack.host_lane."
                                     "tree_hops). Per hop: bench/gloo_broadcast_hops.py, the median arrival of rank 1 "
                                     "of 2 real gloo ranks over loopback TCP, 255.3 us (3000 steps; bench/results/"
                                     "gloo_broadcast_hops.txt; six runs here gave medians of 219-278 us). A PROXY "
                                     "measured on this project's 2-vCPU shared VM "
                                     "(no public per-world-size gloo broadcast latency found; pytorch/pytorch#127179 "
                                     "reports ~150 us per gloo broadcast of an 8x8 tensor, host and world size not "
                                     "stated): the thread wake-ups that dominate a hop are likely shorter on a "
                                     "dedicated server host. Overlapped, the tree hides under the pass. Range: 20 us "
                                     "per hop (one loopback TCP send/recv and two thread wake-ups on a dedicated host, "
                                     "an estimate; pytorch/pytorch#127179's ~150 us lies inside) to 278 us, the "
                                     "slowest of the six runs here", (20e-6, 278e-6)),
    "rank_spread_s": (45e-6, "a PROXY: no SGLang per-rank measurement; every TP rank runs its own Scheduler over the "
                             "same requests (identical host work per step), so its spread is OS noise and CPython "
                             "on each rank's core, measured for another Python engine's per-rank step work at 45 us "
                             "(bench/engine_host_path.py, vLLM v0.32.0 CPU build at TP2: robust sigma of a rank's "
                             "own host CPU time per step). Range: 10 us (an OS-noise estimate for a dedicated core) "
                             "to that measurement's high end. Overlapped, it hides under the pass",
                      (10e-6, 120e-6)),
    "handoff_s": (0.0, "code: managers/scheduler.py@0.4.6.post5 recv_requests: with no new request (steady decode) "
                       "broadcast_pyobj sends only the int64 [1] size (utils.py L932-935), the tree hop term; every "
                       "rank schedules the batch itself, so no step is handed to workers; at TP 1 no broadcast "
                       "(tp_size != 1 guard, L871)"),
    "handoff_per_seq_s": (0.0, "code: as handoff_s: the broadcast payload holds new requests only, none in steady "
                               "decode"),
    "handoff_per_rank_s": (0.0, "code: broadcast_pyobj is a gloo broadcast (a binomial tree: handoff_tree_hop_s "
                                "holds the ranks' order), no shared-memory polling"),
    "handoff_wake_s": (0.0, "code: gloo's blocking recv wakes each rank as its hop arrives; the measured hop "
                            "(handoff_tree_hop_s, real gloo ranks) holds those wake-ups"),
    "step_broadcasts": (0, "code: no GPU-side broadcast of step inputs: each rank builds its ForwardBatch itself "
                           "(scheduler.py get_next_batch_to_run on every rank); DP attention, grammar and "
                           "SYNC_TOKEN_IDS_ACROSS_TP collectives are off by default (environ.py@0.5.23 L790)"),
}
