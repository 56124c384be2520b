"""Simulator speed, fast path vs exact, engine throughput, memory over a long sweep, and peers.

    python bench/sim_speed.py            # everything (about two minutes on 2 cores)
    python bench/sim_speed.py --quick    # skip the 10,000-point memory sweep
    python bench/sim_speed.py --engine-base REV   # only the engines, this checkout's against REV's

Prints one table; every number comes from this one run. `--exact` (the sampled mode) simulates
every rank with the profile's arrival jitter on sampled steps and layers; brute force simulates
every rank, layer and decode step, and its rows time a stated fraction of the work and scale it.
Peers: GenZ (pip install genz-llm) answering the same standard-TP question (prefill + decode
latency of one configuration), and AIConfigurator if it is importable.

`--engine-base REV` times only the engines on a few real steps: the heap engine (sim/engine/heap_engine.py,
what `--exact` runs thousands of times) on every rank with drawn arrival delays, and the SimPy engine on
one rank (as the fast path runs it). This checkout's modules and the same files at git revision REV are
loaded side by side in this process and run interleaved (A B, B A, A B, ...), so both sides see the
same machine load; it prints each side's median CPU time per call and their ratio.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.commands import sweep_grid as sw  # noqa: E402
from tpsim.sim.grid import Point, grid  # noqa: E402
from tpsim.sim.engine import heap_engine, simpy_engine  # noqa: E402
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Simulator, Workload, predict  # noqa: E402
from tpsim.sim.hardware.profile import ArrivalJitter, load_profile  # noqa: E402
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES  # noqa: E402
from tpsim.sim.stack.presets import PRESETS  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402

ALL = list(DEFAULT_SCHEDULES)


def illustrative(profile):
    """The profile with a nonzero per-rank arrival jitter, for timing --exact where it has work to
    do. Illustrative only, never a built-in value: 5 us within a node, 10 us across nodes."""
    return dataclasses.replace(profile, arrival_jitter={
        "node": ArrivalJitter("exponential", 5e-6, "illustrative"),
        "net": ArrivalJitter("exponential", 10e-6, "illustrative")})


def jitter_label(profile) -> str:
    return ", ".join(f"{k} {j.dist} mean {j.mean_s * 1e6:g} us" for k, j in profile.arrival_jitter.items())


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc), not the peak."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def timed(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def sweep_points(n: int) -> list[Point]:
    models = ["llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
              "llama-2-7b", "llama-2-70b", "codellama-34b", "ladder-1b", "ladder-3b"]
    pts = grid(models, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16, 32, 64], ["h100-sxm"], 1024, 512,
                  bw_scales=[0.25, 0.5, 1.0, 2.0])
    return (pts * (n // len(pts) + 1))[:n]


def engine_at(rev: str, path: str):
    """The module at `path` (an engine) as it was at git revision `rev`, loaded as a module of its own
    (its imports resolve to this checkout: the engines' inputs, Interference and the schedule, are shared)."""
    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "-C", str(root), "show", f"{rev}:{path}"],
                         capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"{Path(path).stem}_at_{rev}", loader=None)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)   # (dataclasses look it up)
    exec(compile(src, f"{rev}:{path}", "exec"), mod.__dict__)
    return mod


def engine_cases():
    """(label, schedule, op_time, interference, ranks): real steps the sampled mode runs, every rank."""
    cases = []
    for label, model, tp, prof, stack, spec, phase in (
            ("70B TP8 decode ladder", "llama-3.1-70b", 8, "h100-sxm", None, "ladder", "decode"),
            ("70B TP8 decode spd:0.5, co-scheduled", "llama-3.1-70b", 8, "h100-sxm-coschedule", None, "spd:0.5", "decode"),
            ("8B TP8 decode standard, eager (launch chain)", "llama-3.1-8b", 8, "h100-sxm", "eager", "standard", "decode"),
            ("70B TP8 prefill parallel", "llama-3.1-70b", 8, "h100-sxm", None, "parallel", "prefill")):
        kw = {"stack": make_stack({}, preset=PRESETS[stack].values)} if stack else {}
        w = Workload(get_model(model), tp, load_profile(prof), batch=4, prompt_len=1024, gen_len=512, **kw)
        sim = Simulator(w, record=False)
        step = w.decode_step(1) if phase == "decode" else w.prefill_step()
        sched = w.schedule(spec, step)
        times = {op.name: sim._op_time(op, phase, sched) for op in sched.ops}
        issue = sim._issue_time
        launch = ({op.name: issue(op, phase, sched) for op in sched.ops}
                  if issue is not None and not w.stack.graphs(phase) else None)
        cases.append((label, sched, times, launch, sim.interference, tp))
    return cases


