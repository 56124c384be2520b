"""spd (Sync-Point Drop) on chosen blocks: spd:F (a fraction F of the blocks, from the top) or a
layer list spd:3,5,9-12. In an SPD block rank r feeds its MLP X + P_r and the block does one
all-reduce of P_r + Z_r, adding X after it."""
from __future__ import annotations

import math

from tpsim.sim.schedule.builder import Builder
from tpsim.sim.schedule.schedules._def import LayerKind, Probe, ScheduleDef, each


def layer(b: Builder, i: int, x: str) -> str:
    """SPD block: rank r feeds its MLP X + P_r; one all-reduce of P_r + Z_r; X added after it."""
    p = b.attn(i, x)
    h = b.add(f"L{i}.attn.add", x, p, f"L{i}.h", i)        # local: no sync point
    z = b.mlp(i, h)
    s = b.add(f"L{i}.mlp.sum", p, z, f"L{i}.pz", i)         # P_r + Z_r
    s = b.all_reduce(f"L{i}.mlp.allreduce", s, i)
    return b.add(f"L{i}.mlp.add", x, s, f"L{i}.x", i)


def plan(n: int, layers: tuple[int, ...] = ()) -> tuple[str, ...]:
    chosen = set(layers)
    return tuple("spd" if i in chosen else "standard" for i in range(n))


def parse(spec: str, arg: str, n_layers: int) -> dict:
    if not arg:
        raise ValueError("spd needs an argument: spd:F (fraction of blocks) or spd:3,5,7 (layers)")
    return {"layers": blocks(spec, arg, n_layers)}


def blocks(spec: str, arg: str, n_layers: int) -> tuple[int, ...]:
    """The SPD blocks `arg` names: a fraction of the blocks counted from the top, or a layer list."""
    try:
        frac = float(arg)                       # a fraction of blocks, counted from the top
    except ValueError:
        frac = None
    if frac is not None:
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"spd fraction must be within 0..1, got {arg} (a layer list is spd:3,5,9-12)")
        k = math.floor(frac * n_layers + 0.5)   # round half up: spd:0.5 of 5 blocks is 3, not 2
        if frac > 0 and k == 0:
            raise ValueError(f"spd:{arg} of {n_layers} blocks rounds to none; use a larger fraction or a layer list")
        return tuple(range(n_layers - k, n_layers))
    out: set[int] = set()
    for part in arg.strip("[]").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            lo, _, hi = part.partition("-")
            lo_i, hi_i = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"bad spd spec {spec!r}; use spd:F (0<=F<=1) or a layer list like spd:3,5,9-12") from None
        if hi_i < lo_i:
            raise ValueError(f"empty spd layer range {part!r} in {spec!r}; write low-high")
        if not (0 <= lo_i and hi_i < n_layers):       # checked before the loop: spd:0-999999999 loops 10^9 times
            raise ValueError(f"spd layer {lo_i if lo_i < 0 else hi_i} outside 0..{n_layers - 1}")
        out.update(range(lo_i, hi_i + 1))
    if not out:
        raise ValueError(f"spd layer list {spec!r} names no layer")
    return tuple(sorted(out))


KIND = LayerKind("spd", each(layer), probes=(Probe("spd", "spd:0-2", 3),))
DEF = ScheduleDef("spd", "spd:F (fraction F of blocks from the top) | spd:3,5,9-12 (layer list; one layer as spd:[7])",
                  "drops syncs", plan, (KIND,), parse, example="spd:0.5",
                  summary="Sync-Point Drop: the chosen blocks skip their attention all-reduce")
