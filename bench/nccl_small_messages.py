"""The NCCL all-reduce kernel at decode sizes (16-256 KiB, 2/4/8 ranks): tpsim's price against NCCL's own
model and the public measurements, and how much each grows from 16 to 64 KiB.

Columns per group:
- tpsim: the bare kernel as `tpsim collective --mode nccl` prices it (the profile's measured table,
  its lower envelope: sim/price/comm/collective.py lower_envelope);
- model: NCCL's tuner over the profile's topology (sim/price/comm/topology.py: tuning.cc's latencies and
  bandwidth caps, as NCCL 2.21 / 2.30 have them), its pick and time, shifted by the profile's fitted
  latency_offset_us;
- public: every one-node measurement under bench/data/ of that group with a point at these sizes,
  one process per GPU, stream launches or one graph replay per call as its file says (validation
  only; no profile constant comes from them).

    python bench/nccl_small_messages.py [--profile h100-sxm]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, as bench/'s other scripts)
_checkout.load()

from tpsim.commands.collective_table import collective_rows  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.price.cost import CostModel  # noqa: E402
from tpsim.sim.stack.spec import Stack  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
SIZES = (16384, 32768, 65536, 131072, 262144)


def public(profile: str, group: int) -> list[tuple[str, dict[int, float]]]:
    """(file, {bytes: us}) of the one-node all-reduce measurements of `group` ranks on `profile`'s system,
    one process per GPU, with points at SIZES."""
    out = []
    for f in sorted(DATA.glob("*.json")):
        d = json.loads(f.read_text())
        if (d.get("collective"), d.get("profile"), d.get("group"), d.get("nodes", 1)) != ("all_reduce", profile, group, 1):
            continue
        if d.get("gpus_per_process", 1) != 1 or d.get("mode") != "nccl" or d.get("algo"):
            continue
        pts = {int(b): float(t) for b, t in d["points"] if int(b) in SIZES}
        if len(pts) == len(SIZES):
            out.append((f.stem + (" (graph)" if d.get("graph_launched") else ""), pts))
    return out


def growth(row: dict[int, float]) -> str:
    return f"{row[65536] / row[16384] - 1:+.1%}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h100-sxm")
    args = ap.parse_args()
    prof = load_profile(args.profile)
    cm = CostModel(prof, Stack())
    topo = cm.topology()
    print(f"all_reduce kernel, us; profile {prof.name} (latency_offset_us {prof.topology.latency_offset_us:+.2f} "
          f"on the model)")
    for n in (2, 4, 8):
        rows = [("tpsim", {r.bytes: r.time_us for r in collective_rows(prof, "all_reduce", n, "nccl", SIZES)})]
        picks = {b: topo.pick("all_reduce", b, n, prof.gpus_per_node) for b in SIZES}
        names = sorted({p for p, _ in picks.values()})
        rows.append((f"model {'/'.join(names)}", {b: t * 1e6 for b, (_, t) in picks.items()}))
        rows += public(prof.name, n)
        print(f"\n{n} ranks{'':<34}" + "".join(f"{b >> 10:>7}K" for b in SIZES) + "  16->64K")
        for name, row in rows:
            print(f"  {name:<40}" + "".join(f"{row[b]:8.2f}" for b in SIZES) + f"  {growth(row):>7}")


if __name__ == "__main__":
    main()
