"""upper-bound: standard with every all-reduce removed; each rank adds its own partials. A speed
ceiling only: the outputs are meaningless."""
from __future__ import annotations

from ._def import LayerKind, Probe, ScheduleDef, each
from .standard import layer as standard_layer


def plan(n: int) -> tuple[str, ...]:
    return ("upper-bound",) * n


KIND = LayerKind("upper-bound", each(lambda b, i, x: standard_layer(b, i, x, comm=False)),
                 probes=(Probe("upper-bound", "upper-bound", 2),))
DEF = ScheduleDef("upper-bound", "upper-bound", "n/a", plan, (KIND,))
