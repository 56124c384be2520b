"""`tpsim serve`: each schedule under request traffic (sim/serve/): TTFT, TPOT, E2E percentiles at a rate,
goodput under an SLO, and the highest rate each schedule sustains under it."""
from __future__ import annotations

import math
import sys

import click

from tpsim.fileio.policy import check_figure_path, check_output, json_text, write_json_atomic
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES, SCHEDULE_HELP, plan_of
from tpsim.sim.serve import traffic as tr
from tpsim.sim.serve.perfetto import trace_events
from tpsim.sim.serve.scheduler import ROUTERS, engine_of, setup as engine_setup
from tpsim.sim.serve.service import Point, Service
from tpsim.sim.serve.slo import meets, parse_slo, value_at
from tpsim.sim.serve.traces import FORMATS, read_trace
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import DTYPE_BYTES, make_stack

from tpsim.commands import serve_report as report
from tpsim.commands.bounds import check_bounds
from tpsim.commands.console import field_lines, progress_bar, rich_escape, stderr_console, terminal_console
from tpsim.commands.errors import user_errors
from tpsim.commands.options import not_empty, profile_option, stack_dict

BAR_AT = 2000                      # requests x schedules above which a terminal gets a progress bar


@click.command("serve")
@click.option("--model", required=True, callback=not_empty, help="Model preset or Hugging Face config.json.")
@click.option("--tp", type=int, required=True, help="Tensor-parallel degree of one engine instance.")
@profile_option
@click.option("--stack", "stack_name", default="vllm", show_default=True, metavar="NAME|FILE", callback=not_empty,
              help="The serving engine: vllm (V1 scheduler), sglang or trtllm, or a stack file extending one; "
                   "its preset prices the step and picks the scheduler.")
@click.option("--dtype", type=click.Choice(list(DTYPE_BYTES)), default=None, help="Default: the stack's.")
@click.option("--schedule", "schedules", multiple=True, metavar="SPEC", callback=not_empty,
              help=f"Repeatable. {SCHEDULE_HELP}. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--rate", "rates", type=float, multiple=True,
              help="Requests per second (repeatable: a row per rate; inf: all at once, as vLLM's default "
                   "--request-rate). Without it a --trace replays its own times.")
@click.option("--sweep", is_flag=True, help="Find each schedule's highest rate meeting --slo (bisection to "
              "--sweep-tol on the same requests and seed) and its gain over standard.")
@click.option("--sweep-tol", type=float, default=0.02, show_default=True,
              help="The sweep stops when the lowest failing rate is within this fraction of the highest passing.")
@click.option("--slo", "slo_items", multiple=True, metavar="METRIC=VALUE", callback=not_empty,
              help="Repeatable bound on ttft, tpot or e2e (ms or s; a bare number is ms), e.g. --slo ttft=2s "
                   "--slo tpot=100ms. The SLO holds when each metric's --slo-percentile is within its bound.")
@click.option("--slo-percentile", type=float, default=99.0, show_default=True)
@click.option("--requests", type=int, default=None, help="Requests per run (default 1000; a trace's: all of it).")
@click.option("--duration", type=float, default=None, help="Seconds of traffic at --rate instead of --requests.")
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True,
              help="Prompt tokens (vLLM's random dataset's --random-input-len).")
@click.option("--gen", "gen_len", type=int, default=128, show_default=True,
              help="Output tokens (--random-output-len).")
@click.option("--range-ratio", type=float, default=0.0, show_default=True,
              help="Lengths uniform in [L(1-r), L(1+r)] (--random-range-ratio).")
@click.option("--burstiness", type=float, default=1.0, show_default=True,
              help="Gamma arrivals' shape: 1 Poisson, < 1 burstier (vLLM's --burstiness).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--trace", "trace_path", default=None, callback=not_empty, metavar="FILE",
              help=f"A request trace: {', '.join(FORMATS)} (docs/serving.md). With --rate or --sweep its lengths "
                   f"arrive at that rate.")
@click.option("--trace-format", type=click.Choice(("auto",) + FORMATS), default="auto", show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True,
              help="Engine instances (data parallelism), each a TP group.")
@click.option("--router", type=click.Choice(ROUTERS), default=None,
              help="How requests are spread over --replicas. Default: the engine's own (vllm least-loaded, "
                   "sglang round-robin).")
@click.option("--max-num-seqs", type=int, default=None, help="Running requests cap (default: the engine's).")
@click.option("--max-batched-tokens", type=int, default=None,
              help="Tokens an iteration (vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM "
                   "max_num_tokens; default: the engine's on this GPU).")
@click.option("--kv-cache-gib", type=float, default=None, help="KV cache per rank (default: the engine's rule "
              "over tpsim's memory model).")
@click.option("--max-model-len", type=int, default=None, help="Longest request (default: the model's context).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--plot", "plot_path", default=None, callback=not_empty, metavar="PNG",
              help="Latency (p99 TTFT, TPOT, E2E) against load per schedule: over several --rate, or a --sweep.")
