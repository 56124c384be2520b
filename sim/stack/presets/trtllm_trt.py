"""TensorRT-LLM 0.11, TensorRT engine backend (`--stack trtllm@0.11`): the engine-build line of 2024 (0.9-0.12).

A model is built into a TensorRT engine (trtllm-build) and served by the C++ executor (Triton's
tensorrtllm_backend, or the executor API); one MPI rank per TP rank, each enqueuing the same engine. What
sets this line apart from the 1.x PyTorch backend (sim/stack/presets/trtllm.py) is decode attention at
small batch: multi-block mode is off by default until 0.13, and with it off the XQA dispatcher falls
back to masked multi-head attention, one CTA per query head streaming the whole context.

When multi-block became the default, read from triton-inference-server/tensorrtllm_backend's tags (each
pins its tensorrt_llm submodule): up to 0.11 it is a build option, `trtllm-build --multi_block_mode`,
PluginConfig.multi_block_mode = False; v0.12.0 (2024-08-29) moved it to the runtime and kept it off
(inflight_batcher_llm/src/model_instance_state.cc getExtendedRuntimePerfKnobConfigFromParams: `bool
multiBlockMode = false`; all_models/tests/test_python_backend.py asserts multi_block_mode == False for a
minimal config); v0.13.0 (2024-09-30) turned it on (`bool multiBlockMode = true`, the test asserts True).
So 0.9-0.12 share this preset's decode kernel; from 0.13 an engine runs XQA multi-block as `trtllm`
describes (without its CUDA graphs: {"extends": "trtllm@0.11", "stack": {"attention_knobs": {"xqa":
{"multi_block": true, "heuristic": "sqrt"}}}} is that line's decode attention, the heuristic's version not
pinned here).

The executor and batch manager ship as a static library in 0.11 (no source); its loop is read at the
later open executorImpl.cpp, taken as the same design, and its host numbers are the 1.x line's where
no C++ measurement exists, each said so (the C++ loop does less per request than 1.x's Python).
"""
from tpsim.sim.stack.evidence import mpi_request_broadcast


NAME, LINE = "trtllm", "0.11"
ENGINE = "TensorRT-LLM 0.11 (TensorRT engine backend, C++ executor; multi-block off by default through 0.12)"
_TRT = "NVIDIA/TensorRT-LLM v0.11.0 (05316d33, the tensorrt_llm submodule of tensorrtllm_backend v0.11.0) "
_BE = "triton-inference-server/tensorrtllm_backend v0.11.0 "
_EXEC = ("cpp/tensorrt_llm/executor/executorImpl.cpp Executor::Impl::executionLoop (the search index's stored, "
         "later open version; 0.11 ships the executor as a static library, its loop taken as the same)")
