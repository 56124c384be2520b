"""Fuzz the CLI and every input file kind tpsim reads (issue 48): the bar is 0 tracebacks.

usage: python bench/fuzz_cli.py                      # the full run: every kind, the default counts
       python bench/fuzz_cli.py --scale 0.1 --kinds hf_config,stack
       python bench/fuzz_cli.py --only stack:17 --keep DIR   # one case again, its files left in DIR

Each case is a seed (a valid file of its kind: tests/fixtures/fuzz/README.md, SEEDS in bench/fuzz_inputs.py)
mutated at one to three places (a hostile value at any field, a field dropped or added, a number token, a line
dropped, repeated or cut, an escape sequence, bytes that are not UTF-8), then read by the commands
that read that kind; `cli` cases are random arguments to every command. A case is reproducible from
(--seed, kind, index) alone. Every command runs through the real CLI in this process (click's runner,
as the tests do), with the launcher stubbed: no rank ever starts (a command that gets that far fails
with exit 1), so every check a harness command makes before its ranks start is fuzzed too.

Outcomes: ok (exit 0), refused (exit 2, `Error: ...`), failed (exit 1: a stubbed launch, a FAIL),
slow (past --limit-s seconds), and the failures counted against the bar: traceback (an exception
other than SystemExit, or `Traceback` printed) and raw (a control character printed as is). Prints a
table per kind and each failure with what reproduces it; exits 1 on any traceback or raw output.
Not in the wheel (bench/ is not packaged).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))          # fuzz_inputs, beside this script
import _checkout  # noqa: E402  (this checkout as the package tpsim, as bench/'s other scripts)
_checkout.load()
from tpsim.cli import COMMANDS, main as tpsim_main  # noqa: E402
from tpsim.commands import sweep_grid as sw  # noqa: E402
from tpsim.sim.grid import grid  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.commands.lazy import load  # noqa: E402
from tpsim.fileio.policy import CONTROL  # noqa: E402

from fuzz_inputs import FIX, FZ, TEXTS, case as file_case  # noqa: E402  (seeds, mutations: beside this script)

RUNS = {"cli": 1500, "profile": 400, "hf_config": 400, "stack": 400, "nccl_text": 400, "nccl_json": 200,
        "engine_bench": 300, "measured": 150, "sweep_checkpoint": 200, "state": 40, "safetensors": 150,
        "spd_text": 60}
TORCH_KINDS = ("state", "safetensors", "spd_text")
OUTCOMES = ("ok", "refused", "failed", "slow", "traceback", "raw")

# ---------------------------------------------------------------- random arguments

INTS = ["0", "-1", "1", "2", "3", "4", "8", "16", "7", "65", "1024", "2147483648", "1" + "0" * 20, "x", "", "1e3", "2.5"]
FLOATS = ["nan", "inf", "-1", "0", "1e-320", "1e308", "0.5", "2", "x", "1e6", "86401"]
POOLS = {
    "model": ["tiny", "toy-512", "llama-3.1-8b", "llama-3.1-405b", "llama-3.1-70b[:4]", "tiny[:0]", "tiny[:x]", "nope", "", "{w}",
              str(FIX / "hf" / "qwen2.5-7b"), str(FIX / "hf" / "mixtral-8x7b"), "/dev/zero"],
    "schedule": ["standard", "ladder", "ladder:1", "ladder:0", "spd:0.5", "spd:1.5", "spd:[1]", "spd:3,5,9-12", "spd:",
                 "parallel", "upper-bound", "token-split", "token-split:2", "token-split:65", "seq-parallel", "x",
                 "a" * 500],
    "profile": ["h100-sxm", "a100-sxm-p2p-off", "l40s-pcie", "nope", "{w}", str(FZ / "profile-small.json"),
                str(FIX / "compare" / "profile.json"), "/dev/null", ""],
    "stack": ["vllm", "sglang", "trtllm", "eager", "reference", "nope", str(FZ / "stack-chain.json"), "{w}", ""],
    "out": ["{w}/o.json", "{w}/o.csv", "{w}/new/dir/o.json", "-", "", "{w}", "/dev/null", "/dev/null/x.json",
            "{w}/o.png", "{w}/o.xyz"],
    "file": [str(FIX / "nccl_tests" / "ar_v2_13.txt"), str(FIX / "nccl_tests" / "oci_a100_8_then_16.txt"),
             str(FIX / "engine_bench" / "vllm_latency_tp2.json") + ":tp=2",
             str(FIX / "engine_bench" / "vllm_latency_tp4.json") + ":tp=4", str(FIX / "compare" / "measured-tiny-tp2.json"),
             "/dev/zero", "{w}", "nope.json", str(FZ / "spd-text.txt")],
    "bytes": ["1K", "64M", "0", "-1", "1T", "2T", "1.5K", "x", "8", "16G"],
    "checkpoint": ["{ckpt}", "{w}", "nope", str(FIX / "hf" / "tiny-llama3-v5")],
    "text": TEXTS,
}


def _pool(param: click.Parameter) -> str:
    name = (param.name or "").lower()
    for key, pool in (("schedule", "schedule"), ("model", "model"), ("stack", "stack"), ("profile", "profile"),
                      ("extends", "profile"), ("checkpoint", "checkpoint"), ("bytes", "bytes"), ("sizes", "bytes"),
                      ("out", "out"), ("plot", "out"), ("trace", "out"), ("files", "file"), ("measured", "file"),
                      ("compare", "file"), ("text", "file")):
        if key in name:
            return pool
    return "text"


def _value(param: click.Parameter, rng: random.Random, w: Path, env: dict) -> str:
    t = param.type
    if isinstance(t, click.Choice) and rng.random() < 0.85:
        return rng.choice(list(t.choices))
    if isinstance(t, click.types.IntParamType):
        return rng.choice(INTS)
    if isinstance(t, click.types.FloatParamType):
        return rng.choice(FLOATS)
    v = rng.choice(POOLS[_pool(param)])
    return v.replace("{w}", str(w)).replace("{ckpt}", str(env.get("ckpt", w)))


def commands() -> dict[str, click.Command]:
    out = {}
    for name, (path, _) in COMMANDS.items():
        cmd = load(path)
        if isinstance(cmd, click.Group):
            out |= {f"{name} {sub}": c for sub, c in cmd.commands.items()}
        else:
            out[name] = cmd
    return out


def cli_args(rng: random.Random, w: Path, env: dict) -> list[str]:
    """Random arguments to a random command: its required options mostly, each other one now and then."""
    name = rng.choice(sorted(env["commands"]))
    args = name.split()
    for p in env["commands"][name].params:
        if p.name in ("help", "fault"):
            continue
        if isinstance(p, click.Argument):
            args += [_value(p, rng, w, env) for _ in range(rng.randint(1, 2))]
        elif p.required or rng.random() < 0.25:
            if getattr(p, "is_flag", False):
                args.append(rng.choice(p.opts + p.secondary_opts))
                continue
            for _ in range(rng.randint(1, 2) if p.multiple else 1):
                args += [rng.choice(p.opts), _value(p, rng, w, env)]
    return args


# ---------------------------------------------------------------- running a case

class Slow(BaseException):
    """A case past its time limit (raised by the timer, never caught by a command)."""


def _on_alarm(*_):
    raise Slow()


def outcome(r) -> tuple[str, str]:
    """(outcome, detail) of a finished CliRunner result."""
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = "".join(traceback.format_exception(type(r.exception), r.exception, r.exception.__traceback__)[-3:])
        return "traceback", tb.strip()[-600:]
    if "Traceback (most recent call last)" in r.output:
        return "traceback", r.output[-600:]
    if CONTROL.search(r.output):
        return "raw", repr(r.output[:300])
    return {0: "ok", 2: "refused", 1: "failed"}.get(r.exit_code, "failed"), r.output.strip().splitlines()[-1][:200] \
        if r.output.strip() else ""


def run_case(kind: str, index: int, seed: int, env: dict, limit_s: float, keep: Path | None = None) -> list[tuple]:
    rng = random.Random(f"{seed}:{kind}:{index}")
    w = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=env["root"])) if keep is None else keep
    old = os.getcwd()
    os.chdir(w)                          # a default output (compare-out/) lands in the case's folder
    results = []
    try:
        for argv in ([cli_args(rng, w, env)] if kind == "cli" else file_case(kind, rng, w, env)):
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.setitimer(signal.ITIMER_REAL, limit_s)
            t0 = time.monotonic()
            try:
                r = CliRunner().invoke(tpsim_main, argv, catch_exceptions=True)
                got = outcome(r)
            except Slow:
                got = ("slow", f"over {limit_s:g} s")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            results.append((kind, index, got[0], got[1], argv, time.monotonic() - t0))
    except Slow:
        results.append((kind, index, "slow", "making the case", [], limit_s))
    finally:
        os.chdir(old)
        if keep is None:
            shutil.rmtree(w, ignore_errors=True)
    return results


def _stub_launch(*_a, **_k):
    from tpsim.hw.dist import WorkerFailed   # lazy: torch (hw.dist's ranks); only a harness command gets here
    raise WorkerFailed("fuzz: the launcher is stubbed, no rank starts")


def setup(root: Path, kinds: list[str]) -> dict:
    """What cases share: the commands, a sweep checkpoint of this code, a safetensors checkpoint, the
    launcher stubbed (torch kinds only where torch imports)."""
    env = {"root": root, "commands": commands()}
    ck = root / "seed.partial.jsonl"
    sw.sweep(grid(["tiny"], [2], [1, 2], ["h100-sxm"], 8, 4), ("standard", "ladder"), given={}, checkpoint=ck)
    env["checkpoint"] = ck.read_text()
    try:
        import torch                          # lazy: optional; without it the harness kinds are skipped
        from safetensors.torch import save_file   # lazy: as torch
    except ImportError:
        return env | {"no_torch": True}
    from tpsim.hw.checkpoint import expected_shapes   # lazy: imports torch (present here)
    d = root / "ckpt"
    d.mkdir()
    shutil.copy(FIX / "hf" / "tiny-llama3-v5" / "config.json", d / "config.json")
    g = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(*s, generator=g) * 0.02 for n, s in expected_shapes(get_model(str(d))).items()}
    names = sorted(tensors)
    files = {"model-00001-of-00002.safetensors": names[:len(names) // 2], "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for f, ns in files.items():
        save_file({n: tensors[n] for n in ns}, str(d / f))
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(t.numel() * 4 for t in tensors.values())},
         "weight_map": {n: f for f, ns in files.items() for n in ns}}, indent=1))
    return env | {"ckpt": d}


@contextlib.contextmanager
def stubbed_launch():
    """hw.dist.launch (and calib.run's name for it) replaced while fuzzing: no rank ever starts."""
    try:
        import tpsim.calib.run                # lazy: imports torch, optional
        import tpsim.hw.dist                  # lazy: as calib.run
    except ImportError:                   # no torch: the harness commands refuse before any launch
        yield
        return
    saved = tpsim.hw.dist.launch, tpsim.calib.run.launch
    tpsim.hw.dist.launch = tpsim.calib.run.launch = _stub_launch
    try:
        yield
    finally:
        tpsim.hw.dist.launch, tpsim.calib.run.launch = saved


def run(kinds: list[str], counts: dict[str, int], seed: int = 0, limit_s: float = 30.0, echo=print) -> list[tuple]:
    """Every case of `kinds` (counts[kind] each); returns one row per command run."""
    root = Path(tempfile.mkdtemp(prefix="tpsim-fuzz-"))
    try:
        env = setup(root, kinds)
        rows = []
        for kind in kinds:
            if kind in TORCH_KINDS and env.get("no_torch"):
                echo(f"{kind}: skipped (no torch)")
                continue
            t0 = time.monotonic()
            with stubbed_launch():
                for i in range(counts[kind]):
                    rows += run_case(kind, i, seed, env, limit_s)
            echo(f"{kind}: {counts[kind]} cases in {time.monotonic() - t0:.0f} s")
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(rows: list[tuple], seed: int) -> int:
    kinds = list(dict.fromkeys(r[0] for r in rows))
    print(f"\n{'kind':<17}" + "".join(f"{o:>10}" for o in ("runs",) + OUTCOMES))
    for k in kinds:
        mine = [r for r in rows if r[0] == k]
        print(f"{k:<17}{len(mine):>10}" + "".join(f"{sum(r[2] == o for r in mine):>10}" for o in OUTCOMES))
    print(f"{'all':<17}{len(rows):>10}" + "".join(f"{sum(r[2] == o for r in rows):>10}" for o in OUTCOMES))
    bad = [r for r in rows if r[2] in ("traceback", "raw", "slow")]
    for kind, i, what, detail, argv, took in bad:
        print(f"\n{what} {kind}:{i} ({took:.1f} s; again: python bench/fuzz_cli.py --seed {seed} --only {kind}:{i} "
              f"--keep DIR)\n  tpsim {' '.join(argv)[:300]}\n  " + detail.replace("\n", "\n  "))
    return int(any(r[2] in ("traceback", "raw") for r in rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(RUNS), help=f"comma-separated, of: {', '.join(RUNS)}")
    ap.add_argument("--scale", type=float, default=1.0, help="times the default number of cases per kind")
    ap.add_argument("--limit-s", type=float, default=30.0, help="per command")
    ap.add_argument("--only", default=None, help="KIND:INDEX, one case (with --keep DIR: its files kept there)")
    ap.add_argument("--keep", type=Path, default=None)
    a = ap.parse_args()
    if a.only:
        kind, _, i = a.only.partition(":")
        root = Path(tempfile.mkdtemp(prefix="tpsim-fuzz-"))
        env = setup(root, [kind])
        keep = a.keep.resolve() if a.keep else None
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        with stubbed_launch():
            rows = run_case(kind, int(i), a.seed, env, a.limit_s, keep)
        for r in rows:
            print(r[2], "tpsim", " ".join(r[4]), "\n", r[3])
        return int(any(r[2] in ("traceback", "raw") for r in rows))
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(RUNS))
    if unknown:
        ap.error(f"unknown kind {unknown[0]}; choose from {', '.join(RUNS)}")
    t0 = time.monotonic()
    rows = run(kinds, {k: max(1, round(RUNS[k] * a.scale)) for k in kinds}, a.seed, a.limit_s)
    print(f"seed {a.seed}, {len(rows)} commands in {time.monotonic() - t0:.0f} s")
    return report(rows, a.seed)


if __name__ == "__main__":
    sys.exit(main())
