"""The command line's side of the one bounds table (sim/bounds.py): which option is checked against
which entry, and the checks every command runs on its counts before any work (simulator, harness,
calibration, compare, sweep alike)."""
from __future__ import annotations

from tpsim.sim.bounds import BOUNDS

MAX_TOKENS = BOUNDS["tokens"].hi       # --prompt and --gen (documented in docs/reliability.md)

# command-line option -> its entry in the bounds table
OPTION_BOUNDS: dict[str, str] = {
    "--tp": "tp", "--nproc": "tp", "--emulate-tp": "tp", "--comm-group": "tp", "--gpus-per-node": "gpus_per_node",
    "--jobs": "jobs", "--batch": "batch", "--layers": "layers", "--prompt": "tokens", "--gen": "tokens",
    "--repeats": "repeats", "--warmup": "warmup", "--seed": "seed",
}


def check_bound(option: str, value) -> None:
    """`value` of `option` (a key of OPTION_BOUNDS) is an integer within its bound; None: not given."""
    if value is None:
        return
    lo, hi = BOUNDS[OPTION_BOUNDS[option]].lo, BOUNDS[OPTION_BOUNDS[option]].hi
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{option} must be in {lo}..{hi}, got {value}")


def check_bounds(values: dict) -> None:
    """Every option -> value (or repeated values: a list or tuple) of `values` within its bound."""
    for option, v in values.items():
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            check_bound(option, x)


def check_sizes(tp=None, batch=None, prompt_len=None, gen_len=None, gpus_per_node=None, comm_group=None) -> None:
    """Workload sizes within the bounds table (sim/bounds.py), before any work (memory and time grow
    with them)."""
    check_bounds({"--tp": tp, "--batch": batch, "--prompt": prompt_len, "--gen": gen_len,
                  "--gpus-per-node": gpus_per_node, "--comm-group": comm_group})
