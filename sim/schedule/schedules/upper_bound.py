"""upper-bound: standard with every collective removed, the layers' all-reduces and, under a
vocab-parallel stack, the embedding's all-reduce and the head's all-gather too (comm_free); each rank
adds its own partials and samples from its own vocab shard. A speed ceiling for the standard
layer only (the outputs are meaningless): its kernels are the standard layer's without the
collectives, so another architecture whose layer has other kernels can come out faster: ladder's
first norm fuses into its qkv GEMV (about 1 us a layer at 70B TP8 batch 1), and parallel runs one
RMSNorm a layer instead of two, which is ~6 kernels fewer on the eager stack, whose decode steps are
bound by kernel launches (8B TP4 --no-compile: parallel 1.202x, upper-bound 1.051x over standard)."""
from __future__ import annotations

from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, each, uniform
from tpsim.sim.schedule.schedules.standard import layer as standard_layer


plan = uniform("upper-bound")


KIND = LayerKind("upper-bound", each(lambda b, i, x: standard_layer(b, i, x, comm=False)),
                 probes=(Probe("upper-bound", "upper-bound", 2),))
DEF = ScheduleDef("upper-bound", "upper-bound", "n/a", plan, (KIND,), comm_free=True,
                  summary="no communication at all: the standard layer's speed ceiling")
