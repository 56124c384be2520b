"""The collective model against public measurements that no profile constant came from.

Each file under bench/data/ is one public measurement (URL, system, the profile that describes it,
collective, ranks, mode, implementation, points [bytes, us]); this prices every point with
`commands.collective_table.collective_rows` -- the same code `tpsim collective` runs -- and prints
one row per point and the median |error|, overall and per coverage class (one node / two nodes,
P2P on / off, small <= 64 KiB / large). The sources the built-in profiles were built from are
listed apart in docs/collectives.md; none of them is in bench/data/.

Optional fields:
- "algo": the run forced NCCL_ALGO (e.g. "ring"); it is priced against the model's candidate of
  that algorithm (the protocol NCCL's tuner would pick among that algorithm's), at what it really
  costs, plus eager_extra in eager mode -- not against the default pick or a measured table of
  the default algorithm.
- "in_median": false, with "out_of_scope": why -- printed apart, never counted in a median (a
  measurement of something the profile does not describe, e.g. an eager custom all-reduce timed
  differently from the profile's only custom table). With "profile": null as well, the system is
  one no built-in profile describes: its rows are printed, not priced.
- "graph_launched": true when the timed calls were replayed from a CUDA graph (nccl-tests -G > 0,
  torch.cuda.graph replay); absent/false: stream launches. Its own coverage class.
- "gpus_per_process": GPUs one process drives (nccl-tests -g N, nGpus N in the header); one
  thread then launches every rank's kernel in turn each iteration, so small sizes time the host's
  launch loop. Absent: 1 (one process per GPU, as the reference stack runs). Its own class.
- "timing": how the source's loop timed each call ({"kind", "gpus_per_thread", "calls_per_graph",
  "source": where the loop was read}); `sim.price.comm.timing.loop_time` turns the priced device
  time (mode nccl) into what that loop measures. A point whose loop has no sourced price (one
  thread launching N GPUs below the device-bound limit, one graph replay per call) is printed
  apart with the reason, never in a median -- a rule over the whole class, not a cut by error.
  "unstated": priced in the source's mode, nothing added.
- "raw" (a file under bench/data/raw/ holding the posted text and its URL) and "raw_section" (the
  line that starts the part used, for a file holding several runs): `points_from_raw` re-reads the
  points from it with calib/imports.py (nccl-tests text) so a test can hold every row against the
  post; "raw_kind": "torch-json" for the tp_latency-style JSON of a torch harness ("raw_key":
  eager_us or graph_us).

    python bench/validate_collectives.py            # table
    python bench/validate_collectives.py --summary  # only the medians per coverage class
    python bench/validate_collectives.py --json     # one JSON object
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.calib.imports import parse_nccl_tests  # noqa: E402
from tpsim.commands.collective_table import Row, busbw_factor, collective_rows  # noqa: E402
from tpsim.sim.price.comm.timing import HostCosts, Timing, loop_time  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.price.comm.topology import TopologyModel  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
RAW = DATA / "raw"
SMALL_BYTES = 65536


def points_from_raw(d: dict) -> list[list]:
    """The [bytes, us] points of source `d` read again from its raw posted text: nccl-tests output
    through the project's importer (out-of-place time), or a torch harness JSON's size sweep."""
    text = (RAW / d["raw"]).read_text()
    if d.get("raw_kind") == "torch-json":
        sweep = json.loads(text)["size_sweep"]
        return [[int(r["bytes"]), round(float(r[d["raw_key"]]), 2)] for r in sweep]
    if d.get("raw_section"):
        part = text.split(d["raw_section"] + "\n", 1)[1]
        text = part.split("\n###", 1)[0]                     # up to the next section
    t = parse_nccl_tests(text, d["raw"], group=d["group"], collective=d["collective"])
    return [[b, us] for b, us in zip(t.bytes, t.time_us)]


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
                         "in_median": False, "out_of_scope": d.get("out_of_scope", "no built-in profile describes the system"),
                         "timing": "-", "forced": bool(d.get("algo")), "collective": d["collective"],
                         "graph_launched": bool(d.get("graph_launched")),
                         "gpus_per_process": int(d.get("gpus_per_process", 1))} for b, us in sorted(measured.items()))
            continue
        timing = Timing.from_dict(d.get("timing", {"kind": "unstated"}))
        prof = load_profile(d["profile"])
        if d.get("algo"):
            priced = forced_rows(d, measured)
        else:
            # a stated loop starts from the bare kernel (mode nccl) and adds what the loop pays
            mode = d["mode"] if timing.kind == "unstated" else "nccl"
            priced = collective_rows(prof, d["collective"], d["group"], mode, tuple(measured),
                                     d.get("gpus_per_node"), measured, d.get("impl", "auto"))
        host = HostCosts.from_profile(prof)
        for r in priced:
            lt = loop_time(r.time_us * 1e-6, timing, host)
            r = Row(r.bytes, lt.time_s * 1e6, r.bytes / lt.time_s / 1e9 * busbw_factor(d["collective"], d["group"]),
                    r.path + lt.path, r.measured_us)
            rows.append({"file": d["file"], "profile": d["profile"], "group": d["group"], "nodes": d["nodes"],
                         "p2p": d["p2p"], "mode": d["mode"], "impl": d.get("impl", "nccl"), "bytes": r.bytes,
                         "measured_us": r.measured_us, "priced_us": round(r.time_us, 2),
                         "error_pct": round(r.error_pct, 1), "path": r.path,
                         "in_median": d.get("in_median", True) and lt.unpriced is None,
                         "out_of_scope": d.get("out_of_scope") if not d.get("in_median", True) else lt.unpriced,
                         "timing": timing.kind, "forced": bool(d.get("algo")),
                         "collective": d["collective"], "graph_launched": bool(d.get("graph_launched")),
                         "gpus_per_process": int(d.get("gpus_per_process", 1))})
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
    # one node, P2P on: the class the reference TP 2-8 runs live in, split by what can move the error
    one = [r for r in rows if r["nodes"] == 1 and r["p2p"]]
    classes["1 node P2P on"] = one
    classes["  small (<= 64 KiB)"] = [r for r in one if r["bytes"] <= SMALL_BYTES]
    classes["  large (> 64 KiB)"] = [r for r in one if r["bytes"] > SMALL_BYTES]
    for c in ("all_reduce", "all_gather", "reduce_scatter"):
        classes[f"  {c}"] = [r for r in one if r["collective"] == c]
    for g in sorted({r["group"] for r in one}):
        classes[f"  group {g}"] = [r for r in one if r["group"] == g]
    classes["  graph-launched"] = [r for r in one if r["graph_launched"]]
    classes["  stream-launched"] = [r for r in one if not r["graph_launched"]]
    classes["  1 process per GPU"] = [r for r in one if r["gpus_per_process"] == 1]
    classes["  1 process, N GPUs"] = [r for r in one if r["gpus_per_process"] > 1]
    classes["  small, 1 process/GPU"] = [r for r in one if r["gpus_per_process"] == 1 and r["bytes"] <= SMALL_BYTES]
    classes["  small, 1 proc N GPUs"] = [r for r in one if r["gpus_per_process"] > 1 and r["bytes"] <= SMALL_BYTES]
    for k in sorted({r.get("timing", "unstated") for r in one}):
        classes[f"  timing {k}"] = [r for r in one if r.get("timing", "unstated") == k]
    return {k: med(v) for k, v in classes.items()}


def per_source(rows: list[dict]) -> dict[str, dict]:
    """Median |error| and signed median error of each source file (in-median rows only)."""
    out = {}
    for f in sorted({r["file"] for r in rows if r["in_median"]}):
        e = [r["error_pct"] for r in rows if r["file"] == f and r["in_median"]]
        out[f] = {"points": len(e), "median_abs_error_pct": round(statistics.median(abs(x) for x in e), 1),
                  "median_error_pct": round(statistics.median(e), 1)}
    return out


def main(argv: list[str]) -> int:
    rows = evaluate(load())
    summ = summary(rows)
    by_source = per_source(rows)
    if "--json" in argv:
        print(json.dumps({"rows": rows, "summary": summ, "per_source": by_source}, indent=1))
        return 0
    if "--summary" in argv:
        print_class_medians(summ)
        return 0
    print_rows(rows)
    print_source_medians(by_source)
    print()
    print_class_medians(summ)
    return 0


def print_rows(rows: list[dict]) -> None:
    """Every point (in-median ones first), then the count and reason of each left-out group."""
    head = f"{'source':40s} {'profile':16s} {'n':>3s} {'nodes':>5s} {'p2p':>4s} {'mode':6s} {'impl':6s} " \
           f"{'bytes':>10s} {'meas us':>9s} {'model us':>9s} {'error':>8s}  path"
    print(head)
    print("-" * len(head))
    header_done = False
    for r in sorted(rows, key=lambda r: not r["in_median"]):
        if not r["in_median"] and not header_done:
            print("-- out of scope (printed, not in any median):")
            header_done = True
        priced = "-" if r["priced_us"] is None else f"{r['priced_us']:9.2f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+7.1f}%"
        print(f"{r['file'][:40]:40s} {r['profile']:16s} {r['group']:3d} {r['nodes']:5d} {'on' if r['p2p'] else 'off':>4s} "
              f"{r['mode']:6s} {r['impl']:6s} {r['bytes']:10d} {r['measured_us']:9.2f} {priced:>9s} "
              f"{err:>8s}  {r['path']}")
    print()
    reasons: dict[tuple[str, str], int] = {}
    for r in rows:
        if not r["in_median"]:
            reasons[(r["file"], r["out_of_scope"])] = reasons.get((r["file"], r["out_of_scope"]), 0) + 1
    for (f, why), n in reasons.items():
        print(f"out of scope: {f} ({n} point{'s' if n > 1 else ''}): {why}")
    print()


def print_source_medians(by_source: dict) -> None:
    """Median |error| and signed median error of each source's in-median points."""
    print(f"{'per source':40s} {'points':>6s} {'median |err|':>12s} {'median err':>10s}")
    for f, v in by_source.items():
        print(f"{f[:40]:40s} {v['points']:6d} {v['median_abs_error_pct']:11.1f}% {v['median_error_pct']:+9.1f}%")


def print_class_medians(summ: dict) -> None:
    """The medians block, one line per coverage class (what docs/collectives.md quotes: --summary)."""
    for k, v in summ.items():
        m = "-" if v["median_abs_error_pct"] is None else f"{v['median_abs_error_pct']:.1f}%"
        print(f"median |error| {k:30s}: {m:>7s}  ({v['points']} points)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
