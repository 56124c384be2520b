"""`tpsim bench` and `tpsim check`: their click commands, the options they share, and the
launcher/rank-mode switch (`run_ranks`) that spd-plan reuses.

This module imports no torch (it runs without the [hw] extra until the body needs it): the command bodies
reach the torch side (torch, hw.dist, hw.bench, hw.check) through `hw.harness` only.
Each command runs in one of two modes:
  * launcher (default): starts --nproc local rank processes itself (hw.dist.launch), watches
    them (a rank exiting nonzero stops the rest; --timeout-s bounds every collective) and
    prints rank 0's result;
  * rank (under torchrun, detected by RANK/WORLD_SIZE in the environment): this process *is*
    one rank. torchrun starts the same command line as the launcher, through the one tpsim entry
    point: `torchrun --nproc-per-node 8 --no-python tpsim bench --device cuda --backend nccl ...`
    (or `torchrun ... -m tpsim bench ...`; from a source checkout that is not installed,
    `torchrun ... cli.py bench ...`, which runs that checkout as tpsim). No module here has a `__main__`
    block, so no file is ever imported twice (once as `__main__`, once by its name).
"""
from __future__ import annotations

import json

import click

from tpsim.calib.measured_trace import bench_trace
from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES, SCHEDULE_HELP
from tpsim.sim.stack.presets import load_stack
from tpsim.fileio.policy import write_json_atomic

from tpsim.hw import harness, require_torch
from tpsim.hw.run_config import HARNESS_COLLECTIVES, RunConfig, check_timeout, default_timeout_s

from tpsim.commands.bounds import check_bounds
from tpsim.commands.harness import (check_cuda, check_out_path, cuda_available, memory_gate, model_and_checkpoint,
                                    run_ranks, under_torchrun)
from tpsim.commands.console import PhaseBar, echo_wrapped
from tpsim.commands.errors import UserError, ctrl_c_exits_130, user_errors
from tpsim.commands.options import HARNESS_STACK, not_empty, preset_option, stack_options


# bench/check keyword -> its option (checked against sim/bounds.py through commands.bounds.OPTION_BOUNDS)
_OPTION = {"tp": "--tp", "batch": "--batch", "prompt_len": "--prompt", "gen_len": "--gen", "layers": "--layers",
           "emulate_tp": "--emulate-tp", "repeats": "--repeats", "warmup": "--warmup", "seed": "--seed"}


def _check_ranges(kw: dict) -> None:
    """Every numeric option in range, nothing silently replaced (ValueError -> exit 2)."""
    check_bounds({opt: kw.get(key) for key, opt in _OPTION.items()})
    if kw.get("timeout_s") is not None:
        check_timeout(kw["timeout_s"], "--timeout-s")
    if kw.get("deadline_s") is not None:
        check_timeout(kw["deadline_s"], "--deadline-s")
    g = kw.get("gpu_mem_gib")
    if g is not None and not (0 < g < 1 << 20):
        raise ValueError(f"--gpu-mem-gib must be a positive number of GiB, got {g}")
    check_out_path(kw.get("out"), "--out")


