"""`tpsim sweep`: a what-if grid from the simulator alone, over processes, resumable (commands/sweep_grid.py)."""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import click

from tpsim.commands import sweep_grid as sw
from tpsim.fileio.policy import STDOUT, check_figure_path, write_json_atomic, write_text_atomic
from tpsim.sim.grid import grid
from tpsim.fileio.lock import check_writable, output_lock
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES, ScheduleSpec
from tpsim.sim.stack.spec import make_stack
from tpsim.sim.stack.presets import load_stack

from tpsim.commands.bounds import check_bounds
from tpsim.commands.console import echo_wrapped, progress_bar
from tpsim.commands.errors import ctrl_c_exits_130, user_errors
from tpsim.commands.options import compile_options, not_empty, preset_option, stack_given, stack_options


@click.command("sweep")
@click.option("--model", "models", multiple=True, required=True, callback=not_empty,
              help="Model preset or Hugging Face config.json (or its folder); repeatable.")
@click.option("--tp", "tps", type=int, multiple=True, required=True, help="TP degree; repeatable.")
@click.option("--batch", "batches", type=int, multiple=True, default=(1,), show_default=True, help="Repeatable.")
@click.option("--profile", "profiles_", multiple=True, default=("h100-sxm",), show_default=True,
              callback=not_empty,
              help="Profile name or JSON path; repeatable.")
@click.option("--schedule", "schedules", multiple=True, metavar="SPEC", callback=not_empty,
              help=f"Repeatable (standard is always included). Default: {' '.join(DEFAULT_SCHEDULES[1:])}.")
@click.option("--bw-scale", "bw_scales", type=float, multiple=True, default=(1.0,), show_default=True,
              help="What-if: interconnect bandwidth times this; repeatable.")
@click.option("--lat-scale", "lat_scales", type=float, multiple=True, default=(1.0,), show_default=True,
              help="What-if: collective latency times this; repeatable.")
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True)
@click.option("--gen", "gen_len", type=int, default=512, show_default=True)
@click.option("--jobs", type=int, default=1, show_default=True, help="Worker processes.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              callback=not_empty,
              help="CSV to write (a .json beside it holds the same rows). A sweep killed midway "
                   "resumes from OUT.partial.jsonl when rerun with the same --out. - prints the CSV "
                   "(no .json twin, no checkpoint).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=not_empty,
              help="PNG of speedups: heatmaps over TP (or lines over --bw-scale when swept).")
@click.option("--plot-view", type=click.Choice(["speedup", "no-retraining"]), default="speedup", show_default=True,
              help="no-retraining: per batch size, the best schedule that keeps the model (standard, "
                   "token-split, seq-parallel) against ladder / parallel / spd.")
