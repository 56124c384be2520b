"""Time the exact compute ops the schedules emit, with the kernels the harness runs.

Shapes. For one (model, TP, batch, prompt, gen, stack) case, the unique `Op.signature`s of the
layer kinds (standard, ladder, spd, parallel, upper-bound; each over all layers) over the prefill step and the
decode steps: one decode step with kv="static" (every step has the same shape), with kv="filled"
the decode positions the simulator's fast path samples (sim.predict.DECODE_SAMPLES), so
lookups hit measured points exactly. Points keep every attr of the op (cost.py matches on all).

Inputs. Each signature is timed on the very tensors it sees in a real pass: a one-layer copy of the
model (every layer has the same shapes) runs each schedule without communication
(sim.schedule.transform.local: collectives replaced by local stand-ins of their shape) through hw.runner,
and the first input of each signature is kept. Timing calls the same kernel on them again.

Timing. CPU: inside whole passes (`time_in_passes`): the model's prefill and decode passes of
every schedule, without communication, run by hw.runner with its per-op timing, so
each op is timed in the context it has in a real pass -- the same predecessor ops, the same cache
and dispatch state. Timed alone and interleaved with unrelated ops instead, a small op (an
RMSNorm of one row) costs 3-6x more on a CPU than it does in a model. The time includes the
Python/dispatch overhead of the harness's call path (intended: a CPU device adds launch overhead
to device time). GPU: CUDA events around `inner` back-to-back calls / inner (`time_samples`). Signatures are interleaved within a
trial; every rank times concurrently (as in a TP run, where ranks share the host); the point is
the median over all ranks' trials.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from tpsim.sim.memory import GIB, estimate
from tpsim.sim.schedule.language import Op
from tpsim.sim.schedule.transform import local

from tpsim.hw.kernels import KERNELS
from tpsim.hw.model import build_rank_model, torch_dtype
from tpsim.hw.runner import Runner

from tpsim.calib.shapes import ShapeCase


@dataclass
class _Sample:
    """One signature's representative op, its pass context and its real input tensors."""

    op: object
    ctx: object
    args: list


def random_tokens(sched, vocab: int, gen: torch.Generator, device: str) -> torch.Tensor:
    st = sched.step
    return torch.randint(0, vocab, (st.batch, st.q_len), generator=gen, device=device)


def capture(case: ShapeCase, device: str, dtype: str, seed: int = 0) -> dict[tuple, _Sample]:
    """signature -> (op, ctx, input tensors) from a pass of each schedule over a 1-layer model."""
    one = case.model.truncated(1)
    max_seq = case.prompt_len + case.gen_len
    rm = build_rank_model(one, case.tp, 0, batch=case.batch, max_seq=max_seq, dtype=dtype,
                          device=device, seed=seed, head=case.stack.head, embed=case.stack.embed)
    runner = Runner(rm)
    want = set(case.signatures())
    got: dict[tuple, _Sample] = {}
    gen = torch.Generator(device=device).manual_seed(seed)

    def keeping(kernel):
        def run(ctx, op, *args):
            if op.signature in want and op.signature not in got:
                got[op.signature] = _Sample(op, ctx, list(args))
            return kernel(ctx, op, *args)
        return run
    runner.kernels = {kind: keeping(k) for kind, k in runner.kernels.items()}
    with torch.no_grad():
        for sched in case.schedules(one):
            if want <= set(got):
                break
            sched = local(sched)
            runner.forward(sched, random_tokens(sched, case.model.vocab, gen, device), sched.step.start_pos)
    missing = want - set(got)
    if missing:
        raise RuntimeError(f"internal: a one-layer pass did not produce ops {sorted(missing)[:3]}")
    return {s: got[s] for s in case.signatures()}


def pass_model(case: ShapeCase, device: str, dtype: str, seed: int = 0, group=None):
    """(model, Runner) for timing inside passes: all layers when the rank's shard is small enough
    (a CPU's caches hold one layer's weights but not eight: timing one layer over and over would
    time cache-resident weights); else the first layer. `group`: the runner's process group."""
    full = estimate(case.model, case.tp, case.batch, case.prompt_len, case.gen_len, case.stack, device)
    model = case.model if full.total_bytes < 2 * GIB else case.model.truncated(1)
    rm = build_rank_model(model, case.tp, 0, batch=case.batch, max_seq=case.prompt_len + case.gen_len, dtype=dtype,
                          device=device, seed=seed, head=case.stack.head, embed=case.stack.embed)
    return model, Runner(rm, group)


def time_in_passes(case: ShapeCase, device: str, dtype: str, *, trials: int, warmup: int = 2, seed: int = 0,
                   barrier=None) -> dict[tuple, list[float]]:
    """Seconds per call of each signature, timed inside repeated passes of every schedule over the
    model (collectives replaced by local stand-ins of the right shape)."""
    model, runner = pass_model(case, device, dtype, seed)
    want = set(case.signatures())
    out: dict[tuple, list[float]] = {sig: [] for sig in want}
    gen = torch.Generator(device=device).manual_seed(seed)
    scheds = [local(s) for s in case.schedules(model)]
    signatures = [{op.name: op.signature for op in s.ops} for s in scheds]   # op names repeat across steps
    runner.timing = True                          # a Record per op: perf_counter around its kernel
    with torch.no_grad():
        for t in range(warmup + trials):
            if barrier:
                barrier()
            for sched, signature in zip(scheds, signatures):
                res = runner.forward(sched, random_tokens(sched, case.model.vocab, gen, device), sched.step.start_pos)
                for r in res.records if t >= warmup else ():
                    if signature[r.op] in out:
                        out[signature[r.op]].append(r.end_s - r.start_s)
    return out


