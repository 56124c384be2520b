"""The reference harness (today's defaults): gpt-fast style, both phases torch.compile'd, decode under
CUDA graphs, math SDPA over a static cache, NCCL. Stack's own defaults (sim/stack.py), sourced in
docs/design.md ("Benchmark protocol") and docs/sources.md §10; no host lane: one Python process per
rank launches its own kernels, which sim.cost already prices."""

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
    "wo_bmm": (False, "the reference ran torch 2.5 (its logs: NCCL 2.21.5; docs/sources.md §10), whose FakeTensor ran "
                      "view ops' C++ meta kernels (torch/_meta_registrations.py activate_meta: 'All view ops have meta "
                      "kernels in C++ today'; fake_tensor.py _dispatch_impl takes a Python decomposition for a view "
                      "only with symbolic sizes), so gpt_fast utils.py Attention's "
                      "y.transpose(1, 2).contiguous().view(bsz, seqlen, dim) has eager strides and F.linear folds it "
                      "into one mm: wo is extern cuBLAS at batch > 1 (torch 2.9+ registers a fake view impl through "
                      "torch._refs._reshape_view_helper, pytorch#158406, and takes the bmm: Stack.wo_bmm)"),
}
HOST: dict = {}         # no engine host work beyond the kernels' launches
