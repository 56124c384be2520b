"""Per-op breakdown of one prefill pass and one decode step, priced by sim's own cost model.

    python bench/breakdown.py [--profile h100-sxm] [--model llama-3.1-70b] [--tp 8]
                              [--batch 1 --batch 64] [--schedule standard] [--json]
                              [--stack FIELD=VALUE ...]

For each (phase, batch): the time of every op of one rank's forward pass from
sim.price.cost.CostModel (compute) and sim.predict.Simulator.comm_s (collectives), summed per IR op
kind over the whole pass and listed per named op of one layer (layer 0, whose ops every layer
repeats), each with its share of the summed op time; plus the simulated step time
(Simulator.step_time: what `tpsim predict` uses, with overlap). For a compiled decode step, each
layer op's kernels from sim.price.fusion's table (on a GPU profile the Triton-path table,
sim/compiled_kernels_gpu.json) with their DRAM bytes, L2 re-read bytes and time. Torch-free.

The `sim` package is imported from the current directory when it has one (so
`cd /some/checkout && python /path/to/bench/breakdown.py` prices with that checkout's code),
else from this script's repository; the header names which.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

_here = Path.cwd() if (Path.cwd() / "sim" / "price" / "cost.py").is_file() else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_here))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load(str(_here))

from tpsim import sim  # noqa: E402
from tpsim.sim.price import decode_price, fusion  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.predict import Simulator, Workload  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.stack.spec import Stack, make_stack  # noqa: E402


def _stack(prof, overrides: list[str]) -> Stack:
    """The profile's stack_defaults (as `tpsim predict` uses them), then FIELD=VALUE overrides."""
    fields = {f.name: f for f in dataclasses.fields(Stack)}
    kw = dict(prof.stack_defaults)
    for item in overrides:
        key, sep, val = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--stack {item!r}: use FIELD=VALUE with FIELD one of {', '.join(fields)}")
        default = fields[key].default
        if isinstance(default, bool):
            if val.lower() not in ("true", "false", "1", "0", "on", "off"):
                raise ValueError(f"--stack {item!r}: {key} takes true/false")
            kw[key] = val.lower() in ("true", "1", "on")
        elif isinstance(default, int):
            kw[key] = int(val)
        else:
            kw[key] = val
    return make_stack(kw)      # the one assembly path: decode graphs follow compile_decode unless set


def _shape(op) -> str:
    a = dict(op.attrs)
    if op.kind == "gemm":
        return f"{a['m']}x{a['n']}x{a['k']}"
    if op.kind == "attention":
        return f"b{a['batch']} q{a['q_len']} kv{a['kv_len']} h{a['heads']}/{a['kv_heads']} {a['impl']}"
    if "rows" in a and "width" in a:
        return f"{a['rows']}x{a['width']}"
    return ""


def _kernels(simr, sched, op, phase: str) -> list[dict]:
    """The compiled kernels charged to `op` (sim.price.fusion's table), each with its DRAM bytes, L2
    bytes (re-reads, sim/price/l2_traffic.py) and time; [] for an op priced without the table."""
    if op.is_comm or not simr.cost.stack.compiled(phase):
        return []
    hit = fusion.lookup(sched, op, simr.cost.profile.device)
    if hit is None:
        return []
    terms = simr.cost.kernel_terms(op, fusion.kernels(hit), sched, simr.cost.stack.graphs(phase))
    # the Kernel object itself stays out: the rows are what --json prints
    return [{k: v for k, v in t.items() if k != "kernel"} | {"table": f"{hit[0]}:{hit[1]}", "us": t["s"] * 1e6}
            for t in terms]