def _common(f):
    """Options shared by bench and check (applied bottom-up)."""
    opts = [
        click.option("--model", default=None, callback=not_empty,
                     help="preset name or a Hugging Face config.json (or its folder); NAME[:K] = first K layers "
                          "[default: tiny, or the --checkpoint's config]"),
        click.option("--checkpoint", type=click.Path(file_okay=False), default=None, callback=not_empty,
                     help="a Hugging Face snapshot folder (config.json + *.safetensors, one file or sharded): run "
                          "its weights, each rank reading only its slices [default: random weights]"),
        click.option("--layers", type=int, default=None, help="run only the first K layers of the model"),
        click.option("--tp", "--nproc", "tp", type=int, default=2, show_default=True,
                     help="TP degree = number of rank processes"),
        click.option("--batch", type=int, default=1, show_default=True),
        click.option("--prompt", "prompt_len", type=int, default=None, help="prompt tokens [default: bench 1024, check 16]"),
        click.option("--gen", "gen_len", type=int, default=None, help="generated tokens, prefill makes the 1st [default: bench 512, check 9]"),
        click.option("--schedule", "schedules", multiple=True, callback=not_empty, help=SCHEDULE_HELP),
        click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
                     help="collective backend [default: nccl on cuda, gloo on cpu]"),
        click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True),
        click.option("--collective", type=click.Choice(HARNESS_COLLECTIVES), default=None,
                     help="how all-reduces run: auto = the backend's own (NCCL on cuda, gloo on cpu); symm-mem = "
                          "PyTorch symmetric memory as vLLM runs it (multimem / two-shot by the simulator's rule, "
                          "NCCL above its max size or without NVLS multicast; cuda + nccl, eager, bf16/fp32) "
                          "[default: auto; bench: as the --stack preset maps its all-reduce]"),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--timeout-s", type=float, default=None,
                     help="a collective (or rank start-up) that waits longer ends the run with an error "
                          "[default: 30 s + 20x a pessimistic estimate of the longest pass]"),
        click.option("--deadline-s", type=float, default=None, help="bound on the whole run (launcher kills all)"),
        click.option("--json", "as_json", is_flag=True, help="print the result as JSON"),
        click.option("--out", type=click.Path(dir_okay=False), default=None, callback=not_empty,
                     help="write the result JSON here"),
        click.option("--emulate-tp", type=int, default=None,
                     help="with --tp 1: run rank 0 of a TP-N job on one device (its shard shapes; collectives "
                          "over the 1-process group), e.g. one rank of llama-3.1-70b at TP 8 on a single GPU"),
        click.option("--fault", default=None, hidden=True, callback=not_empty, help="test hook RANK:PHASE:exit|hang"),
    ]
    for o in reversed(opts):
        f = o(f)
    return stack_options(preset_option(f))     # --stack: mapped onto the harness by _stack_preset


def _config(kind: str, **kw):
    """Options -> validated RunConfig (ValueError on user mistakes: exit 2 through user_errors)."""
    device = kw.pop("device")
    if device == "auto":
        device = "cuda" if cuda_available(kind) else "cpu"
    _check_ranges(kw)
    if device == "cuda":
        check_cuda(1 if under_torchrun() else kw["tp"], kind)
    backend = kw.pop("backend") or ("nccl" if device == "cuda" else "gloo")
    kw["collective"] = kw.get("collective") or "auto"
    dtype = kw.pop("dtype") or ("fp16" if device == "cuda" else "fp32")
    if dtype == "fp8":          # e4m3 linears computed in the device's run dtype (hw/fp8.py: upcast for compute)
        dtype, kw["weight_dtype"] = ("bf16" if device == "cuda" else "fp32"), "fp8"
    kw["kv_dtype"] = kw.get("kv_dtype") or "auto"
    kw["ar_norm_fusion"] = kw.get("ar_norm_fusion") or "none"      # the harness runs the fused kernel's dataflow
    kw.update({k: v for k, v in HARNESS_STACK.items() if kw.get(k) is None})
    schedules = kw.pop("schedules") or DEFAULT_SCHEDULES
    defaults = {"bench": (1024, 512), "check": (16, 9)}[kind]
    kw["prompt_len"] = defaults[0] if kw["prompt_len"] is None else kw["prompt_len"]
    kw["gen_len"] = defaults[1] if kw["gen_len"] is None else kw["gen_len"]
    kw.pop("deadline_s", None)
    if kw.get("decode_graphs", False) is None:
        kw["decode_graphs"] = device == "cuda" and kw["kv"] == "static"
    as_json = kw.pop("as_json")
    kw["model"], kw["checkpoint"] = model_and_checkpoint(kind, kw.get("model"), kw.get("checkpoint"))
    if kind == "check" and kw.get("emulate_tp"):
        raise UserError("--emulate-tp is for bench: a lone rank's output is a partial sum, so there is "
                        "nothing to check against the reference")
    if kw.get("timeout_s") is None:       # proportionate to the work: a hang is reported in ~30 s on tiny
        m = get_model(kw["model"])
        m = m.truncated(kw["layers"]) if kw.get("layers") else m
        # prefill: 2 flops per parameter per token + the attention scores (4 * layers * b * p^2 * hidden)
        flops = (2.0 * m.param_count() * kw["batch"] * kw["prompt_len"]
                 + 4.0 * m.layers * kw["batch"] * kw["prompt_len"] ** 2 * m.hidden) / (kw.get("emulate_tp") or kw["tp"])
        kw["timeout_s"] = round(default_timeout_s(flops, device), 1)
    cfg = RunConfig(device=device, backend=backend, dtype=dtype, schedules=tuple(schedules),
                    json=as_json, **kw)
    cfg.validate()
    return cfg


