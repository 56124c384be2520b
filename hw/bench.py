"""The benchmark protocol (docs/design.md): measured tokens/s of each schedule on this machine.

Per schedule one *generation* = prefill of batch x prompt (produces token 1) + gen-1 decode steps
with the static KV cache, greedy tokens fed back. Every schedule is warmed up, then measured
`repeats` times *interleaved* (A B C, B C A, C A B, ...) so drift and noise (+-15% on small
machines) hit every schedule alike. Each rank times its own passes after a barrier; a pass lasts
as long as its slowest rank, so per repeat we take the max over ranks, then report the median
over repeats with the spread. Standard always runs: speedup is over it (median of the per-repeat
paired ratios is reported in the spread as well).

exposed_comm_s is communication the compute stream could not hide: on CPU the time ranks spent
blocked in work.wait() (mean over ranks, median over repeats); on CUDA the compute stream's
blocked time from CUDA events of one recorded prefill + one decode step, decode scaled by gen-1.
With --compile it is null (printed "-"): a compiled pass waits for its collectives inside the graph,
where the harness cannot time the waits, and the recorded passes are eager ones, another program.

Run as `tpsim bench --nproc N`, or under torchrun as `torchrun --nproc-per-node N --no-python tpsim bench ...`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

from tpsim.sim.stack.sampler import REFERENCE as REFERENCE_SAMPLER
from tpsim.sim.schedule.language import build, notes_of
from tpsim.hw import rank as hwrank
from tpsim.hw.run_config import RunConfig, memory_gate
from tpsim.hw.inductor_flags import compile_functional_pass, current_inductor_flags
from tpsim.hw.model import build_rank_model
from tpsim.hw.probe import probe_s
from tpsim.hw.report import format_result  # noqa: F401  (the rank prints it: hwrank.run_rank)
from tpsim.hw.runner import DecodeGraph, Runner
from tpsim.hw.symm_mem import make_all_reduce


def worker(config: dict) -> int:
    """Entry point of one rank (hw.dist launches it; under torchrun, commands.bench calls it in-process)."""
    hwrank.run_rank(config, run_bench, format_result)
    return 0


def _sync(cfg: RunConfig) -> None:
    if cfg.device == "cuda":
        torch.cuda.synchronize()


def run_bench(cfg: RunConfig, ctx: hwrank.DistContext) -> dict:
    model, stack = cfg.model_spec(), cfg.stack()
    if cfg.tp != ctx.world:
        raise ValueError(f"--tp {cfg.tp} but {ctx.world} processes were started")
    tp = cfg.model_tp            # shard shapes and schedules; collectives run over the started processes
    est = memory_gate(cfg)                 # before any allocation (hw.run_config: the one gate)
    specs = list(dict.fromkeys(["standard", *cfg.schedules]))
    pre_step, dec_step = cfg.steps()
    plans = {s: (build(s, model, tp, pre_step, stack),
                 build(s, model, tp, dec_step, stack) if dec_step else None) for s in specs}
    rm = build_rank_model(model, tp, ctx.rank, batch=cfg.batch, max_seq=cfg.prompt_len + cfg.gen_len,
                          dtype=cfg.dtype, device=ctx.device, seed=cfg.seed, head=cfg.head,
                          embed=cfg.embed, checkpoint=cfg.checkpoint, fp8=stack.fp8, kv_fp8=stack.kv_dtype == "fp8")
    group, cpu = dist.group.WORLD, hwrank.cpu_group()
    all_reduce = make_all_reduce(cfg.collective, group, ctx.device, cfg.dtype,
                                 [s for pair in plans.values() for s in pair])
    runner = Runner(rm, group, rank=ctx.rank, compile=cfg.compile, all_reduce=all_reduce)
    gen = torch.Generator().manual_seed(cfg.seed)
    prompt = torch.randint(0, model.vocab, (cfg.batch, cfg.prompt_len), generator=gen).to(rm.device)
    graphs: dict[str, DecodeGraph] = {}
    compiled = compile_passes(runner, plans, cfg, ctx.rank) if cfg.compile else {}

    if cfg.decode_graphs and dec_step is not None and not cfg.compile:
        for s in specs:                                     # every rank captures the same spec together,
            graphs[s] = DecodeGraph(runner, plans[s][1])    # before warm-up and timing

    def generation(spec: str) -> tuple[float, float, float | None]:
        pre, dec = plans[spec]
        dist.barrier(group=cpu)
        _sync(cfg)
        hwrank.fault_point(ctx.rank, "prefill")
        t0 = time.perf_counter()
        if compiled:
            # whole compiled passes: waits happen inside the graph, so no exposed time is measured (None)
            nxt = compiled[spec][0](pre, prompt, compiled["pos0"])[1]
            _sync(cfg)
            t1 = time.perf_counter()
            pos_t = compiled["pos"]
            for j in range(1, cfg.gen_len):
                hwrank.fault_point(ctx.rank, "decode")
                pos_t.fill_(cfg.prompt_len + j - 1)
                nxt = compiled[spec][1](dec, nxt.view(-1, 1), pos_t)[1]
            _sync(cfg)
            return t1 - t0, time.perf_counter() - t1, None
        res = runner.forward(pre, prompt, 0)
        _sync(cfg)
        t1 = time.perf_counter()
        wait_s, nxt = res.wait_s, res.next_tokens
        for j in range(1, cfg.gen_len):
            hwrank.fault_point(ctx.rank, "decode")
            pos = cfg.prompt_len + j - 1
            if spec in graphs:
                res = graphs[spec].replay(nxt.view(-1, 1), pos)
            else:
                res = runner.forward(dec, nxt.view(-1, 1), pos)
            wait_s += res.wait_s
            nxt = res.next_tokens
        _sync(cfg)
        return t1 - t0, time.perf_counter() - t1, wait_s

    probes = [probe_s(rm.device)]              # the machine's speed before (ahead of warm-up) and after timing
    for _ in range(cfg.warmup):
        for s in specs:
            generation(s)
    samples: dict[str, list] = {s: [] for s in specs}
    for rep in range(cfg.repeats):
        k = rep % len(specs)
        for s in specs[k:] + specs[:k]:                   # interleaved, rotating the start
            samples[s].append(generation(s))
    probes.append(probe_s(rm.device))
    records = {s: _recorded_passes(runner, plans[s], prompt, cfg, cpu) for s in specs}
    everything = [None] * ctx.world
    env = _rank_env(ctx) | {"probe_s": probes, "inductor_flags": compiled.get("inductor_flags"),
                            "collective_notes": list(all_reduce.notes),
                            "collective_kernels": {str(b): k for b, k in sorted(all_reduce.ran.items())}}
    dist.all_gather_object(everything, {"samples": samples, "records": records, "env": env}, group=cpu)
    return assemble(cfg, model.name, specs, everything, est.to_dict())


def compile_passes(runner: Runner, plans: dict, cfg: RunConfig, rank: int) -> dict:
    """torch.compile each schedule's whole prefill and decode pass (Runner.functional_pass), as the
    reference harness compiles its forward (docs/sources.md §10): fullgraph, static shapes; decode under
    CUDA graphs (mode reduce-overhead) on cuda with --graphs. On CPU Inductor generates C++ (OpenMP)
    kernels, on CUDA Triton ones. Compiling is slow (tens of seconds per pass on a small CPU); the
    compiled code is cached by Inductor's FX graph cache (TORCHINDUCTOR_CACHE_DIR, default
    /tmp/torchinductor_$USER), so a rerun of the same shapes starts fast. Each pass is compiled
    here, once, with a progress line, before warm-up.

    hw.inductor_flags.compile_functional_pass sets the reference's Inductor flags in this (rank)
    process first, coordinate_descent_tuning as the run's stack says (cfg.mm_decompose_m1), so every
    compile and recompile sees them; their values read back after compiling are returned under
    "inductor_flags" (the result's env records them)."""
    import torch._dynamo.config as dcfg   # lazy: torch._dynamo takes ~0.8 s to import; only --compile needs it
    for name in ("recompile_limit", "cache_size_limit"):       # one graph per (schedule, phase)
        if hasattr(dcfg, name):
            setattr(dcfg, name, max(getattr(dcfg, name), 4 * len(plans) + 8))
    dev = runner.rm.device
    out: dict = {"pos0": torch.tensor(0, device=dev), "pos": torch.tensor(cfg.prompt_len, device=dev)}
    dec_mode = "reduce-overhead" if (cfg.device == "cuda" and cfg.decode_graphs) else None
    backend = "Triton" if cfg.device == "cuda" else "C++"
    for spec, (pre, dec) in plans.items():
        fns = (compile_functional_pass(runner, cfg.mm_decompose_m1),
               compile_functional_pass(runner, cfg.mm_decompose_m1, mode=dec_mode))
        out[spec] = fns
        t0 = time.perf_counter()
        if rank == 0:
            print(f"compiling {spec} (prefill + decode, Inductor {backend}; cached for reruns)...",
                  file=sys.stderr, flush=True)
        hwrank.fault_point(rank, "compile")            # a progress mark per schedule (commands/bench.py's bar)
        tok = torch.zeros(pre.step.batch, pre.step.q_len, dtype=torch.long, device=dev)
        fns[0](pre, tok, out["pos0"])
        if dec is not None:
            fns[1](dec, tok[:, :1], out["pos"])
        runner.rm.reset_cache()
        if rank == 0:
            print(f"compiled {spec} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out["inductor_flags"] = current_inductor_flags()
    return out


RECORDED_DECODE_STEPS = 3      # per-op records of a few decode steps: one step's are too noisy to join on


def _recorded_passes(runner: Runner, plan, prompt, cfg: RunConfig, cpu) -> list[dict]:
    """Per-op records of one eager prefill and up to RECORDED_DECODE_STEPS eager decode steps
    (after a barrier each); each record dict carries its pass index ("pass": 0, 1, ... per phase)."""
    pre, dec = plan
    runner.timing = True
    try:
        out: list[dict] = []
        dist.barrier(group=cpu)
        res = runner.forward(pre, prompt, 0)
        out += [_record(r, 0, runner) for r in res.records]
        nxt = res.next_tokens
        for j in range(min(RECORDED_DECODE_STEPS, cfg.gen_len - 1) if dec is not None else 0):
            dist.barrier(group=cpu)
            res = runner.forward(dec, nxt.view(-1, 1), cfg.prompt_len + j)
            out += [_record(r, j, runner) for r in res.records]
            nxt = res.next_tokens
    finally:
        runner.timing = False
    return out


def _record(r, pass_index: int, runner: Runner) -> dict:
    """A per-op record as JSON, with its pass index; an all-reduce's also names the kernel it ran
    (hw.symm_mem: "nccl" / "gloo", or the symmetric-memory kernel "multimem" / "symm-twoshot")."""
    d = r.to_dict() | {"pass": pass_index}
    if r.kind == "all_reduce" and r.op in runner.comm_kernels:
        d["kernel"] = runner.comm_kernels[r.op]
    return d


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def median_ci(xs: list[float], level: float = 0.90) -> tuple[float, float, float]:
    """Distribution-free confidence interval for the median (sign test / order statistics):
    [x_(k), x_(n+1-k)] with the largest k whose coverage 1 - 2 P(Binom(n, 1/2) < k) is >= level.
    Returns (lo, hi, coverage). Below 5 samples even [min, max] covers less than 90%; it is
    returned with its true (lower) coverage. Why not mean +- t*s: repeats on a shared box have
    outliers (a descheduled rank) that a t-interval would let dominate."""
    ys = sorted(xs)
    n = len(ys)
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * _half_binom_cdf(k, n) >= level:
        k += 1                       # _half_binom_cdf(k, n) = P(B < k + 1): coverage of [x_(k+1), x_(n-k)]
    return ys[k - 1], ys[n - k], float(1 - 2 * _half_binom_cdf(k - 1, n))


def _half_binom_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binom(n, 1/2), exact: sum of C(n, i) over i <= k, over 2^n (integers, one
    rounding; what scipy.stats.binom.cdf(k, n, 0.5) gives, without its ~0.5 s import)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def _spread(xs: list[float]) -> dict:
    """min / quartiles / max of a sample (quartiles collapse to the median below 2 points), and a
    ~90% confidence interval for the median (`median_ci`)."""
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    lo, hi, cov = median_ci(xs)
    return {"min": min(xs), "p25": q[0], "median": q[1], "p75": q[2], "max": max(xs), "n": len(xs),
            "ci_lo": lo, "ci_hi": hi, "ci_coverage": cov}


def assemble(cfg: RunConfig, model_name: str, specs: list[str], per_rank: list[dict], memory: dict) -> dict:
    """Combine every rank's samples into the `tpsim predict --json` shape (+ records, spread, env)."""
    tokens = cfg.batch * cfg.gen_len
    reps = cfg.repeats
    rows = []
    base_tps: list[float] = []
    for s in specs:
        pre = [max(r["samples"][s][i][0] for r in per_rank) for i in range(reps)]
        dec = [max(r["samples"][s][i][1] for r in per_rank) for i in range(reps)]
        skew = [max(sum(r["samples"][s][i][:2]) for r in per_rank) - min(sum(r["samples"][s][i][:2])
                for r in per_rank) for i in range(reps)]
        tps = [tokens / (p + d) for p, d in zip(pre, dec)]
        if s == "standard":
            base_tps = tps
        recs = [rec for r in per_rank for rec in r["records"][s]]
        if cfg.compile:
            # not measured: the waits happen inside the compiled graph, and the recorded passes are eager
            # ones (another program); before, a false 0 on CPU and the eager passes' time on CUDA
            exposed = None
        elif cfg.device == "cuda":                   # GPU-side blocked time from the recorded passes
            def w(ph: str) -> float:        # blocked time of one pass of phase ph, mean over ranks and passes
                passes = 1 + max((x.get("pass", 0) for x in recs if x["phase"] == ph), default=0)
                return sum(x["end_s"] - x["start_s"] for x in recs
                           if x["stream"] == "wait" and x["phase"] == ph) / (len(per_rank) * passes)
            exposed = w("prefill") + (cfg.gen_len - 1) * w("decode")
        else:
            exposed = _median([statistics.fmean(r["samples"][s][i][2] for r in per_rank) for i in range(reps)])
        p_s, d_s = _median(pre), _median(dec)
        rows.append({"schedule": s, "prefill_s": p_s, "decode_s": d_s, "tokens_per_s": tokens / (p_s + d_s),
                     "speedup": None, "exposed_comm_s": exposed,
                     "spread": {"prefill_s": _spread(pre), "decode_s": _spread(dec), "tokens_per_s": _spread(tps),
                                "speedup": _spread([a / b for a, b in zip(tps, base_tps)]),
                                "rank_skew_s": _spread(skew)},
                     "records": recs,
                     "notes": list(notes_of(s, cfg.model_spec(), cfg.model_tp, cfg.steps(), cfg.stack()))})
    std = rows[0]["tokens_per_s"]
    for r in rows:
        r["speedup"] = r["tokens_per_s"] / std
    emulated = {"emulated": {"tp": cfg.emulate_tp, "ranks": cfg.tp}} if cfg.emulate_tp else {}
    return emulated | {"model": model_name, "model_spec": dataclasses.asdict(cfg.model_spec()),
            "tp": cfg.model_tp, "profile": "measured", "batch": cfg.batch,
            "prompt_len": cfg.prompt_len, "gen_len": cfg.gen_len, "dtype": cfg.dtype, "precision": cfg.precision(),
            "stack": cfg.ran()
                     | {"collective_notes": per_rank[0]["env"].get("collective_notes", []),
                        # message bytes -> the kernel rank 0's last all-reduce of that size ran
                        "collective_kernels": per_rank[0]["env"].get("collective_kernels", {})},
            "repeats": cfg.repeats, "warmup": cfg.warmup, "schedules": rows, "memory": memory,
            "env": _env(cfg, per_rank)}


def _rank_env(ctx: hwrank.DistContext) -> dict:
    dev = torch.cuda.get_device_name(ctx.device) if ctx.device.startswith("cuda") else (
        platform.processor() or platform.machine())
    return {"rank": ctx.rank, "hostname": socket.gethostname(), "device": dev,
            "cores": list(ctx.cores) if ctx.cores is not None else None}


def _env(cfg: RunConfig, per_rank: list[dict]) -> dict:
    nccl = None
    if cfg.device == "cuda":
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:   # noqa: BLE001 - builds without NCCL
            nccl = None
    knobs = {k: v for k, v in os.environ.items()
             if k.startswith(("NCCL_", "TORCH_NCCL_", "OMP_NUM_THREADS", hwrank.PIN_ENV))}
    return {"torch": torch.__version__, "nccl": nccl, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "backend": cfg.backend, "device": cfg.device, "world_size": cfg.tp, "env_vars": knobs,
            "hostnames": sorted({r["env"]["hostname"] for r in per_rank}),
            "devices": [r["env"]["device"] for r in per_rank], "cpu_count": os.cpu_count(),
            "rank_cores": [r["env"].get("cores") for r in per_rank],
            # torch._inductor.config as rank 0 compiled with (hw.inductor_flags); None: eager run
            "inductor_flags": per_rank[0]["env"].get("inductor_flags"),
            # hw.probe before and after the timed repeats, median over ranks
            "probe_s": [statistics.median(r["env"]["probe_s"][i] for r in per_rank) for i in (0, 1)]}


def stack_harness_options(values: dict, device: str) -> tuple[dict, list[str]]:
    """A --stack preset's values (sim.stack.presets.Preset.values) as `tpsim bench` options where PyTorch can
    run them, and a note for each that it cannot (or runs differently). Options: attention, kv,
    expand_gqa, prefill_logits, head, embed, compile, decode_graphs, mm_decompose_m1 (RunConfig's names;
    the last sets coordinate_descent_tuning when compiled: hw.inductor_flags), and collective
    "symm-mem" with dtype "bf16" where an engine's all-reduce maps onto it (a GPU, eager passes;
    absent: the backend's own, the device's dtype). A vocab-parallel embed runs as the engines run it: each rank's vocab shard, the masked
    lookup, the embed.allreduce."""
    opts, notes = {}, []
    att = values.get("attention", "math")
    opts["attention"] = "flash" if att != "math" else "math"
    libs = {"flashinfer": "FlashInfer", "fa3": "FlashAttention-3", "xqa": "TensorRT-LLM's XQA",
            "vllm-paged": "vLLM's paged attention"}
    if att in libs:
        lib = libs[att]
        notes.append(f"attention {att}: {lib} is not part of PyTorch; the harness runs "
                     "F.scaled_dot_product_attention (a fused kernel) instead")
    if opts["attention"] == "flash":
        notes.append("attention flash: F.scaled_dot_product_attention picks its backend; on GPU the flash "
                     "backend takes no explicit mask, so with the cache mask the harness passes SDPA runs its "
                     "memory-efficient or cuDNN kernel" if device == "cuda" else
                     "attention flash: F.scaled_dot_product_attention, PyTorch's fused CPU kernel")
    for k, default in (("kv", "static"), ("expand_gqa", True), ("prefill_logits", "all"), ("head", "replicated"),
                       ("embed", "replicated")):
        opts[k] = values.get(k, default)
    cp, cd = values.get("compile_prefill", True), values.get("compile_decode", True)
    opts["compile"] = bool(cp or cd)
    if cp != cd:
        notes.append(f"the harness compiles both passes or neither: compile {'on' if opts['compile'] else 'off'} "
                     f"(the preset compiles {'decode' if cd else 'prefill'} only)")
    opts["mm_decompose_m1"] = bool(values.get("mm_decompose_m1", True))
    if opts["compile"] and opts["kv"] != "static":
        # the compiled pass takes its start position as a device tensor (one graph for every decode
        # step, hw.kernels: filled-KV attention slices the cache by a Python int), so filled KV runs eager
        opts["compile"] = False
        notes.append("compile: the harness compiles a pass over a static KV cache only (one graph for every "
                     "decode position); with filled KV both passes run eager")
    graphs = values.get("decode_graphs", cd)
    opts["decode_graphs"] = bool(graphs) and device == "cuda" and opts["kv"] == "static"
    if graphs and device != "cuda":
        notes.append("decode CUDA graphs need a GPU: off on cpu")
    elif graphs and opts["kv"] != "static":
        notes.append("decode CUDA graphs: the harness's graphs need a static KV cache (hw.runner.DecodeGraph: a "
                     "fixed attended length; the engines capture per padded batch size instead): off with filled KV")
    if values.get("prefill_graphs"):
        notes.append("prefill CUDA graphs: the harness captures decode only")
    scope = values.get("graph_scope", "step")
    if scope != "step" and graphs:
        notes.append(f"graph_scope {scope}: not run; when the harness replays a decode graph it captures the "
                     "whole step through sampling (hw.runner.DecodeGraph)")
    coll = values.get("collective", "auto")
    if coll not in ("auto", "nccl", "gloo"):
        # an engine's own all-reduce (sim/stack/impls.py): PyTorch's nearest is symmetric memory, which the
        # harness runs on GPUs (hw.symm_mem) by the simulator's kernel rule, eager passes only
        what = (f"collective {coll}: the engines' custom all-reduce kernels are not part of PyTorch; "
                if coll != "symm-mem" else "collective symm-mem: ")
        if device != "cuda":
            notes.append(what + "the nearest, symmetric-memory all-reduce (torch.distributed._symmetric_memory), runs "
                                "only on GPUs with peer access: gloo measured here")
        elif opts["compile"]:
            notes.append(what + "the harness runs symmetric-memory all-reduce in eager passes only: NCCL measured "
                                "in the compiled passes")
        else:
            # bf16: vLLM's SymmMemCommunicator takes bf16 only (and serves bf16 checkpoints in bf16);
            # torch's kernels take no fp16, the harness's GPU default (an explicit --dtype wins)
            opts["collective"], opts["dtype"] = "symm-mem", "bf16"
            notes.append(what + "the harness runs the nearest, PyTorch symmetric-memory all-reduce (--collective "
                                "symm-mem, in bf16 as vLLM's communicator: multimem / two-shot by the simulator's "
                                "rule; NCCL above its max size or without NVLS multicast on SM90)")
    if any(v for k, v in (values.get("host") or {}).items() if k != "overlap"):
        notes.append("host lane: the engine's scheduler and hand-off to workers are not reproduced; the harness's "
                     "own loop runs each step (tpsim profiles import-engine-bench fits them from engine runs)")
    if values.get("sampler", REFERENCE_SAMPLER) != REFERENCE_SAMPLER:
        notes.append(f"sampler {values['sampler']}: the engine's sampler kernels (sim/stack/sampler.py) are priced by the "
                     "simulator only; the harness samples with one argmax over the logits (hw/kernels.py _sample)")
    if values.get("layer_host_s"):
        notes.append("layer_host_s: the engine's Python per layer is not reproduced; the harness's own eager "
                     "module code runs, and the measurement holds its Python instead")
    if values.get("engine_kernels") or values.get("attention_prep_kernels"):
        notes.append("engine kernels: the engine's fused CUDA ops (fused_add_rmsnorm, silu_and_mul, its RoPE and "
                     "cache-write kernels) are not part of PyTorch; the harness runs PyTorch's ops for them")
    return opts, notes
