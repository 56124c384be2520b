"""`tpsim calibrate`: measure this machine into a profile JSON (the click command; the work is
calib.run). Under torchrun: `torchrun ... --no-python tpsim calibrate ...` (or `-m tpsim calibrate`;
from a source checkout that is not installed, `cli.py calibrate`).

Launcher mode (default) starts --nproc local ranks; under torchrun (RANK/WORLD_SIZE set) this
process is one rank and rank 0 writes the profile. This module imports no torch: the body reaches the torch side (calib.run, hw.dist) through `hw.harness`.
"""
from __future__ import annotations

import json
import os

import click

from tpsim.sim.memory import DoesNotFit, check_fits, estimate
from tpsim.sim.model.presets import get_model
from tpsim.sim.stack.spec import ATTENTION_IMPLS, DECODE_KV, DTYPE_BYTES, HEADS, PREFILL_LOGITS, Stack

from tpsim.hw import harness, require_torch
from tpsim.hw.run_config import check_timeout, default_timeout_s

from tpsim.calib.imports import check_impl_tag
from tpsim.calib.overlap_summary import noise_note
from tpsim.calib.plan import CalibConfig, CalibrationStopped

from tpsim.commands.harness import check_cuda, check_out_path
from tpsim.commands.bounds import check_bounds
from tpsim.commands.console import PhaseBar, echo_wrapped
from tpsim.commands.errors import ctrl_c_exits_130, user_errors
from tpsim.commands.options import not_empty


@click.command("calibrate")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True,
              help="gloo: CPU ranks; nccl: one GPU per rank")
@click.option("--nproc", type=int, default=2, show_default=True,
              help="local rank processes to launch (ignored under torchrun: the world size counts)")
@click.option("--models", "--model", "models", multiple=True, callback=not_empty,
              help="model preset whose op shapes to time; repeatable")
@click.option("--tp", "tps", type=int, multiple=True, help="TP degrees [default: every valid one up to the ranks]")
@click.option("--batch", "batches", type=int, multiple=True, help="batch sizes; repeatable [default: 1]")
@click.option("--prompt", "prompts", type=int, multiple=True, help="prompt lengths; repeatable [default: 1024]")
@click.option("--gen", "gens", type=int, multiple=True, help="generated tokens; repeatable [default: 512]")
@click.option("--dtype", type=click.Choice(list(DTYPE_BYTES)), default=None, help="[default: fp32 on cpu, fp16 on cuda]")
@click.option("--kv", "kvs", type=click.Choice(DECODE_KV), multiple=True, help="[default: static]; repeatable")
@click.option("--attention", "attentions", type=click.Choice(ATTENTION_IMPLS), multiple=True, help="[default: math]")
@click.option("--head", "heads", type=click.Choice(HEADS), multiple=True, help="[default: replicated]")
@click.option("--prefill-logits", "prefill_logits", type=click.Choice(PREFILL_LOGITS), multiple=True,
              help="[default: all]")
@click.option("--collective", "collectives", type=click.Choice(["all_reduce", "all_gather", "reduce_scatter"]),
              multiple=True, help="collectives to sweep [default: all_reduce with --quick, else all three]")
@click.option("--parts", "parts", type=click.Choice(["device", "collectives", "compute", "overlap"]), multiple=True,
              help="what to measure [default: all]; a subset needs --extends")
@click.option("--nccl-env", "envs", multiple=True, metavar="K=V[,K=V]", callback=not_empty,
              help="also sweep collectives under this NCCL setting (own launch, own table tag); repeatable")
@click.option("--impl", default=None, callback=not_empty,
              help="table tag of the collectives measured [default: the backend name]")
@click.option("--quick", is_flag=True, help="fewer sizes and trials (a few minutes on a CPU box)")
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=not_empty, help="profile JSON to write")
@click.option("--extends", default=None, callback=not_empty,
              help="base profile completing a partial calibration (e.g. h100-sxm)")
