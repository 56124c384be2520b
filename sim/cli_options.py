"""The command line's front door, shared by every command (cli.py, hw/commands.py,
calib/commands.py): the one user-error exception and its decorator (exit 2, one line), the
workload and serving-stack flags declared once, and the one place a `Stack` is built from them."""
from __future__ import annotations

import functools
from dataclasses import asdict

import click

from tpsim.sim.bounds import BOUNDS
from tpsim.sim.model import MODELS, get_model
from tpsim.sim.predict import Workload
from tpsim.sim.profile import load_profile
from tpsim.sim.stack import ATTENTION_IMPLS, DECODE_KV, DTYPE_BYTES, HEADS, PREFILL_LOGITS, Stack, make_stack


class TpsimError(click.ClickException):
    """A user mistake: one line on stderr, exit code 2, no traceback."""

    exit_code = 2


def user_errors(fn):
    """Turn ValueError (bad model, TP, schedule, profile...) into a one-line error, exit 2."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except ValueError as e:          # sim.errors.UserError, ProfileError, CompareError, ...
            raise TpsimError(str(e)) from None
        except OSError as e:                  # an output path that cannot be written, a missing file
            raise TpsimError(f"cannot use {e.filename}: {e.strerror}") from None
    return wrapper


def workload_options(fn):
    """Options shared by predict, trace and sweep: the model, cluster and serving stack."""
    opts = [
        click.option("--model", required=True, help=f"Model preset, or a Hugging Face config.json (or its "
                                                     f"folder); NAME[:K] for its first K layers. "
                                                     f"Presets: {', '.join(MODELS)}"),
        click.option("--tp", type=int, required=True, help="Tensor-parallel degree (GPUs per model replica)."),
        click.option("--profile", default="h100-sxm", show_default=True,
                     help="Built-in profile name or path to a profile JSON (see `tpsim profiles list`)."),
        click.option("--batch", type=int, default=1, show_default=True, help="Sequences per batch."),
        click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True, help="Prompt tokens."),
        click.option("--gen", "gen_len", type=int, default=512, show_default=True, help="Generated tokens."),
        click.option("--gpus-per-node", type=int, default=None,
                     help="GPUs per node (default: the profile's); TP beyond it spans nodes."),
        click.option("--comm-group", type=int, default=None,
                     help="Ranks the collectives really span (default: TP). 1 predicts one rank of the TP job "
                          "emulated on a single GPU, as `tpsim bench --tp 1 --emulate-tp TP` measures it."),
        click.option("--memory-check/--no-memory-check", default=True, show_default=True,
                     help="Refuse a workload whose per-rank weights + KV cache + activations exceed the "
                          "profile's GPU memory."),
        click.option("--collective", default="auto", show_default=True,
                     help="Collective implementation, a table key of the profile (nccl, custom, gloo); "
                          "auto: the profile's default_impl."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return compile_options(stack_options(fn))


def compile_options(fn):
    """How each phase runs (torch.compile, CUDA graphs): predict, trace, sweep and show. Each
    defaults to None (the profile's stack_defaults, else Stack's). bench and check declare their
    own --compile, off by default: their harness runs eager unless asked."""
    opts = [
        click.option("--compile/--no-compile", "compile_", default=None,
                     help="Both phases torch.compile'd (Inductor's fused kernels, docs/compiled-stack.md) or eager "
                          "(one kernel per torch op). Default: the profile's stack_defaults, else compiled, as the "
                          "reference harness."),
        click.option("--compile-prefill/--no-compile-prefill", default=None,
                     help="Prefill compiled; overrides --compile for prefill."),
        click.option("--compile-decode/--no-compile-decode", default=None,
                     help="Decode compiled; overrides --compile for decode."),
        click.option("--decode-graphs/--no-decode-graphs", default=None,
                     help="Decode under CUDA graphs (torch.compile reduce-overhead). Default: the profile's "
                          "stack_defaults, else on when decode is compiled."),
        click.option("--prefill-graphs/--no-prefill-graphs", default=None,
                     help="Prefill under CUDA graphs. Default: the profile's stack_defaults, else off."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def stack_options(fn):
    """The serving-stack flags, declared once for every command that runs or prices a stack
    (predict, trace, sweep, show, bench, check). Each defaults to None: predict and trace then take the
    profile's stack_defaults, else Stack's defaults; bench and check take `HARNESS_STACK`."""
    opts = [
        click.option("--dtype", type=click.Choice(list(DTYPE_BYTES)), default=None,
                     help="Default: the profile's stack_defaults, else fp16 (bench/check: fp16 on cuda, fp32 on cpu)."),
        click.option("--head", type=click.Choice(HEADS), default=None,
                     help="LM head replicated on every rank, or split over the vocabulary + all-gather. "
                          "Default: the profile's stack_defaults, else replicated."),
        click.option("--attention", type=click.Choice(ATTENTION_IMPLS), default=None,
                     help="Attention kernel: math SDPA (materialized scores) or fused flash. Default: the "
                          "profile's stack_defaults, else math."),
        click.option("--kv", type=click.Choice(DECODE_KV), default=None,
                     help="Attention reads the whole static KV cache (masked) or only its filled part. "
                          "Default: the profile's stack_defaults, else static."),
        click.option("--prefill-logits", type=click.Choice(PREFILL_LOGITS), default=None,
                     help="Logits for every prompt position, or only the last. Default: the profile's "
                          "stack_defaults, else all."),
        click.option("--expand-gqa/--no-expand-gqa", default=None,
                     help="Repeat K/V heads to the query head count before attention. Default: the "
                          "profile's stack_defaults, else on."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


# What bench and check run for a stack flag not given (Stack's defaults; dtype follows the device).
HARNESS_STACK = {"head": "replicated", "attention": "math", "kv": "static", "prefill_logits": "all",
                 "expand_gqa": True}


# rich is imported by these three, at first use: ~30 ms that `--help`, `--json` and the commands
# that print no table (trace, sweep) do not pay at every start.

def rich_console(**kw):
    """A rich Console (kw: width, stderr, ...)."""
    from rich.console import Console      # lazy: rich takes ~30 ms to import; only printing needs it
    return Console(**kw)


def rich_table(**kw):
    """A rich Table (kw: title, title_justify, ...)."""
    from rich.table import Table          # lazy: rich (see rich_console)
    return Table(**kw)


def rich_escape(text: str) -> str:
    """`text` with its [brackets] escaped, printed as is by rich."""
    from rich.markup import escape        # lazy: rich (see rich_console)
    return escape(text)


def _stderr_console():
    return rich_console(stderr=True)


MAX_TOKENS = BOUNDS["tokens"].hi       # --prompt and --gen (documented in docs/reliability.md)


def check_sizes(tp=None, batch=None, prompt_len=None, gen_len=None, gpus_per_node=None, comm_group=None) -> None:
    """Workload sizes within the bounds table (sim/bounds.py), before any work (memory and time grow
    with them)."""
    for name, v, bound in (("--tp", tp, "tp"), ("--batch", batch, "batch"), ("--prompt", prompt_len, "tokens"),
                           ("--gen", gen_len, "tokens"), ("--gpus-per-node", gpus_per_node, "gpus_per_node"),
                           ("--comm-group", comm_group, "tp")):
        if v is not None and not BOUNDS[bound].lo <= v <= BOUNDS[bound].hi:
            raise ValueError(f"{name} must be in {BOUNDS[bound].lo}..{BOUNDS[bound].hi}, got {v}")


def make_workload(model, tp, profile, batch, prompt_len, gen_len, gpus_per_node, dtype, head, attention, kv,
                  prefill_logits, expand_gqa, decode_graphs, prefill_graphs, collective, memory_check=True,
                  comm_group=None, compile_=None, compile_prefill=None, compile_decode=None):
    check_sizes(tp, batch, prompt_len, gen_len, gpus_per_node, comm_group)
    prof = load_profile(profile)
    given = dict(dtype=dtype, head=head, attention=attention, kv=kv, prefill_logits=prefill_logits,
                 expand_gqa=expand_gqa, prefill_graphs=prefill_graphs, decode_graphs=decode_graphs,
                 compile=compile_, compile_prefill=compile_prefill, compile_decode=compile_decode,
                 collective=collective)
    # what the user said wins; then what the profile's cluster runs by default; then Stack's defaults
    stack = make_stack(given, prof.stack_defaults)
    impls = sorted({t.impl for t in prof.collective_tables} | {prof.default_impl, "nccl", "auto"})
    if stack.collective not in impls:
        raise ValueError(f"profile {prof.name} has no collective implementation {stack.collective!r}; "
                         f"choose from: {', '.join(impls)}")
    return Workload(get_model(model), tp, prof, batch, prompt_len, gen_len, stack, gpus_per_node,
                    memory_check=memory_check, comm_group=comm_group)


def stack_dict(stack: Stack) -> dict:
    """The priced stack as JSON (every Stack field)."""
    return asdict(stack)
