"""vLLM, V0 engine, 0.6.0-0.6.3 (source read at vllm 0.6.3.post1, the PyPI sdist; `--stack vllm@0.6`).

The engine users of the older synchronous vLLM still run: LLMEngine.step schedules, the driver worker
(rank 0, in the engine process) builds the step's inputs, and at TP > 1 hands them to the other ranks
(vllm/worker/worker_base.py@v0.6.3.post1 _get_driver_input_and_broadcast -> broadcast_tensor_dict,
vllm/distributed/parallel_state.py L565-648): the metadata (a pickled list) through the TP group's
shared-memory MessageQueue, then one eager NCCL broadcast per non-empty input tensor on the device
group (async_op=True, then handle.wait(): the compute stream waits for them before the graph replays).
The other ranks sleep-poll the queue (shm_broadcast.py@v0.6.3.post1 L25 RINGBUFFER_SLEEP_INTERVAL =
1e-7, L391 time.sleep), unpickle, allocate the tensors and post their side of each broadcast. After the
pass rank 0 gathers the logits (logits_processor.py L86-88, tensor_model_parallel_gather) and alone
samples (model_runner.py L1694-1695: other ranks return []), and the previous step's outputs are
processed while this step's pass runs (the async output processing of 0.6.0, on by default:
engine/arg_utils.py L178 disable_async_output_proc False; model_runner.py L1697-1698 calls the callback
after launching the forward).

What differs in 0.6.4-0.6.6: the readers poll with os.sched_yield (vllm-project/vllm#9994, merged after
0.6.3.post1), so no wake-up window: {"extends": "vllm@0.6", "host": {"handoff_wake_s": 0}}. Kernel
choices: no torch.compile (0.6 has none by default), decode under CUDA graphs of the model forward
(CUDAGraphRunner), FlashAttention-2 through vllm-flash-attn.
"""
from tpsim.sim.stack.evidence import eager_layer_python


NAME, LINE = "vllm", "0.6"
ENGINE = "vLLM 0.6.0-0.6.3 (V0 engine, synchronous)"
_V = "vllm@v0.6.3.post1 "
_M = ("bench/engine_host_path.py, bench/results/engine-host-path-2026-12-06.txt (vLLM v0.32.0 CPU build, V1 "
      "engine, TP1, batch 1-64)")
_PROXY = (f"a PROXY: the V1 engine's measured term ({_M}): V0's scheduler and prepare_model_input are other "
          "code doing the same kinds of Python work per step and per sequence; no V0 profile splits them "
          "(vllm-project/vllm#6854 bounds V0's whole inter-step gap, schedule + prepare + output + sync, at "
          "about 4 ms per decode step: Llama-3-8B TP1, batch not stated)")
