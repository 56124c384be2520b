"""When does each TP rank receive SGLang's per-step request broadcast? A host microbenchmark of the
gloo broadcast that every SGLang scheduler runs once per loop iteration at tp_size > 1.

SGLang (python/sglang/srt/managers/scheduler.py recv_requests -> utils broadcast_pyobj) broadcasts the
requests rank 0 received over the TP CPU group (gloo). In steady decode no request arrives, so each step
is exactly one `dist.broadcast` of an int64 tensor of shape [1] (8 bytes, value 0) from rank 0. gloo's
broadcast (gloo/broadcast.cc, which ProcessGroupGloo's broadcast calls) is a binomial tree over
log2ceil(N) rounds: rank r receives in round bit_length(r) from r less its highest set bit, and since a
sender posts its sends without waiting, the data reaches rank r after popcount(r) sequential hops
(sim.stack.host_lane.tree_hops; the last rank of N = 2^k is k hops from rank 0).

What this measures, on real gloo process groups over loopback TCP: per iteration all ranks meet at a
barrier, sleep 0.5 ms (so every receiver is already waiting in its recv, as SGLang's schedulers wait in
broadcast_pyobj), then rank 0 stamps t0 and broadcasts; every rank stamps the moment its broadcast
returns. time.perf_counter_ns is CLOCK_MONOTONIC on Linux, one clock for all processes of a host, so
rank r's arrival t_r - t0 is its delay behind rank 0. Printed per world size: each rank's median, p10
and p90 arrival (us), and the median per hop of the last rank (its arrival / its popcount hops).

    python bench/gloo_broadcast_hops.py [--world 2 --world 4] [--iters 2000] [--json OUT]

This is a host (CPU) benchmark: its numbers describe the machine it runs on. Run it on the serving
host for a number for that host. A world size above the machine's core count oversubscribes the
CPUs (a forwarding rank may wait for a core), and the script says so in its output.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, warmup: int, iters: int, out) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    size = torch.zeros(1, dtype=torch.long)   # broadcast_pyobj's tensor_size: [1] int64, 0 = no new requests
    stamps = []
    for i in range(warmup + iters):
        dist.barrier()
        time.sleep(5e-4)                      # every receiver is waiting in its recv before rank 0 sends
        if rank == 0:
            t0 = time.perf_counter_ns()
            dist.broadcast(size, src=0)
            stamps.append(t0)
        else:
            dist.broadcast(size, src=0)
            stamps.append(time.perf_counter_ns())
    t = torch.tensor(stamps[warmup:], dtype=torch.long)   # [iters] ns stamps of this rank
    gathered = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
    dist.gather(t, gathered, dst=0)
    if rank == 0:
        out.put([g.tolist() for g in gathered])
    dist.destroy_process_group()


def measure(world: int, warmup: int, iters: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, warmup, iters, q)) for r in range(world)]
    for p in procs:
        p.start()
    stamps = q.get(timeout=600)
    for p in procs:
        p.join()
    t0 = stamps[0]
    ranks = []
    for r in range(1, world):
        d = sorted((a - b) / 1e3 for a, b in zip(stamps[r], t0))        # us behind rank 0
        q10, q50, q90 = (d[int(f * (len(d) - 1))] for f in (0.1, 0.5, 0.9))
        ranks.append({"rank": r, "round": r.bit_length(), "hops": bin(r).count("1"),
                      "median_us": q50, "p10_us": q10, "p90_us": q90})
    hops = ranks[-1]["hops"]
    return {"world": world, "iters": iters, "hops_to_last": hops, "ranks": ranks,
            "median_per_hop_us": ranks[-1]["median_us"] / hops,
            "oversubscribed": world > (os.cpu_count() or 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, action="append", help="world size (repeat); default 2")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    host = {"cpus": os.cpu_count(), "torch": torch.__version__, "cpu": _cpu_name()}
    results = []
    for n in a.world or [2]:
        r = measure(n, a.warmup, a.iters)
        results.append(r)
        flag = "  (OVERSUBSCRIBED: more ranks than CPUs)" if r["oversubscribed"] else ""
        print(f"world {n}: {r['median_per_hop_us']:.1f} us per hop (last rank, {r['hops_to_last']} hops){flag}")
        for x in r["ranks"]:
            print(f"  rank {x['rank']} (round {x['round']}, {x['hops']} hops): median {x['median_us']:.1f} us  "
                  f"p10 {x['p10_us']:.1f}  p90 {x['p90_us']:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": host, "results": results}, f, indent=1)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