@click.option("--name", default=None, callback=not_empty, help="profile name [default: the --out file's stem]")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout-s", type=float, default=None,
              help="a collective (or rank start-up) that waits longer ends the run [default: 120 s, or more "
                   "for big shapes: 30 s + 20x a pessimistic estimate of the longest prefill pass]")
@click.option("--stop-after", type=int, default=None, hidden=True, help="test hook: stop after N groups")
@user_errors
def calibrate_cmd(backend, nproc, models, tps, batches, prompts, gens, quick, out, extends, **kw):
    """Measure collectives, the exact compute ops of the schedules and their overlap on this
    machine; write a profile (raw points kept beside the fits). Rerun the same command to resume
    an interrupted calibration (state in OUT.state.json)."""
    require_torch("calibrate")
    _check_values(backend, nproc, tps, batches, prompts, gens, kw.get("timeout_s"), kw.get("stop_after"),
                  seed=kw.get("seed"), impl=kw.get("impl"))
    check_out_path(out, "--out")
    _check_size(backend, nproc, models, tps, batches, prompts, gens, kw.get("dtype"))
    calib_run, dist = harness("tpsim.calib.run", "calibrate"), harness("tpsim.hw.dist", "calibrate")
    if kw.get("timeout_s") is None:
        kw["timeout_s"] = _default_timeout_s(backend, models, batches or (1,), prompts or (1024,))
    opts = {k: v for k, v in kw.items() if v not in (None, ())}
    for src_, dst in (("kvs", "kvs"), ("attentions", "attentions"), ("heads", "heads"),
                      ("prefill_logits", "prefill_logits"), ("collectives", "collectives"),
                      ("parts", "parts"), ("envs", "envs")):
        if src_ in opts:
            opts[dst] = tuple(opts.pop(src_))
    common = dict(models=models, tps=tps, batches=batches or (1,), prompt_len=prompts or (1024,),
                  gen_len=gens or (512,), quick=quick, out=out, extends=extends)
    # Ctrl-C: `Aborted! N finished group(s) are kept in OUT.state.json: rerun ...`, exit 130 (calib.run's
    # CalibrationInterrupted says what a rerun continues from, once the ranks are gone)
    with ctrl_c_exits_130():
        try:
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
                dev = "cuda" if backend == "nccl" else "cpu"
                opts.setdefault("dtype", "fp16" if dev == "cuda" else "fp32")
                cfg = CalibConfig(out=os.path.abspath(out), backend=backend, device=dev, models=tuple(models),
                                  tps=tuple(tps), batches=tuple(common["batches"]),
                                  prompt_lens=tuple(common["prompt_len"]), gen_lens=tuple(common["gen_len"]),
                                  quick=quick, extends=extends, **opts)
                path = calib_run.run_here(cfg)
            else:
                path = _with_progress(lambda cb: calib_run.calibrate(backend, nproc, progress=cb, **common, **opts))
        except (CalibrationStopped, dist.WorkerFailed) as e:      # not the user's mistake: exit 1
            raise click.ClickException(str(e)) from None
    if path is not None:
        _summary(str(path))


def _check_values(backend, nproc, tps, batches, prompts, gens, timeout_s, stop_after, seed=None, impl=None) -> None:
    """Ranges and the device, before any process starts (ValueError -> exit 2)."""
    check_bounds({"--nproc": nproc, "--tp": tps, "--batch": batches, "--prompt": prompts, "--gen": gens,
                  "--seed": seed})
    if impl is not None:
        check_impl_tag(impl)
    if timeout_s is not None:
        check_timeout(timeout_s, "--timeout-s")
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"--stop-after must be >= 1, got {stop_after}")
    if backend == "nccl":
        check_cuda(nproc if "RANK" not in os.environ else 1, "calibrate")