@click.command("bench")
@_common
@click.option("--repeats", type=int, default=5, show_default=True, help="measured generations per schedule")
@click.option("--warmup", type=int, default=1, show_default=True, help="unmeasured generations per schedule")
@click.option("--graphs/--no-graphs", "decode_graphs", default=None,
              help="decode under CUDA graphs [default: on for cuda with --kv static, else off]")
@click.option("--compile/--no-compile", "compile_", default=None,
              help="torch.compile each whole prefill and decode pass (Inductor: C++ kernels on CPU, Triton on "
                   "CUDA; functional collectives), as the reference harness; compiled code is cached "
                   "[default: off, or as the --stack preset compiles]")
@click.option("--gpu-mem-gib", type=float, default=None, help="per-rank memory to plan against [default: the device's]")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, callback=not_empty,
              help="also write a Chrome/Perfetto trace of one measured prefill and decode step per schedule "
                   "(a track per rank and stream; open in ui.perfetto.dev)")
@user_errors
def bench_cmd(deadline_s, compile_, trace_path=None, stack_name=None, **kw):
    """Measure tokens/s of each schedule (interleaved repeats; standard always included).

    --stack maps a preset onto what this harness can run (hw.bench.stack_harness_options); an explicit
    flag wins, and what PyTorch cannot run is listed in the result's stack.notes."""
    require_torch("bench")
    check_out_path(trace_path, "--trace")
    result, cfg, notes = _run_stacked("bench", stack_name, kw, compile_, deadline_s)
    if result is None:
        return
    click.echo(json.dumps(result, indent=1) if cfg.json else harness("tpsim.hw.bench", "bench").format_result(result))
    _echo_stack_notes(stack_name, notes, cfg)
    if cfg.out and not cfg.json:
        click.echo(f"wrote {cfg.out}")
    if trace_path:
        write_json_atomic(trace_path, bench_trace(result))
        click.echo(f"wrote {trace_path}: open it in ui.perfetto.dev or chrome://tracing", err=cfg.json)


def _run_stacked(command: str, stack_name: str | None, kw: dict, compile_: bool | None,
                 deadline_s: float | None) -> tuple[dict | None, RunConfig, list[str]]:
    """bench's and check's run: the --stack preset under the flags given (_stack_preset), the validated
    config, the memory gate, the ranks (tpsim.hw.<command>:worker; Ctrl-C exits 130), and the preset
    named in the result's stack. Returns (rank 0's result, or None in rank mode; the config; the
    preset's notes)."""
    compile_, notes = _stack_preset(command, stack_name, kw, compile_)
    cfg = _config(command, compile=compile_, deadline_s=deadline_s, **kw)
    memory_gate(cfg, command)
    with ctrl_c_exits_130(), PhaseBar() as bar:
        # bench counts rank 0's progress marks (RunConfig.bench_marks); check's few passes draw no bar
        on_beat = (lambda st: bar.update(bench_phase(st, cfg.tp), st.count if st else 0, cfg.bench_marks)) \
            if command == "bench" else None
        result = run_ranks(f"tpsim.hw.{command}:worker", cfg, deadline_s, command, on_beat=on_beat)
    if result is not None and stack_name:
        result["stack"] |= {"preset": stack_name, "notes": notes}
    return result, cfg, notes


