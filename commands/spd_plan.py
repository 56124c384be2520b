"""`tpsim spd-plan`: choose SPD blocks as the SPD paper does, on a checkpoint and a text, and price
the choice with the simulator (docs/spd-plan.md): the click command.

Like commands/bench.py (whose launcher and rank-mode switch it reuses, `run_ranks`), it imports no torch:
the ranks run hw/spd/plan.py:worker, started with --nproc local processes (hw.dist.launch), or
this very command under torchrun (`torchrun --nproc-per-node 8 --no-python tpsim spd-plan ...`:
then each process is one rank). Everything the user can get wrong is checked here before any rank
starts (one line, exit 2): the checkpoint's headers, the text's length, the budget, the profile.

Resume: finished passes go to `<--out>.partial.jsonl` as they complete; a rerun with the same
inputs (hw.spd.text.plan_digest) reads them back and measures only the rest. The file is removed
once the result is written (launcher mode; under torchrun it is kept, and a rerun reprints at
once). Without --out nothing is kept: the partial file made for the run is removed however it ends.
Ctrl-C stops the ranks and exits 130 (commands.errors.ctrl_c_exits_130), saying how many finished
passes --out's partial file keeps for a rerun. The launcher locks --out (sim.lock.output_lock) while
a plan runs; under torchrun no process holds that lock.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

import click

from tpsim.fileio.policy import check_figure_path

from tpsim.fileio.lock import check_writable, output_lock
from tpsim.sim.model.presets import get_model
from tpsim.sim.stack.spec import DTYPE_BYTES

from tpsim.hw import require_torch
from tpsim.hw.run_config import RunConfig, check_timeout, default_timeout_s
from tpsim.hw.spd.select import (Budget, format_plan, make_progress, parse_budget, partial_path, price,
                                 read_partial, show_progress)
from tpsim.hw.spd.text import load_tokens, plan_digest

from tpsim.commands.harness import check_cuda, cuda_available, memory_gate, model_and_checkpoint, run_ranks, under_torchrun
from tpsim.commands.bounds import check_sizes
from tpsim.commands.errors import UserError, ctrl_c_exits_130, user_errors
from tpsim.commands.options import HARNESS_STACK, not_empty

TARGET = "tpsim.hw.spd.plan:worker"


@click.command("spd-plan")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None, callback=not_empty,
              help="a Hugging Face snapshot folder (config.json + *.safetensors): the trained model to plan for")
@click.option("--text", "text_path", default=None, callback=not_empty,
              help="the text perplexity is measured on (tokenized by the checkpoint's tokenizer.json, else read "
                   "as whitespace-separated token ids, else bytes mod vocab; the output says which)")
@click.option("--tp", "--nproc", "tp", type=int, default=2, show_default=True,
              help="TP degree = number of rank processes (SPD's outputs depend on it)")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
              help="collective backend [default: nccl on cuda, gloo on cpu]")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(list(DTYPE_BYTES)), default=None,
              help="the harness's dtype [default: fp16 on cuda, fp32 on cpu]")
@click.option("--layers", type=int, default=None, help="plan only the first K layers of the model")
@click.option("--max-ppl-increase", default=None, metavar="X%|X", callback=not_empty,
              help="budget: X% = perplexity at most X percent over the baseline; X = at most X perplexity points "
                   "over it [default: 1%]")
@click.option("--blocks", type=int, default=None, help="budget: the K least sensitive blocks (instead of a ppl budget)")
@click.option("--seq-len", type=int, default=256, show_default=True, help="tokens per window (one prefill each)")
@click.option("--windows", type=int, default=None, help="windows measured [default: as many as the text holds]")
@click.option("--profile", default="h100-sxm", show_default=True, callback=not_empty,
              help="the profile the chosen list is priced on")
@click.option("--batch", type=int, default=1, show_default=True, help="priced workload: sequences per batch")
@click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True,
              help="priced workload: prompt tokens")
@click.option("--gen", "gen_len", type=int, default=512, show_default=True, help="priced workload: generated tokens")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--out", type=click.Path(dir_okay=False), default=None, callback=not_empty,
              help="write the result JSON here (and resume from <out>.partial.jsonl)")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=not_empty,
              help="PNG of the sensitivity by layer")
@click.option("--timeout-s", type=float, default=None,
              help="a collective that waits longer ends the run [default: 30 s + 20x a pessimistic pass estimate]")
@click.option("--deadline-s", type=float, default=None, help="bound on the whole run (launcher kills all)")
@click.option("--fault", default=None, hidden=True, callback=not_empty, help="test hook RANK:passN:exit|hang")
@user_errors
def spd_plan_cmd(checkpoint, text_path, tp, backend, device, dtype, layers, max_ppl_increase, blocks, seq_len,
                 windows, profile, batch, prompt_len, gen_len, as_json, out, plot_path, timeout_s, deadline_s, fault):
    """Choose SPD blocks by measured sensitivity (the SPD paper's method) and price them.

    Measures the baseline perplexity and the perplexity with each block's attention all-reduce
    dropped alone (real ranks), picks the least sensitive blocks greedily within the budget
    (measuring each set), prints the per-block table and spd:LIST, and predicts its speedup on
    --profile. Sensitivities only mean something on trained weights."""
    require_torch("spd-plan")
    try:
        cfg, opts = _prepare(checkpoint, text_path, tp, backend, device, dtype, layers, max_ppl_increase, blocks,
                             seq_len, windows, profile, batch, prompt_len, gen_len, as_json, out, plot_path,
                             timeout_s, deadline_s, fault)
    except ValueError as e:               # a tokenizer's or checkpoint's message may span lines: one here
        raise UserError(" ".join(str(e).split())) from None
    # a partial file made for this run (no --out) is nobody's resumable state: gone however the run ends
    # (before: a Ctrl-C, a failed rank or a refused memory gate left /tmp/tpsim-spd-plan-*.partial.jsonl)
    own = opts["partial"] if not out else None
    try:
        memory_gate(cfg, "spd-plan")
        # Ctrl-C: the ranks are stopped; with --out, what its partial file keeps for a rerun is said
        with ctrl_c_exits_130(then=lambda: _resumable(opts) if out else None):
            if under_torchrun():
                run_ranks(TARGET, cfg, deadline_s, "spd-plan", {"spd_plan": opts | {"bar": True}})
                return
            with output_lock(out, "spd-plan") if out else contextlib.nullcontext():      # OutputBusy: exit 2
                result = _launch(cfg, opts, deadline_s)
    finally:
        if own:
            Path(own).unlink(missing_ok=True)
    Path(opts["partial"]).unlink(missing_ok=True)        # the result is written: nothing left to resume
    click.echo(json.dumps(result, indent=1) if as_json else format_plan(result))
    for what, path in (("result", out), ("plot", plot_path)):
        if path and not as_json:
            click.echo(f"wrote {path}" + (" (sensitivity by layer)" if what == "plot" else ""))


def _prepare(checkpoint, text_path, tp, backend, device, dtype, layers, max_ppl_increase, blocks, seq_len, windows,
             profile, batch, prompt_len, gen_len, as_json, out, plot_path, timeout_s, deadline_s, fault):
    """Options -> (RunConfig, the plan's own options); ValueError (one line) for anything wrong."""
    if not checkpoint:
        raise ValueError("--checkpoint DIR is required: the Hugging Face snapshot to plan for")
    if not text_path:
        raise ValueError("--text FILE is required: the text perplexity is measured on")
    if not 2 <= tp <= 1024:
        raise ValueError(f"--tp must be in 2..1024 (at TP 1 there is no all-reduce to drop), got {tp}")
    check_sizes(batch=batch, prompt_len=prompt_len, gen_len=gen_len)
    if not 2 <= seq_len <= 1 << 20:
        raise ValueError(f"--seq-len must be in 2..{1 << 20}, got {seq_len}")
    for name, v in (("--timeout-s", timeout_s), ("--deadline-s", deadline_s)):
        if v is not None:
            check_timeout(v, name)
    for name, p in (("--out", out), ("--plot", plot_path)):
        if p:
            check_writable(p, name)
    if plot_path:
        check_figure_path(plot_path)
    if device == "auto":
        device = "cuda" if cuda_available("spd-plan") else "cpu"
    if device == "cuda":
        check_cuda(1 if under_torchrun() else tp, "spd-plan")
    name, path = model_and_checkpoint("spd-plan", None, checkpoint)
    m = get_model(name)
    if layers is not None and not 1 <= layers <= m.layers:
        raise ValueError(f"--layers must be in 1..{m.layers}, got {layers}")
    m = m.truncated(layers) if layers else m
    budget = parse_budget(max_ppl_increase, blocks, m.layers)
    tokens = load_tokens(text_path, path, m.vocab, seq_len, windows)
    price(m, tp, profile, batch, prompt_len, gen_len, "standard")       # a bad profile or shape fails now
    dtype = dtype or ("fp16" if device == "cuda" else "fp32")
    if timeout_s is None:                 # as bench/check: proportionate to one pass (a prefill of seq_len)
        flops = (2.0 * m.param_count() * seq_len + 4.0 * m.layers * seq_len ** 2 * m.hidden) / tp
        timeout_s = round(default_timeout_s(flops, device), 1)
    cfg = RunConfig(model=name, layers=layers, tp=tp, batch=1, prompt_len=seq_len, gen_len=1,
                    schedules=("standard",), backend=backend or ("nccl" if device == "cuda" else "gloo"),
                    device=device, dtype=dtype, timeout_s=timeout_s, out=os.path.abspath(out) if out else None,
                    json=as_json, fault=fault, checkpoint=path, **HARNESS_STACK)
    cfg.validate()
    digest = plan_digest(tokens, path, tp, dtype, device, layers)
    if out:
        part = partial_path(os.path.abspath(out))
    elif under_torchrun():
        part = None                       # no --out: nothing kept to resume from
    else:
        fd, part = tempfile.mkstemp(prefix="tpsim-spd-plan-", suffix=".partial.jsonl")
        os.close(fd)
    opts = {"text": os.path.abspath(text_path), "windows": windows, "digest": digest, "partial": part,
            "budget": budget.__dict__.copy(), "plot": os.path.abspath(plot_path) if plot_path else None,
            "price": {"profile": profile, "batch": batch, "prompt_len": prompt_len, "gen_len": gen_len},
            "layers": m.layers}
    return cfg, opts


def _resumable(opts: dict) -> str | None:
    """After a Ctrl-C with --out: what its partial file keeps (the user's resumable state, left in
    place), as calibrate says what its state file keeps; None when no pass had finished."""
    n = len(read_partial(opts["partial"], opts["digest"]))
    return f"{n} finished pass(es) are kept in {opts['partial']}: rerun the same command to continue" if n else None


def _launch(cfg: RunConfig, opts: dict, deadline_s: float | None) -> dict:
    """The launcher: ranks run; a thread moves the bar from the partial file rank 0 appends to."""
    stop = threading.Event()
    budget = Budget(**opts["budget"])

    def watch() -> None:
        tasks: dict = {}
        with make_progress() as bar:
            while not stop.wait(0.25):
                show_progress(bar, tasks, read_partial(opts["partial"], opts["digest"]), opts["layers"], budget)
    t = threading.Thread(target=watch, name="tpsim-spd-plan-progress", daemon=True)
    t.start()
    try:
        return run_ranks(TARGET, cfg, deadline_s, "spd-plan", {"spd_plan": opts})
    finally:
        stop.set()
        t.join(timeout=2.0)
