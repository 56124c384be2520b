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
HOST: dict = {}
