"""One rank of a calibration: run the planned groups not yet in the state file, measure each
(device constants, collective sweeps, compute cases, overlap), and let rank 0 save after each.
hw.dist launches this module's `worker` by name: `calib.rank:worker`."""
from __future__ import annotations

import os
import platform
import socket
import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tpsim.sim.stack.spec import DTYPE_BYTES

from tpsim.hw import rank as hwrank
from tpsim.hw.model import torch_dtype
from tpsim.hw.probe import probe_s

from tpsim.calib import compute
from tpsim.calib.collectives import arrival_summary, arrival_waits, max_over_ranks, nccl_env, points, sweep
from tpsim.calib.overlap import measure, measure_in_passes
from tpsim.calib.overlap_summary import summarize, summarize_passes
from tpsim.calib.plan import STOPPED, CalibConfig, Group, plan_groups, read_state, utc_now, write_state
from tpsim.calib.shapes import ShapeCase


def worker(config: dict) -> int:
    """Entry point of one rank (hw.dist launches it as `calib.rank:worker`)."""
    cfg = CalibConfig.from_dict(config)
    ctx = hwrank.init_from_env(cfg.backend, "cuda" if cfg.device == "cuda" else "cpu", cfg.timeout_s)
    try:
        return run_groups(cfg, ctx)
    finally:
        hwrank.shutdown()


def run_groups(cfg: CalibConfig, ctx, progress: Callable | None = None) -> int:
    """Run every group of this launch not in the state file; rank 0 saves after each group.
    Returns 0 when all are done, STOPPED when `stop_after` ended it early."""
    pg = hwrank.cpu_group()

    def barrier():
        dist.barrier(group=pg)
    box = [read_state(cfg) if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=pg)
    state = box[0]
    groups = plan_groups(cfg, ctx.world, cfg.env_index)
    new = 0
    for i, g in enumerate(groups):
        if g.name in state["groups"]:
            continue
        hwrank.fault_point(ctx.rank, "group")      # a progress mark per group (names a hung rank); test hook
        t0 = time.monotonic()
        result = measure_group(g, cfg, ctx, barrier, pg)
        if ctx.rank == 0:
            state["groups"][g.name] = {"kind": g.kind, "run_id": cfg.run_id, "world": ctx.world,
                                       "finished_at": utc_now(), "wall_s": round(time.monotonic() - t0, 3), **result}
            write_state(cfg.state_path, state)
            if progress:
                progress(g.name)
        barrier()
        new += 1
        if cfg.stop_after and new >= cfg.stop_after and any(h.name not in state["groups"] for h in groups[i + 1:]):
            return STOPPED
    return 0


def measure_group(g: Group, cfg: CalibConfig, ctx, barrier, pg) -> dict:
    """Run group `g` on every rank; the gathered result (meaningful on rank 0)."""
    dev = ctx.device
    if g.kind == "device":
        local = _device_constants(cfg, dev) | {"cores": list(ctx.cores) if ctx.cores is not None else None}
    elif g.kind == "collectives":
        p = g.params
        local = sweep(p["collective"], p["sizes"], p["group"], mode=p["mode"], dtype=cfg.dtype, device=dev,
                      trials=cfg.trials["collectives"], world_barrier=barrier)
    elif g.kind == "arrival":
        local = {"waits": arrival_waits(g.params["group"], dtype=cfg.dtype, device=dev, world_barrier=barrier),
                 "host": socket.gethostname()}
    elif g.kind == "compute":
        probe = probe_s(dev)                        # the machine's speed as these points are taken
        samples = compute.capture(g.params["case"], dev, cfg.dtype, seed=cfg.seed)     # each signature's op
        if dev.startswith("cuda"):
            local = compute.time_samples(samples, device=dev, trials=cfg.trials["compute"], barrier=barrier)
        else:
            local = compute.time_in_passes(g.params["case"], dev, cfg.dtype, trials=cfg.trials["compute"],
                                           seed=cfg.seed, barrier=barrier)
        local = {"times": local, "probe_s": probe}
    elif g.kind == "overlap":
        local = _overlap_local(cfg, g.params["cases"], dev, barrier)
    else:
        raise ValueError(f"unknown group kind {g.kind}")
    gathered = [None] * ctx.world
    dist.all_gather_object(gathered, local, group=pg)
    if ctx.rank != 0:
        return {}
    if g.kind == "device":
        return _merge_device(gathered)
    if g.kind == "collectives":
        p = g.params
        return {"points": points(p["collective"], p["group"], p["mode"], p["impl"], max_over_ranks(gathered)),
                "env": nccl_env() if cfg.backend == "nccl" else {"backend": "gloo"},
                "trials": cfg.trials["collectives"], "ranks": ctx.world}
    if g.kind == "arrival":
        scope = "node" if len({r["host"] for r in gathered}) == 1 else "net"
        return {**arrival_summary([r["waits"] for r in gathered]), "scope": scope, "ranks": ctx.world}
    if g.kind == "compute":
        return {"points": compute.points(samples, [r["times"] for r in gathered]),
                "probe_s": statistics.median(r["probe_s"] for r in gathered),
                "trials": cfg.trials["compute"], "ranks": ctx.world}
    if "cases" in gathered[0]:                      # measured inside the models' passes (CPU)
        summary = summarize_passes([r["cases"] for r in gathered])
        what = "pooled over " + "; ".join(c["what"] for c in gathered[0]["cases"])
    else:
        summary, what = summarize(gathered), gathered[0]["what"]
    return {"summary": summary, "trials": cfg.trials["overlap"], "ranks": ctx.world, "what": what}


