"""upper-bound: standard with every collective removed, the layers' all-reduces and, under a
vocab-parallel stack, the embedding's all-reduce and the head's all-gather too (comm_free); each rank
adds its own partials and samples from its own vocab shard. A speed ceiling only: the outputs are
meaningless."""
from __future__ import annotations

from ._def import LayerKind, Probe, ScheduleDef, each, uniform
from .standard import layer as standard_layer


plan = uniform("upper-bound")


KIND = LayerKind("upper-bound", each(lambda b, i, x: standard_layer(b, i, x, comm=False)),
                 probes=(Probe("upper-bound", "upper-bound", 2),))
DEF = ScheduleDef("upper-bound", "upper-bound", "n/a", plan, (KIND,), comm_free=True)
