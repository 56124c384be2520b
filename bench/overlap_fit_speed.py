"""CPU time of the overlap refit that `tpsim compare --quick` runs in the parent (calib.overlap_fit).

    python bench/overlap_fit_speed.py [--checkout DIR] [--boot 30]

Fits the quick calibration's two cases (toy-512 and toy-1024 standard decode at TP2, batch 1)
from trials the engine itself made under known factors with 5% noise, then the bootstrap refits
(`--boot`, compare's default 30), and prints the process CPU seconds the fit took. `--checkout`
times another checkout's fit (e.g. an older commit in a git worktree) with the same inputs, so two
runs side by side give the ratio.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
ap.add_argument("--boot", type=int, default=30)
args = ap.parse_args()
sys.path.insert(0, args.checkout)
import _checkout  # noqa: E402  (the chosen checkout as the package tpsim)
_checkout.load(args.checkout)

from tpsim.calib.overlap_fit import case_descriptor, decode_schedule, fit_profile_overlap, pass_ratios  # noqa: E402
from tpsim.sim.price.cost import CostModel  # noqa: E402
from tpsim.sim.engine.step import Interference  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402
from tpsim.calib.shapes import ShapeCase as Case  # noqa: E402


def main() -> None:
    prof = load_profile("h100-sxm")
    truth = Interference(1.4, 1.8, 3e-6)
    rng = random.Random(0)
    cases = []
    for name in ("toy-512", "toy-1024"):
        model = get_model(name)
        case = Case(model, 2, 1, 16, 8, make_stack({"dtype": "fp32", "compile": False}))
        desc = case_descriptor(case, model)
        sched = decode_schedule(desc)
        cost = CostModel(prof, sched.stack)
        r, w = pass_ratios(sched, lambda op: cost.comm_s(op, "decode") if op.is_comm else cost.compute_s(op, "decode"),
                           truth)
        trials = {"alone": [], "blocking": [], "overlapped": [], "overlapped_wait": []}
        for _ in range(15):
            o = 1.0 + rng.gauss(0, 0.05)
            trials["alone"].append(0.8 * o)
            trials["blocking"].append(r * (1.0 + rng.gauss(0, 0.05)))
            trials["overlapped"].append(o)
            trials["overlapped_wait"].append(w * o * (1.0 + rng.gauss(0, 0.05)))
        cases.append({"what": name, "case": desc, "per_trial_s": trials})
    summary = {"method": "passes", "compute_slowdown": 1.2, "comm_slowdown": 1.5, "cases": cases}
    t0 = time.process_time()
    got = fit_profile_overlap(prof, summary, n_boot=args.boot)
    cpu_s = time.process_time() - t0
    print(f"checkout {args.checkout}")
    print(f"fit: s={got['compute_slowdown']} k={got['comm_slowdown']} wake_us={got['wake_us']} "
          f"and {args.boot} bootstrap refits")
    print(f"refit CPU s: {cpu_s:.2f}")


if __name__ == "__main__":
    main()