_PROXY = "a PROXY: the 1.x PyExecutor's measured term (sim/stack/presets/trtllm.py) as the high end"
STACK = {
    "dtype": ("bf16", "the engine's build dtype: examples/<model>/convert_checkpoint.py --dtype 'auto', 'inferred "
                      "from the source model' (bfloat16 for Llama 3.x); trtllm-build keeps the checkpoint's"),
    "attention": ("xqa", f"{_TRT}GPTAttentionPlugin (gpt_attention_plugin) -> AttentionOp::enqueueGeneration: XQA when "
                         "the plugin's enable_xqa (default True) and its dispatcher's shouldUse (supported config and "
                         "mayHavePerfGain), else masked multi-head attention (sim/price/decode_grid.py xqa -> mmha); "
                         "context FMHA for prefill (a fused flash-style kernel, priced at its roofline)"),
    "attention_knobs": ({"xqa": {"multi_block": False, "heuristic": "cap8"}},
                        "multi_block off: tensorrt_llm/plugin/plugin.py PluginConfig.multi_block_mode = False "
                        "(trtllm-build --multi_block_mode, default disable) through 0.11, the runtime knob's default "
                        f"False in 0.12 ({_BE.replace('v0.11.0', 'v0.12.0')}model_instance_state.cc); so the XQA "
                        "dispatcher's mayHavePerfGain counts one CTA per (sequence, KV head) and, below SMs / 4 of "
                        "them, masked MHA runs (decoderMaskedMultiheadAttentionLaunch.h mmha_launch_kernel_ex). "
                        "heuristic 'cap8': the older runners' computeMultiBlockCount (history // 512, at most 8 CTAs "
                        "per KV head) and mayHavePerfGain's 512-token blocks, read in decoderXQARunner.cpp of the "
                        "0.8-0.9 era; it acts only with multi-block on. No CUDA graph: no capture length"),
    "attention_prep_kernels": (1, f"{_TRT}where XQA runs, one preprocessing kernel applies RoPE and writes the new "
                                  "K/V into the paged cache first (invokeApplyBiasRopeUpdateKVCache); masked MHA, "
                                  "which the small-batch decode step runs, does both inside its own kernel "
                                  "(decoderMaskedMultiheadAttentionTemplate.h). Counted as the one kernel (Stack "
                                  "reads 0 as the reference's PyTorch RoPE and copies): the same bytes, one launch and "
                                  "one device floor per layer more than masked MHA takes"),
    "engine_kernels": (True, "the engine's elementwise work is TensorRT's: trtllm-build hands the network (RmsNorm's "
                             "pow/mean/rsqrt/mul, the residual add, SiLU x gate) to TensorRT, whose pointwise fusion "
                             "generates one kernel per chain between GEMMs and plugins; counted as the engines' fused "
                             "add+RMSNorm and SwiGLU kernels (one each)"),
    "kv": ("filled", "paged KV cache (PluginConfig.paged_kv_cache True): the decode kernels read each sequence's "
                     "filled blocks"),
    "expand_gqa": (False, "XQA and masked MHA index K/V by KV head (num_kv_heads in the plugin); nothing is repeated"),
    "prefill_logits": ("last", "trtllm-build --gather_context_logits off by default: the context phase computes "
                               "logits for each request's last token only"),
    "head": ("vocab-parallel", "tensorrt_llm/models/llama/model.py LLaMAForCausalLM: lm_head = ColumnLinear(..., "
                               "tp_group, gather_output=True): a vocabulary shard per rank and an all-gather"),
    "embed": ("replicated", "convert_checkpoint.py --use_parallel_embedding default False: every rank holds the whole "
                            "embedding table and looks up locally (no all-reduce)"),
    "graph_scope": ("logits", "no CUDA graph in this line (decode_graphs); the engine's outputs are the logits "
                              "(float32, trtllm-build --logits_dtype default), sampled by the C++ decoder after it"),
    "compile_prefill": (False, "a TensorRT engine, no torch.compile"),
    "compile_decode": (False, "a TensorRT engine, no torch.compile"),
    "mm_decompose_m1": (False, "no Inductor: the linears are TensorRT's or the gemm plugin's GEMMs (cuBLAS)"),
    "decode_graphs": (False, f"{_BE}inflight_batcher_llm/src/model_instance_state.cc builds the executor with no CUDA "
                             "graph option (the executor's cudaGraphMode arrives later in ExtendedRuntimePerfKnobConfig, "
                             "default false): each step enqueues the engine (IExecutionContext enqueue), which launches "
                             "its kernels from C++"),
    "prefill_graphs": (False, "as decode: no CUDA graphs"),
    "layer_host_s": (5e-6, "an ESTIMATE: no Python per layer (TensorRT's enqueue walks the engine's kernels and plugins in "
                           "C++), but the attention plugin's enqueue does host work each call beyond its launches: "
                           "GPTAttentionPlugin::enqueue fills its params, runs the XQA dispatcher's checks and, for "
                           "masked MHA, queries occupancy twice (mmha_launch_kernel_ex: "
                           "cudaOccupancyMaxActiveBlocksPerMultiprocessor, then MMHA_LAUNCH_CHECK at the chosen block "
                           "size); no public timing of it: a few us, range 1-20 us", (1e-6, 20e-6)),
    "launch_host_s": (3.3e-6, "the CUDA driver's launch, no Python: meta-pytorch/tritonbench#1017 measured a raw "
                              "cuLaunchKernel at 3.0 us (no arguments) and 3.3 us (19 arguments) per launch (GB200, "
                              "its nop_triton_direct_culaunch row), and ~1.3 us in its summary; TensorRT's enqueue "
                              "adds its own dispatch per kernel, unmeasured. Range: 1.3 us to h100-sxm's eager launch "
                              "through PyTorch, 8.81 us (Python dispatch included, as if TensorRT's per-kernel "
                              "dispatch cost as much)", (1.3e-6, 8.81e-6)),
    "sampler": ("trtllm-torch-greedy", "the C++ decoder's greedy step (runtime/gptDecoderBatched.cpp, DynamicDecodeLayer "
                                       "with top-k 1) on the engine's float32 logits, taken as the same kernels as 1.x's "
                                       "greedy sampler (sim/stack/sampler.py): a full-vocabulary pass and the [batch] "
                                       "token-id kernels"),
    "collective": ("trtllm-auto", "tensorrt_llm/plugin/plugin.py PluginConfig.use_custom_all_reduce True: the "
                                  "allreduce plugin's custom one-shot/two-shot kernels for small messages, NCCL for "
                                  "large (priced by sim/price/comm/custom_allreduce.py)"),
}
# trtllm@1's host numbers (sim/stack/presets/trtllm.py), where this line's C++ loop has no measurement of its own
_V1_SCHEDULE_PER_SEQ_S = 1.3e-6     # NVIDIA/TensorRT-LLM#10273: 4.4% of host_step_time at 1536 requests per rank
HOST = {
    "overlap": (False, f"{_EXEC}: each iteration forwardSync (wait for step j), populateNewResponses, fetchNewRequests, "
                       "then forwardAsync (schedule and enqueue step j+1): the host's work between two steps is in "
                       "series with the GPU"),
    "schedule_per_seq_s": (_V1_SCHEDULE_PER_SEQ_S, f"{_PROXY}: the C++ capacity and micro-batch schedulers per "
                                                   "request, at most the 1.x Python scheduler's 1.3 us "
                                                   "(NVIDIA/TensorRT-LLM#10273: 1.98 ms / 1536 requests); range a "
                                                   "tenth of it to it", (0.13e-6, 1.3e-6)),
    "output_per_seq_s": (2.81e-6, f"{_PROXY}: populateNewResponses per request, a tenth of 1.x's "
                                                    "Python output work (NVIDIA/TensorRT-LLM#10273: 43.13 ms / 1536 "
                                                    "requests) as the C++ estimate; range a hundredth to all of it",
                         (0.28e-6, 28.1e-6)),
    "rank_spread_s": (45e-6, "a PROXY, as trtllm@1: no TensorRT-LLM per-rank measurement; every MPI rank runs the same "
                             "loop over the same requests, so its spread is OS noise on each rank's core, taken as "
                             "the per-rank step work measured for a Python engine, 45 us (bench/engine_host_path.py, "
                             "vLLM v0.32.0 CPU build at TP2), a high estimate for a C++ loop. Range: 10 us (an OS-noise "
                             "estimate for a dedicated core) to that measurement's high end", (10e-6, 120e-6)),
    **mpi_request_broadcast(f"{_EXEC.split(' (')[0]} fetchNewRequests: every iteration the leader broadcasts the "
                            "serialized new requests, even none, over the TP communicator (mCommTensorParallel->"
                            "bcast(packed, 0): the vector's size, then its bytes)"),
    "handoff_per_seq_s": (0.0, "code: the broadcast holds the new requests only (fetchNewRequests): none in steady "
                               "decode"),
    "handoff_per_rank_s": (0.0, "code: the MPI broadcast's tree (handoff_tree_hop_s) holds the ranks' order"),
    "step_broadcasts": (0, "code: each rank builds its own engine inputs from the broadcast requests; no other "
                           "per-iteration collective outside the engine"),
}
