"""`tpsim trace`: a Chrome/Perfetto trace of one simulated prefill and decode step."""
from __future__ import annotations

import click

from tpsim.fileio.policy import STDOUT, write_json_atomic
from tpsim.fileio.lock import check_writable
from tpsim.sim.predict import Simulator
from tpsim.sim.schedule.language import SCHEDULE_HELP
from tpsim.sim.engine.record import chrome_trace, host_records

from tpsim.commands.console import echo_wrapped
from tpsim.commands.errors import user_errors
from tpsim.commands.options import make_workload, not_empty, workload_options


@click.command("trace")
@workload_options
@click.option("--schedule", "spec", default="ladder", show_default=True, callback=not_empty, help=SCHEDULE_HELP)
@click.option("--ranks", type=int, default=None, help="Ranks to simulate and show (default: all TP ranks).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              callback=not_empty,
              help="Trace JSON to write (- for stdout).")
@user_errors
def trace(spec, ranks, out_path, **kw):
    """Write a Chrome/Perfetto trace of one prefill and one decode step (a track per rank and stream)."""
    check_writable(out_path, stdout_ok=True)       # `--out -`: the trace on stdout, the summary on stderr
    w = make_workload(**kw)
    ranks = w.tp if ranks is None else ranks
    if not 1 <= ranks <= w.tp:
        raise ValueError(f"--ranks must be in 1..{w.tp}")
    sim = Simulator(w, exact=True, record=True, ranks=ranks)
    records, offset = [], 0.0
    steps = [w.prefill_step()] + ([w.decode_step(1)] if w.gen_len > 1 else [])
    summary = []
    for step in steps:
        res = sim.step(spec, step)
        ln, total_s = sim.lane(step), sim.in_lane(step, res.duration_s, staggered=True)
        lanes = host_records(w.stack.host, ln, step.phase, ranks, offset, total_s) if ln else []
        shift = offset + (ln.lead_s if ln and not w.stack.host.overlap else 0.0)   # in series: after the lead
        records += lanes + [r.__class__(r.op, r.rank, r.stream, r.start_s + shift, r.end_s + shift, r.phase, r.kind)
                            for r in res.records]
        notes = w.schedule(spec, step).notes
        summary.append(f"{step.phase} {total_s * 1e3:.3f} ms (exposed comm {res.exposed_comm_s * 1e3:.3f} ms"
                       + (f"; pass {res.duration_s * 1e3:.3f} ms in the host lane" if ln else "") + ")"
                       + "".join(f" [{n}]" for n in notes))
        offset += total_s
    write_json_atomic(out_path, chrome_trace(records, label=spec))
    echo_wrapped(f"wrote {'stdout' if out_path == STDOUT else out_path}: {len(records)} events, {ranks} rank(s); "
                 + "; ".join(summary) + ". Open it in ui.perfetto.dev or chrome://tracing.", err=out_path == STDOUT)
