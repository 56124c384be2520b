"""The reference harness (today's defaults): gpt-fast style, both phases torch.compile'd, decode under
CUDA graphs, math SDPA over a static cache, NCCL. Stack's own defaults (sim/stack/spec.py), sourced in
docs/design.md ("Benchmark protocol") and docs/sources.md §10; no host lane: one Python process per
rank launches its own kernels, which sim.price.cost already prices."""

NAME = "reference"
ENGINE = "Ladder Residual paper's gpt-fast-style harness (tpsim's defaults)"
# every other field at Stack's default
STACK = {
    "mm_decompose_m1": (True, "mayank31398/ladder-residual-inference@ea2e9e44 benchmark.py:27 "
                              "torch._inductor.config.coordinate_descent_tuning = True (as gpt-fast, pytorch-labs/"
                              "gpt-fast@32971d31 generate.py:25; docs/sources.md §10), and benchmark.py:354 compiles "
                              "decode_one_token with static shapes (mode reduce-overhead, fullgraph): at batch 1 "
                              "every linear's M == 1 is statically known, so torch/_inductor/decomposition.py mm "
                              "makes it a generated mul + sum reduction"),
}
# No host lane: each rank is its own Python process that launches its kernels, which sim.price.cost prices.
# The terms that would grow with TP are proved absent by that structure (sim/silent_zeros.py asks each one):
_NO_LANE = ("code: one Python process per rank (torchrun) runs the generation loop itself (mayank31398/"
            "ladder-residual-inference benchmark.py, as gpt-fast generate.py): no engine process, so no step is "
            "handed to workers")
HOST = {
    "handoff_s": (0.0, _NO_LANE),
    "handoff_per_seq_s": (0.0, _NO_LANE),
    "handoff_per_rank_s": (0.0, _NO_LANE),
    "handoff_tree_hop_s": (0.0, _NO_LANE),
    "handoff_wake_s": (0.0, _NO_LANE),
    "step_broadcasts": (0, _NO_LANE + "; every rank builds its own inputs"),
    "rank_spread_s": (0.0, "code: no per-step host lane: each rank's launches are the cost model's per-rank launch "
                           "chain (sim/price/cost.py issue_s) from the step's start, and a rank's late arrival at a "
                           "collective is the profile's jitter.arrival per collective, not a lane term"),
}
