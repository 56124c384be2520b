"""Simulator fidelity over time: calibrate this machine (quick), bench a small gloo grid, predict it,
and append one JSON line of errors to bench/fidelity.jsonl, so regressions in fidelity are visible.

    python bench/fidelity.py [--runs 1] [--out-dir fidelity-out] [--nproc 2] [--model toy-512 ...]

One run takes 2-3 minutes on a 2-core machine (quick calibration, 9 interleaved repeats per
schedule). The harness numbers are real measurements on a real (if slow) interconnect, so this is a
true validation of the simulator, not a self-consistency check. Every run calibrates and measures
afresh in a new directory under --out-dir and appends its own line; with --runs N the totals over
the runs are printed at the end (run-to-run variation is part of what a user of this machine sees).
"""
from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.calib.compare import QUICK_MODELS, Point, run_compare  # noqa: E402
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES  # noqa: E402

REPEATS = 9


def one_run(points: list, out_dir: Path, nproc: int, log: Path) -> dict:
    result = run_compare(points, DEFAULT_SCHEDULES, out_dir, None, "gloo", "cpu", nproc, True, REPEATS, (), 120.0)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    line = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
            "host": socket.gethostname(), "grid": [p.key for p in points], "repeats": REPEATS,
            "summary": result["summary"], "failed": result["failed"],
            # the machine's speed during each measurement / during calibration (hw.probe)
            "machine_drift": {f"{p.model}_tp{p.tp}_b{p.batch}": round(p.machine_drift["ratio"], 3)
                              for p in result["points"] if p.machine_drift}}
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")
    print(f"{'schedule':12} {'|err| tok/s':>11} {'|err| prefill':>13} {'|err| decode':>12} {'speedup err':>11} "
          f"sign (undetermined: measurement, prediction)")
    for spec, s in result["summary"].items():
        print(f"{spec:12} {s['median_abs_err_tokens_per_s']:>11.1%} {s['median_abs_err_prefill_s']:>13.1%} "
              f"{s['median_abs_err_decode_s']:>12.1%} {s['median_abs_speedup_err']:>11.3f} "
              f"{s['sign_matches']}/{s['points']} ({s['sign_mismatches_within_noise']}, "
              f"{s.get('sign_mismatches_prediction_uncertain', 0)})")
    for f in result["failed"]:
        print(f"failed {f['point']}: {f['error']}")
    if line["machine_drift"]:
        print("machine speed, measurement / calibration: "
              + ", ".join(f"{k} x{v:.2f}" for k, v in line["machine_drift"].items()))
    print(f"appended to {log}; report in {out_dir}/report.md")
    return result


def totals(results: list[dict]) -> None:
    """Over runs: the range and median of each schedule's median |err| tokens/s, and sign counts."""
    print(f"\nover {len(results)} runs:")
    specs = dict.fromkeys(s for r in results for s in r["summary"])
    n_match = n_all = n_undet = n_pred = 0
    for spec in specs:
        per_run = [r["summary"][spec] for r in results if spec in r["summary"]]
        errs = [s["median_abs_err_tokens_per_s"] for s in per_run]
        match, pts, undet, pred = (sum(s.get(k, 0) for s in per_run)
                                   for k in ("sign_matches", "points", "sign_mismatches_within_noise",
                                             "sign_mismatches_prediction_uncertain"))
        if spec != "standard":
            n_match, n_all, n_undet, n_pred = n_match + match, n_all + pts, n_undet + undet, n_pred + pred
        print(f"  {spec:12} median |err| tok/s {min(errs):.1%}-{max(errs):.1%} (median {statistics.median(errs):.1%})"
              f"  sign {match}/{pts}, undetermined {undet} by the measurement and {pred} by the prediction, "
              f"{pts - match - undet - pred} wrong")
    print(f"  speedup sign (schedules other than standard): {n_match}/{n_all} match, {n_undet} undetermined by "
          f"the measurement, {n_pred} by the prediction's interval, {n_all - n_match - n_undet - n_pred} wrong")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out-dir", default="fidelity-out")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--model", action="append", dest="models")
    ap.add_argument("--log", default=str(ROOT / "bench" / "fidelity.jsonl"))
    args = ap.parse_args()
    models = args.models or list(QUICK_MODELS)
    points = [Point(m, args.nproc, 1, 32, 16) for m in models]
    results = []
    for i in range(args.runs):
        # a fresh directory per run: compare reuses the measured points it finds in a directory,
        # and a fidelity line must come from new measurements (and a new calibration)
        out = Path(args.out_dir) / f"{datetime.datetime.now():%Y%m%d-%H%M%S}-run{i + 1}"
        print(f"--- run {i + 1}/{args.runs} -> {out}")
        results.append(one_run(points, out, args.nproc, Path(args.log)))
    if args.runs > 1:
        totals(results)


if __name__ == "__main__":
    main()
