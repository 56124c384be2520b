"""How fast this machine computes right now: a fixed probe, timed the same way everywhere.

A shared VM's speed drifts: on the 2-core development VM the same quick calibration priced
toy-512's comm-free decode step at 7.8 ms and, 20 minutes later, at 11.4 ms. A prediction from a
calibration can be no closer to a measurement than the machine's speed between the two, so
calibration (with its compute points) and the benchmark (before and after its timed repeats)
both time this probe, and `tpsim compare` reports their ratio beside its errors.
"""
from __future__ import annotations

import statistics
import time

import torch

PROBE_N = 256          # [256, 256] @ [256, 256]: ~1 ms on one CPU core, microseconds on a GPU
PROBE_CALLS = 8


def probe_s(device: str = "cpu", reps: int = 7) -> float:
    """Median seconds of PROBE_CALLS fp32 matmuls [PROBE_N, PROBE_N]^2 on `device` (synchronized;
    on CPU on one thread: one core's speed, comparable between launches of 1 or N ranks)."""
    cuda = str(device).startswith("cuda")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(PROBE_N, PROBE_N, generator=gen).to(device)
    b = torch.randn(PROBE_N, PROBE_N, generator=gen).to(device)
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)
    try:
        _timed_calls(a, b, cuda)                      # warm-up
        return statistics.median(_timed_calls(a, b, cuda) for _ in range(reps))
    finally:
        torch.set_num_threads(threads)


def _timed_calls(a, b, cuda: bool) -> float:
    """Seconds of PROBE_CALLS back-to-back a @ b (no autograd)."""
    with torch.no_grad():
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(PROBE_CALLS):
            torch.mm(a, b)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0
