"""What one simulated forward pass is given and gives back, whichever engine runs it (the SimPy engine,
sim/engine/simpy_engine.py; the heap engine, sim/engine/heap_engine.py): how compute and a collective in
flight slow each other (Interference), and the pass's timeline (StepResult). Kept apart from the engines
so that a caller that only describes a pass (calibration, a compiled pass) imports no SimPy."""
from __future__ import annotations

from dataclasses import dataclass, field

from tpsim.sim.engine.record import Record


@dataclass(frozen=True)
class Interference:
    """How a collective in flight and compute on the same rank share it.

    While a collective runs, compute on its ranks is slowed by compute_slowdown; while compute
    runs on any of its ranks, the collective progresses at 1/comm_slowdown. The last wake_s of a
    collective's time is not the collective's own: it is waking the rank that blocked on it (a
    sleeping thread scheduled again, on CPU ~0.7 ms). A rank that was busy computing when the
    collective ended pays nothing, so a blocking schedule costs the collective's full time and one
    that overlaps it saves the wake-up as well (min(wake_s, the collective's time) each)."""

    compute_slowdown: float = 1.0     # factor on compute while a collective runs on the rank
    comm_slowdown: float = 1.0        # factor on a collective while compute runs on any of its ranks
    wake_s: float = 0.0               # the part of a collective's time that wakes a rank blocked on it
    coschedule: object = None         # sim.price.coschedule.CoSchedule: per-kernel SMs and HBM sharing instead
                                      # of the two flat factors (GPU profiles); None: the flat factors

    def __post_init__(self) -> None:
        if self.compute_slowdown < 1.0 or self.comm_slowdown < 1.0:
            raise ValueError("slowdown factors must be >= 1")
        if not self.wake_s >= 0.0:
            raise ValueError(f"wake_s must be >= 0, got {self.wake_s}")

    @property
    def active(self) -> bool:
        return (self.compute_slowdown > 1.0 or self.comm_slowdown > 1.0 or self.wake_s > 0.0
                or self.coschedule is not None)

    def bind(self, schedule, times_s: dict):
        """The co-scheduling hook for one schedule (sim.price.coschedule.Bound), or None without one."""
        return self.coschedule.bind(schedule, times_s) if self.coschedule is not None else None


@dataclass
class StepResult:
    """Timeline of one forward pass."""

    duration_s: float                 # until the last rank finished its last op
    exposed_comm_s: float             # rank 0's compute stream blocked waiting on collectives
    records: list[Record] = field(default_factory=list)
    events: int = 0                   # SimPy events scheduled (engine throughput benchmarks)
    last_held_op: int = -1            # index in schedule.ops of the last op the GPU waited on the CPU
                                      # to launch (the launch chain held it back); -1: none
    apart: bool = False               # flat interference factors (no coschedule hook) applied, and no compute
                                      # op ran beside a collective: every rate was 1, so the pass is the same
                                      # at any other flat factors (the same wake_s)
