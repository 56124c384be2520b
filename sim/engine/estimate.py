"""What sampled mode (sim/engine/sampled.py) reports of the jitter's cost on a step, and when it stops
sampling: kept apart from the sampler so that a prediction that draws no jitter (the fast path)
names them without importing the sampler and numpy."""
from __future__ import annotations

from dataclasses import dataclass

REL_TOL = 2e-3            # stop once the 95% CI half-width of the mean step is within this of it


@dataclass(frozen=True)
class Estimate:
    """The jitter's cost on one step: its mean over draws, with a 95% confidence half-width."""

    delta_s: float            # mean extra seconds per step over the jitter-free (fast path) time
    half_s: float             # 95% confidence half-width of delta_s
    sd_s: float               # spread: standard deviation of one step's time (approximation, see module)
    samples: int

    @staticmethod
    def zero() -> "Estimate":
        return Estimate(0.0, 0.0, 0.0, 0)
