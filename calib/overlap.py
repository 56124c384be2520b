"""Interference between a collective and compute running at the same time on one rank.

Two methods, both giving the engine's two factors (compute_slowdown, comm_slowdown):
  CPU (gloo): `measure_in_passes` / `summarize_passes` -- the models' own decode passes with
              their all-reduces blocking or in flight during the next module, factors chosen so
              the engine reproduces those passes (see there for why a CPU needs this);
  GPU, or no model to measure: `measure` / `summarize` below, one gemm against one all-reduce.

The GPU method: three measurements, interleaved per trial after a barrier (FACTS.md §7, §8):
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


FACTOR_CAP = 50.0      # a slowdown factor at or above this: no measurable progress, written as the cap


def profile_factor(raw: float) -> float:
    """A measured slowdown factor as a profile writes it: within [1, FACTOR_CAP], 4 decimals."""
    return round(min(FACTOR_CAP, max(1.0, raw)), 4)


def profile_factors(summary: dict) -> dict[str, float]:
    """{compute_slowdown, comm_slowdown} as written into the profile from an overlap summary."""
    return {k: profile_factor(summary.get(k + "_raw", summary[k])) for k in ("compute_slowdown", "comm_slowdown")}


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
    from calib.collectives import CPU_GAP_S, _busy
    _busy(CPU_GAP_S, _GAP_A, _GAP_W)


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


def _comm_rate_factor(per_rank: list[dict], comm_alone: float) -> float:
    """k such that the collective progresses at 1/k of its speed while compute runs.

    Per trial and rank: during the compute (c') the collective did b - r of its b seconds of
    work, r being the wait left after the compute: a progress rate of (b - r) / c', at least
    b / c' when it ended within the compute. On an oversubscribed CPU this is bimodal (the
    collective's thread got a core, or it did not), so the *mean* rate is what a sum of many
    overlapped collectives sees: k = 1 / mean(rate)."""
    rates = []
    for r in per_rank:
        for c, w in zip(r["both_compute"], r.get("both_wait", [])):
            done = min(max(comm_alone - w, 0.0), comm_alone)
            rates.append(min(1.0, done / c) if c > 0 else 1.0)
    if not rates:
        return 1.0
    mean = sum(rates) / len(rates)
    return FACTOR_CAP if mean <= 0.02 else max(1.0, 1.0 / mean)


def summarize(per_rank: list[dict]) -> dict:
    """Slowdowns and overlap from every rank's trials (collective: slowest rank per trial)."""
    n = min(len(r["comm"]) for r in per_rank)

    def over(key, agg):
        return [agg(r[key][i] for r in per_rank) for i in range(n)]
    med = statistics.median
    compute_alone, compute_both = med(over("compute", med)), med(over("both_compute", med))
    comm_alone, comm_both = med(over("comm", max)), med(over("both_comm", max))
    total = med(over("both_total", max))
    serial, ideal = compute_alone + comm_alone, max(compute_alone, comm_alone)
    comm_k = _comm_rate_factor(per_rank, comm_alone)
    return {
        "compute_slowdown": compute_both / compute_alone,
        "comm_slowdown": max(comm_k, 0.0),
        "comm_slowdown_direct": comm_both / comm_alone,
        "compute_alone_us": compute_alone * 1e6, "compute_overlapped_us": compute_both * 1e6,
        "comm_alone_us": comm_alone * 1e6, "comm_overlapped_us": comm_both * 1e6,
        "both_total_us": total * 1e6, "serial_us": serial * 1e6,
        "hidden_fraction": min(1.0, max(0.0, (serial - total) / min(compute_alone, comm_alone))),
        "overlaps": total < serial - 0.1 * min(compute_alone, comm_alone),
        "trials": n, "reps": per_rank[0]["reps"], "rows": per_rank[0]["rows"], "ideal_us": ideal * 1e6,
    }


# ------------------------------------------------------------------ CPU: inside the model's own passes

EARLY_S = 20e-6        # a wait this short: the all-reduce had finished within the module it overlapped


def measure_in_passes(case, device: str, dtype: str, *, trials: int, warmup: int = 2, seed: int = 0,
                      pg=None, barrier=None) -> dict:
    """This rank's per-trial seconds of the case's standard decode pass run three ways, interleaved:

      alone        collectives replaced by local stand-ins (no communication);
      blocking     a blocking all-reduce of the collective's size at each all-reduce;
      overlapped   at each all-reduce: issue it with async_op=True, then wait for the previous
                   one, so each is in flight while the next module's compute runs (the last one
                   is waited for at the end of the pass). Issue before wait is the order a
                   schedule's ops give the harness (a collective is issued where its op stands,
                   awaited where a reader needs it).

    On a CPU whose cores the ranks' compute fills, how a collective and compute share the cores
    depends on the op mix between collectives and on the steady state (threads that just finished
    a collective, a peer still finishing one). Measured on this 2-core VM: a 1.1 ms all-reduce
    issued once after a barrier, against 4.6 ms of one gemm repeated, had none of its work done
    when the gemm ended; in flight during the model's own modules, about 40% of it is done. So
    the interference is measured here, on the model's own modules and all-reduce size. The
    all-reduce works on its own buffer of the collective's shape ([batch, hidden]); the pass's
    values are unchanged, so all three patterns compute the same thing."""
    import torch.distributed as dist
    from calib.compute import pass_model, random_tokens, walk_pass
    from sim.schedule import build
    from sim.stack import Step
    model, runner = pass_model(case, device, dtype, seed)
    st = case.stack
    sched = build("standard", model, case.tp, Step.decode(case.batch, case.prompt_len, case.gen_len, 1, st), st)
    ars = [op for op in sched.ops if op.kind == "all_reduce"]
    if not ars:
        raise ValueError(f"{case.key}: the standard decode pass has no all-reduce to overlap")
    gen = torch.Generator(device=device).manual_seed(seed)
    tokens = random_tokens(sched, case.model.vocab, gen, device)
    bufs: dict[str, torch.Tensor] = {}
    clock = time.perf_counter
    state = {"mode": "alone", "pending": None, "wait": 0.0, "first": None, "t0": 0.0, "early": 0}

    def step(op, ctx, args, run):
        if op.kind != "all_reduce":
            return run()
        buf = bufs.get(op.name)
        if buf is None:
            buf = bufs[op.name] = torch.zeros_like(args[0])      # zeros: summing stays 0, never overflows
        mode = state["mode"]
        if mode == "alone":
            if state["first"] is None:
                state["first"] = clock() - state["t0"]
        elif mode == "blocking":
            dist.all_reduce(buf, group=pg)
        else:
            prev = state["pending"]
            state["pending"] = dist.all_reduce(buf, group=pg, async_op=True)
            if prev is not None:
                w0 = clock()
                prev.wait()
                dw = clock() - w0
                state["wait"] += dw
                state["early"] += dw < EARLY_S
        return run()

    def one(mode: str) -> float:
        state.update(mode=mode, pending=None, wait=0.0, first=None, early=0)
        state["t0"] = t0 = clock()
        walk_pass(runner, sched, tokens, step)
        if state["pending"] is not None:
            w0 = clock()
            state["pending"].wait()
            state["wait"] += clock() - w0
        return clock() - t0

    out = {k: [] for k in ("alone", "first", "blocking", "overlapped", "overlapped_wait", "early")}
    with torch.no_grad():
        for t in range(warmup + trials):
            row = {}
            for mode in ("alone", "blocking", "overlapped"):
                (barrier or dist.barrier)()
                row[mode] = one(mode)
                if mode == "alone":
                    row["first"] = state["first"]
                if mode == "overlapped":
                    row["overlapped_wait"] = state["wait"]
                    row["early"] = state["early"]
            if t >= warmup:
                for k, v in row.items():
                    out[k].append(v)
    first = bufs[ars[0].name]
    nbytes = first.numel() * first.element_size()
    from calib.overlap_fit import case_descriptor
    out.update(n=len(ars), layers=model.layers, case=case_descriptor(case, model),
               what=(f"{case.model.name} TP{case.tp} batch {case.batch} standard decode passes ({model.layers} "
                     f"layers, {len(ars)} all-reduces of {nbytes} B): alone, blocking, and each all-reduce in "
                     f"flight during the next module (async_op=True)"))
    return out


def summarize_passes(per_rank: list[list[dict]]) -> dict:
    """Slowdowns that make the simulator reproduce the measured passes (`measure_in_passes`),
    pooled over the cases measured (per_rank[r][j]: rank r's trials of case j).

    Per case and trial (the mean over ranks), with n all-reduces per pass: C = the pass alone,
    c0 = its compute before the first all-reduce, Tb = blocking, To and Wo = overlapped and its
    waits. The simulator charges a blocking pass C + n*b, so one all-reduce costs b = (Tb - C) / n
    in this context. In the overlapped pass the compute after the first all-reduce (A = C - c0
    alone) took S = To - Wo - c0 with all-reduces in flight: compute_slowdown = S / A. The
    all-reduces got P = n*b - Wo = Tb - C - Wo of their work done during S: comm_slowdown = S / P.
    With both, the simulator's overlapped pass is c0 + S + Wo = To exactly (for one case; pooled,
    the factors are sum(S) / sum(A) and sum(S) / sum(P), weighting each case by its time) --
    provided every all-reduce outlasts the module it overlaps, as it does on a CPU whose cores the
    compute fills. One that finishes early slows only part of the module, which this fit cannot
    see; `done_early` (the share of waits under EARLY_S) says how often that happened.
    Each term is the median over trials of paired (interleaved) differences, which cancels the
    machine's drift between trials."""
    cases = [_case_terms([r[j] for r in per_rank]) for j in range(len(per_rank[0]))]
    total = {k: sum(c[k] for c in cases) for k in ("A", "S", "P")}
    compute_k = total["S"] / total["A"] if total["A"] > 0 else 1.0
    comm_k = total["S"] / total["P"] if total["P"] > 0 else FACTOR_CAP
    return {
        "method": "passes",
        "compute_slowdown": max(1.0, compute_k), "comm_slowdown": min(FACTOR_CAP, max(1.0, comm_k)),
        "compute_slowdown_raw": compute_k, "comm_slowdown_raw": comm_k,
        "overlaps": total["P"] > 0, "trials": min(c["trials"] for c in cases),
        "done_early": max(c["done_early"] for c in cases), "cases": cases,
    }


def _case_terms(per_rank: list[dict]) -> dict:
    """One case's paired medians (seconds) and its own factors, as `summarize_passes` explains."""
    n_trials = min(len(r["alone"]) for r in per_rank)
    n = per_rank[0]["n"]
    keys = ("alone", "first", "blocking", "overlapped", "overlapped_wait")
    rows = [{k: sum(r[k][i] for r in per_rank) / len(per_rank) for k in keys} for i in range(n_trials)]
    med = statistics.median
    a = med(r["alone"] - r["first"] for r in rows)
    s = med(r["overlapped"] - r["overlapped_wait"] - r["first"] for r in rows)
    p = med(r["blocking"] - r["alone"] - r["overlapped_wait"] for r in rows)
    return {
        "what": per_rank[0].get("what", ""), **({"case": per_rank[0]["case"]} if "case" in per_rank[0] else {}),
        "A": a, "S": s, "P": p, "trials": n_trials, "all_reduces": n,
        "compute_slowdown": s / a if a > 0 else 1.0, "comm_slowdown": s / p if p > 0 else None,     # None: no progress at all
        "all_reduce_in_context_us": med((r["blocking"] - r["alone"]) / n for r in rows) * 1e6,
        **{f"{k}_us": med(r[k] for r in rows) * 1e6 for k in keys},
        "blocking_over_overlapped": med(r["blocking"] / r["overlapped"] for r in rows),
        # waits that found their all-reduce done (the first all-reduce has no wait before it)
        "done_early": (sum(sum(r.get("early", [0] * n_trials)[:n_trials]) for r in per_rank)
                       / (len(per_rank) * n_trials * max(1, n - 1))),
        # the raw points behind the medians (s, mean over ranks, one entry per trial)
        "per_trial_s": {k: [round(r[k], 9) for r in rows] for k in keys},
    }


def redraw_trials(case: dict, rng) -> dict[str, list[float]]:
    """One bootstrap draw of an in-pass case's kept trials (`per_trial_s`): as many trials as it
    has, with replacement, each trial's values kept together (they are paired)."""
    rows = case["per_trial_s"]
    m = len(rows["alone"])
    idx = [rng.randrange(m) for _ in range(m)]
    return {k: [v[i] for i in idx] for k, v in rows.items()}


def factor_samples(summary: dict, n: int = 200, seed: int = 0) -> list[tuple[float, float]]:
    """Bootstrap (compute_slowdown, comm_slowdown) pairs from an in-pass summary's kept trials:
    each sample redraws every case's trials with replacement and pools them as `summarize_passes`
    does. [] when the summary has no trials to draw from (a GPU or imported profile)."""
    import random
    cases = summary.get("cases") or []
    if summary.get("method") != "passes" or not cases or not all("per_trial_s" in c for c in cases):
        return []
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        drawn = [redraw_trials(c, rng) | {"n": c["all_reduces"]} for c in cases]
        s = summarize_passes([drawn])
        out.append((s["compute_slowdown"], s["comm_slowdown"]))
    return out
