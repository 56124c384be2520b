"""The Ladder Residual / SPD answer for Llama-3.1-70B at TP8 by serving engine and batch
(docs/serving-engines.md): tpsim's prediction per --stack preset, no measurement.

    python bench/serving_engines.py [--out docs/img/serving-engines-70b-tp8.png]

Prints one row per (stack, batch): ms per decode step of standard, and the speedup of ladder and
spd:0.7 over standard (docs/serving-engines.md shows this output; tests/test_docs.py reruns it);
with --out, also draws them (matplotlib): one panel per schedule, a line per stack."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _checkout  # noqa: E402

_checkout.load()
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402
from tpsim.sim.stack.presets import PRESETS  # noqa: E402

MODEL, TP, PROFILE, PROMPT, GEN = "llama-3.1-70b", 8, "h100-sxm", 1024, 512
BATCHES = (1, 4, 16, 64)
SCHEDULES = ("ladder", "spd:0.7")


def rows() -> list[dict]:
    prof, model = load_profile(PROFILE), get_model(MODEL)
    out = []
    for name, preset in PRESETS.items():
        stack = make_stack({}, prof.stack_defaults, preset=preset.values)
        for b in BATCHES:
            w = Workload(model, TP, prof, b, PROMPT, GEN, stack)
            preds = {p.schedule: p for p in predict(w, ["standard", *SCHEDULES], record=False)}
            out.append({"stack": name, "batch": b, "standard_ms_per_step": preds["standard"].decode_s / (GEN - 1) * 1e3}
                       | {s: preds[s].speedup for s in SCHEDULES})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also draw the figure here (docs/img/serving-engines-70b-tp8.png)")
    args = ap.parse_args()
    data = rows()
    print(f"{'stack':<11}{'batch':>6}{'standard ms/step':>18}" + "".join(f"{s:>10}" for s in SCHEDULES))
    for r in data:
        print(f"{r['stack']:<11}{r['batch']:>6}{r['standard_ms_per_step']:>18.2f}"
              + "".join(f"{r[s]:>9.3f}x" for s in SCHEDULES))
    if args.out:
        plot(data, args.out)


STYLES = ("-", "-", "-", ":", "-", "--", "-.")
MARKERS = ("o", "s", "^", "v", "D", "x", "P")


def plot(data: list[dict], out: str) -> None:
    import matplotlib                # lazy: the plot extra, only for the figure
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: see above
    fig, axes = plt.subplots(1, len(SCHEDULES), figsize=(10, 4), sharey=True)
    for ax, s in zip(axes, SCHEDULES):
        # one style per preset, in PRESETS' order; an older version line dotted or dashed, trtllm@1 dashed as it
        # can coincide with sglang; a preset added without a style here fails the zip (strict)
        for (name, style, mark) in zip(PRESETS, STYLES, MARKERS, strict=True):
            pts = [r for r in data if r["stack"] == name]
            ax.plot([r["batch"] for r in pts], [r[s] for r in pts], marker=mark, ls=style, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(f"{s} over standard")
        ax.set_xlabel("batch")
    axes[0].set_ylabel("predicted speedup (tokens/s)")
    axes[-1].legend(title="--stack")
    fig.suptitle(f"{MODEL} TP{TP} on {PROFILE}, prompt {PROMPT}, gen {GEN} (tpsim prediction)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
