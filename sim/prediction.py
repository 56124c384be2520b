"""One schedule's prediction: prefill, decode, tokens/s and speedup (sim/predict.py makes it), with the
sampled mode's confidence intervals and, as JSON, what `tpsim predict --json` prints per schedule."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpsim.sim.engine.estimate import Estimate
from tpsim.sim.engine.step import StepResult

if TYPE_CHECKING:
    from tpsim.sim.predict import Simulator


@dataclass
class Prediction:
    schedule: str
    prefill_s: float
    decode_s: float
    exposed_comm_s: float
    batch: int
    gen_len: int
    speedup: float = 1.0
    model_change: str = "none"          # what the schedule asks of the model (schedule.model_change)
    notes: tuple[str, ...] = ()         # what the schedule builder chose (a fallback, padding and its cost)
    prefill: StepResult | None = field(default=None, repr=False)        # timeline of the prefill
    decode: StepResult | None = field(default=None, repr=False)         # timeline of decode step 1
    mode: str = "fast"
    jitter_prefill: Estimate | None = None      # sampled mode: the jitter's cost on the prefill
    jitter_decode: Estimate | None = None       # sampled mode: on one decode step (mean over positions)
    speedup_ci: float = 0.0                     # sampled mode: 95% half-width of the speedup
    # the simulator that made it: sim/sensitivity.py reruns its workload at other numbers no price reads on it,
    # and sim/baseline.py predicts the schedules that keep the model on it
    simulator: Simulator | None = field(default=None, repr=False, compare=False)

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.gen_len / (self.prefill_s + self.decode_s)

    @property
    def total_ci_s(self) -> float:
        """95% half-width of prefill_s + decode_s (sampled mode; the two are sampled independently)."""
        pre = self.jitter_prefill.half_s if self.jitter_prefill else 0.0
        dec = self.jitter_decode.half_s * (self.gen_len - 1) if self.jitter_decode else 0.0
        return math.hypot(pre, dec)

    def to_dict(self) -> dict:
        out = {"schedule": self.schedule, "prefill_s": self.prefill_s, "decode_s": self.decode_s,
               "tokens_per_s": self.tokens_per_s, "speedup": self.speedup,
               "exposed_comm_s": self.exposed_comm_s, "model_change": self.model_change,
               "notes": list(self.notes)}
        if self.mode == "sampled":
            pre, dec = self.jitter_prefill or Estimate.zero(), self.jitter_decode or Estimate.zero()
            total = self.prefill_s + self.decode_s
            out.update({"prefill_ci95_s": pre.half_s, "decode_ci95_s": dec.half_s * (self.gen_len - 1),
                        "tokens_per_s_ci95": self.tokens_per_s * self.total_ci_s / total,
                        "speedup_ci95": self.speedup_ci,
                        "jitter_prefill_s": pre.delta_s, "jitter_decode_step_s": dec.delta_s,
                        "decode_step_sd_s": dec.sd_s, "samples": {"prefill": pre.samples, "decode": dec.samples}})
        return out
