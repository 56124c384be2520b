"""The serving question for one deployment (model, TP, profile, engine stack, replicas): each schedule's
latencies at a rate, and its highest rate under an SLO. Holds one step model (sim.predict.Simulator)
and one interpolated step table per schedule, shared by every run (a rate sweep prices each node once).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tpsim.sim.hardware.profile import Profile
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.schedule.language import plan_of
from tpsim.sim.serve import slo as slo_mod
from tpsim.sim.serve.cluster import Run, simulate
from tpsim.sim.serve.metrics import Summary, summarize
from tpsim.sim.serve.scheduler import Setup
from tpsim.sim.serve.steptime import StepTable
from tpsim.sim.serve.traffic import Traffic
from tpsim.sim.stack.spec import Stack


@dataclass
class Point:
    """One schedule at one rate."""

    schedule: str
    rate: float | None            # None: the trace's own times
    summary: Summary
    run: Run | None = None        # kept when recorded (the Perfetto trace)


class Service:
    """A deployment whose schedules are compared on the same requests."""

    def __init__(self, model: ModelSpec, tp: int, profile: Profile, stack: Stack, setup: Setup,
                 replicas: int = 1, router: str | None = None, gpus_per_node: int | None = None):
        self.model, self.tp, self.profile, self.stack, self.setup = model, tp, profile, stack, setup
        self.replicas, self.router = replicas, router or setup.router
        w = Workload(model, tp, profile, stack=stack, gpus_per_node=gpus_per_node, memory_check=False)
        self.sim = Simulator(w, record=False)
        self.tables: dict[str, StepTable] = {}

    def check(self, traffic: Traffic) -> None:
        """One line for the first request the engine can never serve (too long, too big for the cache)."""
        for i, (p, o) in enumerate(zip(traffic.prompt.tolist(), traffic.output.tolist())):
            self.setup.check(p, o, f"request {i}" + (f" of {traffic.source}" if traffic.source else ""))

    def table(self, spec: str) -> StepTable:
        if spec not in self.tables:
            plan_of(spec, self.model.layers)            # a bad spec fails here, before any simulation
            s = self.setup
            self.tables[spec] = StepTable(lambda step: self.sim.step_time(spec, step)[0], self.stack,
                                          s.max_seqs, s.max_len, max(s.budget, s.max_prefill),
                                          self.sim.w.causal_prefill)
        return self.tables[spec]

    def run(self, spec: str, traffic: Traffic, record: bool = False,
            progress: Callable[[int], None] | None = None) -> Point:
        run = simulate(traffic, self.setup, self.table(spec), self.replicas, self.router, record, progress)
        return Point(spec, None, summarize(run), run if record else None)

    def max_rate(self, spec: str, traffic: Traffic, slo: dict, percentile: float, burstiness: float, seed: int,
                 start: float = 1.0, rel_tol: float = 0.02, on_run: Callable[[float], None] | None = None
                 ) -> slo_mod.Sweep:
        """The highest rate at which `spec` meets `slo` on `traffic`'s lengths (sim.serve.slo.max_rate)."""
        def run_at(rate: float) -> Summary:
            if on_run is not None:
                on_run(rate)
            return self.run(spec, traffic.at_rate(rate, burstiness, seed)).summary
        return slo_mod.max_rate(run_at, slo, percentile, start, rel_tol)