STACK = {
    "dtype": ("bf16", f"{_V}vllm/config.py ModelConfig dtype 'auto': the checkpoint's torch_dtype (bfloat16 for "
                      "Llama 3.x); give --dtype fp16 for an fp16 checkpoint"),
    "attention": ("fa2", f"{_V}vllm/attention/selector.py which_attn_to_use: FLASH_ATTN by default on sm80+ for "
                         "fp16/bf16 (vllm/attention/backends/flash_attn.py: vllm_flash_attn's FlashAttention-2 "
                         "flash_attn_with_kvcache for decode over the block table)"),
    "attention_fallback": ("fa2", f"{_V}the same backend on every sm80+ GPU (no FA3 in 0.6)"),
    "attention_knobs": ({"fa2": {"graph_table_kv_len": 8192, "graph_len_model": True}},
                        f"{_V}vllm/engine/arg_utils.py EngineArgs.max_seq_len_to_capture = 8192, and vllm/config.py "
                        "ModelConfig._verify_cuda_graph takes min(max_seq_len_to_capture, max_model_len) "
                        "(graph_len_model: the model's context, ModelSpec.max_context, when it states one); "
                        "vllm/worker/model_runner.py GPUModelRunnerBase.__init__: graph_block_tables = np.zeros("
                        "(max batch, get_max_block_per_batch())), get_max_block_per_batch = ceil(max_seq_len_to_capture "
                        "/ block_size), the table every captured decode graph reads; attention/backends/flash_attn.py "
                        "passes it as block_table to flash_attn_with_kvcache with num_splits left 0, so "
                        "vllm-flash-attn's mha_fwd_kvcache runs num_splits_heuristic over the table's width (8192 "
                        "tokens), not the sequence's length"),
    "attention_prep_kernels": (2, f"{_V}vllm/model_executor/layers/rotary_embedding.py RotaryEmbedding.forward_cuda: "
                                  "ops.rotary_embedding (q and k in one kernel); attention/backends/flash_attn.py "
                                  "unified_flash_attention: ops.reshape_and_cache_flash writes K and V in one kernel"),
    "engine_kernels": (True, f"{_V}vllm/model_executor/layers/layernorm.py RMSNorm.forward_cuda: "
                             "ops.fused_add_rms_norm / ops.rms_norm; activation.py SiluAndMul.forward_cuda: "
                             "ops.silu_and_mul (no torch.compile: these CUDA ops run)"),
    "kv": ("filled", f"{_V}attention/backends/flash_attn.py decode: flash_attn_with_kvcache(cache_seqlens="
                     "decode_seq_lens, block_table=...) reads each sequence's filled blocks"),
    "expand_gqa": (False, "FlashAttention handles GQA natively (K/V keep num_kv_heads)"),
    "prefill_logits": ("last", f"{_V}model_executor/sampling_metadata.py selected_token_indices: each prompt's "
                               "last position only (no prompt_logprobs)"),
    "head": ("vocab-parallel", f"{_V}model_executor/layers/logits_processor.py LogitsProcessor._get_logits: "
                               "ParallelLMHead's vocab/TP shard, then tensor_model_parallel_gather to rank 0 "
                               "(use_gather on CUDA), which alone samples: priced as the all-gather and a "
                               "full-vocab sample (a gather to one rank moves the same bytes into rank 0; at "
                               "decode sizes both are latency-bound)"),
    "embed": ("vocab-parallel", f"{_V}model_executor/layers/vocab_parallel_embedding.py VocabParallelEmbedding: "
                                "masked lookup of the rank's shard, then tensor_model_parallel_all_reduce"),
    "graph_scope": ("forward", f"{_V}vllm/worker/model_runner.py execute_model: the CUDAGraphRunner replays the "
                               "model forward (hidden states); compute_logits and the sampler run eagerly after it"),
    "compile_prefill": (False, f"{_V}no torch.compile in the default V0 model runner"),
    "compile_decode": (False, f"{_V}no torch.compile in the default V0 model runner"),
    "decode_graphs": (True, f"{_V}engine/arg_utils.py enforce_eager False: decode batches up to 256 "
                            "(_BATCH_SIZES_TO_CAPTURE) replay CUDA graphs (worker/model_runner.py L718-721)"),
    "prefill_graphs": (False, f"{_V}worker/model_runner.py L718: graphs for decode-only batches"),
    "mm_decompose_m1": (False, "no Inductor: every linear is F.linear -> cuBLAS (only read on a compiled phase)"),
    "layer_host_s": eager_layer_python(f"counted on vLLM v0.11's layer: {_V}model_executor/models/llama.py "
                                       "LlamaDecoderLayer.forward calls the same modules (RMSNorm, LlamaAttention: "
                                       "QKVParallelLinear, get_rope, Attention, RowParallelLinear; LlamaMLP) and "
                                       "attention/backends/flash_attn.py FlashAttentionImpl.forward dispatches into "
                                       "Python through torch.ops.vllm.unified_flash_attention, which views and "
                                       "slices q, k, v and the cache as V1's does; taken as the same count"),
    "sampler": ("vllm-v0-random", "sim/stack/sampler.py SAMPLERS['vllm-v0-random']: benchmarks/benchmark_latency.py"
                                  "@v0.6.3.post1 samples at temperature=1.0, top_p=1.0 (V0's Sampler.forward: "
                                  "softmax and log_softmax, then the random path)"),
    "collective": ("vllm-custom", f"{_V}engine/arg_utils.py disable_custom_all_reduce False: "
                                  "distributed/device_communicators/custom_all_reduce.py CustomAllreduce for world "
                                  "sizes 2/4/6/8 on full NVLink (priced by sim/price/comm/custom_allreduce.py)"),
}
HOST = {
    "overlap": (False, f"{_V}vllm/engine/llm_engine.py LLMEngine.step: schedule, execute, process in series"),
    "output_hidden": (True, f"{_V}engine/arg_utils.py disable_async_output_proc False; worker/model_runner.py "
                            "L1697-1698: after launching step j+1's forward the driver runs the async callback, "
                            "which processes step j's outputs while the GPU computes"),
    "schedule_s": (71e-6, _PROXY, (35e-6, 1e-3)),
    "schedule_per_seq_s": (9.6e-6, _PROXY, (6.2e-6, 50e-6)),
    "prepare_s": (5.4e-4, f"{_PROXY}; only the driver prepares (the others rebuild from the broadcast, "
                          "handoff_s)", (5e-5, 2e-3)),
    "prepare_per_seq_s": (4.8e-6, _PROXY, (3.1e-6, 30e-6)),
    "output_s": (0.097e-3, "vllm-project/vllm#6913: profile of _process_model_outputs, Llama-3-70B on 4xH100 (the V0 "
                           "engine before async output processing), 0.2 ms at batch 1 and 3.4 ms at batch 32: the "
                           "intercept of the line through the two points. Hidden under the next pass "
                           "(output_hidden) unless longer. Range: the V1 engine's measured output work "
                           f"({_M}, 0.058-0.265 ms) to twice the batch-1 figure", (0.058e-3, 0.4e-3)),
    "output_per_seq_s": (0.103e-3, "vllm-project/vllm#6913: the slope of the same line, (3.4 - 0.2) ms / 31; "
                                   "range from half to 1.5 times it (two points, no spread given)",
                         (0.05e-3, 0.155e-3)),
    "launch_s": (38e-6, f"a PROXY: the V1 engine's measured Python between input preparation and the replay ({_M}); "
                        "V0's execute_model sets up the same kind of context before CUDAGraphRunner.forward",
                 (20e-6, 87e-6)),
    "handoff_s": (1.0e-4, "code + measured here: at TP > 1 the driver pickles the broadcast metadata once and "
                          "writes it to the TP group's shared-memory MessageQueue (parallel_state.py@v0.6.3.post1 "
                          "broadcast_object L468-470 -> mq_broadcaster), each other rank unpickles it and allocates "
                          "the 9 input tensors (L615-621) before posting its broadcasts; at TP 1 none of it "
                          "(L575-577). Offline dumps + loads of that metadata list at batch 1 (1171 bytes) 21.4 + "
                          "11.1 us (this project's 2-vCPU VM, CPython 3.11), x3, the low end of the in-step / "
                          f"offline ratio measured for the V1 engine's pickles ({_M}: 3-5x, cold caches after "
                          "polling). Range: the offline 30 us to x5 plus ~40 us of allocation and metadata "
                          "rebuild, x1.5 for another host CPU", (3.0e-5, 3.0e-4)),
    "handoff_per_seq_s": (0.8e-6, "as handoff_s: the offline slope of the metadata's dumps + loads, 0.26 us per "
                                  "request (1171 bytes at batch 1 to 13436 at 256), x3; range x1 to x5 x1.5",
                          (0.26e-6, 2.0e-6)),
    "handoff_wake_s": (52.5e-6, f"{_V}distributed/device_communicators/shm_broadcast.py L25 and L391: a reader "
                                "finding no new message calls time.sleep(RINGBUFFER_SLEEP_INTERVAL = 1e-7), which "
                                "Linux's 50 us default timer slack stretches: vllm-project/vllm#9994 measured "
                                "time.sleep(1e-7) at mean 5.247e-05 s (sd 2.3e-06, min 8.2e-06, max 6.06e-05 over "
                                "10000 calls). Range: that min to 65 us, the median of the same call measured on "
                                "this project's VM", (8.2e-6, 65e-6)),
    "handoff_per_rank_s": (0.0, "code: shm_broadcast.py@v0.6.3.post1 acquire_read: each reader polls on its own and "
                                "sleeps between polls (the wake-up window, handoff_wake_s, is their order); no "
                                "spinning order"),
    "handoff_tree_hop_s": (0.0, "code: parallel_state.py@v0.6.3.post1 L468-470 (use_message_queue_broadcaster for "
                                "the TP group, L1018): one writer, every reader reads the same ring buffer chunk"),
    "step_broadcasts": (9, "code: parallel_state.py@v0.6.3.post1 broadcast_tensor_dict L594-613: one "
                           "torch.distributed.broadcast(async_op=True) on the NCCL device group per non-empty GPU "
                           "tensor; a FlashAttention decode step carries 9 (input_tokens, input_positions; "
                           "slot_mapping, seq_lens_tensor, query_start_loc, seq_start_loc, context_lens_tensor, "
                           "block_tables of attention/backends/flash_attn.py FlashAttentionMetadata; "
                           "selected_token_indices), the swap/copy block lists empty and skipped (L596-598). "
                           "Each priced by the profile as an eager NCCL all-gather of one int64 per sequence (the "
                           "ring broadcast's n-1 steps at a latency-bound size; sim/predict.py)"),
    "rank_spread_s": (10e-6, "no V0 per-rank measurement: the other ranks' own host work per step is a dequeue, an "
                             "unpickle and 9 allocations (~0.1 ms), a fifth of the V1 worker's whose per-rank "
                             f"spread was measured at 45 us ({_M}): 10 us, an OS-noise estimate. Range: 2 us to the "
                             "V1 worker's measured high end", (2e-6, 120e-6)),
}