@click.option("--perfetto", "perfetto_path", default=None, callback=not_empty, metavar="FILE",
              help="Chrome/Perfetto trace of every request's lifetime (queued, prefill, decode, preempted), "
                   "per schedule and replica: the first --rate, or each schedule's highest rate with --sweep.")
@user_errors
def serve(model, tp, profile, stack_name, dtype, schedules, rates, sweep, sweep_tol, slo_items, slo_percentile,
          requests, duration, prompt_len, gen_len, range_ratio, burstiness, seed, trace_path, trace_format,
          replicas, router, max_num_seqs, max_batched_tokens, kv_cache_gib, max_model_len, as_json, plot_path,
          perfetto_path):
    """Serve request traffic with each schedule: TTFT/TPOT/E2E percentiles, goodput, highest rate under an SLO.

    Each engine instance (--replicas of them, one TP group each) runs its engine's own scheduler (the
    --stack preset's: vLLM V1, SGLang or TensorRT-LLM), its KV cache from tpsim's memory model, and
    every iteration is priced by the step model for the mixed batch it holds (docs/serving.md)."""
    check_bounds({"--tp": tp, "--seed": seed, "--prompt": prompt_len, "--gen": gen_len})
    for flag, v, lo in (("--replicas", replicas, 1), ("--requests", requests, 1), ("--max-num-seqs", max_num_seqs, 1),
                        ("--max-batched-tokens", max_batched_tokens, 1), ("--max-model-len", max_model_len, 2)):
        if v is not None and v < lo:
            raise ValueError(f"{flag} must be >= {lo}, got {v}")
    for flag, v in (("--duration", duration), ("--kv-cache-gib", kv_cache_gib), ("--slo-percentile", slo_percentile)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ValueError(f"{flag} must be a positive number, got {v}")
    for v in rates:
        if not v > 0:             # inf: every request at once (vLLM's default --request-rate)
            raise ValueError(f"--rate must be a positive number of requests/s (inf: all at once), got {v}")
    if duration is not None and rates and math.isinf(rates[0]):
        raise ValueError("--duration needs a finite --rate")
    if slo_percentile > 100:
        raise ValueError(f"--slo-percentile must be in (0, 100], got {slo_percentile}")
    slo = parse_slo(slo_items)
    if sweep and not slo:
        raise ValueError("--sweep finds the highest rate meeting an SLO: give --slo (e.g. --slo ttft=2s --slo tpot=100ms)")
    if duration is not None and (len(rates) != 1 or requests is not None):
        raise ValueError("--duration takes one --rate and no --requests (requests = rate x duration)")
    if not rates and not sweep and trace_path is None:
        raise ValueError("give --rate R (requests/s), --sweep with --slo, or a --trace to replay")
    for path, opt in ((plot_path, "--plot"), (perfetto_path, "--perfetto")):
        if path is not None:
            check_output(path, opt)
    if plot_path is not None:
        check_figure_path(plot_path)
        if not sweep and len(rates) < 2:
            raise ValueError("--plot draws latency against load: give several --rate, or --sweep")
    schedules = list(dict.fromkeys(schedules)) or list(DEFAULT_SCHEDULES)
    if "standard" not in schedules and sweep:
        schedules.insert(0, "standard")                  # the gain is over standard
    m, prof = get_model(model), load_profile(profile)
    for spec in schedules:
        plan_of(spec, m.layers)
    engine = engine_of(stack_name)
    stack = make_stack({"dtype": dtype}, prof.stack_defaults, preset=load_stack(stack_name).values)
    su = engine_setup(engine, m, tp, prof, stack, budget=max_batched_tokens, max_seqs=max_num_seqs, kv_gib=kv_cache_gib,
                      max_len=max_model_len, router=router)
    service = Service(m, tp, prof, stack, su, replicas, router)

    # the requests: a trace's (its times, or its lengths at a rate), or vLLM's random dataset
    n = requests if requests is not None else (math.ceil(rates[0] * duration) if duration else None)
    if trace_path is not None:
        base = read_trace(trace_path, trace_format, n)
    else:
        p, o = tr.random_lengths(n or 1000, prompt_len, gen_len, range_ratio, seed)
        base = tr.Traffic(p * 0.0, p, o, f"random lengths prompt {prompt_len} gen {gen_len}"
                          + (f" range {range_ratio:g}" if range_ratio else ""))
    service.check(base)

    total = len(base) * len(schedules) * max(len(rates), 1)
    show_bar = not as_json and sys.stderr.isatty() and (total >= BAR_AT or sweep)
    points: list[Point] = []
    sweeps = []
    with progress_bar("[progress.description]{task.description}", transient=True, disable=not show_bar,
                      console=stderr_console()) as bar:
        task = bar.add_task("serve", total=total if not sweep else len(schedules))
        if sweep:
            start = 1.0
            for spec in schedules:
                bar.update(task, description=f"sweep {spec}")
                res = service.max_rate(spec, base, slo, slo_percentile, burstiness, seed, start, sweep_tol,
                                       on_run=lambda r, s=spec: bar.update(task, description=f"sweep {s} {r:.3g} req/s"))
                if spec == "standard":
                    start = res.rate                      # the others start at standard's answer
                pts = [Point(spec, r, s) for r, s in sorted(res.points.items())]
                points += pts
                sweeps.append({"schedule": spec, "max_rate": res.rate, "fail_rate": res.fail_rate,
                               "rates": sorted(res.points),
                               "at_max": {k: value_at(res.points[res.rate], k, slo_percentile) for k in slo}})
                bar.advance(task)
        else:
            for rate in rates or [None]:
                t = base if rate is None else base.at_rate(rate, burstiness, seed)
                for i, spec in enumerate(schedules):
                    record = perfetto_path is not None and rate == (rates[0] if rates else None)
                    done0 = bar.tasks[0].completed
                    pt = service.run(spec, t, record, progress=lambda d: bar.update(task, completed=done0 + d))
                    pt.rate = rate
                    points.append(pt)
    if perfetto_path is not None:
        if sweep:       # the trace of each schedule at its highest rate meeting the SLO
            recorded = [(s["schedule"], service.run(s["schedule"], base.at_rate(s["max_rate"], burstiness, seed),
                                                    record=True).run) for s in sweeps]
        else:
            recorded = [(p.schedule, p.run) for p in points if p.run is not None]
        write_json_atomic(perfetto_path, trace_events(recorded), "--perfetto")

    traffic_desc = base.source if (trace_path is not None and not rates and not sweep) else (
        f"{base.source}, {'Poisson' if burstiness == 1 else f'gamma burstiness {burstiness:g}'} arrivals, seed {seed}")
    doc = {"model": m.name, "tp": tp, "profile": prof.name, "replicas": replicas, "router": service.router,
           "stack": stack_dict(stack, stack_name), "engine": su.to_dict(),
           "traffic": {"requests": len(base), "source": traffic_desc, "burstiness": burstiness, "seed": seed},
           "slo": {"bounds_s": slo, "percentile": slo_percentile} if slo else None,
           "runs": [{"schedule": p.schedule, "rate": p.rate, **p.summary.to_dict(),
                     **({"goodput": p.summary.goodput(slo), "slo_met": meets(p.summary, slo, slo_percentile)}
                        if slo else {})} for p in points]}
    if sweep:
        base_rate = next(s["max_rate"] for s in sweeps if s["schedule"] == "standard")
        for s in sweeps:
            s["gain"] = s["max_rate"] / base_rate
        doc["sweep"] = {"rel_tol": sweep_tol, "schedules": sweeps}
    if plot_path is not None and sweep:      # every schedule also at the rates standard's sweep ran: one x axis
        have = {(p.schedule, p.rate) for p in points}
        for spec in schedules:
            for rate in sweeps[0]["rates"]:
                if (spec, rate) not in have:
                    points.append(Point(spec, rate, service.run(spec, base.at_rate(rate, burstiness, seed)).summary))
    if plot_path is not None:
        by: dict = {}
        for p in points:
            by.setdefault(p.schedule, []).append(p)
        report.plot(by, slo, slo_percentile, plot_path, f"{m.name} TP{tp} x{replicas} {prof.name} {engine}: "
                    f"{traffic_desc}", {s["schedule"]: s["max_rate"] for s in sweeps} if sweeps else None)
    if as_json:
        click.echo(json_text(doc))
        return
    console = terminal_console()
    src = load_stack(stack_name).path
    console.print(rich_escape(field_lines(f"stack: {stack.describe()} (values and sources: {src})", console.width)),
                  style="dim")
    head = (f"{rich_escape(m.name)}  TP{tp} x {replicas} replica{'s' * (replicas > 1)}  profile "
            f"{rich_escape(prof.name)}  {su.engine} scheduler\n"
            f"KV {su.kv_tokens:,} tokens/replica  budget {su.budget} tokens  max {su.max_seqs} running"
            + (f"  router {service.router}" if replicas > 1 else "") +
            f"\n{len(base)} requests: {rich_escape(traffic_desc)}")
    console.print(head)
    if sweep:
        console.print(f"{report.slo_line(slo, slo_percentile)}: the highest rate, bisection to {sweep_tol:.0%}")
        console.print(report.sweep_table(sweeps, slo, slo_percentile))
    else:
        for rate in dict.fromkeys(p.rate for p in points):       # a table per rate, in the order given
            console.print(f"at {rate:g} req/s" if rate is not None else "the trace's own arrival times")
            console.print(report.latency_table([p for p in points if p.rate == rate], slo, slo_percentile))
        if slo:
            console.print(f"{report.slo_line(slo, slo_percentile)}; good req/s: requests meeting every bound per "
                          f"second (vLLM's goodput); * the SLO does not hold at that rate", style="dim")
    pre = sum(p.summary.preemptions for p in points)
    console.print(f"TTFT and TPOT in ms{', E2E in s' if not sweep else ''}, as vLLM's benchmark measures them (TPOT "
                  f"per request: (E2E - TTFT) / (output - 1); ITL in --json)"
                  + ("; done req/s: requests over the run's duration" if not sweep else
                     "; rates run: the rates the bisection simulated")
                  + (f"; {pre} preemptions over the runs" if pre else "") + ".", style="dim")