def breakdown(w: Workload, spec: str, phase: str) -> dict:
    """One pass of `spec` in `phase` (decode: step 1) priced op by op."""
    simr = Simulator(w, record=False)
    step = w.prefill_step() if phase == "prefill" else w.decode_step(1)
    sched = w.schedule(spec, step)

    def op_s(op):
        # a collective: its price plus the expected wait for its last rank (the fast path's, sim/engine/arrival.py)
        if op.is_comm:
            return simr.comm_s(op, phase) + simr.arrival_wait_s(op)
        return simr.cost.compute_s(op, phase, sched)

    by_kind: dict = defaultdict(lambda: {"count": 0, "us": 0.0})
    compute_us = comm_us = 0.0
    for op in sched.ops:
        us = op_s(op) * 1e6
        by_kind[op.kind]["count"] += 1
        by_kind[op.kind]["us"] += us
        if op.is_comm:
            comm_us += us
        else:
            compute_us += us
    total = compute_us + comm_us
    layer = [{"name": op.name.removeprefix("L0."), "kind": op.kind, "shape": _shape(op), "us": op_s(op) * 1e6,
              "kernels": _kernels(simr, sched, op, phase)}
             for op in sched.layer_ops(0)]
    layer_total = sum(r["us"] for r in layer)
    for r in layer:
        r["share"] = r["us"] / layer_total if layer_total else 0.0
    kinds = {k: {"count": v["count"], "us": v["us"], "share": v["us"] / total if total else 0.0}
             for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]["us"])}
    step_s, exposed_s = simr.step_time(spec, step)
    return {"phase": phase, "batch": w.batch, "tokens": step.tokens, "kv_len": step.kv_len,
            "graphs": w.stack.graphs(phase), "sum_compute_us": compute_us, "sum_comm_us": comm_us,
            "sum_us": total, "step_us": step_s * 1e6, "exposed_comm_us": exposed_s * 1e6,
            "by_kind": kinds, "layer_ops": layer, "layer_us": layer_total,
            "decode_attention": decode_attention_terms(simr, sched, phase),
            "coschedule": coschedule_terms(simr, sched)}


def decode_attention_terms(simr: Simulator, sched, phase: str) -> dict | None:
    """Layer 0's decode attention kernel (sim/price/decode_grid.py): its grid and split as the stack's
    kernel rule picks them, and the priced limits (bandwidth-bound, one CTA's share at the per-CTA rate,
    the combine), µs; None in prefill or without a grid (math SDPA, a profile without
    compute.decode_attention: `lines` says which)."""
    op = next((op for op in sched.layer_ops(0) if op.kind == "attention"), None)
    if op is None or phase != "decode":
        return None
    graphs = simr.cost.stack.graphs(phase, op.name)
    out = {"lines": decode_price.describe(op, simr.cost, graphs)}
    got = simr.cost.decode_attention(op, graphs)
    if got is not None:
        grid, t = got
        out |= {"grid": {k: v for k, v in dataclasses.asdict(grid).items()},
                "bandwidth_us": t.bandwidth_s * 1e6, "stream_us": t.stream_s * 1e6, "combine_us": t.combine_s * 1e6,
                "us": t.s * 1e6, "bound": t.bound}
    return out


def coschedule_terms(simr: Simulator, sched) -> dict | None:
    """The per-kernel co-scheduling terms of one full pass (sim/price/coschedule.py), None where the profile
    keeps flat interference factors: per collective of layer 0 its NCCL CTAs, HBM demand and the start
    delay it waited for SMs (summed over the pass, per role), and every (compute op, collective) pair
    that ran together in layer 0 with its slowdown factors."""
    cs = simr.interference.coschedule
    if cs is None:
        return None
    simr._simulate(sched, record=False)
    bound = cs.last
    delay: dict = defaultdict(float)
    waits: dict = defaultdict(int)
    for comm, (d, n) in bound.delays.items():
        role = comm.split(".", 1)[1] if comm[:1] == "L" and "." in comm else comm
        delay[role] += d * 1e6
        waits[role] += n
    colls = []
    for op in sched.layer_ops(0):
        if op.is_comm:
            c = bound.comm(op.name)
            role = op.name.removeprefix("L0.")
            colls.append({"name": role, "ctas": c.ctas, "hbm_gbps": c.hbm_gbps,
                          "delay_us_per_pass": delay.get(role, 0.0), "waits_per_pass": waits.get(role, 0)})
    pairs = [{"compute": k.removeprefix("L0."), "collective": m.removeprefix("L0."), "compute_factor": f[0],
              "comm_factor": f[1]} for (k, m), f in bound._f.items() if k.startswith("L0.") and m.startswith("L0.")]
    return {"sms": cs.gpu.sms, "high_priority": cs.gpu.high_priority, "collectives": colls, "pairs": pairs}


