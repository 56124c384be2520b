"""The rank-skew sensitivity table of docs/skew.md: 405B TP16 on h100-sxm (batch 1, prompt 1024,
gen 512) under per-rank exponential arrival jitter of node/net means 0/0 .. 10/20 us (0.3/0.3 the
built-in profiles' derived value), `--exact`'s
sampled mode. Each row's profile is docs/skew-illustrative.json with its two means replaced
(ILLUSTRATIVE values, not measurements). Prints the markdown rows: tokens/s ± 95% CI (speedup).

    python bench/skew_sensitivity.py
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import _checkout  # noqa: E402  (this checkout as the package tpsim)

_checkout.load()
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402

SPECS = ["standard", "ladder", "parallel", "spd:0.7", "upper-bound"]
JITTER_US = [(0, 0), (0.3, 0.3), (1, 2), (2, 4), (5, 10), (10, 20)]     # node / net mean per rank (0.3: built-in)


def row(node_us: float, net_us: float) -> str:
    prof = json.loads((ROOT / "docs" / "skew-illustrative.json").read_text())
    prof["jitter"]["arrival"]["node"]["mean_us"]["value"] = float(node_us)
    prof["jitter"]["arrival"]["net"]["mean_us"]["value"] = float(net_us)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(prof, f)
        f.flush()
        p = load_profile(f.name)
    w = Workload(get_model("llama-3.1-405b"), 16, p, 1, 1024, 512, make_stack({}, p.stack_defaults))
    preds = {x.schedule: x.to_dict() for x in predict(w, SPECS, mode="sampled")}
    jitter = node_us or net_us
    cells = []
    for s in SPECS:
        d = preds[s]
        cell = f"{d['tokens_per_s']:.2f}" + (f"±{d['tokens_per_s_ci95']:.2f}" if jitter else "")
        cells.append(cell + ("" if s == "standard" and jitter else f" ({d['speedup']:.3f}x)"))
    label = f"{node_us}/{net_us}" + (" (built-in)" if (node_us, net_us) == (0.3, 0.3) else "")
    return f"| {label} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    print("| jitter node/net us | " + " | ".join(SPECS) + " |")
    print("|---" * (len(SPECS) + 1) + "|")
    for node, net in JITTER_US:
        print(row(node, net))
