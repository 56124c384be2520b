"""Prediction time per configuration (fast path), printed as a table; then the start-up share.

    python bench/predict_speed.py [--repeats 3] [--startup-runs 5] [--base CHECKOUT_DIR | COMMIT] [--stack NAME]

Each row: one `predict` call (all listed schedules + the standard baseline), median wall time
over repeats, in this process (imports and profile loading excluded).

Start-up: the CPU time (user + system, resource.getrusage of the finished child) of
fresh processes: the interpreter alone, the libraries the simulator needs, `import tpsim.cli`, and
a whole `cli.py predict --model llama-3.1-70b --tp 8` (the table printed, as a user runs it; with
--stack NAME, `--stack NAME` added to it: an engine's stack, its host terms' intervals and
decode steps sampled over a filled cache). With --base, the same processes of another checkout
run interleaved with this one's, --startup-runs each, and the medians' ratio is printed: a
directory, or a commit of this repository (`git archive` of it into a temporary directory beside
this checkout's processes, removed after).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the environment a user's shell hands a process, taken before tpsim.sim is imported here (it sets
# OPENBLAS_NUM_THREADS for its own process, which every child would otherwise inherit: the base
# checkout's children too)
USER_ENV = dict(os.environ)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES  # noqa: E402
from tpsim.sim.stack.spec import Stack  # noqa: E402

ALL = list(DEFAULT_SCHEDULES)
CONFIGS = [
    ("llama-3.1-8b", 8, 1, ["ladder"], Stack()),
    ("llama-3.1-70b", 8, 1, ["ladder"], Stack()),
    ("llama-3.1-70b", 8, 4, ALL, Stack()),
    ("llama-3.1-405b", 16, 1, ["ladder"], Stack()),
    ("llama-3.1-405b", 16, 1, ALL, Stack()),
    ("llama-3.1-405b", 16, 1, ALL, Stack(kv="filled", attention="flash")),
]


PREDICT = ["predict", "--model", "llama-3.1-70b", "--tp", "8"]
# what the simulator's processes import whatever the CLI does: the floor of any `tpsim predict`
# (numpy is not among them: only jitter draws and a filled cache's sampled decode steps use it)
LIBRARIES = "import simpy, click"
# everything that predict of PREDICT imports (rich: the table; not networkx: every collective it
# prices is measured), without running it: the whole process minus this is the simulation itself
PREDICT_IMPORTS = "import tpsim.commands.predict, rich.console, rich.table"
IMPORTS = "predict's imports, not run"


def child_cpu_s(argv: list[str], pycache: str | None) -> float:
    """CPU seconds (user + system) that the process `argv` used, run to its end (output discarded).
    Byte code is cached under `pycache` (PYTHONPYCACHEPREFIX: no checkout is written to), as an
    installed package has it; None: compiled at every start (PYTHONDONTWRITEBYTECODE=1)."""
    env = {k: v for k, v in USER_ENV.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env |= {"PYTHONPYCACHEPREFIX": pycache} if pycache else {"PYTHONDONTWRITEBYTECODE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env | {"COLUMNS": "120"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup_processes(root: Path, predict: list[str]) -> dict[str, list[str]]:
    """name -> the command line of each measured process, for the checkout at `root`."""
    load = f"import sys; sys.path.insert(0, {str(root)!r}); import _checkout; _checkout.load(); "
    return {"python -c pass": [sys.executable, "-c", "pass"],
            LIBRARIES: [sys.executable, "-c", LIBRARIES],
            "import tpsim.cli": [sys.executable, "-c", load + "import tpsim.cli"],
            IMPORTS: [sys.executable, "-c", load + PREDICT_IMPORTS],
            "tpsim " + " ".join(predict): [sys.executable, str(root / "cli.py"), *predict]}


@contextlib.contextmanager
def checkout(base: str | None):
    """The checkout --base names: a directory as is, else a commit of this repository, `git archive`d
    into a temporary directory for the run (None: no base)."""
    if base is None or Path(base).is_dir():
        yield Path(base) if base else None
        return
    with tempfile.TemporaryDirectory(prefix=f"tpsim-{base}-") as tmp:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", base], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        yield Path(tmp)


def startup(runs: int, base: Path | None, byte_cache: bool = True, predict: list[str] = PREDICT,
            label: str | None = None) -> None:
    """Median CPU seconds per process, this checkout's (and --base's) interleaved run by run."""
    sides = {"this": startup_processes(ROOT, predict)} | ({"base": startup_processes(base, predict)} if base else {})
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="tpsim-pycache-") as pycache:
        for run in range(runs + 1):                           # run 0 fills the byte-code cache, untimed
            for name in sides["this"]:
                for side, procs in sides.items():
                    if side == "base" and name in ("python -c pass", LIBRARIES, IMPORTS):
                        continue                              # the same interpreter and libraries
                    t = child_cpu_s(procs[name], pycache if byte_cache else None)
                    if run:
                        times.setdefault((side, name), []).append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nstart-up: CPU s (user + system) of a fresh process "
          f"({'byte code cached' if byte_cache else 'no byte-code cache: every module compiled'}), median of {runs}"
          + (f"; base = {label or base}" if base else ""))
    print(f"{'process':52} {'this':>7}" + (f" {'base':>7} {'ratio':>6}" if base else ""))
    for name in sides["this"]:
        row = f"{name:52} {med['this', name]:>7.3f}"
        if base and ("base", name) in med:
            row += f" {med['base', name]:>7.3f} {med['this', name] / med['base', name]:>5.2f}x"
        print(row)
    whole = med["this", "tpsim " + " ".join(predict)]
    share = {name: med["this", name] / whole for name in sides["this"]}
    print(f"of the whole predict process: import tpsim.cli {share['import tpsim.cli']:.0%}; the interpreter + "
          f"{LIBRARIES!r} {share[LIBRARIES]:.0%}; everything predict imports ({PREDICT_IMPORTS!r}) "
          f"{share[IMPORTS]:.0%}; the rest (loading the profile, simulating, printing) {1 - share[IMPORTS]:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="h100-sxm")
    ap.add_argument("--startup-runs", type=int, default=5, help="processes of each kind timed (0: skip)")
    ap.add_argument("--base", default=None, help="another checkout (a directory, or a commit of this repository) "
                    "to time side by side")
    ap.add_argument("--stack", default=None, help="time `tpsim predict ... --stack NAME` (default: no --stack)")
    ap.add_argument("--no-table", action="store_true", help="only the start-up share")
    ap.add_argument("--no-byte-cache", action="store_true", help="start-up without .pyc files (compiled each time)")
    args = ap.parse_args()
    if not args.no_table:
        table(args)
    if args.startup_runs:
        with checkout(args.base) as base:
            startup(args.startup_runs, base, byte_cache=not args.no_byte_cache,
                    predict=PREDICT + (["--stack", args.stack] if args.stack else []), label=args.base)


def table(args) -> None:
    prof = load_profile(args.profile)
    print(f"{'model':16} {'tp':>3} {'batch':>5} {'kv':>6} {'schedules':>9} {'ms/predict':>10}")
    for model, tp, batch, scheds, stack in CONFIGS:
        w = Workload(get_model(model), tp, prof, batch=batch, prompt_len=1024, gen_len=512, stack=stack)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            predict(w, scheds, record=False)
            times.append(time.perf_counter() - t0)
        print(f"{model:16} {tp:>3} {batch:>5} {stack.kv:>6} {len(set(scheds) | {'standard'}):>9} "
              f"{statistics.median(times) * 1e3:>10.1f}")


if __name__ == "__main__":
    main()
