"""What every part of the built-in profiles' derivation shares: the database path (argv[1]), the
output folder (argv[2]), the measured inputs shipped with the profiles (sim/hardware/profiles/_data), the
database's name, and the {value, source} leaf. See derive_builtin.py (run that)."""
from __future__ import annotations

import sys
from pathlib import Path

AIC = "aiconfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0, NVIDIA)"
# From derive_builtin.py's command line; None when a test imports a pure function (e.g. shm).
_ARGS = sys.argv[1:3] if len(sys.argv) > 2 else [None, None]
DATA = Path(_ARGS[0]) if _ARGS[0] else None
OUT = Path(_ARGS[1]) if _ARGS[1] else None
# the public measurements the derivation reads beside the database (their URLs inside each file)
INPUTS = Path(__file__).resolve().parents[2] / "sim" / "hardware" / "profiles" / "_data"


def sv(value, source):
    return {"value": value, "source": source}


def svr(value, lo, hi, source):
    """A value its source gives only as the interval [lo, hi] (sim/sensitivity.py varies it there)."""
    return {"value": value, "range": [lo, hi], "source": source}


# SMs per GPU (the datasheets): where the memory curve's rows fill the GPU (compute.py) and the
# co-scheduling section's SM count (collectives.py overlap_gpu)
GPU_SMS = {
    "h100_sxm": (132, "NVIDIA H100 SXM5 datasheet / Hopper whitepaper: 132 SMs"),
    "h200_sxm": (132, "NVIDIA H200 SXM: the GH100 die of H100 SXM5 with 132 SMs enabled (Hopper whitepaper)"),
    "a100_sxm": (108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs (A100 SXM4)"),
    "l40s": (142, "NVIDIA L40S datasheet / Ada Lovelace architecture whitepaper: 142 SMs"),
}
