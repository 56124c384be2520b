"""Plain PyTorch eager: one kernel per torch op, each launched from Python, no CUDA graphs (what a
Hugging Face transformers generate() loop runs). The rest as the reference harness; no engine host
lane beyond the per-kernel launches sim.price.cost prices from the profile's eager launch cost."""

NAME = "eager"
ENGINE = "PyTorch eager (no torch.compile, no CUDA graphs)"
_SRC = "PyTorch eager mode: torch.compile not called, so no Inductor fusion and no CUDA graph capture"
STACK = {
    "compile_prefill": (False, _SRC),
    "compile_decode": (False, _SRC),
    "decode_graphs": (False, _SRC),
    "prefill_graphs": (False, _SRC),
    "mm_decompose_m1": (False, "no Inductor: every linear is F.linear -> cuBLAS (and a user's torch.compile on "
                               "top of this stack runs torch's default coordinate_descent_tuning = False, "
                               "torch/_inductor/config.py: TORCHINDUCTOR_COORDINATE_DESCENT_TUNING unset)"),
}
# No host lane: each rank is its own Python process that launches its kernels, which sim.price.cost prices.
# The terms that would grow with TP are proved absent by that structure (sim/silent_zeros.py asks each one):
_NO_LANE = ("code: one Python process per rank (torchrun) runs the generation loop itself (a transformers-"
            "style generate() loop per rank): no engine process, so no step is handed to workers")
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
