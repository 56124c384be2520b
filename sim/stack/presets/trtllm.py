"""TensorRT-LLM, PyTorch backend (1.x; tensorrt_llm/llmapi/llm_args.py defaults).

Each TP rank is an MPI rank running its own PyExecutor loop (tensorrt_llm/_torch/pyexecutor/py_executor.py);
the overlap scheduler is on by default: the host prepares and launches iteration j+1 while the GPU runs
iteration j, and the previous iteration's outputs are processed after that launch. Host time per
iteration from TensorRT-LLM's own host_step_time statistic (a host-time measurement, not an
end-to-end result) in NVIDIA/TensorRT-LLM#10273.
"""

NAME = "trtllm"
ENGINE = "TensorRT-LLM 1.x (PyTorch backend)"
_ARGS = "tensorrt_llm/llmapi/llm_args.py"
STACK = {
    "dtype": ("bf16", f"{_ARGS} dtype: str = 'auto': the checkpoint's torch_dtype, bfloat16 for Llama 3.x, Qwen2.5 "
                      "and Qwen3 (give --dtype fp16 for an fp16 checkpoint)"),
    "attention": ("flash", "tensorrt_llm/_torch/attention_backend/trtllm.py: TRT-LLM's fused (flash-style) "
                           "context FMHA and XQA decode kernels over the paged KV cache; priced as flash"),
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
    "layer_host_s": (55.6e-6, "measured here from the code: vLLM v0.11's eager CUDA Llama decoder layer (TP > 1, V1 FlashAttention) makes, beyond its 12 kernel launches, 12 nn.Module calls, 13 tensor ops that launch nothing (views, slices, split, unbind, .data, empty: FlashAttentionImpl.forward's own comment, 'view and slice ... are surprisingly slow even in the case they do not invoke any GPU ops'), 1 custom-op dispatch into Python (torch.ops.vllm.unified_attention_with_output) and ~30 Python frames (bench/eager_layer_python.py COUNT, file and function per line); each kind timed on this project's CPU with the same torch: 55.6 us per layer, range [44.5, 113.6] us (bench/results/eager-layer-python-2026-12-06.txt: the count -/+20%, the top at the median repeats of a loaded host). Only an eager phase pays it: compiled, Inductor's graph holds these ops; counted on vLLM's layer: TensorRT-LLM's PyTorch-backend LlamaDecoderLayer (tensorrt_llm/_torch/models/modeling_llama.py) calls the same modules in eager Python with its own views, taken as the same count"),
    "sampler": ("trtllm-torch-greedy", "sim/stack/sampler.py SAMPLERS['trtllm-torch-greedy']: trtllm-bench latency sets no temperature/top_k/top_p (GREEDY) and sampler_type auto picks TorchSampler: LogitsProcessor's logits.float() inside the graph, then pyexecutor/sampler.py's argmax and two [batch] token-id kernels (copy_, scatter_) eagerly"),
    "collective": ("trtllm-auto", "tensorrt_llm/_torch/distributed/ops.py AllReduce strategy AUTO: custom one-shot/"
                             "two-shot kernels for small messages, NCCL for large (priced by sim/price/comm/custom_allreduce.py)"),
}
HOST = {
    "overlap": (True, f"{_ARGS} disable_overlap_scheduler: bool = Field(default=False)"),
    "schedule_per_seq_s": (1.3e-6, "NVIDIA/TensorRT-LLM#10273: scheduling is ~4.4% of host_step_time "
                                   "(45.11 ms per iteration at 1536 requests per rank, GB200): 1.98 ms / 1536"),
    "rank_spread_s": (0.0, "no public measurement of the spread of PyExecutor ranks' per-iteration host time "
                           "found: 0"),
    "handoff_tree_hop_s": (0.0, "each MPI rank runs its own PyExecutor; rank 0 broadcasts new requests each "
                                "iteration (NVIDIA/TensorRT-LLM#15134 measures that 'per-iteration request "
                                "broadcast' only for 40k-token disaggregated requests on GB300). The broadcast is "
                                "pyexecutor's dist.broadcast(payloads, root=0): mpi4py's pickled-object bcast over "
                                "the MPI shared-memory transport, not gloo's TCP tree, so the gloo hop "
                                "(bench/gloo_broadcast_hops.py) does not carry over; no public measurement of "
                                "mpi4py's small-object bcast at TP sizes found: 0"),
    "output_per_seq_s": (28.1e-6, "NVIDIA/TensorRT-LLM#10273: the rest of host_step_time, "
                                  "(45.11 - 1.98) ms / 1536 requests"),
}
