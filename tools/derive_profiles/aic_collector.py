"""How aiconfigurator's GEMM collector times a row of the built-in GEMM tables, as far as it decides
what the row means: ai-dynamo/aiconfigurator collector/sglang/collect_gemm.py at e23be5a79 (the
commit that collected the sglang 0.5.14 rows) builds `outside_loop_count` copies of (a, w) and times
them one after another in a replayed CUDA graph, reporting the time per copy. Each weight is read
again after the other copies' bytes, so where the copies fit in L2 together the row ran warm.
Pure Python: the derivation (compute.py) and bench/validate_gemm_tables.py read it."""
from __future__ import annotations

COPIES_MAX = 6                 # collect_gemm.py: min(6, ...)
BUDGET_SHARE = 0.45            # collect_gemm.py: _budget = int(_gpu_mem * 0.45)


def copies(m: int, n: int, k: int, memory_gib: float) -> int:
    """(a, w) copies timed in rotation for a bf16 [m, k] x [n, k] row on a GPU of `memory_gib`:
    min(6, budget // persistent bytes), 1 when one copy is over the budget."""
    persistent = 2 * (m * k + m * n + n * k)
    budget = int(memory_gib * 2**30 * BUDGET_SHARE)
    return 1 if persistent >= budget else max(1, min(COPIES_MAX, budget // persistent))


def rotation_bytes(m: int, n: int, k: int, memory_gib: float) -> int:
    """Bytes the rotation sweeps between two reads of one copy's weight (all copies' a, w and out)."""
    return copies(m, n, k, memory_gib) * 2 * (m * k + m * n + n * k)
