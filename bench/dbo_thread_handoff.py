"""The CPU cost of vLLM's dual-batch overlap (DBO) threads handing the GPU to each other: the same Python
code path timed on this machine's CPU (it is CPU work: what transfers to a GPU host is the Python and the
OS thread wake-up, not any kernel).

vLLM runs a DBO step's two micro-batches on two Python threads (vllm/v1/worker/gpu_ubatch_wrapper.py
UBatchWrapper._run_ubatches, vLLM 0.11-0.32): per eager step it starts both threads, waits on a
threading.Barrier, sets the first one's event and joins them. Each thread enters a UBatchContext
(vllm/v1/worker/ubatching.py) and, at every yield point, hands over in _cpu_yield:

    self.cpu_signal_event.set()        # wake the other thread (its cpu_wait_event)
    self.cpu_wait_event.wait()         # sleep until it yields back
    self.cpu_wait_event.clear()
    self._restore_context()            # forward_context._forward_context = self.forward_context

(yield_and_switch_from_compute_to_comm around it records a torch.Event and makes a stream wait on one:
two CUDA calls the simulator prices as launches, not here.) Timed here:

  switch   one hand-off: thread A's set() until thread B runs past its wait(), clear() and context
           restore; two threads ping-ponging N times, the wall time over 2N hand-offs
  threads  one eager step's thread set-up: two threading.Thread start + Barrier wait + the first
           event set + both joins (threads that do nothing else)

    python bench/dbo_thread_handoff.py          # table + the value and range sim/stack/presets/vllm.py takes

Value: the median repeat (the machine is shared, but a GPU host's serving process shares its cores
with the engine's other threads too, so the fastest repeat would be the optimistic end). Range: half the
fastest repeat (a faster, idle host CPU) to twice the slowest (a slower or busier one).
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import threading
import time

_CTX = {"ctx": None}          # forward_context._forward_context stand-in


def switch_us(n: int = 20000) -> float:
    """Microseconds per hand-off between two threads ping-ponging as UBatchContext._cpu_yield does."""
    ev = [threading.Event(), threading.Event()]
    ready = threading.Barrier(3)

    def run(me: int) -> None:
        mine, other = ev[me], ev[1 - me]
        ready.wait()
        mine.wait()                       # __enter__: wait for the first go
        mine.clear()
        for _ in range(n):
            other.set()                   # _cpu_yield
            mine.wait()
            mine.clear()
            _CTX["ctx"] = me              # _restore_context
        other.set()                       # __exit__: let the other one finish

    ts = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in ts:
        t.start()
    ready.wait()
    t0 = time.perf_counter_ns()
    ev[0].set()
    for t in ts:
        t.join()
    return (time.perf_counter_ns() - t0) / (2 * n) / 1e3


def threads_us(n: int = 2000) -> float:
    """Microseconds of one eager DBO step's thread set-up (UBatchWrapper._run_ubatches without the model)."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        barrier, go = threading.Barrier(3), [threading.Event(), threading.Event()]

        def body(me: int, barrier=barrier, go=go) -> None:
            barrier.wait()
            go[me].wait()
            go[1 - me].set()

        ts = [threading.Thread(target=body, args=(i,)) for i in (0, 1)]
        for t in ts:
            t.start()
        barrier.wait()
        go[0].set()
        for t in ts:
            t.join()
    return (time.perf_counter_ns() - t0) / n / 1e3


def main() -> None:
    repeats = 7
    sw = sorted(switch_us() for _ in range(repeats))
    th = sorted(threads_us() for _ in range(repeats))
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"switch interval {sys.getswitchinterval() * 1e3:g} ms, load average {os.getloadavg()[0]:.2f}")
    print(f"{'what':8} {'fastest':>8} {'median':>8} {'slowest':>8}  us ({repeats} repeats)")
    for name, xs in (("switch", sw), ("threads", th)):
        print(f"{name:8} {xs[0]:8.1f} {statistics.median(xs):8.1f} {xs[-1]:8.1f}")
    for name, xs in (("switch", sw), ("threads", th)):
        print(f"{name}: {statistics.median(xs):.1f} us, range [{xs[0] / 2:.1f}, {2 * xs[-1]:.1f}] us")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
