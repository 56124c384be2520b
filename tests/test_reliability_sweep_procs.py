"""Sweep pool workers die with the sweep (issue #29 item 1, docs/reliability.md "Child processes").

A real `python cli.py sweep --jobs 2` runs a grid big enough that its workers are computing a
chunk when the test kills the sweep (after the checkpoint has its first finished points); every
worker must be gone within 2 s. Before: both workers lived on (reparented to init, 90 s later
still computing, then blocked forever on the pool's queue). Pure Python, no torch.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from procs import assert_gone, children

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CLI = str(ROOT / "cli.py")


def _grid_args(out: Path) -> list[str]:
    # 2 models x 4 TP x 4 batches x 8 bandwidth scales = 256 points: chunks of 32 points, each
    # chunk a few seconds of simulation on one core (the whole sweep ~12 s with 2 workers)
    args = ["sweep", "--model", "llama-3.1-8b", "--model", "llama-3.2-1b", "--prompt", "256", "--gen", "64",
            "--jobs", "2", "--out", str(out)]
    for t in (1, 2, 4, 8):
        args += ["--tp", str(t), "--batch", str(t)]
    for s in range(1, 9):
        args += ["--bw-scale", str(s)]
    return args


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_sweep_workers_die_with_the_sweep(tmp_path, sig):
    if os.cpu_count() is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("--jobs is capped at the cores: one core runs no pool")
    out = tmp_path / "o.csv"
    ckpt = Path(f"{out}.partial.jsonl")
    p = subprocess.Popen([sys.executable, CLI, *_grid_args(out)], cwd=tmp_path, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and not (ckpt.exists() and ckpt.read_text().count("\n")):
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
            time.sleep(0.02)
        workers = children(p.pid, "sweep")
        assert len(workers) == 2, f"workers {workers}"
        # mid-sweep: the first chunk is checkpointed, the rest are being computed
        assert ckpt.read_text().count("\n") < 256
        os.kill(p.pid, sig)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert_gone(workers, 2.0, "sweep workers")
    assert p.returncode == -sig


def test_ctrl_c_of_a_sweep_exits_130_saying_what_the_checkpoint_keeps(tmp_path):
    """Issue 48 item 7: Ctrl-C exited 1 with a bare `Aborted!`, where every other long command exits 130
    and says what it kept. One process (--jobs 1): the interrupt lands between points."""
    out = tmp_path / "o.csv"
    ckpt = Path(f"{out}.partial.jsonl")
    args = _grid_args(out)
    args[args.index("--jobs") + 1] = "1"
    p = subprocess.Popen([sys.executable, CLI, *args], cwd=tmp_path, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and not (ckpt.exists() and ckpt.read_text().count("\n")):
            assert p.poll() is None, p.stderr.read()[-2000:]
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=30)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    kept = ckpt.read_text().count("\n")
    assert p.returncode == 130, err
    assert f"Aborted! {kept} of " in err and f"points are kept in {ckpt}: rerun the same command to continue" in err
    assert "Traceback" not in err
