"""The collective model against public measurements that no profile constant came from.

Each file under bench/data/ is one public measurement (URL, system, the profile that describes it,
collective, ranks, mode, implementation, points [bytes, us]); this prices every point with
`sim.collective_table.collective_rows` -- the same code `tpsim collective` runs -- and prints
one row per point and the median |error|, overall and per coverage class (one node / two nodes,
P2P on / off, small <= 64 KiB / large). The sources the built-in profiles were built from are
listed apart in docs/collectives.md; none of them is in bench/data/.

Two optional fields keep like with like:
- "algo": the run forced NCCL_ALGO (e.g. "ring"); it is priced against the model's candidate of
  that algorithm (the protocol NCCL's tuner would pick among that algorithm's), at what it really
  costs, plus eager_extra in eager mode -- not against the default pick or a measured table of
  the default algorithm.
- "in_median": false, with "out_of_scope": why -- printed apart, never counted in a median (a
  measurement of something the profile does not describe, e.g. an eager custom all-reduce timed
  differently from the profile's only custom table). With "profile": null as well, the system is
  one no built-in profile describes: its rows are printed, not priced.

    python bench/validate_collectives.py            # table
    python bench/validate_collectives.py --json     # one JSON object
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.collective_table import Row, busbw_factor, collective_rows  # noqa: E402
from sim.profile import load_profile  # noqa: E402
from sim.topology_price import TopologyModel  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
SMALL_BYTES = 65536


def load() -> list[dict]:
    out = []
    for f in sorted(DATA.glob("*.json")):
        d = json.loads(f.read_text())
        d["file"] = f.name
        out.append(d)
    return out


def forced_rows(d: dict, measured: dict[int, float]) -> list[Row]:
    """A run with NCCL_ALGO forced: the model's candidate of that algorithm, priced at its real
    latency (the protocol is the one NCCL's tuner picks among that algorithm's candidates), plus
    the profile's eager_extra in eager mode. No measured table (they time the default algorithm)
    and no node correction (it is the default pick's error)."""
    prof = load_profile(d["profile"])
    topo = TopologyModel(prof.topology)
    out = []
    for b, us in sorted(measured.items()):
        cands = [(n, s) for n, s in topo.choices(d["collective"], b, d["group"], d.get("gpus_per_node"))
                 if n.split("/")[0] == d["algo"]]
        if not cands:
            raise ValueError(f"{d['file']}: the model has no {d['algo']!r} candidate")
        name, t = cands[0]                                  # tuner order: its pick first
        path = f"forced:{name}"
        if d["mode"] == "eager" and prof.eager_extra_s > 0:
            t, path = t + prof.eager_extra_s, path + "+eager_extra"
        bus = b / t / 1e9 * busbw_factor(d["collective"], d["group"])
        out.append(Row(b, t * 1e6, bus, path, us))
    return out


def evaluate(sources: list[dict]) -> list[dict]:
    rows = []
    for d in sources:
        measured = {int(b): float(us) for b, us in d["points"]}
        if not d.get("profile"):
            # no built-in profile describes the measured system: printed, never priced
            rows.extend({"file": d["file"], "profile": "-", "group": d["group"], "nodes": d["nodes"], "p2p": d["p2p"],
                         "mode": d["mode"], "impl": d.get("impl", "nccl"), "bytes": b, "measured_us": us,
                         "priced_us": None, "error_pct": None, "path": "not priced (no profile)",
                         "in_median": False, "forced": bool(d.get("algo"))} for b, us in sorted(measured.items()))
            continue
        if d.get("algo"):
            priced = forced_rows(d, measured)
        else:
            priced = collective_rows(load_profile(d["profile"]), d["collective"], d["group"], d["mode"],
                                     tuple(measured), d.get("gpus_per_node"), measured, d.get("impl", "auto"))
        for r in priced:
            rows.append({"file": d["file"], "profile": d["profile"], "group": d["group"], "nodes": d["nodes"],
                         "p2p": d["p2p"], "mode": d["mode"], "impl": d.get("impl", "nccl"), "bytes": r.bytes,
                         "measured_us": r.measured_us, "priced_us": round(r.time_us, 2),
                         "error_pct": round(r.error_pct, 1), "path": r.path,
                         "in_median": d.get("in_median", True), "forced": bool(d.get("algo"))})
    return rows


def summary(rows: list[dict]) -> dict:
    rows = [r for r in rows if r["in_median"]]

    def med(sel):
        e = [abs(r["error_pct"]) for r in sel]
        return {"points": len(e), "median_abs_error_pct": round(statistics.median(e), 1) if e else None}
    classes = {
        "all": rows,
        "one node": [r for r in rows if r["nodes"] == 1],
        "two nodes": [r for r in rows if r["nodes"] == 2],
        "P2P on": [r for r in rows if r["p2p"]],
        "P2P off": [r for r in rows if not r["p2p"]],
        "small (<= 64 KiB)": [r for r in rows if r["bytes"] <= SMALL_BYTES],
        "large (> 64 KiB)": [r for r in rows if r["bytes"] > SMALL_BYTES],
        "default algorithm": [r for r in rows if not r["forced"]],
        "forced algorithm": [r for r in rows if r["forced"]],
    }
    return {k: med(v) for k, v in classes.items()}


def main(argv: list[str]) -> int:
    rows = evaluate(load())
    summ = summary(rows)
    if "--json" in argv:
        print(json.dumps({"rows": rows, "summary": summ}, indent=1))
        return 0
    head = f"{'source':40s} {'profile':16s} {'n':>3s} {'nodes':>5s} {'p2p':>4s} {'mode':6s} {'impl':6s} " \
           f"{'bytes':>10s} {'meas us':>9s} {'model us':>9s} {'error':>8s}  path"
    print(head)
    print("-" * len(head))
    for r in sorted(rows, key=lambda r: not r["in_median"]):
        if not r["in_median"] and not any(not x["in_median"] for x in rows[:rows.index(r)]):
            print("-- out of scope (printed, not in any median):")
        priced = "-" if r["priced_us"] is None else f"{r['priced_us']:9.2f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+7.1f}%"
        print(f"{r['file'][:40]:40s} {r['profile']:16s} {r['group']:3d} {r['nodes']:5d} {'on' if r['p2p'] else 'off':>4s} "
              f"{r['mode']:6s} {r['impl']:6s} {r['bytes']:10d} {r['measured_us']:9.2f} {priced:>9s} "
              f"{err:>8s}  {r['path']}")
    print()
    for d in load():
        if not d.get("in_median", True):
            print(f"out of scope: {d['file']}: {d['out_of_scope']}")
    print()
    for k, v in summ.items():
        m = "-" if v["median_abs_error_pct"] is None else f"{v['median_abs_error_pct']:.1f}%"
        print(f"median |error| {k:18s}: {m:>7s}  ({v['points']} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
