"""The engines' all-reduce mechanism (sim/price/comm/custom_allreduce.py) against measurements no constant came from.

Held apart, each a class with its own median |error|:
- "odd sizes": the odd-log2 sizes of the very tables the constants were fitted on (the fit used the
  even ones, calib/custom_allreduce_fit.py), where the engine ran its own kernel;
- "symm-mem in vLLM": the sizes of vLLM's table at 4 / 8 ranks on an NVLS box above vLLM's custom
  all-reduce max size, where vLLM's dispatch runs torch symmetric memory (never fitted: priced from
  the vLLM kernel's floor, the NVLS bus rate and two copy kernels);
- "other release": every own-kernel size of the engine's other aiconfigurator releases on the system;
- "sglang by vllm": SGLang's table priced with the vLLM family's constants (SGLang's kernel is vLLM's,
  adapted): how much the engines' wrappers, not the kernel, differ;
- public posts (bench/data/custom_ar/*.json): a forced kernel at the post's group and sizes.
Rows whose size the engine runs on NCCL are not custom-kernel points and are skipped.

    python bench/validate_custom_allreduce.py /work/aic/core/aiconfigurator_core/systems/data
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "derive_profiles"))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

import pandas as pd  # noqa: E402

from tpsim.sim.price.comm import custom_allreduce as car  # noqa: E402
from tpsim.sim.price.cost import CostModel  # noqa: E402
from tpsim.calib.custom_allreduce_fit import is_fit_size  # noqa: E402
from tpsim.sim.stack.impls import ENGINE_COLLECTIVES  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import Stack  # noqa: E402
# the derivation's own release choices, family -> impl names and table reader (one definition)
from collectives import CUSTOM_AR_RELEASES as FIT, _FAMILY_IMPL as IMPL, engine_ar_points  # noqa: E402

POSTS = Path(__file__).resolve().parent / "data" / "custom_ar"
PROFILES = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "a100_sxm": "a100-sxm", "l40s": "l40s-pcie"}


def table_rows(data: Path) -> list[dict]:
    rows = []
    for system, fams in FIT.items():
        prof = load_profile(PROFILES[system])
        for family, fit_rel in fams.items():
            impl = IMPL[family]
            cm = CostModel(prof, Stack(collective=impl))
            rels = sorted(p.parent.name for p in (data / system / "comm" / family).glob("*/custom_allreduce_perf.parquet"))
            for rel in rels:
                pts = engine_ar_points(system, f"{family}/{rel}", data)
                for (n, mode), series in sorted(pts.items()):
                    hw = car.hardware(prof, n, prof.gpus_per_node)
                    for b, us in series:
                        k = car.pick(ENGINE_COLLECTIVES[impl], b, n, hw).kernel
                        if k == "nccl":
                            continue
                        own = f"{family}/{rel}" == fit_rel
                        if own and k in ("oneshot", "twoshot") and is_fit_size(b):
                            continue                            # a fit point
                        cls = ("symm-mem in vLLM" if k in ("multimem", "symm-twoshot") else
                               "odd sizes" if own else "other release")
                        t, path = cm.price("all_reduce", b, n, mode)
                        rows.append({"class": cls, "profile": prof.name, "table": f"{family}/{rel}", "group": n,
                                     "mode": mode, "bytes": b, "measured_us": round(us, 3),
                                     "priced_us": round(t * 1e6, 3), "path": path})
                if family == "sglang" and rel == fit_rel.split("/")[1]:
                    vcm = CostModel(prof, Stack(collective="vllm-custom"))
                    for (n, mode), series in sorted(pts.items()):
                        if mode != "graph":
                            continue
                        hw = car.hardware(prof, n, prof.gpus_per_node)
                        for b, us in series:
                            k = car.pick(ENGINE_COLLECTIVES["sglang-custom"], b, n, hw).kernel
                            if k not in ("oneshot", "twoshot"):
                                continue
                            g = car.kernel_s(prof, "vllm", k, b, n)
                            if g is not None:
                                rows.append({"class": "sglang by vllm", "profile": prof.name, "table": f"sglang/{rel}",
                                             "group": n, "mode": mode, "bytes": b, "measured_us": round(us, 3),
                                             "priced_us": round(g * 1e6, 3), "path": f"vllm:{k}"})
                    del vcm
    return rows


def post_rows() -> list[dict]:
    rows = []
    for f in sorted(POSTS.glob("*.json")):
        d = json.loads(f.read_text())
        prof = load_profile(d["profile"])
        for kernel, pts in d["kernels"].items():
            fam, k = kernel.split(":")
            for b, us in pts:
                t = car.kernel_s(prof, fam, k, b, d["group"])
                rows.append({"class": f"post {f.stem}" + ("" if d.get("in_median", True) else " (apart)"),
                             "profile": prof.name, "table": kernel, "group": d["group"], "mode": d["mode"],
                             "bytes": b, "measured_us": us, "priced_us": round(t * 1e6, 3), "path": kernel,
                             "in_median": d.get("in_median", True)})
    return rows


def err(r: dict) -> float:
    return 100.0 * (r["priced_us"] - r["measured_us"]) / r["measured_us"]


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: validate_custom_allreduce.py AICONFIGURATOR_SYSTEMS_DATA [--json]")
    rows = table_rows(Path(argv[0])) + post_rows()
    if "--json" in argv:
        print(json.dumps(rows))
        return
    classes = {}
    for r in rows:
        classes.setdefault((r["class"], r["profile"], r["mode"]), []).append(r)
    print(f"{'class':34s} {'profile':10s} {'mode':6s} {'points':>6s} {'median |err|':>12s}")
    for (cls, prof, mode), rs in sorted(classes.items()):
        print(f"{cls:34s} {prof:10s} {mode:6s} {len(rs):6d} {statistics.median(abs(err(r)) for r in rs):11.1f}%")
    for cls in sorted({r["class"] for r in rows}):
        rs = [r for r in rows if r["class"] == cls and r["mode"] == "graph"]
        if rs:
            print(f"ALL {cls} (graph): {len(rs)} points, median |error| "
                  f"{statistics.median(abs(err(r)) for r in rs):.1f}%")
    print()
    for r in rows:
        if r["class"].startswith("post") or (r["profile"] == "h100-sxm" and r["mode"] == "graph"
                                             and r["class"] in ("odd sizes", "symm-mem in vLLM")):
            print(f"{r['class']:28s} {r['profile']:9s} {r['table']:22s} g{r['group']} {r['bytes']:>10d} B "
                  f"measured {r['measured_us']:9.2f} priced {r['priced_us']:9.2f} us {err(r):+6.1f}%  {r['path']}")


if __name__ == "__main__":
    main(sys.argv[1:])