def paired(fns: dict, rounds: int) -> dict[str, float]:
    """Median CPU seconds per call of each of fns (name -> callable), run interleaved A B, B A, ..."""
    t_one = timed(next(iter(fns.values())), 1)
    calls = max(1, int(0.02 / max(t_one, 1e-6)))            # ~20 ms per timing
    ts: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:   # ABBA: neither side always first
            fn = fns[name]
            t0 = time.process_time()
            for _ in range(calls):
                fn()
            ts[name].append((time.process_time() - t0) / calls)
    return {name: statistics.median(v) for name, v in ts.items()}


def engine_ab(rev: str, rounds: int) -> None:
    """This checkout's engines against REV's, interleaved round by round (module doc)."""
    this, this_simpy = heap_engine, simpy_engine
    base, base_simpy = engine_at(rev, "sim/engine/heap_engine.py"), engine_at(rev, "sim/engine/simpy_engine.py")
    print(f"engines: this checkout (A) vs {rev} (B), {rounds} interleaved rounds, median CPU ms per call")
    ratios = []
    cases = engine_cases()
    print("  heap engine (simulate_ranks: every rank, drawn arrival delays)")
    for label, sched, times, launch, inter, ranks in cases:
        issue = (lambda op: launch[op.name]) if launch is not None else None
        fns, outs = {}, {}
        for name, mod in (("A", this), ("B", base)):
            c = mod.compile_schedule(sched, lambda op: times[op.name], inter, issue_s=issue)
            delays = np.random.default_rng(0).exponential(5e-6, (len(c.comm_names), ranks))
            fns[name] = lambda mod=mod, c=c, delays=delays: mod.simulate_ranks(c, ranks, inter, delays)
            outs[name] = fns[name]()
        assert outs["A"] == outs["B"], f"{label}: the two engines disagree: {outs}"
        med = paired(fns, rounds)
        ratios.append(med["A"] / med["B"])
        print(f"    {label:46} A {med['A'] * 1e3:7.3f}  B {med['B'] * 1e3:7.3f}  A/B {ratios[-1]:5.3f}  "
              f"({len(c.time_s)} items, {len(c.comm_names)} collectives, {ranks} ranks)", flush=True)
    print(f"    geometric mean A/B {math.prod(ratios) ** (1 / len(ratios)):.3f}")
    print("  SimPy engine (simulate: one rank, as the fast path runs it)")
    ratios = []
    for label, sched, times, launch, inter, _ in cases:
        issue = (lambda op: launch[op.name]) if launch is not None else None
        fns = {name: lambda mod=mod: mod.simulate(sched, lambda op: times[op.name], 1, inter, record=False,
                                                  issue_s=issue)
               for name, mod in (("A", this_simpy), ("B", base_simpy))}
        a, b = fns["A"](), fns["B"]()
        # the same timeline (the events it takes may differ: one side may schedule fewer for it)
        assert (a.duration_s, a.exposed_comm_s) == (b.duration_s, b.exposed_comm_s), label
        med = paired(fns, rounds)
        ratios.append(med["A"] / med["B"])
        print(f"    {label:46} A {med['A'] * 1e3:7.3f}  B {med['B'] * 1e3:7.3f}  A/B {ratios[-1]:5.3f}  "
              f"({a.events} events, B {b.events})", flush=True)
    print(f"    geometric mean A/B {math.prod(ratios) ** (1 / len(ratios)):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the 10,000-point memory sweep")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--engine-base", metavar="REV", help="only the engines, against git revision REV's")
    ap.add_argument("--rounds", type=int, default=41, help="interleaved rounds of --engine-base")
    args = ap.parse_args()
    if args.engine_base:
        engine_ab(args.engine_base, args.rounds)
        return
    h100 = load_profile("h100-sxm")
    rows = []

    def row(what, fast_s, exact_s, note=""):
        rows.append((what, fast_s, exact_s, note))
        print(f"  {what:44} fast {fast_s * 1e3:9.1f} ms   brute {exact_s * 1e3:10.1f} ms   "
              f"ratio {exact_s / fast_s:7.1f}x  {note}", flush=True)

    print("prediction time (best of 3, wall clock; this box is shared, so see also the CPU seconds)")
    jit = illustrative(h100)
    for label, model, tp, gen_small in (("(a) 70B TP8", "llama-3.1-70b", 8, 33),
                                        ("(b) 405B TP16 (2 nodes)", "llama-3.1-405b", 16, 5)):
        w = Workload(get_model(model), tp, h100, batch=1, prompt_len=1024, gen_len=512)
        wj = Workload(get_model(model), tp, jit, batch=1, prompt_len=1024, gen_len=512)
        fast = timed(lambda: predict(w, ALL, record=False))
        ex0 = timed(lambda: predict(w, ALL, record=False, mode="sampled"))
        cpu0 = time.process_time()
        exj = timed(lambda: predict(wj, ALL, record=False, mode="sampled"))
        cpuj = (time.process_time() - cpu0) / 3
        n = predict(wj, ALL, record=False, mode="sampled")
        samples = max(p.jitter_decode.samples for p in n if p.jitter_decode)
        # brute force: every rank and step; gen 512 -> time a short generation and scale the decode part
        ws = Workload(get_model(model), tp, jit, batch=1, prompt_len=1024, gen_len=gen_small)
        specs = ALL if tp <= 8 else ["standard", "ladder"]
        t_pre = timed(lambda: [Simulator(ws, mode="brute", record=False).step_time(s, ws.prefill_step())
                               for s in specs], 1)
        t_small = timed(lambda: predict(ws, specs, mode="brute", record=False), 1)
        brute = (t_pre + (t_small - t_pre) * 511 / (gen_small - 1)) * len(ALL) / len(specs)
        print(f"  {label}, 5 schedules, gen 512: fast {fast * 1e3:7.1f} ms | --exact, built-in jitter "
              f"{ex0 * 1e3:7.1f} ms | --exact, illustrative jitter {exj * 1e3:7.1f} ms ({cpuj:.2f} CPU s, up to "
              f"{samples} samples/step) | brute force est. {brute:7.1f} s (from gen {gen_small}"
              f"{', 2 schedules' if len(specs) < len(ALL) else ''})", flush=True)
    print(f"  illustrative jitter: {jitter_label(jit)}; built-in profiles carry 0.3 us per rank (derived: their jitter source)")

    print("\n--exact against brute force (small cases, illustrative jitter, gen 33: 32 decode steps)")
    for model, tp, per_node in (("llama-3.2-1b", 2, None), ("toy-1024", 4, 2)):
        w = Workload(get_model(model), tp, jit, prompt_len=64, gen_len=33, gpus_per_node=per_node)
        sampled = predict(w, ALL[:4], record=False, mode="sampled")
        brute = predict(w, ALL[:4], record=False, mode="brute")
        where = f"{w.nodes} node{'s' * (w.nodes > 1)}"
        for s, b in zip(sampled, brute):
            d = s.to_dict()
            # brute force is one draw of 32 steps: its own sd is the step spread * sqrt(32)
            sd = math.hypot(d["decode_ci95_s"] / 1.96, s.jitter_decode.sd_s * math.sqrt(32))
            print(f"  {model} TP{tp} ({where}) {s.schedule:9} decode: --exact {s.decode_s * 1e3:8.3f} "
                  f"+- {d['decode_ci95_s'] * 1e3:.3f} ms, brute {b.decode_s * 1e3:8.3f} ms, "
                  f"diff {(b.decode_s - s.decode_s) / sd:+.2f} sd "
                  f"(jitter adds {s.jitter_decode.delta_s * 1e6:.1f} us/step)")

    print("\nsweep time")
    pts = sweep_points(1000)
    t_fast = timed(lambda: sw.sweep(pts, ("standard", "ladder"), jobs=args.jobs), 1)
    few = pts[:: 100]
    # memory_check off: the grid holds points that do not fit (the sweep reports those), timed alike
    t_few = timed(lambda: [predict(Workload(get_model(p.model), p.tp, h100, p.batch, p.prompt_len, 17,
                                            memory_check=False), ["ladder"],
                                   mode="brute", record=False) for p in few if p.tp in (1, 2, 4, 8, 16)
                           and get_model(p.model).heads % p.tp == 0], 1)
    row(f"(c) 1,000-point sweep, std+ladder, {args.jobs} jobs", t_fast, t_few * 100 * 511 / 16 / args.jobs,
        "brute force est. from 10 points at gen 17")

    print("\nengine throughput")
    sim = Simulator(Workload(get_model("llama-3.1-70b"), 8, h100), exact=True, record=False)
    w70 = Workload(get_model("llama-3.1-70b"), 8, h100, batch=1, prompt_len=1024, gen_len=512)
    sched = w70.schedule("ladder", w70.decode_step(1))
    t0 = time.perf_counter()
    res = sim._simulate(sched, record=False)
    dt = time.perf_counter() - t0
    print(f"  70B TP8 ladder decode step, 8 ranks: {res.events} events in {dt * 1e3:.1f} ms "
          f"= {res.events / dt / 1e3:.0f}k events/s (SimPy, brute force)")
    c = compile_schedule(sched, lambda op: sim._op_time(op, "decode"), sim.interference)
    t_rank = timed(lambda: simulate_ranks(c, 8, sim.interference), 3)
    print(f"  the same step on the rank engine (--exact): {t_rank * 1e3:.1f} ms, x{dt / t_rank:.0f} faster")

    print("\npeers, same question: llama-3.1-70b TP8 H100, batch 1, prompt 1024, gen 512, standard TP")
    t_tpsim = timed(lambda: predict(w70, ["standard"], record=False), 5)
    p = predict(w70, ["standard"], record=False)[0]
    print(f"  tpsim fast path   {t_tpsim * 1e3:8.1f} ms/query   decode {p.decode_s / 511 * 1e3:.2f} ms/token")
    try:
        from GenZ import decode_moddeling, prefill_moddeling   # lazy: optional peer tool, timed only if installed
        system = {"Flops": 989, "Memory_size": 80, "Memory_BW": 3350, "ICN": 450, "real_values": True}

        def genz():
            pre = prefill_moddeling(model="meta-llama/Llama-3.1-70B", batch_size=1, input_tokens=1024,
                                    system_name=system, bits="bf16", tensor_parallel=8)
            dec = decode_moddeling(model="meta-llama/Llama-3.1-70B", batch_size=1, input_tokens=1024,
                                   output_tokens=512, system_name=system, bits="bf16", tensor_parallel=8)
            return pre, dec
        genz()
        t_genz = timed(genz, 5)
        _, dec = genz()
        print(f"  GenZ (genz-llm)   {t_genz * 1e3:8.1f} ms/query   decode {dec['Latency']:.2f} ms/token   "
              f"tpsim/GenZ time ratio {t_tpsim / t_genz:.2f}")
    except ImportError:
        print("  GenZ: not installed (pip install genz-llm)")
    # AIConfigurator: its CLI in its own environment (it pins its own numpy/pandas stack), so both
    # tools are timed the same way, as whole commands: `AICONFIGURATOR=/path/to/aiconfigurator`
    aic = os.environ.get("AICONFIGURATOR") or shutil.which("aiconfigurator")
    if aic:
        q = ["--model-path", "meta-llama/Meta-Llama-3.1-70B", "--system", "h100_sxm", "--backend", "sglang",
             "--estimate-mode", "static", "--isl", "1024", "--osl", "512", "--batch-size", "1", "--tp-size", "8"]
        t_aic = timed(lambda: subprocess.run([aic, "cli", "estimate", *q], capture_output=True, check=True), 3)
        out = subprocess.run([aic, "cli", "estimate", *q], capture_output=True, text=True).stdout
        tpot = next((ln.split(":")[1].strip() for ln in out.splitlines() if "TPOT" in ln), "?")
        ttft = next((ln.split(":")[1].strip() for ln in out.splitlines() if "TTFT" in ln), "?")
        cli = [sys.executable, str(Path(__file__).resolve().parent.parent / "cli.py"), "predict", "--model",
               "llama-3.1-70b", "--tp", "8", "--schedule", "standard", "--json"]
        t_cli = timed(lambda: subprocess.run(cli, capture_output=True, check=True), 3)
        print(f"  AIConfigurator CLI {t_aic * 1e3:7.0f} ms/command   TTFT {ttft}, TPOT {tpot} (sglang stack)   "
              f"tpsim predict CLI {t_cli * 1e3:.0f} ms/command   ratio {t_cli / t_aic:.2f}")
    else:
        print("  AIConfigurator: not found (pip install aiconfigurator in its own venv; set AICONFIGURATOR)")

    if not args.quick:
        print("\nmemory over a 10,000-point sweep (one process, std+ladder)")
        pts = sweep_points(10_000)
        marks = {}
        t0 = time.perf_counter()
        for i in range(0, 10_000, 1000):
            sw.sweep(pts[i:i + 1000], ("standard", "ladder"), jobs=1)
            gc.collect()
            marks[i + 1000] = (_rss_bytes(), len(gc.get_objects()))
        for n in (1000, 2000, 5000, 10000):
            print(f"  after {n:6d} points: RSS {marks[n][0] / 2**20:6.1f} MiB, live Python objects {marks[n][1]:,}")
        print(f"  ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