def time_samples(samples: dict[tuple, _Sample], *, device: str, trials: int, warmup: int = 2,
                 inner: int = 10, barrier=None) -> dict[tuple, list[float]]:
    """Seconds per call of each signature's kernel, `trials` each, interleaved."""
    cuda = device.startswith("cuda")
    keys = list(samples)
    out = {k: [] for k in keys}
    with torch.no_grad():
        for k in keys:
            s = samples[k]
            for _ in range(warmup):
                KERNELS[s.op.kind](s.ctx, s.op, *s.args)
        if cuda:
            torch.cuda.synchronize()
        for t in range(trials):
            if barrier:
                barrier()
            order = keys[t % len(keys):] + keys[:t % len(keys)]
            for k in order:
                s = samples[k]
                f = KERNELS[s.op.kind]
                if cuda:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for _ in range(inner):
                        f(s.ctx, s.op, *s.args)
                    e1.record()
                    e1.synchronize()
                    out[k].append(e0.elapsed_time(e1) / 1e3 / inner)
                else:
                    t0 = time.perf_counter()
                    f(s.ctx, s.op, *s.args)
                    out[k].append(time.perf_counter() - t0)
    return out


def points(samples: dict[tuple, _Sample], per_rank: list[dict[tuple, list[float]]]) -> list[dict]:
    """One point per signature, attrs exactly as the op has them: the slowest rank's median.

    Why the slowest: a TP pass moves at the pace of its slowest rank (every collective waits for
    it), as the harness's pass times (max over ranks) and the collective points (max over ranks
    per trial) already say. On a small CPU box one core can be 10% slower than another (it also
    serves interrupts and the launcher), which a pooled median would hide."""
    out = []
    for sig, s in samples.items():
        ts = [t for r in per_rank for t in r[sig]]
        meds = [statistics.median(r[sig]) for r in per_rank if r[sig]]
        t = max(meds) if meds else 0.0
        out.append({"kind": s.op.kind, "attrs": dict(s.op.attrs), "dtype": s.op.dtype, "mode": "eager",
                    "time_s": float(f"{t:.6g}"), "samples": len(ts),
                    "rank_medians_s": [float(f"{m:.6g}") for m in meds],
                    "spread_pct": round((max(ts) - min(ts)) / t * 100, 1) if ts else 0.0})
    return out


# ------------------------------------------------------------------ device constants

def launch_overhead_s(device: str, dtype: str, calls: int = 2000) -> float:
    """Per-op cost of the harness's call path on a trivial op: KERNELS['add'] on 1-element tensors.

    On CPU this is Python + dispatch + the tiny kernel (the floor every measured op pays); on GPU,
    the CPU-side launch rate of back-to-back tiny kernels (no sync inside)."""
    op = Op("add", "add", ("a", "b"), ("c",), (("rows", 1), ("width", 1)), dtype)
    a = torch.ones(1, 1, dtype=torch_dtype(dtype), device=device)
    f = KERNELS["add"]
    per = []
    with torch.no_grad():
        for _ in range(100):
            f(None, op, a, a)
        for _ in range(max(5, calls // 100)):
            t0 = time.perf_counter()
            for _ in range(100):
                f(None, op, a, a)
            per.append((time.perf_counter() - t0) / 100)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return statistics.median(per)


def graph_launch_s(device: str, dtype: str, kernels: int = 200, trials: int = 10) -> float:
    """GPU only: seconds per kernel of a CUDA graph of `kernels` tiny adds, replayed."""
    a = torch.ones(1, dtype=torch_dtype(dtype), device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = a + a
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(kernels):
            b = a + a
    g.replay()                 # untimed: the first replay uploads the graph (calib/collectives.py _capture)
    torch.cuda.synchronize()
    per = []
    for _ in range(trials):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        per.append(e0.elapsed_time(e1) / 1e3 / kernels)
    return statistics.median(per)


def peak_flops(device: str, dtype: str, sizes: tuple[int, ...], trials: int = 5) -> float:
    """Best achieved FLOP/s of square matmuls [n, n] @ [n, n] (the device's practical peak)."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(torch_dtype(dtype))
        b = torch.randn(n, n, device=device).to(torch_dtype(dtype))
        best = max(best, 2.0 * n ** 3 / _best_time(lambda: a @ b, device, trials))
    return best


def mem_bandwidth(device: str, nbytes: int, trials: int = 5) -> float:
    """Best achieved bytes/s of a device-to-device copy (read + write counted)."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2.0 * src.numel() * 4 / _best_time(lambda: dst.copy_(src), device, trials)


def _best_time(f, device: str, trials: int) -> float:
    cuda = device.startswith("cuda")
    f()
    best = float("inf")
    for _ in range(trials):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best