def _device_constants(cfg: CalibConfig, dev: str) -> dict:
    cuda = dev.startswith("cuda")
    mm = (2048, 4096, 8192) if cuda else ((256, 512, 1024) if cfg.quick else (256, 512, 1024, 2048))
    copies = ([1 << 20, 16 << 20, 256 << 20, 1 << 30] if cuda else
              [64 << 10, 1 << 20, 16 << 20, 64 << 20] + ([] if cfg.quick else [256 << 20]))
    out = {"launch_s": compute.launch_overhead_s(dev, cfg.dtype),
           "matmul": {n: compute.peak_flops(dev, cfg.dtype, (n,)) for n in mm},
           "copy": {b: compute.mem_bandwidth(dev, b) for b in copies}}
    out["graph_launch_s"] = compute.graph_launch_s(dev, cfg.dtype) if cuda else None
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        out["device_name"], out["device_mem_bytes"] = props.name, props.total_memory
        out["compute_capability"] = float(f"{props.major}.{props.minor}")     # 9.0 on an H100
    return out


def _merge_device(per_rank: list[dict]) -> dict:
    med = statistics.median
    r0 = per_rank[0]
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "launch_s": med(r["launch_s"] for r in per_rank),
        "graph_launch_s": med(r["graph_launch_s"] for r in per_rank) if r0["graph_launch_s"] is not None else None,
        "matmul_flops": {str(n): med(r["matmul"][n] for r in per_rank) for n in r0["matmul"]},
        "copy_bytes_per_s": {str(b): med(r["copy"][b] for r in per_rank) for b in r0["copy"]},
        "device_name": r0.get("device_name") or _cpu_name(),
        "device_mem_bytes": r0.get("device_mem_bytes"),
        "compute_capability": r0.get("compute_capability"),
        "host": socket.gethostname(), "host_ram_bytes": ram, "cpu_count": os.cpu_count(),
        "ranks": len(per_rank),
        # CPU ranks pinned to these cores (hw.rank.pin_cores); measured values depend on it
        "rank_cores": [r.get("cores") for r in per_rank],
    }


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _overlap_local(cfg: CalibConfig, cases: list[ShapeCase], dev: str, barrier) -> dict:
    """This rank's overlap trials. CPU: inside the standard decode passes of each case as wide as
    the group with gen >= 2 (`calib.overlap.measure_in_passes`), pooled when summarized. GPU, or no such case: the MLP
    up-projection gemm of the first case's prefill ([rows, hidden] @ [hidden, 2*ffn/tp], rows cut
    until it lasts about as long as the collective) against an all-reduce of the prefill activation
    [batch*prompt, hidden]; without a case, [256, 1024] @ [1024, 1024] against 1 MiB."""
    # in passes: cases as wide as the group (their all-reduces span it) with a decode step to run
    in_pass = [c for c in cases if c.tp == dist.get_world_size() and c.gen_len >= 2]
    if in_pass and not dev.startswith("cuda"):
        return {"cases": [measure_in_passes(c, dev, cfg.dtype, trials=cfg.trials["overlap"], seed=cfg.seed,
                                            barrier=barrier) for c in in_pass]}
    case = cases[0] if cases else None
    td = torch_dtype(cfg.dtype)
    if case is None:
        m, k, n = 256, 1024, 1024
        nbytes = 1 << 20
    else:
        s = case.model.shard(case.tp)
        m, k, n = case.batch * case.prompt_len, s.hidden, 2 * s.ffn
        nbytes = m * s.hidden * DTYPE_BYTES[cfg.dtype]
    x = torch.randn(m, k, device=dev).to(td)                   # [rows, hidden]
    w = torch.randn(n, k, device=dev).to(td) / k ** 0.5         # [2*ffn/tp, hidden] (F.linear layout)

    def make(rows: int):
        xr = x[:rows].contiguous()
        return lambda: F.linear(xr, w)
    with torch.no_grad():
        r = measure(make, m, nbytes, dtype=td, device=dev, trials=cfg.trials["overlap"], barrier=barrier)
    r["what"] = (f"gemm [{r['rows']}, {k}] @ [{k}, {n}] x{r['reps']} vs all_reduce of {nbytes} B, alone and "
                 f"concurrently (async_op=True)")
    return r
