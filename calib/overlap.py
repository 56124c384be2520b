"""Interference between a collective and compute running at the same time on one rank.

Two methods, both giving the engine's two factors (compute_slowdown, comm_slowdown):
  CPU (gloo): `measure_in_passes` -- the models' own decode passes with
              their all-reduces blocking or in flight during the next module, factors chosen so
              the engine reproduces those passes (see there for why a CPU needs this);
  GPU, or no model to measure: `measure` below, one gemm against one all-reduce.
This module only measures (torch, on every rank); calib.overlap_summary turns the trials into the
factors (`summarize_passes`, `summarize`) without torch.

The GPU method: three measurements, interleaved per trial after a barrier (docs/sources.md §7, §8):
  compute alone     `reps` calls of one compute op (a gemm of the model's shapes);
  collective alone  one all-reduce;
  both              the all-reduce issued with async_op=True (gloo: its background threads;
                    NCCL: a dedicated comm stream that waits on the current one), then the same
                    compute calls, then the wait.
compute_slowdown = median(compute while the collective runs) / median(compute alone);
comm_slowdown    = the rate the simulator's model needs: while compute runs for c' the collective
                   (b alone) progresses at 1/k, then at full speed, so the wait after the compute
                   lasts r = b - c'/k  ->  k = c' / (b - r). Taken from the wait's return on the
                   compute thread, which is exact, rather than from the end of the collective as
                   gloo's callback reports it (that needs the GIL, so it fires late while compute
                   runs). If the collective ended within the compute, k <= c'/b.
`reps` is chosen so the compute alone lasts about 2x the collective, so the two really run
side by side. CPU: the collective's end is taken from its future's callback (gloo's thread),
or the wait's return if no callback fired; GPU: CUDA events on each stream. Per trial the
collective counts at its slowest rank, the compute at the median rank.

`hidden_fraction` says whether overlap happens at all: 1 = the shorter of the two was hidden
completely (both together took max(a, b)), 0 = they serialized (took a + b).
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Step
from tpsim.sim.schedule.transform import blocking, local, overlapped

from tpsim.hw.model import torch_dtype

from tpsim.calib.collectives import CPU_GAP_S, busy
from tpsim.calib.compute import pass_model, random_tokens
from tpsim.calib.overlap_fit import case_descriptor
from tpsim.calib.overlap_summary import EARLY_S


def measure(make_compute, rows: int, nbytes: int, *, dtype: torch.dtype, device: str, trials: int, pg=None,
            barrier=None) -> dict:
    """This rank's per-trial seconds: {'compute', 'comm', 'both_compute', 'both_comm', 'both_total'}
    plus the 'rows' and 'reps' used.

    `make_compute(rows)` returns a zero-argument callable running one compute op over `rows` rows
    (on the current stream on GPU). The rows are cut (or the op repeated) until the compute alone
    lasts about as long as the collective alone; all ranks agree on both."""
    barrier = barrier or dist.barrier
    cuda = device.startswith("cuda")
    buf = torch.ones(max(1, nbytes // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=device)
    comm_stream = torch.cuda.Stream() if cuda else None
    compute = make_compute(rows)
    for _ in range(2):                                          # warm-up both, lazy init outside timing
        compute()
        dist.all_reduce(buf, group=pg)
    if cuda:
        torch.cuda.synchronize()
    comm = statistics.median(_comm(buf, pg, cuda, comm_stream, barrier) for _ in range(5))
    one = statistics.median(_compute(compute, 1, cuda) for _ in range(3))
    if one > comm and rows > 1:
        rows = max(1, int(rows * comm / one))
    rows = int(_agree(rows, dist.ReduceOp.MIN, pg, device))
    compute = make_compute(rows)
    compute()
    one = statistics.median(_compute(compute, 1, cuda) for _ in range(5))
    # compute lasts ~2x the collective: long enough that a collective that progresses at all
    # under compute finishes within it, and that the compute slowdown is not lost in noise
    reps = int(_agree(max(1, round(2 * comm / max(one, 1e-9))), dist.ReduceOp.MAX, pg, device))
    out = {"compute": [], "comm": [], "both_compute": [], "both_comm": [], "both_total": [], "both_wait": [],
           "reps": reps, "rows": rows}
    for _ in range(trials):
        barrier()
        out["compute"].append(_compute(compute, reps, cuda))
        out["comm"].append(_comm(buf, pg, cuda, comm_stream, barrier))
        c, m, tot = _both(compute, reps, buf, pg, cuda, comm_stream, barrier)
        out["both_compute"].append(c)
        out["both_comm"].append(m)
        out["both_total"].append(tot)
        out["both_wait"].append(max(0.0, tot - c))      # blocked after the compute, for the collective
    return out


def _warm_gap() -> None:
    """CPU: compute for a moment after the barrier, as a model does before it issues a collective.

    Right after a barrier (itself a collective) the collective's threads are awake and finish the
    next one at once; after compute they sleep, and on a host whose cores the ranks' compute fills
    they wait for a core. Collectives in a model are issued after compute, so measure them so."""
    busy(CPU_GAP_S, _GAP_A, _GAP_W)


_GAP_A, _GAP_W = torch.randn(4, 256), torch.randn(256, 256)


def _agree(v: float, op, pg, device: str) -> float:
    t = torch.tensor([float(v)], dtype=torch.float32, device=device)
    dist.all_reduce(t, op=op, group=pg)
    return t.item()


def _compute(compute, reps: int, cuda: bool) -> float:
    if cuda:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            compute()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3
    t0 = time.perf_counter()
    for _ in range(reps):
        compute()
    return time.perf_counter() - t0


def _comm(buf, pg, cuda: bool, stream, barrier) -> float:
    barrier()
    if cuda:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(stream)
            dist.all_reduce(buf, group=pg, async_op=True).wait()
            e1.record(stream)
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3
    _warm_gap()
    t0 = time.perf_counter()
    dist.all_reduce(buf, group=pg, async_op=True).wait()
    return time.perf_counter() - t0


def _both(compute, reps: int, buf, pg, cuda: bool, stream, barrier) -> tuple[float, float, float]:
    """(compute s, collective s, total s) with the collective in flight while compute runs."""
    barrier()
    if cuda:
        cur = torch.cuda.current_stream()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        stream.wait_stream(cur)
        ev[0].record(cur)
        with torch.cuda.stream(stream):
            ev[2].record(stream)
            work = dist.all_reduce(buf, group=pg, async_op=True)
            work.wait()                          # comm stream waits on the work: the marker below ends it
            ev[3].record(stream)
        for _ in range(reps):
            compute()
        ev[1].record(cur)
        cur.wait_stream(stream)
        torch.cuda.synchronize()
        total = max(ev[0].elapsed_time(ev[1]), ev[0].elapsed_time(ev[3]))
        return ev[0].elapsed_time(ev[1]) / 1e3, ev[2].elapsed_time(ev[3]) / 1e3, total / 1e3
    done: list[float] = []
    _warm_gap()
    t0 = time.perf_counter()
    work = dist.all_reduce(buf, group=pg, async_op=True)
    try:
        work.get_future().then(lambda _f: done.append(time.perf_counter()))
    except (RuntimeError, AttributeError):
        pass
    for _ in range(reps):
        compute()
    t_c = time.perf_counter()
    work.wait()
    t_w = time.perf_counter()
    end = done[0] if done else t_w
    # total: until the compute thread could go on (the wait returned); the callback time `end`
    # is reported too, but it is late whenever it had to wait for the GIL
    return t_c - t0, end - t0, t_w - t0


# ------------------------------------------------------------------ CPU: inside the model's own passes

def measure_in_passes(case, device: str, dtype: str, *, trials: int, warmup: int = 2, seed: int = 0,
                      pg=None, barrier=None) -> dict:
    """This rank's per-trial seconds of the case's standard decode pass run three ways, interleaved
    (the sim.schedule.transform patterns of that schedule, run by hw.runner as any schedule is):

      alone        `local`: collectives replaced by local stand-ins (no communication);
      blocking     `blocking`: each all-reduce issued and awaited at once;
      overlapped   `overlapped`: each all-reduce issued where it stands and awaited after the next
                   one is issued, so it is in flight while the next module's compute runs (the last
                   one is awaited at the end of the pass). Issue before wait is the order a
                   schedule's ops give the harness.

    On a CPU whose cores the ranks' compute fills, how a collective and compute share the cores
    depends on the op mix between collectives and on the steady state (threads that just finished
    a collective, a peer still finishing one). Measured on this 2-core VM: a 1.1 ms all-reduce
    issued once after a barrier, against 4.6 ms of one gemm repeated, had none of its work done
    when the gemm ended; in flight during the model's own modules, about 40% of it is done. So
    the interference is measured here, on the model's own modules and all-reduce size. The
    all-reduce's result is only awaited, never read (the pass goes on with a stand-in), so all
    three patterns compute the same values."""
    model, runner = pass_model(case, device, dtype, seed, group=pg or dist.group.WORLD)
    st = case.stack
    sched = build("standard", model, case.tp, Step.decode(case.batch, case.prompt_len, case.gen_len, 1, st), st)
    ars = [op for op in sched.ops if op.kind == "all_reduce"]
    if not ars:
        raise ValueError(f"{case.key}: the standard decode pass has no all-reduce to overlap")
    patterns = {"alone": local(sched), "blocking": blocking(sched), "overlapped": overlapped(sched)}
    gen = torch.Generator(device=device).manual_seed(seed)
    tokens = random_tokens(sched, case.model.vocab, gen, device)
    clock = time.perf_counter
    out = {k: [] for k in ("alone", "first", "blocking", "overlapped", "overlapped_wait", "early")}
    with torch.no_grad():
        for t in range(warmup + trials):
            row = {}
            for mode, pattern in patterns.items():
                (barrier or dist.barrier)()
                t0 = clock()
                res = runner.forward(pattern, tokens, sched.step.start_pos)
                row[mode] = clock() - t0
                if mode == "alone":
                    row["first"] = res.first_sync_s
                if mode == "overlapped":
                    row["overlapped_wait"] = res.wait_s
                    # waits that found their all-reduce done (the last wait has no module before it)
                    row["early"] = sum(w < EARLY_S for w in res.waits_s[:-1])
            if t >= warmup:
                for k, v in row.items():
                    out[k].append(v)
    nbytes = ars[0].attr("rows") * ars[0].attr("width") * torch.tensor([], dtype=torch_dtype(dtype)).element_size()
    out.update(n=len(ars), layers=model.layers, case=case_descriptor(case, model),
               what=(f"{case.model.name} TP{case.tp} batch {case.batch} standard decode passes ({model.layers} "
                     f"layers, {len(ars)} all-reduces of {nbytes} B): alone, blocking, and each all-reduce in "
                     f"flight during the next module (async_op=True)"))
    return out
