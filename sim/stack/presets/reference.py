"""The reference harness (today's defaults): gpt-fast style, both phases torch.compile'd, decode under
CUDA graphs, math SDPA over a static cache, NCCL. Stack's own defaults (sim/stack/spec.py), sourced in
docs/design.md ("Benchmark protocol") and docs/sources.md §10; no host lane: one Python process per
rank launches its own kernels, which sim.price.cost already prices."""
from tpsim.sim.stack.evidence import process_per_rank_host

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
HOST = process_per_rank_host('mayank31398/ladder-residual-inference benchmark.py, as gpt-fast generate.py')
