"""The rank side of `tpsim spd-plan` (commands/spd_plan.py starts it, as bench and check start
theirs): perplexities measured by the harness on real ranks, the SPD blocks chosen from them
(hw.spd.select: the paper's sensitivity, the greedy budget), priced by the simulator.

Every pass is one schedule run by hw.runner.Runner on this rank's shard of the checkpoint: the
baseline (standard), then each block alone as an SPD block (spd:[i]: that block's attention
all-reduce dropped, rank r's MLP reading X + P_r), then the greedy sets (spd:SET). A pass runs
each token window (hw.spd.text) as a prefill with logits for every position, [seq_len, vocab] on
every rank (the head is replicated), and sums the next-token negative log-likelihood:
ppl = exp(sum NLL / (windows * (seq_len - 1))). Rank 0's numbers are broadcast after each pass,
so every rank takes the same greedy decisions. Rank 0 appends each finished pass to the partial
file and, on a rerun with the same inputs digest, reads them back instead of measuring.
"""
from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tpsim.sim.schedule.language import build
from tpsim.hw import rank as hwrank
from tpsim.hw.model import build_rank_model
from tpsim.hw.run_config import RunConfig, memory_gate
from tpsim.hw.runner import Runner
from tpsim.hw.spd.select import (Budget, append_partial, choose, distill, format_plan, make_progress,
                                 plot_sensitivity, price, read_partial, show_progress, spd_spec)
from tpsim.hw.spd.text import load_tokens, plan_digest


def worker(config: dict) -> int:
    """Entry point of one rank (hw.dist.launch or torchrun); config = RunConfig fields + "spd_plan"."""
    opts = config["spd_plan"]
    hwrank.run_rank(config, lambda cfg, ctx: run_plan(cfg, ctx, opts), format_plan)
    return 0


def run_plan(cfg: RunConfig, ctx: hwrank.DistContext, opts: dict) -> dict:
    """Measure, choose, price (module doc); the result dict every rank returns (rank 0's is reported)."""
    torch.set_default_dtype(torch.float32)
    model = cfg.model_spec()
    tp, L = ctx.world, model.layers
    if cfg.tp != tp:
        raise ValueError(f"--tp {cfg.tp} but {tp} processes were started")
    memory_gate(cfg)                       # under torchrun no launcher checked it
    tokens = load_tokens(opts["text"], cfg.checkpoint, model.vocab, cfg.prompt_len, opts.get("windows"))
    digest = opts.get("digest") or plan_digest(tokens, cfg.checkpoint, tp, cfg.dtype, cfg.device, cfg.layers)
    budget = Budget(**opts["budget"])
    part = opts.get("partial")
    group = hwrank.cpu_group()
    box = [read_partial(part, digest) if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=group)
    done: dict[str, dict] = box[0]
    found = set(done)
    rm = build_rank_model(model, tp, ctx.rank, batch=1, max_seq=cfg.prompt_len, dtype=cfg.dtype,
                          device=ctx.device, head=cfg.head, embed=cfg.embed, checkpoint=cfg.checkpoint)
    runner = Runner(rm, dist.group.WORLD, rank=ctx.rank)
    pre, _ = cfg.steps()
    stack = cfg.stack()
    ids = torch.tensor(tokens.ids, dtype=torch.long, device=ctx.device).view(tokens.windows, tokens.seq_len)
    bar = make_progress() if ctx.rank == 0 and opts.get("bar") else None
    tasks: dict = {}
    used: list[str] = []
    measured = [0]

    def measure(spec: str, phase: str) -> float:
        used.append(spec)
        if spec not in done:
            hwrank.fault_point(ctx.rank, f"pass{measured[0]}")
            measured[0] += 1
            sched = build(spec, model, tp, pre, stack)
            nll = 0.0
            for w in range(tokens.windows):
                rm.reset_cache()
                logits = runner.forward(sched, ids[w:w + 1], 0).logits.float()[:, :model.vocab]   # [S, vocab]
                nll += F.cross_entropy(logits[:-1], ids[w, 1:], reduction="sum").item()
            n = tokens.windows * (tokens.seq_len - 1)
            row = [{"spec": spec, "phase": phase, "nll": nll, "tokens": n, "ppl": math.exp(nll / n)}]
            dist.broadcast_object_list(row, src=0, group=group)     # one set of numbers: rank 0's
            done[spec] = row[0]
            if ctx.rank == 0 and part:
                append_partial(part, digest, row[0])
        if bar is not None:
            show_progress(bar, tasks, {s: done[s] for s in used}, L, budget)
        return done[spec]["ppl"]

    if bar is not None:
        bar.start()
    try:
        base = measure("standard", "baseline")
        solo = {i: measure(spd_spec([i]), "solo") for i in range(L)}
        chosen, cum, stopped = choose(base, solo, budget, lambda spec: measure(spec, "set"))
    finally:
        if bar is not None:
            bar.stop()
    result = _result(cfg, model.name, tp, tokens, budget, base, solo, chosen, cum, stopped)
    result.update(digest=digest, passes=len(used), resumed=len(found & set(used)), partial=part)
    if ctx.rank == 0:
        pr = opts.get("price")
        if pr:
            try:
                result["price"] = price(model, tp, pr["profile"], pr["batch"], pr["prompt_len"], pr["gen_len"],
                                        result["schedule"])
            except ValueError as e:           # validated before launch; a profile edited since
                result["price"] = None
                result["price_error"] = str(e)
        if opts.get("plot"):
            plot_sensitivity(result, opts["plot"])
            result["plot"] = os.path.abspath(opts["plot"])
    return result


def _result(cfg: RunConfig, name: str, tp: int, tokens, budget: Budget, base: float, solo: dict[int, float],
            chosen: list[int], cum: dict[int, float], stopped: dict | None) -> dict:
    """The plan as JSON: a row per block (layer order) and the chosen set."""
    most = sorted(solo, key=lambda i: (-solo[i], i))          # rank 1: the most sensitive block
    to_distill = distill(base, solo, budget)
    blocks = [{"layer": i, "ppl": solo[i], "sensitivity": solo[i] - base, "sensitivity_pct": (solo[i] / base - 1) * 100,
               "rank": most.index(i) + 1, "chosen": i in cum, "order": chosen.index(i) if i in cum else None,
               "cumulative_ppl": cum.get(i), "distill": i in to_distill} for i in range(len(solo))]
    return {"model": name, "layers": len(solo), "tp": tp, "backend": cfg.backend, "device": cfg.device,
            "dtype": cfg.dtype, "checkpoint": cfg.checkpoint, "seq_len": tokens.seq_len, "windows": tokens.windows,
            "tokens_how": tokens.how, "tokens_available": tokens.available,
            "budget": budget.describe(), "budget_spec": {k: v for k, v in vars(budget).items() if v is not None},
            "limit_ppl": budget.limit(base), "baseline_ppl": base, "blocks": blocks, "chosen": chosen,
            "schedule": spd_spec(chosen), "final_ppl": cum[chosen[-1]] if chosen else base, "stopped_at": stopped,
            "distill": to_distill}
