"""The efficiency curves of the built-in profiles from a table of GEMM timings (compute.py reads
aiconfigurator's into these): medians per half-decade, and which rows stream the way a generated
kernel of a decode step does. numpy only, so the rule is tested on toy rows (tests/test_memory_curve.py)."""
from __future__ import annotations

import math

import numpy as np

import aic_collector

from tpsim.sim.hardware.schema import L2Spec
from tpsim.sim.price.l2_traffic import l2_hit_fraction
from tpsim.sim.hardware.gemm_grids import gemm_tile

MIN_ROWS = 5                  # rows a bin needs (else it is left out, or falls back to every row: binned)
COLD_SHARE = 0.1              # a row "ran cold": its collector rotation's L2 hit share is at most this


def binned(x, y, lo: float, hi: float, prefer=None) -> tuple[list[float], list[float]]:
    """(bin centres, median y) per half-decade of x from 10**lo to 10**hi, for bins of at least
    MIN_ROWS rows; where the mask `prefer` holds MIN_ROWS rows of a bin, the median of those alone.
    Medians are clipped to [1e-4, 1] and rounded to 4 places, centres to 3 significant digits."""
    xs, ys = [], []
    edges = 10 ** np.arange(lo, hi + 0.5, 0.5)
    for a, b in zip(edges, edges[1:]):
        sel = (x >= a) & (x < b)
        if prefer is not None and (sel & prefer).sum() >= MIN_ROWS:
            sel = sel & prefer
        if sel.sum() >= MIN_ROWS:
            xs.append(float(f"{math.sqrt(a * b):.3g}"))
            ys.append(round(float(min(1.0, max(1e-4, np.median(y[sel])))), 4))
    return xs, ys


def streams_like_generated(m, n, k, sms: int, grid: str | None, l2: L2Spec | None, memory_gib: float):
    """Mask of the rows timed as a generated streaming kernel of a decode step runs: their cuBLAS grid
    (sim/hardware/gemm_grids.py `grid`) fills the GPU's `sms`, and the collector's rotation of their copies
    (aic_collector) ran cold in L2 (`l2`'s sweep: hit share <= COLD_SHARE). All False without a
    sourced grid or sweep: nothing says which rows those are."""
    if grid is None or l2 is None:
        return np.zeros(len(m), dtype=bool)
    return np.array([gemm_tile(grid, mi).ctas(mi, ni) >= sms and l2_hit_fraction(
        l2, aic_collector.rotation_bytes(int(mi), int(ni), int(ki), memory_gib)) <= COLD_SHARE
        for mi, ni, ki in zip(m, n, k)], dtype=bool)
