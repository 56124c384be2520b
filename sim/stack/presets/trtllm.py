"""TensorRT-LLM, PyTorch backend (1.x; tensorrt_llm/llmapi/llm_args.py defaults).

Each TP rank is an MPI rank running its own PyExecutor loop (tensorrt_llm/_torch/pyexecutor/py_executor.py);
the overlap scheduler is on by default: the host prepares and launches iteration j+1 while the GPU runs
iteration j, and the previous iteration's outputs are processed after that launch. Host time per
iteration from TensorRT-LLM's own host_step_time statistic (a host-time measurement, not an
end-to-end result) in NVIDIA/TensorRT-LLM#10273. The terms that grow with TP (the per-iteration request
broadcast over MPI, the ranks' spread) carry values and ranges from the code and estimates, each said
which; tensorrt_llm/_torch/pyexecutor/executor_request_queue.py and _torch/distributed/communicator.py
read at the search index's stored version (commit 007a7508).
"""
from tpsim.sim.stack.evidence import eager_layer_python, mpi_request_broadcast


NAME, LINE = "trtllm", "1"
CURRENT = True          # `--stack trtllm`
ENGINE = "TensorRT-LLM 1.x (PyTorch backend, overlap scheduler on)"
_ARGS = "tensorrt_llm/llmapi/llm_args.py"
STACK = {
    "dtype": ("bf16", f"{_ARGS} dtype: str = 'auto': the checkpoint's torch_dtype, bfloat16 for Llama 3.x, Qwen2.5 "
                      "and Qwen3 (give --dtype fp16 for an fp16 checkpoint)"),
    "fp8_activations": ("static", "with FP8 linears: tensorrt_llm/_torch/modules/linear.py FP8QDQLinearMethod (QuantAlgo.FP8, "
                                  "ModelOpt checkpoints): a per-tensor weight_scale and a static per-tensor input_scale "
                                  "from the checkpoint's calibration, the linear's output in the model dtype, so the AUTO "
                                  "all-reduce reduces bf16 (its FP8 LOWPRECISION strategy is opt-in); priced with vLLM's "
                                  "measured CUTLASS scaled-mm table (aiconfigurator's TRT-LLM fp8 rows, not carried, run "
                                  "gate/up 1.2-1.5x faster than bf16 where vLLM's run 1.3-1.9x)"),
    "attention": ("xqa", "tensorrt_llm/_torch/attention_backend/trtllm.py TrtllmAttention -> the thop attention op "
                         "(cpp/tensorrt_llm/thop/attentionOp.cpp) -> AttentionOp::enqueueGeneration: the XQA kernel "
                         "for generation (mEnableXQA = true, cpp/tensorrt_llm/common/attentionOp.h), its grid from "
                         "computeMultiBlockCount (sim/price/decode_grid.py xqa); context FMHA for prefill (a fused "
                         "flash-style kernel, priced at its roofline)"),
    "attention_knobs": ({"xqa": {"graph_capture_kv_len": 131071, "graph_len_model": True}},
                        "multi_block on: attentionOp.h bool mMultiBlockMode = true, which the PyTorch op never clears "
                        "(only a runtime_perf_knobs value or forced-deterministic attention would); heuristic 'sqrt': "
                        "decoderXQAImplCommon.h computeMultiBlockCount (max_past_kv_length, kMinHistoryTokensPerBlock "
                        "128, round(sqrt(8 M)) cap). graph_capture_kv_len: the CTA count is computed on the host at "
                        "capture and baked into the graph; tensorrt_llm/_torch/pyexecutor/model_engine.py "
                        "_create_cuda_graph_warmup_request captures each generation graph with one dummy request of "
                        "min(available tokens, max_seq_len - 1, max_position_embeddings - draft_len) tokens ('Insert "
                        "the longest request first to simulate padding'), max_seq_len defaulting to the checkpoint's "
                        "max_position_embeddings (_infer_max_seq_len_from_config; llama3 rope is not rescaled): the "
                        "model's context - 1 (graph_len_model: ModelSpec.max_context; 131071 for a model that states "
                        "none, Llama 3.1's). A server started with --max_seq_len N captures at N - 1: a stack file "
                        "with graph_len_model false and graph_capture_kv_len N - 1"),
    "attention_prep_kernels": (1, "tensorrt_llm/_torch/attention_backend/trtllm.py TrtllmAttention.support_fused_rope() "
                                  "and support_fused_qkv() are True: the attention op takes the fused qkv and its "
                                  "QKV-preprocessing kernel applies RoPE and writes the new K/V into the paged cache "
                                  "before the decode kernel (update_kv_cache): one kernel"),
    "engine_kernels": (True, "tensorrt_llm/_torch/modules/rms_norm.py RMSNorm.forward: flashinfer_fused_add_rmsnorm("
                             "hidden_states, residual, weight, eps) with IS_FLASHINFER_AVAILABLE (the residual add inside "
                             "the norm kernel) / flashinfer_rmsnorm; _torch/custom_ops flashinfer_silu_and_mul"),
    "kv": ("filled", "paged KV cache: the decode kernels read each sequence's filled blocks only"),
    "expand_gqa": (False, "XQA is the grouped-query decode kernel (K/V heads not repeated)"),
    "prefill_logits": ("last", f"{_ARGS} gather_generation_logits/return_context_logits False: context "
                               "logits only for each request's last token"),
    "head": ("vocab-parallel", "tensorrt_llm/_torch/modules/embedding.py LMHead: column-parallel over the "
                               "vocabulary with gather_output (all-gather)"),
    "embed": ("vocab-parallel", "tensorrt_llm/_torch/models/modeling_llama.py LlamaModel.embed_tokens = Embedding(..., "
                                "tensor_parallel_mode=TensorParallelMode.COLUMN, gather_output=True); "
                                "_torch/modules/embedding.py pre_comm_embedding_ops: COLUMN masks the ids outside the "
                                "rank's vocab range, F.embedding, masked_fill_, then the all-reduce of the partial rows"),
    "graph_scope": ("logits", "tensorrt_llm/_torch/pyexecutor/model_engine.py: the CUDA graph captures the model "
                              "forward, which returns logits (DecoderModelForCausalLM.forward -> logits_processor with "
                              "lm_head); py_executor.py then runs the Sampler (pyexecutor/sampler.py) on those logits "
                              "outside the graph (docs/source/developer-guide/overview.md: 'Sampler: takes the raw "
                              "outputs (logits) from the ModelEngine')"),
    "compile_prefill": (False, f"{_ARGS} torch_compile_config: None by default (no torch.compile)"),
    "compile_decode": (False, f"{_ARGS} torch_compile_config: None by default"),
    "mm_decompose_m1": (False, "no Inductor on the linears: torch_compile_config None by default; with it, "
                               "TorchCompileConfig.enable_inductor = False by default (llm_args.py), and tensorrt_llm/"
                               "_torch/compilation/backend.py Backend.optimize returns the FX graph (custom fusion "
                               "passes only) unless enable_inductor; nothing sets coordinate_descent_tuning (torch's "
                               "default False, which the decomposition needs even on that aot_autograd path). "
                               "Linears run TRT-LLM's own GEMM ops or F.linear (cuBLAS)"),
    "decode_graphs": (True, f"{_ARGS} cuda_graph_config: CUDA graphs for generation-only batches by default"),
    "prefill_graphs": (False, f"{_ARGS} cuda_graph_config: generation batches only"),
    "layer_host_s": eager_layer_python("counted on vLLM's layer: TensorRT-LLM's PyTorch-backend LlamaDecoderLayer (tensorrt_llm/_torch/models/modeling_llama.py) calls the same modules in eager Python with its own views, taken as the same count"),
    "sampler": ("trtllm-torch-greedy", "sim/stack/sampler.py SAMPLERS['trtllm-torch-greedy']: trtllm-bench latency sets no temperature/top_k/top_p (GREEDY) and sampler_type auto picks TorchSampler: LogitsProcessor's logits.float() inside the graph, then pyexecutor/sampler.py's argmax and two [batch] token-id kernels (copy_, scatter_) eagerly"),
    "collective": ("trtllm-auto", "tensorrt_llm/_torch/distributed/ops.py AllReduce strategy AUTO: custom one-shot/"
                             "two-shot kernels for small messages, NCCL for large (priced by sim/price/comm/custom_allreduce.py)"),
}
HOST = {
    "overlap": (True, f"{_ARGS} disable_overlap_scheduler: bool = Field(default=False)"),
    "schedule_per_seq_s": (1.3e-6, "NVIDIA/TensorRT-LLM#10273: scheduling is ~4.4% of host_step_time "
                                   "(45.11 ms per iteration at 1536 requests per rank, GB200): 1.98 ms / 1536"),
    "rank_spread_s": (45e-6, "a PROXY: no TensorRT-LLM per-rank measurement; every MPI rank runs its own PyExecutor "
                             "over the same requests (identical host work per iteration), so its spread is OS noise "
                             "and CPython on each rank's core, measured for another Python engine's per-rank step "
                             "work at 45 us (bench/engine_host_path.py, vLLM v0.32.0 CPU build at TP2). Range: 10 us "
                             "(an OS-noise estimate for a dedicated core) to that measurement's high end. "
                             "Overlapped, it hides under the pass", (10e-6, 120e-6)),
    **mpi_request_broadcast("every iteration rank 0 broadcasts the new requests, even an empty list "
                            "(executor_request_queue.py _broadcast_new_requests -> self.dist.broadcast((new_requests, "
                            "py_request_objects), root=0)); communicator.py safe_broadcast pickles them (17 bytes "
                            "empty: 0.41 us dumps, 0.32 us loads, measured here) and sends an int64 [3] header, then "
                            "the bytes"),
    "handoff_per_seq_s": (0.0, "code: the broadcast payload holds new requests only (executor_request_queue.py "
                               "_broadcast_new_requests): none in steady decode"),
    "handoff_per_rank_s": (0.0, "code: the MPI broadcast's tree (handoff_tree_hop_s) holds the ranks' order; no "
                                "shared-memory ring polled"),
    "step_broadcasts": (0, "code: each rank builds its own inputs; without attention DP no other per-iteration "
                           "collective outside the graph (tp_allgather / tp_gather are attention-DP only: "
                           "executor_request_queue.py _fetch_new_requests_attention_dp, py_executor.py "
                           "_enqueue_responses)"),
    "output_per_seq_s": (28.1e-6, "NVIDIA/TensorRT-LLM#10273: the rest of host_step_time, "
                                  "(45.11 - 1.98) ms / 1536 requests"),
}
