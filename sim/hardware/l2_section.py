"""`compute.l2` of a profile: the GPU's L2 -> SM bandwidth and the measured transition of a repeated
sweep from its L2 plateau to its DRAM plateau (sim/price/l2_traffic.py prices with them;
docs/profile-format.md). Kept beside sim/hardware/check.py, which calls `parse_l2` with its typed
getter, so every failure names the file and the field.

    "l2": {"gbps": {"value": 10030, "source": "..."},                  # L2 -> SM, GB/s
           "sweep": {"kb": [...], "gbps": [...], "dram_gbps": 3887.9,  # optional: data set kB (increasing),
                     "source": "..."}}                                 # GB/s at each, the DRAM plateau

Absent (or null, which drops a base's section under `extends`): no L2 term (DRAM bytes only)."""
from __future__ import annotations

from tpsim.sim.hardware.schema import L2Spec
from tpsim.sim.hardware.schema import MAX_TABLE_POINTS, finite, has_source

L2 = "compute.l2"
MAX_GBPS = 1e6           # 1 PB/s: two orders above any GPU's L2 (H200: ~10 TB/s); more is a typo
RATE_FLOOR_GBPS = 1e-6    # as profile_fields.RATE_FLOOR: 1 kB/s, below any device
MAX_KB = 1e9             # 1 TB of data set: no GPU has that much memory, let alone L2


def parse_l2(g) -> L2Spec | None:
    """compute.l2 as an L2Spec (None when absent or null). `g`: profile_check's _Getter."""
    if g.get(L2, None) is None:
        return None
    g.obj(L2)
    l2_gbps = g.num(f"{L2}.gbps", positive=True, max_=MAX_GBPS)
    if g.get(f"{L2}.sweep", None) is None:
        return L2Spec(l2_gbps * 1e9)
    path = f"{L2}.sweep"
    s = g.obj(path)
    if not has_source(s):
        g.fail(path, "has no 'source'")
    kb, gbps = s.get("kb"), s.get("gbps")
    if not isinstance(kb, list) or not isinstance(gbps, list) or len(kb) != len(gbps) or not kb:
        g.fail(path, "needs equal-length non-empty lists 'kb' and 'gbps'")
    if len(kb) > MAX_TABLE_POINTS:
        g.fail(path, f"has {len(kb)} points; at most {MAX_TABLE_POINTS}")
    if any(not finite(v) or not 0 < v <= MAX_KB for v in kb) or any(b <= a for a, b in zip(kb, kb[1:])):
        g.fail(f"{path}.kb", f"must be positive numbers (<= {MAX_KB:g}), strictly increasing")
    if any(not finite(v) or not RATE_FLOOR_GBPS <= v <= MAX_GBPS for v in gbps):
        g.fail(f"{path}.gbps", f"values must be GB/s in [{RATE_FLOOR_GBPS:g}, {MAX_GBPS:g}]")
    dram = g.num(f"{path}.dram_gbps", positive=True, max_=MAX_GBPS)
    if dram >= l2_gbps:
        # the hit fraction divides by 1/l2 - 1/dram: the DRAM plateau must be the slower one
        g.fail(f"{path}.dram_gbps", f"must be below {L2}.gbps ({l2_gbps:g}: the L2 plateau), got {dram:g}")
    return L2Spec(l2_gbps * 1e9, tuple((float(a), float(b)) for a, b in zip(kb, gbps)), dram)
