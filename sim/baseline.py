"""The number a user weighs against retraining: the best way to run the *same* model on the same
stack and cluster (every registered schedule whose model change is none, at its default spec, plus
token-split:4), and what each schedule that changes the model gains over it.

A serving stack may pick the schedule per phase (they all compute standard's outputs), so the best is the
fastest prefill and the fastest decode, each from any candidate: "P / D" when two schedules win them. A
candidate that cannot run this workload (dbo at batch 1, a token split longer than the prompt, a fused
kernel the GPU cannot run) is left out and said so. Where the stack is an engine's that ships the fused
all-reduce + add + RMSNorm but has it off (vLLM, SGLang: Stack.ar_norm_fusion), standard with it on is a
candidate too ("standard+ar-fusion"): a flag away, no retraining.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from tpsim.sim.predict import Simulator
from tpsim.sim.schedule.language import no_retraining
from tpsim.sim.stack.presets import PRESETS

EXTRA = ("token-split:4",)                  # another split count worth a user's try
FUSED = "standard+ar-fusion"                # standard under the engine's fused all-reduce + RMSNorm


def candidates() -> tuple[str, ...]:
    """The schedules that keep the model, registry order, plus EXTRA."""
    return tuple(dict.fromkeys(no_retraining() + EXTRA))


@dataclass(frozen=True)
class BestFree:
    """The best way to run the model unchanged: its prefill and decode schedules and their times."""

    prefill: str
    decode: str
    prefill_s: float
    decode_s: float
    tokens_per_s: float
    skipped: tuple[str, ...] = ()           # candidates that cannot run here, "spec: why"
    times: dict = field(default_factory=dict, compare=False)     # spec -> (prefill_s, decode_s)

    @property
    def name(self) -> str:
        return self.prefill if self.prefill == self.decode else f"{self.prefill} / {self.decode}"

    def to_dict(self) -> dict:
        return {"schedule": self.name, "prefill_schedule": self.prefill, "decode_schedule": self.decode,
                "prefill_s": self.prefill_s, "decode_s": self.decode_s, "tokens_per_s": self.tokens_per_s,
                "candidates": {k: {"prefill_s": p, "decode_s": d} for k, (p, d) in self.times.items()},
                "skipped": list(self.skipped)}


def best_free(sim, preds: dict | None = None) -> BestFree:
    """The best free way to run `sim`'s workload (a sim.predict.Simulator): the candidates already
    predicted in `preds` (spec -> Prediction) are reused, the others simulated here."""

    w = sim.w
    times: dict[str, tuple[float, float]] = {}
    skipped: list[str] = []
    for spec in candidates():
        p = (preds or {}).get(spec)
        try:
            p = p or sim.predict(spec)
        except ValueError as e:
            skipped.append(f"{spec}: {str(e).splitlines()[0]}")
            continue
        times[spec] = (p.prefill_s, p.decode_s)
    preset = PRESETS.get(w.stack.preset) if w.stack.preset else None
    engine = preset.ar_fusion if preset is not None and preset.ar_fusion != "none" else None
    if engine and w.stack.ar_norm_fusion == "none" and w.tp > 1:
        try:
            p = Simulator(replace(w, stack=replace(w.stack, ar_norm_fusion=engine)), record=False).predict("standard")
            times[FUSED] = (p.prefill_s, p.decode_s)
        except ValueError as e:
            skipped.append(f"{FUSED}: {str(e).splitlines()[0]}")
    pre = min(times, key=lambda k: times[k][0])
    dec = min(times, key=lambda k: times[k][1])
    total = times[pre][0] + times[dec][1]
    return BestFree(pre, dec, times[pre][0], times[dec][1], w.batch * w.gen_len / total, tuple(skipped), times)


def gain(pred, best: BestFree) -> float | None:
    """tokens/s of a schedule that changes the model (retrain, drops syncs) over the best that keeps it; None
    for one that keeps it, and for upper-bound (n/a: no way to run the model)."""
    if pred.model_change in ("none", "n/a"):
        return None
    return pred.tokens_per_s / best.tokens_per_s


def line(preds, best: BestFree) -> str:
    """The line under predict's table: the best free schedule and each model change's gain over it."""
    gains = [f"{p.schedule} {g - 1:+.1%}" for p in preds if (g := gain(p, best)) is not None]
    out = f"best keeping the model: {best.name} ({best.tokens_per_s:.1f} tokens/s)"
    return out + (f"; over it: {', '.join(gains)}" if gains else "")
