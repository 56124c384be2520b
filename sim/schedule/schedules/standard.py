"""standard: Megatron TP. H = X + AR(P_r); X' = H + AR(Z_r), both all-reduces blocking."""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, each, uniform


def layer(b: Builder, i: int, x: str, comm: bool = True) -> str:
    """One standard layer; with the stack's fused all-reduce + RMSNorm (Stack.ar_norm_fusion) each
    all-reduce is that kernel where the engine's window takes it (Builder.ar_fusion)."""
    p = b.attn(i, x)
    if comm:
        p = b.all_reduce(f"L{i}.attn.allreduce", p, i, fuse=b.ar_fusion())
    h = b.add(f"L{i}.attn.add", x, p, f"L{i}.h", i)
    z = b.mlp(i, h)
    if comm:
        z = b.all_reduce(f"L{i}.mlp.allreduce", z, i, fuse=b.ar_fusion())
    return b.add(f"L{i}.mlp.add", h, z, f"L{i}.x", i)


plan = uniform("standard")


KIND = LayerKind("standard", each(layer), probes=(Probe("standard", "standard", 2),))
DEF = ScheduleDef("standard", "standard", "none", plan, (KIND,),
                  summary="Megatron TP: a blocking all-reduce after attention and after the MLP")
