"""Plain PyTorch eager: one kernel per torch op, each launched from Python, no CUDA graphs (what a
Hugging Face transformers generate() loop runs). The rest as the reference harness; no engine host
lane beyond the per-kernel launches sim.price.cost prices from the profile's eager launch cost."""
from tpsim.sim.stack.evidence import process_per_rank_host

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
HOST = process_per_rank_host('a transformers-style generate() loop per rank')