@compile_options
@stack_options
@preset_option
@user_errors
def sweep(models, tps, batches, profiles_, schedules, bw_scales, lat_scales, prompt_len, gen_len, jobs,
          out_path, plot_path, plot_view, stack_name, **stack_flags):
    """What-if grid from the simulator alone: models x TP x batch x profile x link scaling -> CSV (+ plot)."""
    check_bounds({"--jobs": jobs, "--tp": tps, "--batch": batches, "--prompt": prompt_len, "--gen": gen_len})
    if jobs > sw.max_jobs():                 # more processes than cores only add start-up and memory
        click.echo(f"--jobs {jobs} capped at {sw.max_jobs()} (the cores this process may use)", err=True)
        jobs = sw.max_jobs()
    for name, vs in (("--bw-scale", bw_scales), ("--lat-scale", lat_scales)):
        for v in vs:
            if not (math.isfinite(v) and 1e-6 <= v <= 1e6):
                raise ValueError(f"{name} must be a finite number in [1e-6, 1e6], got {v}")
    check_writable(out_path, stdout_ok=True)
    if Path(out_path).suffix.lower() == ".json":
        raise ValueError(f"--out names the CSV (its .json twin is written beside it): give {Path(out_path).with_suffix('.csv')} "
                         f"for {out_path}")
    if plot_path is not None:
        check_writable(plot_path, "--plot")
        check_figure_path(plot_path)
    for p in profiles_:
        load_profile(p)                       # a bad profile fails before any work
    for m in models:
        get_model(m)
    # each point's profile fills the stack fields the flags and the --stack preset leave unset
    # (commands.sweep_grid.run_point: flag > preset > profile stack_defaults > Stack's, as predict)
    preset = load_stack(stack_name).values if stack_name is not None else None
    given = stack_given(**stack_flags)
    make_stack(dict(given), preset=preset)    # a bad flag combination fails before any work
    scheds = tuple(dict.fromkeys(("standard",) + (schedules or DEFAULT_SCHEDULES[1:])))
    for spec in scheds:
        ScheduleSpec.parse(spec)              # a bad spec fails before any work
    points = grid(models, tps, batches, profiles_, prompt_len, gen_len, bw_scales, lat_scales)
    to_stdout = out_path == STDOUT            # the CSV printed: no twin, no checkpoint, no lock
    checkpoint = None if to_stdout else f"{out_path}.partial.jsonl"
    json_path = Path(out_path).with_suffix(".json")
    if json_path == Path(out_path):
        json_path = Path(f"{out_path}.json")
    if not to_stdout:
        check_writable(json_path)             # the twin obeys the same policy as --out
    discarded: list[str] = []
    finished = [0]
    with (contextlib.nullcontext() if to_stdout else output_lock(out_path, "sweep")):
        # Ctrl-C: exit 130 saying what the checkpoint keeps, as every long command does
        with ctrl_c_exits_130(), _kept_on_interrupt(finished, len(points), checkpoint), \
                progress_bar("[progress.description]{task.description}") as bar:
            task = bar.add_task("sweep", total=len(points))

            def progress(done: int, total: int) -> None:
                finished[0] = done
                bar.update(task, completed=done)
            rows = sw.sweep(points, scheds, given=given, jobs=jobs, checkpoint=checkpoint, progress=progress,
                            preset=preset, discarded=discarded)
        if discarded:
            echo_wrapped(f"{len(discarded)} checkpointed point(s) in {checkpoint} did not hold their point's rows "
                     f"(another point's, NaN or negative values, none): computed again", err=True)
        write_text_atomic(out_path, sw.to_csv(rows))
        if not to_stdout:
            write_json_atomic(json_path, rows)
            Path(checkpoint).unlink(missing_ok=True)
    failed = [r["error"] for r in rows if r["error"]]
    echo_wrapped(f"wrote {'stdout' if to_stdout else f'{out_path} (and {json_path})'}: {len(points)} points, "
                 f"{len(rows)} rows"
                 + (f"; {len(failed)} point(s) could not run (see the error column), e.g. {failed[0]}" if failed else ""),
                 err=to_stdout)
    if len(failed) == len(points):            # one error row per failed point: nothing ran
        raise ValueError(f"no grid point could run (the error column says why for each), e.g. {failed[0]}")
    if plot_path is not None:
        sw.plot(rows, plot_path, plot_view)
        click.echo(f"wrote {plot_path}", err=to_stdout)   # stdout holds the CSV


@contextlib.contextmanager
def _kept_on_interrupt(finished: list[int], total: int, checkpoint: str | None):
    """A Ctrl-C inside becomes a KeyboardInterrupt saying what the checkpoint keeps (for
    ctrl_c_exits_130's `Aborted! ...`): the finished points a rerun of the same command resumes from."""
    try:
        yield
    except KeyboardInterrupt:
        if checkpoint is None:
            raise KeyboardInterrupt(f"{finished[0]} of {total} points were done; --out - keeps no checkpoint") from None
        raise KeyboardInterrupt(f"{finished[0]} of {total} points are kept in {checkpoint}: rerun the same "
                                f"command to continue") from None
