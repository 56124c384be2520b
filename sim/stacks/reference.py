"""The reference harness (today's defaults): gpt-fast style, both phases torch.compile'd, decode under
CUDA graphs, math SDPA over a static cache, NCCL. Stack's own defaults (sim/stack.py), sourced in
docs/design.md ("Benchmark protocol") and docs/sources.md §10; no host lane: one Python process per
rank launches its own kernels, which sim.cost already prices."""

NAME = "reference"
ENGINE = "Ladder Residual paper's gpt-fast-style harness (tpsim's defaults)"
STACK: dict = {}        # every field at Stack's default
HOST: dict = {}         # no engine host work beyond the kernels' launches
