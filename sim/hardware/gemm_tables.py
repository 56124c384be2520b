"""`compute.gemm_tables` of a profile: measured GEMM times by weight shape and m (sim/price/cost.py indexes
them after the listed points). Kept beside sim/hardware/check.py, which calls `parse_gemm_tables`."""
from __future__ import annotations

import math

from tpsim.sim.bounds import BOUNDS
from tpsim.sim.hardware.schema import MIN_TIME_S, GemmTable, finite


def parse_gemm_tables(g, already: int = 0) -> tuple[GemmTable, ...]:
    """`compute.gemm_tables` as GemmTables (`g`: profile_check's typed getter, so every failure
    names the file and the field): measured GEMM times in a compact form, one row per weight shape.

    Each table: {"source", "dtypes": [...], "m": [m0, m1, ...] (increasing), "rows": [{"n", "k",
    "time_us": [t at m0, t at m1, ...]}, ...]}; a row may say how its (n, k) was obtained
    ("nk": "interpolated" ...); "quant": "fp8" marks a table of FP8 linears (W8A8 e4m3, output in
    `dtypes`). Kept as GemmTables (their times count towards the compute-points
    bound; the cost model indexes them after `compute.tables`, so calibrated points win)."""
    tables, out = [], []
    n_points = already
    for ti, t in enumerate(g.get("compute.gemm_tables", [])):
        p = f"compute.gemm_tables[{ti}]"
        if not isinstance(t, dict) or not t.get("source"):
            g.fail(p, "must be an object with a 'source'")
        ms, dtypes, rows = t.get("m"), t.get("dtypes", ["fp16"]), t.get("rows")
        if (not isinstance(ms, list) or not ms or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                      for v in ms) or ms != sorted(set(ms))):
            g.fail(f"{p}.m", "must be an increasing list of positive integers")
        if not isinstance(dtypes, list) or not dtypes or any(not isinstance(d, str) for d in dtypes):
            g.fail(f"{p}.dtypes", "must be a non-empty list of dtype names")
        if not isinstance(rows, list):
            g.fail(f"{p}.rows", "must be a list")
        for ri, r in enumerate(rows):
            n, k, us = (r.get("n"), r.get("k"), r.get("time_us")) if isinstance(r, dict) else (None,) * 3
            if (any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (n, k))
                    or not isinstance(us, list) or len(us) != len(ms) or not _times_ok(us)):
                g.fail(f"{p}.rows[{ri}]", f"needs positive integers 'n', 'k' and 'time_us': {len(ms)} "
                                             f"times in [{MIN_TIME_S * 1e6:g}, 1e12] us, one per m")
            if n_points + len(dtypes) * len(ms) > BOUNDS["compute_points"].hi:
                g.fail(f"{p}.rows[{ri}]", f"brings the profile over {BOUNDS['compute_points'].hi} compute "
                                             f"points ({BOUNDS['compute_points'].why})")
            n_points += len(dtypes) * len(ms)
            out.append((n, k, tuple(v * 1e-6 for v in us)))
        quant = t.get("quant", "")
        if quant not in ("", "fp8"):
            g.fail(f"{p}.quant", "must be \"fp8\" (a table of FP8 linears) or absent")
        tables.append(GemmTable(t["source"], tuple(dtypes), tuple(ms), tuple(out), quant))
        out = []
    return tuple(tables)


def _times_ok(us: list) -> bool:
    """Every time of a row a finite number (true / false are none) in [MIN_TIME_S * 1e6, 1e12] us. A row
    of plain ints and floats (every row of a profile read from JSON) is checked at C speed: its sum is
    finite exactly when each time is, and its least and greatest bound the rest; any other row, or one
    whose sum leaves the float range, time by time."""
    lo, hi = MIN_TIME_S * 1e6, 1e12
    try:
        if us and set(map(type, us)) <= {int, float} and math.isfinite(sum(us)):
            return lo <= min(us) and max(us) <= hi
    except OverflowError:               # an int past the float range
        pass
    return not any(isinstance(v, bool) or not isinstance(v, (int, float)) or not finite(v)
                   or not lo <= v <= hi for v in us)