def _check_size(backend, nproc, models, tps, batches, prompts, gens, dtype) -> None:
    """Every rank builds at least one layer of each model with its embedding and head (calib.compute
    .pass_model) at the smallest TP: refuse before any process starts when that cannot fit in this
    host's RAM shared by the ranks (llama-3.1-405b on a 23 GiB CPU box started, then died)."""
    if backend != "gloo":
        return                        # the device's own memory: checked by the ranks' allocator
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    stack = Stack(dtype=dtype or "fp32")
    for name in models:
        try:
            m = get_model(name)
        except ValueError:
            continue                  # reported by the config check, with the valid names
        est = estimate(m.truncated(1), min(tps or (1,)), max(batches or (1,)), max(prompts or (1024,)),
                       max(gens or (512,)), stack, "cpu")
        try:
            check_fits(est, ram // nproc, f"host RAM shared by {nproc} ranks")
        except DoesNotFit as e:
            raise ValueError(f"--models {name}: one layer with its embedding and head: "
                             f"{str(e).splitlines()[0].rstrip(':')}") from None


def _default_timeout_s(backend, models, batches, prompts) -> float:
    """Proportionate to the biggest prefill pass timed (whole model on one rank, the worst case),
    never under 120 s: device constants and collective sweeps have no pass to estimate from."""
    flops = 0.0
    for name in models:
        try:
            m = get_model(name)
        except ValueError:
            continue                       # reported by the config check, with the valid names
        for b in batches:
            for p in prompts:
                flops = max(flops, 2.0 * m.param_count() * b * p + 4.0 * m.layers * b * p * p * m.hidden)
    return round(max(120.0, default_timeout_s(flops, "cuda" if backend == "nccl" else "cpu")), 1)


def _with_progress(run):
    """Run with the one progress bar (commands/console.py), which appears at the first finished-group
    report, so an option refused before any work is one line with no bar drawn above it."""
    with PhaseBar() as bar:
        return run(lambda done, total, _name: bar.update("calibrating: groups", done, total))


def _summary(path: str) -> None:
    with open(path) as f:
        p = json.load(f)
    echo_wrapped(f"wrote {path}")
    ov = p.get("overlap", {})
    if "compute_slowdown" in ov:
        sm = next((g.get("summary", {}) for g in p.get("raw", {}).get("groups", {}).values()
                   if g.get("kind") == "overlap"), {})
        early = (f" (in the model's passes; {sm['done_early']:.0%} of the all-reduces finished within their "
                 f"module)" if "done_early" in sm else "")
        wake = f", wake-up {ov['wake_us']['value']:.0f} us" if "wake_us" in ov else ""
        echo_wrapped(f"  overlap: compute x{ov['compute_slowdown']['value']}, comm x{ov['comm_slowdown']['value']}"
                     f"{wake}{early}")
        if noise_note(sm):
            echo_wrapped(f"warning: overlap factors {noise_note(sm)}", err=True)
        if len(sm.get("fit", {}).get("cases", [])) == 1:
            echo_wrapped("    one model only: the three overlap parameters are not all determined by it; calibrate "
                         "two models of different compute/collective balance for a profile that extrapolates")
        for c in sm.get("fit", {}).get("cases", []):
            echo_wrapped(f"    {c['what'].split(' standard')[0]}: blocking/overlapped pass {c['measured'][0]:.3f}x "
                         f"measured, {c['fitted'][0]:.3f}x simulated; waiting {c['measured'][1]:.0%} / "
                         f"{c['fitted'][1]:.0%}")
    for t in p.get("collectives", {}).get("tables", [])[:4]:
        pairs = ", ".join(f"{b}B {u:.0f}us" for b, u in list(zip(t["bytes"], t["time_us"]))[::max(1, len(t["bytes"]) // 4)])
        echo_wrapped(f"  {t['impl']} {t['collective']} g{t['group']} {t['mode']}: {pairs}")
    n = sum(len(t["points"]) for t in p.get("compute", {}).get("tables", []))
    echo_wrapped(f"  compute points: {n}")
