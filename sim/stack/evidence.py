"""Values more than one preset takes from the same evidence, written once.

- The host lane of a harness whose every rank is its own Python process (the reference harness, plain
  eager): no engine process, so every TP-dependent lane term is proved absent by that structure
  (`process_per_rank_host`, its `why` naming the harness's loop).
- The per-iteration request broadcast of an engine whose TP ranks are MPI ranks (TensorRT-LLM, both its
  PyTorch executor and its C++ one): two blocking MPI Bcasts over shared memory (`mpi_request_broadcast`,
  its `how` naming the engine's call).
- The eager decoder layer's Python beyond its kernel launches (Stack.layer_host_s), counted on vLLM
  v0.11's layer and timed here (`eager_layer_python`, its `how` saying why another engine's layer is taken
  as the same count).
"""
from __future__ import annotations


def process_per_rank_host(why: str) -> dict:
    """HOST entries (field -> (value, source)) for a harness that runs one generation loop per rank."""
    no_lane = f"code: one Python process per rank (torchrun) runs the generation loop itself ({why}): " \
              "no engine process, so no step is handed to workers"
    return {
        "handoff_s": (0.0, no_lane),
        "handoff_per_seq_s": (0.0, no_lane),
        "handoff_per_rank_s": (0.0, no_lane),
        "handoff_tree_hop_s": (0.0, no_lane),
        "handoff_wake_s": (0.0, no_lane),
        "step_broadcasts": (0, no_lane + "; every rank builds its own inputs"),
        "rank_spread_s": (0.0, "code: no per-step host lane: each rank's launches are the cost model's per-rank "
                               "launch chain (sim/price/cost.py issue_s) from the step's start, and a rank's late "
                               "arrival at a collective is the profile's jitter.arrival per collective, not a "
                               "lane term"),
    }


def mpi_request_broadcast(how: str) -> dict:
    """HOST entries (field -> (value, source[, range])) for an engine whose rank 0 broadcasts each iteration's
    new requests, even none, with two blocking MPI Bcasts (a size header, then the bytes); `how` names the
    engine's call and what it adds."""
    return {
        "handoff_s": (5e-6, f"code + estimate: {how}; two blocking MPI Bcasts over MPI's shared-memory transport, "
                            "which busy-poll. No public intra-node small-message MPI_Bcast latency at TP sizes found: "
                            "a few us for two shared-memory Bcasts, an estimate; range 2-20 us. At TP 1 a single-rank "
                            "Bcast returns at once", (2e-6, 20e-6)),
        "handoff_tree_hop_s": (2e-6, "code + estimate: the two MPI Bcasts per iteration (handoff_s) each run MPI's tree "
                                     "over the ranks (the library's algorithm; binomial assumed, sim.stack.host_lane."
                                     "tree_hops), so rank r gets the requests about popcount(r) hops late: ~1 us per hop "
                                     "and Bcast over shared memory with busy-polling ranks, an estimate (no public "
                                     "osu_bcast figure for small intra-node messages found); range 0.6-10 us for the two. "
                                     "gloo's TCP tree is another mechanism: bench/gloo_broadcast_hops.py does not carry over",
                               (0.6e-6, 10e-6)),
        "handoff_wake_s": (0.0, "code: blocking MPI collectives busy-poll in the progress engine (no sleep between polls)"),
    }


# bench/eager_layer_python.py on this project's CPU (bench/results/eager-layer-python-2026-12-06.txt)
LAYER_HOST_S = 55.6e-6
LAYER_HOST_RANGE_S = (44.5e-6, 113.6e-6)
_LAYER_HOST = (
    "measured here from the code: vLLM v0.11's eager CUDA Llama decoder layer (TP > 1, V1 FlashAttention) makes, "
    "beyond its 12 kernel launches, 12 nn.Module calls, 13 tensor ops that launch nothing (views, slices, split, "
    "unbind, .data, empty: FlashAttentionImpl.forward's own comment, 'view and slice ... are surprisingly slow "
    "even in the case they do not invoke any GPU ops'), 1 custom-op dispatch into Python (torch.ops.vllm."
    "unified_attention_with_output) and ~30 Python frames (bench/eager_layer_python.py COUNT, file and function "
    "per line); each kind timed on this project's CPU with the same torch: 55.6 us per layer, range [44.5, "
    "113.6] us (bench/results/eager-layer-python-2026-12-06.txt: the count -/+20%, the top at the median "
    "repeats of a loaded host). Only an eager phase pays it: compiled, Inductor's graph holds these ops")


def eager_layer_python(how: str = "") -> tuple:
    """The STACK entry "layer_host_s": (value, source, (lo, hi)); `how` says why this engine's layer is
    taken as vLLM v0.11's count (empty for vLLM v0.11 itself)."""
    return LAYER_HOST_S, _LAYER_HOST + (f"; {how}" if how else ""), LAYER_HOST_RANGE_S
