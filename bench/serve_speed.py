"""Speed of tpsim serve's simulation: one hour of traffic at 10 requests/s, and how the cost grows with
the number of requests.

    python bench/serve_speed.py [--model llama-3.1-70b --tp 8 --stack vllm --schedule standard]

One hour at 10 req/s is 36,000 requests (vLLM's random dataset lengths, prompt 1024 and output 128:
`tpsim serve`'s defaults; Poisson arrivals, seed 0). Printed, all from this one run:

  cold   the whole simulation of the hour from a fresh step model: the step table's nodes priced
         as the run first needs them (sim/serve/steptime.py), then every iteration (bound: <= 10 s)
  warm   the same hour again on the table the cold run filled: the request-level simulation alone
  linear cost per request at N/4, N/2 and N requests, the sizes interleaved (N/4, N/2, N, N/4, ...,
         REPEATS rounds, each size's best round), as ratios to N/4's: 1.00 is linear growth

Every run is the same traffic truncated (the first n requests of the hour), on a table already filled
by the cold run, so the ratios time the simulation, not the step model. Times are this process's CPU
seconds (time.process_time: the 2-core machine is shared, and other processes' load is not the
simulation's cost); the cold run's wall-clock seconds are printed beside.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.serve.scheduler import engine_of, setup  # noqa: E402
from tpsim.sim.serve.service import Service  # noqa: E402
from tpsim.sim.serve.traffic import Traffic, synthetic  # noqa: E402
from tpsim.sim.stack.presets import load_stack  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402

RATE, HOUR_S, REPEATS = 10.0, 3600, 5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--profile", default="h100-sxm")
    ap.add_argument("--stack", default="vllm")
    ap.add_argument("--schedule", default="standard")
    a = ap.parse_args()
    prof, m = load_profile(a.profile), get_model(a.model)
    st = make_stack({}, prof.stack_defaults, preset=load_stack(a.stack).values)
    su = setup(engine_of(a.stack), m, a.tp, prof, st)
    n = int(RATE * HOUR_S)
    hour = synthetic(n, RATE, 1024, 128, seed=0)
    svc = Service(m, a.tp, prof, st, su)

    t0, w0 = time.process_time(), time.perf_counter()
    pt = svc.run(a.schedule, hour)
    cold, cold_wall = time.process_time() - t0, time.perf_counter() - w0
    nodes = svc.table(a.schedule).evaluated
    t0 = time.process_time()
    svc.run(a.schedule, hour)
    warm = time.process_time() - t0

    sizes = (n // 4, n // 2, n)
    parts = {k: Traffic(hour.arrival_s[:k], hour.prompt[:k], hour.output[:k]) for k in sizes}
    best = dict.fromkeys(sizes, float("inf"))
    for _ in range(REPEATS):
        for k in sizes:                         # interleaved: the machine's load hits every size alike
            t0 = time.process_time()
            svc.run(a.schedule, parts[k])
            best[k] = min(best[k], time.process_time() - t0)
    per = {k: best[k] / k for k in sizes}

    s = pt.summary
    print(f"{a.model} TP{a.tp} {a.profile} {a.stack} {a.schedule}: one hour at {RATE:g} req/s = {n} requests "
          f"(prompt 1024, gen 128, Poisson, seed 0)")
    print(f"  {s.iterations} iterations, {s.request_rate:.2f} req/s served, p99 TTFT {s.pct['ttft'][99] * 1e3:.0f} ms, "
          f"p99 TPOT {s.pct['tpot'][99] * 1e3:.1f} ms")
    print(f"cold (step table built as needed, {nodes} exact steps): {cold:6.2f} s CPU ({cold_wall:.2f} s wall)"
          f"   bound: <= 10 s")
    print(f"warm (the table filled):                        {warm:6.2f} s CPU")
    print(f"CPU per request, best of {REPEATS} interleaved rounds, as a ratio to {sizes[0]} requests':")
    for k in sizes:
        print(f"  {k:6d} requests  {best[k]:6.2f} s  {per[k] * 1e6:7.1f} us/request  x{per[k] / per[sizes[0]]:.2f}")


if __name__ == "__main__":
    main()
