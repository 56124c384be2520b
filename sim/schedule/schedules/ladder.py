"""ladder (Ladder Residual), and ladder:K on the upper K layers only (hybrid; standard below)."""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef


def layers(b: Builder, first: int, end: int, x: str) -> str:
    """Ladder on layers first..end-1, as the Ladder authors' TP inference code runs it.

    Module m reads a residual that lacks module m-1's output; m-1's all-reduce is awaited
    just before the add that needs it, so it overlaps m's compute. The first ladder layer
    sees zeros as the previous modules' outputs; after the last, both pending sums are added.
    """
    r, pending = x, None      # pending: (layer, attn all-reduce value, mlp all-reduce value)
    for i in range(first, end):
        if pending:
            r = b.add(f"L{pending[0]}.attn.add", r, pending[1], f"L{pending[0]}.h", pending[0])
        a = b.all_reduce(f"L{i}.attn.allreduce", b.attn(i, r), i)          # launched async
        if pending:
            r = b.add(f"L{pending[0]}.mlp.add", r, pending[2], f"L{pending[0]}.x", pending[0])
        m = b.all_reduce(f"L{i}.mlp.allreduce", b.mlp(i, r), i)            # launched async
        pending = (i, a, m)
    i, a, m = pending
    r = b.add(f"L{i}.attn.add", r, a, f"L{i}.h", i)
    return b.add(f"L{i}.mlp.add", r, m, f"L{i}.x", i)


def plan(n: int, upper: int | None = None) -> tuple[str, ...]:
    """Ladder on the upper `upper` layers (all when None); standard below them."""
    k = n if upper is None else upper
    if not 1 <= k <= n:
        raise ValueError(f"ladder:K needs 1 <= K <= {n} layers, got {k}")
    return ("standard",) * (n - k) + ("ladder",) * k


def parse(spec: str, arg: str, n_layers: int) -> dict:
    if not arg:
        return {}
    try:
        return {"upper": int(arg)}
    except ValueError:
        raise ValueError(f"bad ladder spec {spec!r}; use ladder or ladder:K (K = upper layers)") from None


KIND = LayerKind("ladder", layers, probes=(Probe("ladder", "ladder", 3),))
DEF = ScheduleDef("ladder", "ladder | ladder:K (upper K layers)", "retrain", plan, (KIND,), parse,
                  summary="Ladder Residual: each module's all-reduce overlaps the next module's compute")