def run(args) -> dict:
    prof = load_profile(args.profile)
    stack = _stack(prof, args.stack)
    model = get_model(args.model)
    cases = []
    for phase in ("prefill", "decode"):
        for b in args.batch:
            # pricing only: a breakdown of a shape that would not fit is still a breakdown
            w = Workload(model, args.tp, prof, b, args.prompt, args.gen, stack, memory_check=False)
            cases.append(breakdown(w, args.schedule, phase))
    return {"sim": str(Path(sim.__file__).resolve().parent), "profile": prof.name, "model": model.name,
            "tp": args.tp, "schedule": args.schedule, "prompt_len": args.prompt, "gen_len": args.gen,
            "stack": dataclasses.asdict(stack), "cases": cases}


def _fmt_us(us: float) -> str:
    return f"{us:,.1f}" if us < 1e4 else f"{us:,.0f}"


def show(out: dict) -> None:
    console = Console(width=max(120, Console().width))
    cases = out["cases"]
    heads = [f"{c['phase']} b{c['batch']}" for c in cases]
    console.print(f"[bold]{out['model']} TP{out['tp']} on {out['profile']}[/], schedule {out['schedule']}, "
                  f"prompt {out['prompt_len']}, gen {out['gen_len']}, {out['stack']['dtype']}; "
                  f"sim from {out['sim']}")
    st = ", ".join(f"{k}={v}" for k, v in out["stack"].items())
    console.print(f"stack: {st}", style="dim")

    t = Table(title="whole pass, per op kind: µs (share of summed op time)", title_justify="left")
    t.add_column("kind")
    t.add_column("ops/pass", justify="right")
    for h in heads:
        t.add_column(h, justify="right")
    kinds = list(dict.fromkeys(k for c in cases for k in c["by_kind"]))
    for k in kinds:
        counts = {c["by_kind"].get(k, {}).get("count", 0) for c in cases}
        t.add_row(k, "/".join(map(str, sorted(counts))),
                  *[(f"{_fmt_us(c['by_kind'][k]['us'])} ({c['by_kind'][k]['share']:.1%})"
                     if k in c["by_kind"] else "-") for c in cases])
    t.add_section()
    t.add_row("sum of ops", "", *[_fmt_us(c["sum_us"]) for c in cases])
    t.add_row("  compute", "", *[_fmt_us(c["sum_compute_us"]) for c in cases])
    t.add_row("  collectives", "", *[_fmt_us(c["sum_comm_us"]) for c in cases])
    t.add_row("simulated step", "", *[_fmt_us(c["step_us"]) for c in cases])
    t.add_row("  exposed comm", "", *[_fmt_us(c["exposed_comm_us"]) for c in cases])
    console.print(t)

    t = Table(title="one layer (L0), per named op: µs (share of the layer's summed op time)", title_justify="left")
    t.add_column("op")
    t.add_column("kind")
    for h in heads:
        t.add_column(h, justify="right")
    names = list(dict.fromkeys((r["name"], r["kind"]) for c in cases for r in c["layer_ops"]))
    for name, kind in names:
        cells = []
        for c in cases:
            r = next((r for r in c["layer_ops"] if r["name"] == name), None)
            cells.append(f"{_fmt_us(r['us'])} ({r['share']:.1%})" if r else "-")
        t.add_row(name, kind, *cells)
    t.add_section()
    t.add_row("layer", "", *[_fmt_us(c["layer_us"]) for c in cases])
    console.print(t)
    for h, c in zip(heads, cases):
        console.print(f"{h} shapes: " + ", ".join(f"{r['name']} {r['shape']}" for r in c["layer_ops"]
                                                  if r["kind"] in ("gemm", "attention")), style="dim")
    console.print("gemm shapes are m x n x k; sum of ops: serial sum; simulated step: Simulator.step_time "
                  "(with overlap, as `tpsim predict` prices it)", style="dim")
    for h, c in zip(heads, cases):
        for line in (c.get("decode_attention") or {}).get("lines", []):
            console.print(f"{h} {line}", style="dim", highlight=False)
    for h, c in zip(heads, cases):
        rows = [(r["name"], k) for r in c["layer_ops"] for k in r.get("kernels", [])]
        if c["phase"] != "decode" or not rows:
            continue
        t = Table(title=f"{h}: the kernels of one layer (table {rows[0][1]['table']}): DRAM and L2 bytes, µs",
                  title_justify="left")
        for col in ("op", "kernel", "kind", "DRAM MB", "L2 MB", "µs"):
            t.add_column(col, justify="left" if col in ("op", "kernel", "kind") else "right")
        for name, k in rows:
            t.add_row(name, k["name"][:48], k["kind"], f"{k['dram_bytes'] / 1e6:.2f}",
                      f"{k['l2_bytes'] / 1e6:.2f}" if k["l2_bytes"] else "-", f"{k['us']:.1f}")
        console.print(t)
    console.print("kernels: Inductor's kernels per op (sim/price/fusion.py); DRAM MB: Inductor's byte estimate (each "
                  "buffer once); L2 MB: the loads it repeats through L2 (GQA: G x K/V; wo's expanded weight: "
                  "b x W in b sweeps, each after the first added, from L2 while W fits), at the profile's "
                  "sourced L2 rate (sim/price/l2_traffic.py)", style="dim")
    if any(c.get("coschedule") for c in cases):
        t = Table(title="co-scheduling (sim/price/coschedule.py): per collective of L0, NCCL CTAs / HBM demand GB/s / "
                        "start delay waiting for SMs, µs per pass (waits); pairs: compute x collective slowdowns",
                  title_justify="left")
        t.add_column("collective or pair")
        for h in heads:
            t.add_column(h, justify="right")
        rows = list(dict.fromkeys(r["name"] for c in cases if c.get("coschedule") for r in c["coschedule"]["collectives"]))
        for name in rows:
            cells = []
            for c in cases:
                r = next((r for r in (c.get("coschedule") or {}).get("collectives", []) if r["name"] == name), None)
                cells.append(f"{r['ctas']} / {r['hbm_gbps']:.0f} / {r['delay_us_per_pass']:.1f} ({r['waits_per_pass']})"
                             if r else "-")
            t.add_row(name, *cells)
        t.add_section()
        pairs = list(dict.fromkeys((p["compute"], p["collective"]) for c in cases if c.get("coschedule")
                                   for p in c["coschedule"]["pairs"]))
        for k, m in pairs:
            cells = []
            for c in cases:
                p = next((p for p in (c.get("coschedule") or {}).get("pairs", [])
                          if (p["compute"], p["collective"]) == (k, m)), None)
                cells.append(f"x{p['compute_factor']:.3f} / x{p['comm_factor']:.3f}" if p else "-")
            t.add_row(f"{k} | {m}", *cells)
        console.print(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="h100-sxm")
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--batch", type=int, action="append", help="repeatable; default 1 and 64")
    ap.add_argument("--schedule", default="standard")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--gen", type=int, default=512)
    ap.add_argument("--stack", action="append", default=[], metavar="FIELD=VALUE",
                    help="override one Stack field of the profile's defaults; repeatable")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = ap.parse_args(argv)
    args.batch = args.batch or [1, 64]
    try:
        out = run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        show(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
