"""A serving run: `replicas` engine instances (data parallelism, one TP group each) behind a router, fed
by the traffic's arrivals, on one SimPy clock (SimPy's machine-shop shape: the arrivals are a process
of the cluster, each engine's iterations a process of the engine).

The router sends each request, when it arrives, to one engine: round-robin, or least-loaded -- the
engine with the least waiting x 4 + running requests, vLLM V1's data-parallel balancer's score
(vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request), ties to the lowest index.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Callable

import simpy

from tpsim.sim.serve.engine import Engine, Price
from tpsim.sim.serve.traffic import Request, Traffic


@dataclass
class Run:
    """What a run leaves: every request (with its times), the engines (their records), the clock at the end."""

    requests: list[Request]
    engines: list[Engine]
    end_s: float
    notes: list[str] = field(default_factory=list)


def simulate(traffic: Traffic, setup, price: Price, replicas: int = 1, router: str | None = None,
             record: bool = False, progress: Callable[[int], None] | None = None) -> Run:
    """Serve `traffic` on `replicas` engines of `setup` (sim.serve.scheduler.Setup), each iteration
    priced by `price`. `progress(done)` is called as requests finish (every 1% of them)."""
    if replicas < 1:
        raise ValueError(f"--replicas must be >= 1, got {replicas}")
    router = router or setup.router
    if router not in ("round-robin", "least-loaded"):
        raise ValueError(f"unknown router {router!r}; choose round-robin or least-loaded")
    env = simpy.Environment()
    engines = []
    for i in range(replicas):
        sched = setup.scheduler()
        engines.append(Engine(env, i, sched, price, setup.slots, sched.block, record))
    reqs = [Request(i, float(a), int(p), int(o)) for i, (a, p, o) in
            enumerate(zip(traffic.arrival_s.tolist(), traffic.prompt.tolist(), traffic.output.tolist()))]
    if record:
        for r in reqs:
            r.events = []
    if progress is not None:
        step = max(1, len(reqs) // 100)
        count = [0]

        def tick(_r):
            count[0] += 1
            if count[0] % step == 0 or count[0] == len(reqs):
                progress(count[0])
        for e in engines:
            e.listeners.append(tick)
    for e in engines:
        env.process(e.run())
    env.process(_arrivals(env, reqs, engines, router))
    # the run allocates a few objects per request and per iteration and frees none until it ends: the
    # cyclic collector would rescan every live request each collection (cost growing with the run)
    collecting = gc.isenabled()
    gc.disable()
    try:
        env.run()
    finally:
        if collecting:
            gc.enable()
    unfinished = [r for r in reqs if r.done_s < 0]
    if unfinished:                               # every engine idles only when it has nothing left
        raise RuntimeError(f"{len(unfinished)} requests did not finish (request {unfinished[0].rid})")
    return Run(reqs, engines, env.now)


def _arrivals(env, reqs: list[Request], engines: list[Engine], router: str):
    """The cluster's arrival process: each request at its time, to the engine the router picks."""
    rr = 0
    for r in reqs:
        if r.arrival_s > env.now:
            yield env.timeout(r.arrival_s - env.now)
        if len(engines) == 1:
            e = engines[0]
        elif router == "round-robin":
            e = engines[rr % len(engines)]
            rr += 1
        else:
            e = min(engines, key=lambda x: (4 * len(x.waiting) + len(x.running), x.index))
        e.submit(r)
