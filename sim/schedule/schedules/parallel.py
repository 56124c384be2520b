"""parallel (PaLM, GPT-J): attention and MLP both read norm(X); one all-reduce of their summed partials."""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, each, uniform


def layer(b: Builder, i: int, x: str) -> str:
    n = b.norm(f"L{i}.norm", x, i, f"L{i}.attn_norm")
    p = b.attn(i, n, norm=False)
    z = b.mlp(i, n, norm=False)
    s = b.add(f"L{i}.mlp.sum", p, z, f"L{i}.pz", i)
    s = b.all_reduce(f"L{i}.allreduce", s, i)
    return b.add(f"L{i}.add", x, s, f"L{i}.x", i)


plan = uniform("parallel")


KIND = LayerKind("parallel", each(layer), probes=(Probe("parallel", "parallel", 2),))
DEF = ScheduleDef("parallel", "parallel", "retrain", plan, (KIND,),
                  summary="PaLM / GPT-J: attention and MLP read one norm; one all-reduce a layer")
