"""vLLM, V1 engine (v0.11 line; source read at vllm-project/vllm commits named below).

Serving loop (vllm/v1/engine/core.py EngineCore.step): schedule -> execute_model -> update_from_output,
in series unless --async-scheduling. At TP > 1 the MultiprocExecutor (vllm/v1/executor/multiproc_executor.py)
broadcasts each SchedulerOutput to the N worker processes through the shared-memory MessageQueue
(vllm/distributed/device_communicators/shm_broadcast.py), whose readers poll with os.sched_yield; at
TP 1 the UniProcExecutor runs the step in-process (no hand-off). Each worker prepares its inputs
(vllm/v1/worker/gpu_model_runner.py _prepare_inputs) and replays its CUDA graph.

Host constants are profiler measurements of host time (never end-to-end results); where no public
measurement was found the term is 0 and says so: `tpsim profiles import-engine-bench` fits it from
the user's own `vllm bench latency` runs.
"""

NAME = "vllm"
ENGINE = "vLLM 0.11 (V1 engine)"
STACK = {
    "dtype": ("bf16", "vllm/config/model.py ModelConfig.dtype 'auto' (_get_and_verify_dtype): the checkpoint config's "
                      "torch_dtype, bfloat16 for Llama 3.x, Qwen2.5 and Qwen3 (give --dtype fp16 for an fp16 checkpoint); "
                      "it decides, among others, whether SymmMemCommunicator (bf16 only) takes a message"),
    "attention": ("fa3", "vllm/platforms/cuda.py get_attn_backend_cls: FLASH_ATTN is V1's default backend on "
                         "sm80+; vllm/attention/utils/fa_utils.py get_flash_attn_version: FA3 on sm90 (Hopper), "
                         "FA2 on any other GPU: a profile stating another compute_capability (a100-sxm 8.0, l40s-pcie 8.9) "
                         "prices it as fa2 and says so, sim/price/flash_decode.py kernel_on"),
    "attention_fallback": ("fa2", "vllm/attention/utils/fa_utils.py get_flash_attn_version: 'if hopper default to "
                                  "FA3, otherwise stick to FA2'"),
    "attention_prep_kernels": (2, "vllm/model_executor/layers/rotary_embedding.py RotaryEmbedding: one kernel for q "
                                  "and k (ops.rotary_embedding in eager; forward_native, one fused Triton kernel, "
                                  "under Inductor); vllm/v1/attention/backends/flash_attn.py FlashAttentionImpl.forward: "
                                  "reshape_and_cache_flash writes K and V in one kernel"),
    "engine_kernels": (True, "vllm/model_executor/layers/layernorm.py RMSNorm.forward_cuda: ops.fused_add_rms_norm(x, "
                             "residual, ...) (the residual add inside the norm kernel) / ops.rms_norm; activation.py "
                             "SiluAndMul.forward_cuda: ops.silu_and_mul: vLLM's CUDA ops when a phase runs without "
                             "Inductor (under torch.compile it takes forward_native, priced from Inductor's kernels)"),
    "kv": ("filled", "vllm/v1/attention/backends/flash_attn.py: flash_attn_varlen_func(seqused_k=seq_lens, "
                     "block_table=...) reads only each sequence's filled blocks"),
    "expand_gqa": (False, "vllm/v1/attention/backends/flash_attn.py: K/V keep num_kv_heads; FlashAttention "
                          "handles GQA natively"),
    "prefill_logits": ("last", "vllm/v1/worker/gpu_model_runner.py: logits only at logits_indices (each "
                               "request's last scheduled token)"),
    "head": ("vocab-parallel", "vllm/model_executor/layers/vocab_parallel_embedding.py ParallelLMHead: each rank "
                               "computes batch x vocab/TP logits; V1 all-gathers them to every rank, which all run "
                               "the sampler over the full vocabulary (vllm-project/vllm#9856: 'the logits_processor "
                               "has an AllGather instead of a Gather'): priced as the head.allgather collective and "
                               "a full-vocab sample op on each rank (sim/schedule/builder.py)"),
    "embed": ("vocab-parallel", "vllm/model_executor/layers/vocab_parallel_embedding.py@00db0119 VocabParallelEmbedding"
                                ".forward: at tp_size > 1 get_masked_input_and_mask (ids outside the rank's vocab shard "
                                "-> 0), F.embedding over the shard, masked_fill_ of the masked rows, then "
                                "tensor_model_parallel_all_reduce of [tokens, hidden] (LlamaModel.embed_tokens)"),
    "graph_scope": ("forward", "vllm/v1/worker/gpu_model_runner.py execute_model: the CUDA graph (CUDAGraphWrapper "
                               "around the compiled model) replays self.model(input_ids, positions, ...) -> hidden "
                               "states only; then sample_hidden_states = hidden_states[logits_indices], "
                               "self.model.compute_logits(...) (LM head + logits_processor.py all-gather) and "
                               "self.sampler(...) run eagerly, kernel by kernel, outside the graph"),
    "compile_prefill": (True, "vllm/config/compilation.py: V1 compiles the model with torch.compile "
                              "(CompilationMode VLLM_COMPILE by default)"),
    "compile_decode": (True, "vllm/config/compilation.py: as compile_prefill"),
    "decode_graphs": (True, "vllm/config/compilation.py cudagraph_mode FULL_AND_PIECEWISE: decode batches "
                            "replay full CUDA graphs (capture sizes up to 512)"),
    "prefill_graphs": (False, "vllm/config/compilation.py: prefill runs piecewise graphs only up to the "
                              "largest capture size and attention outside them; priced as eager launches"),
    "mm_decompose_m1": (False, "vllm/compilation/compiler_interface.py@v0.11.0:550-556 (v0.33.0:769-776) "
                               "set_inductor_config sets coordinate_descent_tuning (VLLM_ENABLE_INDUCTOR_COORDINATE_"
                               "DESCENT_TUNING) only for a single-size compile (isinstance(runtime_shape, int); "
                               "compile_range.is_single_size()), i.e. a size in compilation_config.compile_sizes, "
                               "default None (vllm/config/compilation.py@v0.11.0:210, v0.33.0:578): the default "
                               "build compiles one graph for the symbolic num_tokens (compilation/backends.py@v0.11.0"
                               ":341 runtime_shape=None; v0.33.0 vllm/config/vllm.py _set_compile_ranges: one range "
                               "[1, max_num_batched_tokens]) with torch's default coordinate_descent_tuning False, and "
                               "with M symbolic decomposition.py's statically_known_true(shape[0] == 1) fails anyway. "
                               "The linears are plain F.linear, no custom op: UnquantizedLinearMethod.apply -> "
                               "dispatch_unquantized_gemm() (model_executor/layers/linear.py@v0.11.0:236) -> "
                               "default_unquantized_gemm on CUDA = torch.nn.functional.linear (layers/utils.py@"
                               "v0.11.0:88-92,189-195; v0.33.0:83-89, 682-690 without --linear-backend), which "
                               "Inductor lowers to an extern mm: cuBLAS"),
    "layer_host_s": (55.6e-6, "measured here from the code: vLLM v0.11's eager CUDA Llama decoder layer (TP > 1, V1 FlashAttention) makes, beyond its 12 kernel launches, 12 nn.Module calls, 13 tensor ops that launch nothing (views, slices, split, unbind, .data, empty: FlashAttentionImpl.forward's own comment, 'view and slice ... are surprisingly slow even in the case they do not invoke any GPU ops'), 1 custom-op dispatch into Python (torch.ops.vllm.unified_attention_with_output) and ~30 Python frames (bench/eager_layer_python.py COUNT, file and function per line); each kind timed on this project's CPU with the same torch: 55.6 us per layer, range [44.5, 113.6] us (bench/results/eager-layer-python-2026-12-06.txt: the count -/+20%, the top at the median repeats of a loaded host). Only an eager phase pays it: compiled, Inductor's graph holds these ops"),
    "sampler": ("vllm-v1-random", "sim/stack/sampler.py SAMPLERS['vllm-v1-random']: vllm/benchmarks/latency.py samples at temperature=1.0, top_p=1.0, so V1's Sampler.forward runs the random path eagerly after compute_logits (graph_scope forward): logits.to(float32), logits.div_(temperature), softmax, q.exponential_(), probs.div_(q), argmax, .to(int32) -- seven kernels, six over fp32 [batch, vocab] (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py)"),
    "collective": ("vllm-custom", "vllm/distributed/device_communicators/custom_all_reduce.py: CustomAllreduce "
                             "on by default (disable_custom_all_reduce False) for world sizes 2/4/6/8 on "
                             "full NVLink; NCCL otherwise (priced by sim/price/comm/custom_allreduce.py)"),
}
HOST = {
    "overlap": (False, "vllm/config/scheduler.py@01230b40 SchedulerConfig.async_scheduling: bool = False "
                       "(V1's default Scheduler runs the step in series; AsyncScheduler only with "
                       "--async-scheduling)"),
    "schedule_per_seq_s": (12.7e-6, "openfabric-systems/simllm#204: cProfile of vLLM's Scheduler.schedule "
                                    "on all-decode steps, 12.7 us per running request at the concurrency cap"),
    "output_s": (0.097e-3, "vllm-project/vllm#6913: profile of _process_model_outputs, Llama-3-70B on 4xH100, "
                           "0.2 ms at batch 1 and 3.4 ms at batch 32 (the V0 engine): the intercept of the line through "
                           "the two points, 0.097 ms, kept as the per-step part, which no V1 profile splits out"),
    "output_per_seq_s": (8.8e-6, "vllm-project/vllm#10634 and #11133: nsys trace of the V1 engine, Llama-2-7B "
                                 "batch 256, 5-6 ms of GPU idle between two decode steps (the token gap: update "
                                 "from output, schedule, prepare inputs). Its midpoint 5.5 ms less schedule_per_seq_s "
                                 "x 256 (3.25 ms), per sequence: (5.5 - 3.25) ms / 256 = 8.8 us. Supersedes the V0 "
                                 "_process_model_outputs slope of #6913 (0.103 ms/seq: 26 ms at batch 256, five "
                                 "times the whole V1 gap)"),
    "handoff_per_rank_s": (0.3e-6, "vllm/distributed/device_communicators/shm_broadcast.py@00264800: readers "
                                   "poll the ring buffer with os.sched_yield, 'measured to be around 3e-7 "
                                   "seconds' per poll: rank r reads the step r polls after rank 0 at most. "
                                   "Readers keep spinning while messages come (SpinTimer: sleep 0.1 s only after "
                                   "busy_loop_s = 10 s without one), so steady decode steps see the polling only"),
    "handoff_s": (0.0, "vllm/v1/executor/multiproc_executor.py collective_rpc: the SchedulerOutput is pickled "
                       "once and written once to the shared-memory ring; the N workers each unpickle it in "
                       "parallel and only output_rank replies (unique_reply_rank), so nothing in it grows with N "
                       "beyond the readers' polling order. No public microbenchmark of the enqueue of a "
                       "SchedulerOutput found (vllm-project/vllm#54406 names the pickling cost, no numbers): "
                       "0 until fitted (tpsim profiles import-engine-bench); searched again 2026-12-01, queries and "
                       "threads in tests/fixtures/engine_bench/public/README.md"),
    "handoff_tree_hop_s": (0.0, "shm_broadcast.py MessageQueue: one writer, every reader reads the same ring "
                                "buffer chunk (no tree of hops)"),
    "rank_spread_s": (0.0, "no public measurement of the spread of V1 workers' per-step host time found "
                           "(vllm-project/vllm#5792 shows the mechanism in an nsys trace, V0 at TP4: ranks launching "
                           "at different times after the input broadcast and waiting long in the first all-reduce, "
                           "without numbers). The public skew numbers are per collective inside the pass, not this "
                           "per-step host spread: vllm-project/vllm#52777 (TP2, launch-paced decode: 150-165 us median "
                           "entry skew per custom all-reduce) and 1CatAI/1Cat-vLLM#173 (TP8 V100 MoE CUDA graph: "
                           "31.6 us per collective, GPU-side; vllm-project/vllm#52911: ROCm TP8 MoE, 45-68 us): 0; "
                           "searched again 2026-12-01, queries and threads in "
                           "tests/fixtures/engine_bench/public/README.md"),
    "prepare_s": (0.0, "no public profile of V1 _prepare_inputs time found; 0 until fitted. At TP > 1 each "
                       "worker prepares its own inputs, the same work as TP 1's (gpu_model_runner.py _prepare_inputs): "
                       "only its spread across ranks could grow with N (rank_spread_s); searched again 2026-12-01, "
                       "queries and threads in tests/fixtures/engine_bench/public/README.md"),
}
