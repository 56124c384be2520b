"""Simulator fidelity over time: calibrate this machine (quick), bench a small gloo grid, predict it,
and append one JSON line of errors to bench/fidelity.jsonl, so regressions in fidelity are visible.

    python bench/fidelity.py [--out-dir fidelity-out] [--nproc 2] [--model toy-512 --model toy-1024]

Takes a few minutes on a 2-core machine. The harness numbers are real measurements on a real (if
slow) interconnect, so this is a true validation of the simulator, not a self-consistency check.
"""
from __future__ import annotations

import argparse
import datetime
import json
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calib.compare import DEFAULT_SCHEDULES, QUICK_MODELS, Point, run_compare  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out-dir", default="fidelity-out")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--model", action="append", dest="models")
    ap.add_argument("--log", default=str(ROOT / "bench" / "fidelity.jsonl"))
    args = ap.parse_args()
    models = args.models or list(QUICK_MODELS)
    points = [Point(m, args.nproc, 1, 32, 16) for m in models]
    result = run_compare(points, DEFAULT_SCHEDULES, Path(args.out_dir), None, "gloo", "cpu", args.nproc, True, 5,
                         (), 120.0)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    line = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit,
            "host": socket.gethostname(), "grid": [p.key for p in points], "summary": result["summary"],
            "failed": result["failed"]}
    with open(args.log, "a") as f:
        f.write(json.dumps(line) + "\n")
    print(f"{'schedule':12} {'|err| tok/s':>11} {'|err| prefill':>13} {'|err| decode':>12} {'speedup err':>11} sign")
    for spec, s in result["summary"].items():
        print(f"{spec:12} {s['median_abs_err_tokens_per_s']:>11.1%} {s['median_abs_err_prefill_s']:>13.1%} "
              f"{s['median_abs_err_decode_s']:>12.1%} {s['median_abs_speedup_err']:>11.3f} "
              f"{s['sign_matches']}/{s['points']}")
    for f in result["failed"]:
        print(f"failed {f['point']}: {f['error']}")
    print(f"appended to {args.log}; report in {args.out_dir}/report.md")


if __name__ == "__main__":
    main()
