"""Prediction time per configuration (fast path), printed as a table.

    python bench/predict_speed.py [--repeats 3]

Each row: one `predict` call (all listed schedules + the standard baseline), median wall time
over repeats, in this process (imports and profile loading excluded).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.model import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.profile import load_profile  # noqa: E402
from tpsim.sim.schedule import DEFAULT_SCHEDULES  # noqa: E402
from tpsim.sim.stack import Stack  # noqa: E402

ALL = list(DEFAULT_SCHEDULES)
CONFIGS = [
    ("llama-3.1-8b", 8, 1, ["ladder"], Stack()),
    ("llama-3.1-70b", 8, 1, ["ladder"], Stack()),
    ("llama-3.1-70b", 8, 4, ALL, Stack()),
    ("llama-3.1-405b", 16, 1, ["ladder"], Stack()),
    ("llama-3.1-405b", 16, 1, ALL, Stack()),
    ("llama-3.1-405b", 16, 1, ALL, Stack(kv="filled", attention="flash")),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="h100-sxm")
    args = ap.parse_args()
    prof = load_profile(args.profile)
    print(f"{'model':16} {'tp':>3} {'batch':>5} {'kv':>6} {'schedules':>9} {'ms/predict':>10}")
    for model, tp, batch, scheds, stack in CONFIGS:
        w = Workload(get_model(model), tp, prof, batch=batch, prompt_len=1024, gen_len=512, stack=stack)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            predict(w, scheds, record=False)
            times.append(time.perf_counter() - t0)
        print(f"{model:16} {tp:>3} {batch:>5} {stack.kv:>6} {len(set(scheds) | {'standard'}):>9} "
              f"{statistics.median(times) * 1e3:>10.1f}")


if __name__ == "__main__":
    main()
