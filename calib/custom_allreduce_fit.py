"""Fitting the custom all-reduce mechanism (sim/price/comm/custom_allreduce.py) to a measured engine table, on
half of its sizes: what tools/derive_profiles/collectives.py writes into the profiles and what
bench/validate_custom_allreduce.py holds the other half against.

Rule: a size is a fit point when log2(bytes) is even (256 B, 1 KiB, 4 KiB, ...); odd ones (512 B,
2 KiB, ...) are held apart. Among the fit points of the kernel the engine ran there (its own size
rule, custom_allreduce.pick): floor = the fastest time at <= 4 KiB (a
spike is the measurement's hiccup: the kernel never beats its floor); each kernel's rate = least squares
through the origin of (time - floor) against that kernel's remote bytes per rank, over its fit points
at >= 64 KiB (where bytes, not the floor's noise, set the time); two-shot with its own
intercept (twoshot_extra_us: its middle barrier) where it has two or more such points. Points where the engine ran NCCL
are not fitted. Pure Python.
"""
from __future__ import annotations

import math
import statistics

from tpsim.sim.price.comm.custom_allreduce import remote_bytes

FLOOR_MAX_BYTES = 4096
RATE_MIN_BYTES = 64 * 1024


def is_fit_size(nbytes: int) -> bool:
    return int(round(math.log2(nbytes))) % 2 == 0


def fit_group(points: list[tuple[int, float]], kernel_of, n: int,
              eager: list[tuple[int, float]] | None = None) -> dict | None:
    """{floor_us, oneshot_gbps, twoshot_gbps, eager_floor_us, fit_bytes} from (bytes, us) points of one
    group size; kernel_of(bytes) names the kernel the engine ran. None without a custom-kernel floor."""
    fit = [(b, us) for b, us in points if is_fit_size(b) and kernel_of(b) in ("oneshot", "twoshot")]
    small = [us for b, us in fit if b <= FLOOR_MAX_BYTES]
    if not small:
        return None
    floor = min(small)
    out = {"floor_us": round(floor, 3)}
    for k in ("oneshot", "twoshot"):
        pts = [(remote_bytes(k, b, n), us - floor) for b, us in fit if kernel_of(b) == k and b >= RATE_MIN_BYTES]
        extra = 0.0
        if k == "twoshot" and len(pts) >= 2:
            # two-shot's middle barrier (end_sync with __threadfence_system before the all-gather) is a fixed
            # cost the one-shot floor lacks: its own intercept
            mx, my = statistics.mean(x for x, _ in pts), statistics.mean(y for _, y in pts)
            sxx = sum((x - mx) ** 2 for x, _ in pts)
            slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else 0.0
            if slope > 0:
                extra = max(my - slope * mx, 0.0)
            pts = [(x, y - extra) for x, y in pts]
        sxx = sum(x * x for x, _ in pts)
        sxy = sum(x * y for x, y in pts)
        out[f"{k}_gbps"] = round(sxx / sxy / 1e3, 1) if pts and sxy > 0 else None    # bytes/us -> GB/s
        if k == "twoshot" and out[f"{k}_gbps"] is not None:
            out["twoshot_extra_us"] = round(extra, 3)
    if out["oneshot_gbps"] is None:
        return None
    if eager:
        e = [us for b, us in eager if is_fit_size(b) and b <= FLOOR_MAX_BYTES and kernel_of(b) != "nccl"]
        out["eager_floor_us"] = round(statistics.median(e), 3) if e else None     # host-bound: typical call
    out["fit_bytes"] = sorted(b for b, _ in fit)
    return out
