"""Ladder vs parallel, and the comm-free decode step, where people deploy (batch 1-64, TP8, P2P on/off).

    python bench/winners.py [--checkout DIR] [--suffix=-coschedule]

For each (model, TP, profile, batch): the predicted speedups of ladder and parallel over standard,
which wins, the comm-free (upper-bound) decode step in ms, what the ladder's decode step costs above
it per layer in us (the communication it leaves exposed, slowdowns included), and whether the winner
holds with the profile's ranged numbers at the ends of their sources' ranges (sim/sensitivity.py:
"yes", or the reversing setting). The reference stack's defaults
(prompt 1024, gen 512). `--checkout` runs another checkout's simulator on the same grid (e.g. an
older commit in a git worktree), so two runs side by side show what a change moved. `--suffix`
appends to every profile name (`-coschedule`: the per-kernel co-scheduling built-ins). Validation of
direction only: no constant is set from these numbers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
ap.add_argument("--suffix", default="", help="appended to each profile name, e.g. -coschedule")
args = ap.parse_args()
sys.path.insert(0, args.checkout)
import _checkout  # noqa: E402  (the chosen checkout as the package tpsim)
_checkout.load(args.checkout)

from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.sensitivity import check  # noqa: E402

GRID = [(m, 8, p, b) for m in ("llama-3.1-8b", "llama-3.1-70b") for p in ("h100-sxm", "h100-sxm-p2p-off")
        for b in (1, 4, 16, 64)]


def main() -> None:
    print(f"{'model':15} {'tp':>2} {'profile':28} {'batch':>5} {'ladder':>7} {'parallel':>8} {'winner':>8} "
          f"{'comm-free decode ms':>19} {'ladder exposed us/layer':>23}  settled by the sources' ranges")
    for model, tp, prof, batch in GRID:
        w = Workload(get_model(model), tp, load_profile(prof + args.suffix), batch=batch)
        preds = predict(w, ["standard", "ladder", "parallel", "upper-bound"], record=False)
        got = {p.schedule: p for p in preds}
        lad, par = got["ladder"].speedup, got["parallel"].speedup
        ub = got["upper-bound"]
        flips = [f for f in check(w, ["ladder", "parallel"], preds).flips if {f.ahead, f.behind} == {"ladder", "parallel"}]
        settled = "yes" if not flips else "no: " + ", ".join(f"{k} {v:g}" for k, v in flips[0].setting)
        print(f"{model:15} {tp:>2} {prof + args.suffix:28} {batch:>5} {lad:>6.3f}x {par:>7.3f}x "
              f"{'ladder' if lad > par else 'parallel':>8} {ub.decode_s / (w.gen_len - 1) * 1e3:>19.3f} "
              f"{(got['ladder'].decode_s - ub.decode_s) / (w.gen_len - 1) / w.model.layers * 1e6:>23.1f}  {settled}")


if __name__ == "__main__":
    main()
