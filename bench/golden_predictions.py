"""Every priced number tpsim prints, over a fixed grid of commands, in one file: a refactoring that must
not move a prediction (a module move, a mechanism written as a method) is checked by running this
before and after and comparing the two files byte for byte.

usage: python bench/golden_predictions.py OUT.txt            # write
       python bench/golden_predictions.py --check OLD.txt    # rerun, exit 1 naming the first differing command

The commands run in this process through the CLI's own entry point (click's runner), so the text
is what a user sees: predict's table (sensitivity notes included) and --json, show, trace, collective,
sweep and models. Not in the wheel (bench/ is not packaged).
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, as bench/'s other scripts)
_checkout.load()
from tpsim.cli import main as tpsim_main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "hf"

PROFILES = ("h100-sxm", "h100-sxm-p2p-off", "h100-sxm-coschedule", "h100-sxm-p2p-off-coschedule",
            "h200-sxm", "h200-sxm-coschedule", "a100-sxm", "a100-sxm-p2p-off", "l40s-pcie")
SCHEDULES = ("standard", "ladder", "ladder:16", "parallel", "spd:0.7", "upper-bound", "token-split:2", "seq-parallel")


def sched_args(names=SCHEDULES) -> list[str]:
    out: list[str] = []
    for s in names:
        out += ["--schedule", s]
    return out


def commands() -> list[list[str]]:
    cmds: list[list[str]] = []
    # the README's first command, and each profile at 70B TP8
    cmds.append(["predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", "h100-sxm"])
    for p in PROFILES:
        cmds.append(["predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", p, *sched_args(), "--json"])
    for stack in ("reference", "eager", "vllm", "sglang", "trtllm"):
        for model, tp, batch in (("llama-3.1-8b", 1, 1), ("llama-3.1-8b", 2, 16), ("llama-3.1-70b", 4, 1),
                                 ("llama-3.1-70b", 8, 64), ("llama-3.2-1b", 2, 4)):
            cmds.append(["predict", "--stack", stack, "--model", model, "--tp", str(tp), "--batch", str(batch),
                         "--prompt", "512", "--gen", "64", *sched_args(), "--json"])
    cmds.append(["predict", "--model", "llama-3.1-405b", "--tp", "16", "--profile", "h100-sxm"])
    cmds.append(["predict", "--model", "llama-3.1-405b[:8]", "--tp", "8", "--profile", "h200-sxm", "--json"])
    cmds.append(["predict", "--model", "llama-3.1-8b", "--tp", "8", "--profile", "h100-sxm-p2p-off", "--batch", "64"])
    cmds.append(["predict", "--model", "llama-3.1-8b", "--tp", "4", "--no-compile", "--batch", "4", *sched_args()])
    cmds.append(["predict", "--model", "llama-3.2-1b", "--tp", "2", "--gen", "16", "--exact", "--json"])
    cmds.append(["predict", "--model", str(HF / "qwen3-8b"), "--tp", "4", "--batch", "16", "--json"])
    cmds.append(["predict", "--model", str(HF / "qwen2.5-7b"), "--tp", "2", "--stack", "vllm"])
    cmds.append(["predict", "--model", "llama-3.1-70b", "--tp", "8", "--profile", "a100-sxm", "--batch", "16"])
    cmds.append(["predict", "--model", "llama-3.1-8b", "--tp", "2", "--gpus-per-node", "1", "--profile", "h100-sxm"])
    cmds.append(["show", "--model", "llama-3.1-8b", "--tp", "2", "--schedule", "ladder"])
    cmds.append(["show", "--model", "llama-3.1-70b", "--tp", "8", "--schedule", "spd:0.5"])
    for g in ("2", "4", "8"):
        cmds.append(["collective", "--profile", "h100-sxm", "--group", g])
    cmds.append(["collective", "--profile", "h100-sxm-p2p-off", "--group", "8"])
    cmds.append(["models"])
    return cmds


def run_all(progress: bool = True) -> str:
    runner = CliRunner()
    out = []
    cmds = commands()
    with tempfile.TemporaryDirectory() as tmp:
        extra = [["trace", "--model", "llama-3.2-1b", "--tp", "2", "--schedule", "ladder", "--out", f"{tmp}/t.json"],
                 ["sweep", "--model", "llama-3.1-8b", "--tp", "2", "--tp", "8", "--batch", "1", "--batch", "16",
                  "--bw-scale", "0.5", "--bw-scale", "1", "--out", f"{tmp}/s.csv", "--jobs", "1"]]
        for i, args in enumerate(cmds + extra):
            if progress:
                print(f"[{i + 1}/{len(cmds) + len(extra)}] tpsim {' '.join(args)}", file=sys.stderr)
            r = runner.invoke(tpsim_main, args, catch_exceptions=False)
            text = r.output.replace(tmp, "TMP")
            files = []
            for f in sorted(Path(tmp).iterdir()):
                files.append(f"--- {f.name} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}")
                f.unlink()
            shown = " ".join(args).replace(tmp, "TMP")
            out.append(f"=== tpsim {shown}\nexit {r.exit_code}\n{text}" + "\n".join(files) + "\n")
    return "".join(out).replace(str(ROOT), "ROOT")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--check", action="store_true", help="compare with PATH instead of writing it")
    a = ap.parse_args()
    os.environ.setdefault("COLUMNS", "120")
    text = run_all()
    if not a.check:
        Path(a.path).write_text(text)
        print(f"wrote {a.path}: {text.count('=== tpsim')} commands")
        return 0
    old = Path(a.path).read_text()
    if old == text:
        print(f"identical: {text.count('=== tpsim')} commands")
        return 0
    diff = difflib.unified_diff(old.splitlines(), text.splitlines(), "before", "after", lineterm="", n=2)
    print("\n".join(list(diff)[:80]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