def bench_phase(state, ranks: int) -> str:
    """What a bench's progress bar says rank 0 is doing (hw.beat.BeatState; None before its first mark)."""
    if state is None or not state.count:
        return f"bench: starting {ranks} ranks"
    return {"compile": "bench: compiling", "prefill": "bench: generations", "decode": "bench: generations"}.get(
        state.phase, f"bench: {state.phase}")


def _stack_preset(command: str, stack_name: str | None, kw: dict, compile_: bool | None) -> tuple[bool, list[str]]:
    """--stack NAME|FILE for bench and check alike: the preset mapped onto what this harness can run
    (hw.bench.stack_harness_options) under the flags given, each option the user did not give set in
    `kw`; an explicit flag wins. Returns (compile, a note for each preset value that runs otherwise)."""
    if not stack_name:
        return bool(compile_), []
    preset = load_stack(stack_name)
    device = kw["device"] if kw["device"] != "auto" else ("cuda" if cuda_available(command) else "cpu")
    opts, notes = harness("tpsim.hw.bench", command).stack_harness_options(
        _preset_under_flags(preset.values, kw, compile_), device)
    preset_compile = opts.pop("compile")
    if command == "check" and opts.pop("decode_graphs"):
        # check has no --graphs: it compares each pass run without graphs (bench replays them)
        notes.append("decode CUDA graphs: check compares passes run without graphs; bench replays them")
    for k, v in opts.items():
        if kw.get(k) is None:
            kw[k] = v
    return bool(preset_compile if compile_ is None else compile_), notes


def _echo_stack_notes(stack_name: str | None, notes: list[str], cfg) -> None:
    """The --stack preset's notes under the table, one a line (in JSON: the result's stack.notes)."""
    if notes and not cfg.json:
        for n in notes:
            echo_wrapped(f"stack {stack_name}: {n}")


# bench's flags that name a preset value of the same name and meaning (RunConfig's names)
_PRESET_FLAGS = ("attention", "kv", "expand_gqa", "prefill_logits", "head", "embed", "decode_graphs", "collective")


def _preset_under_flags(values: dict, kw: dict, compile_: bool | None) -> dict:
    """A --stack preset's values with each flag the user gave in its place, before the preset is mapped
    onto the harness (hw.bench.stack_harness_options): the flags win either way, and mapped this way
    the notes describe what runs (`--stack trtllm --attention math` said the harness ran flash)."""
    given = {k: kw[k] for k in _PRESET_FLAGS if kw.get(k) is not None}
    if compile_ is not None:                   # the harness compiles both passes or neither
        given |= {"compile_prefill": compile_, "compile_decode": compile_}
    return values | given


@click.command("check")
@_common
@click.option("--compile/--no-compile", "compile_", default=None,
              help="check the whole compiled passes (as `bench --compile`) instead of the eager runner "
                   "[default: off, or as the --stack preset compiles]")
@user_errors
def check_cmd(deadline_s, compile_, stack_name=None, **kw):
    """Numerics: each schedule's TP output vs its single-process reference (nonzero exit on failure).

    --stack maps a preset onto what this harness can run, as bench's (an explicit flag wins); what runs
    otherwise is listed under the table (in JSON: stack.notes)."""
    require_torch("check")
    result, cfg, notes = _run_stacked("check", stack_name, kw, compile_, deadline_s)
    if result is None:
        return
    click.echo(json.dumps(result, indent=1) if cfg.json else harness("tpsim.hw.check", "check").format_check(result))
    _echo_stack_notes(stack_name, notes, cfg)
    if not result["ok"]:
        raise SystemExit(1)


bench_cmd.name, check_cmd.name = "bench", "check"
