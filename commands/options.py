"""The flags shared by the commands, declared once (workload, compile, serving stack, --stack
preset, --profile), the one check every free-text option runs (not_empty), and the one place a
`Workload` and its `Stack` are built from them (make_workload)."""
from __future__ import annotations

from dataclasses import asdict

import click

from tpsim.sim.stack.impls import ENGINE_COLLECTIVES, check_collective_impl
from tpsim.sim.model.presets import MODELS, get_model
from tpsim.sim.predict import Workload
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.fp8 import model_given
from tpsim.sim.stack.ar_fusion import AR_NORM_FUSIONS
from tpsim.sim.stack.spec import (ATTENTION_IMPLS, DECODE_KV, DTYPE_CHOICES, EMBEDS, HEADS, KV_DTYPES,
                                  PREFILL_LOGITS, Stack, make_stack)
from tpsim.sim.stack.presets import load_stack, names as preset_names

from tpsim.commands.bounds import check_sizes
from tpsim.commands.errors import bad_value


def not_empty(ctx: click.Context, param: click.Parameter, value):
    """The click callback of every free-text option and argument (names, paths, specs): an explicitly
    given empty value (`--stack ""`, often an unset shell variable) is refused, naming the option, as
    "Invalid value for '--stack': must not be empty". Without it the commands' `if value:` read ""
    as "not given" and silently ran the default, or carried it to a lookup's "stack file . is a
    directory". A repeatable option's value is a tuple: each item is checked. None (not given) passes."""
    if ctx.resilient_parsing:        # shell completion parses a half-typed line: refuse nothing
        return value
    for v in (value if isinstance(value, tuple) else (value,)):
        if isinstance(v, str) and v == "":
            raise bad_value(ctx, param, "must not be empty")     # one line, exit 2, as every user error
    return value


def profile_option(fn):
    """--profile NAME|FILE, declared once (predict, trace, show): one profile, whose stack_defaults
    fill the stack flags not given."""
    return click.option("--profile", default="h100-sxm", show_default=True, callback=not_empty,
                        help="Built-in profile name or path to a profile JSON (see `tpsim profiles list`); "
                             "its stack_defaults set the stack flags not given.")(fn)


def workload_options(fn):
    """Options shared by predict and trace: the model, cluster and serving stack."""
    opts = [
        click.option("--model", required=True, callback=not_empty,
                     help=f"Model preset, or a Hugging Face config.json (or its folder); NAME[:K] (brackets "
                          f"included, e.g. llama-3.1-405b[:8]) for its first K layers. Presets: {', '.join(MODELS)}"),
        click.option("--tp", type=int, required=True, help="Tensor-parallel degree (GPUs per model replica)."),
        profile_option,
        click.option("--batch", type=int, default=1, show_default=True, help="Sequences per batch."),
        click.option("--prompt", "prompt_len", type=int, default=1024, show_default=True, help="Prompt tokens."),
        click.option("--gen", "gen_len", type=int, default=512, show_default=True, help="Generated tokens."),
        click.option("--gpus-per-node", type=int, default=None,
                     help="Ranks placed on each node (default: the profile's gpus_per_node); TP beyond it spans "
                          "nodes. The node stays the profile's hardware (its NICs, NVLink): fewer ranks use fewer "
                          "of its GPUs. To price another machine, give a profile that describes it."),
        click.option("--comm-group", type=int, default=None,
                     help="Ranks the collectives really span (default: TP). 1 predicts one rank of the TP job "
                          "emulated on a single GPU, as `tpsim bench --tp 1 --emulate-tp TP` measures it."),
        click.option("--memory-check/--no-memory-check", default=True, show_default=True,
                     help="Refuse a workload whose per-rank weights + KV cache + activations exceed the "
                          "profile's GPU memory."),
        click.option("--collective", default="auto", show_default=True, callback=not_empty,
                     help="Collective implementation: a table key of the profile (nccl, custom, gloo), or a "
                          f"serving engine's all-reduce ({', '.join(ENGINE_COLLECTIVES)}; sim/stack/impls.py); "
                          "auto: the profile's default_impl."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return compile_options(stack_options(preset_option(fn)))


def preset_option(fn):
    """--stack NAME|FILE, declared once (predict, trace, show, sweep, bench, check): a serving engine's preset
    or a stack file."""
    return click.option(
        "--stack", "stack_name", default=None, metavar="NAME|FILE", callback=not_empty,
        help=f"Serving-stack preset ({', '.join(preset_names())}; `tpsim stacks`) or a stack file (JSON, e.g. from `tpsim profiles "
             f"import-engine-bench`): its choices and host lane, each with its source (docs/serving-engines.md). "
             f"An explicit flag overrides it. Default: reference (the profile's stack_defaults, else Stack's).")(fn)


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
        click.option("--dtype", type=click.Choice(list(DTYPE_CHOICES)), default=None,
                     help="fp8: e4m3 weights and inputs for the layers' linears (W8A8), bf16 activations, a "
                          "16-bit all-reduce (docs/fp8.md); an FP8 checkpoint is FP8 whatever this says. Default: "
                          "the profile's stack_defaults, else fp16 (bench/check: fp16 on cuda, fp32 on cpu)."),
        click.option("--kv-dtype", type=click.Choice(KV_DTYPES), default=None,
                     help="fp8: an e4m3 KV cache (vLLM --kv-cache-dtype fp8): half the bytes attention reads "
                          "and the cache holds. Default: auto (the activations' dtype)."),
        click.option("--ar-norm-fusion", type=click.Choice(AR_NORM_FUSIONS), default=None,
                     help="Standard TP's all-reduce, residual add and RMSNorm as one fused kernel (FlashInfer's "
                          "trtllm_allreduce_fusion) inside an engine's size window: vllm (its AllReduceFusionPass) "
                          "or sglang (--enable-flashinfer-allreduce-fusion); docs/no-retraining.md. Default: none."),
        click.option("--head", type=click.Choice(HEADS), default=None,
                     help="LM head replicated on every rank, or split over the vocabulary + all-gather. "
                          "Default: the profile's stack_defaults, else replicated."),
        click.option("--embed", type=click.Choice(EMBEDS), default=None,
                     help="Input embedding replicated on every rank, or split over the vocabulary: a masked "
                          "lookup in the rank's shard + an all-reduce (the engines' VocabParallelEmbedding). "
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
HARNESS_STACK = {"head": "replicated", "embed": "replicated", "attention": "math", "kv": "static",
                 "prefill_logits": "all", "expand_gqa": True}


def make_workload(model, tp, profile, batch, prompt_len, gen_len, gpus_per_node, dtype, head, attention, kv,
                  prefill_logits, expand_gqa, decode_graphs, prefill_graphs, collective, memory_check=True,
                  comm_group=None, compile_=None, compile_prefill=None, compile_decode=None, stack_name=None,
                  embed=None, kv_dtype=None, ar_norm_fusion=None):
    check_sizes(tp, batch, prompt_len, gen_len, gpus_per_node, comm_group)
    preset = load_stack(stack_name) if stack_name is not None else None
    prof = load_profile(profile)
    spec = get_model(model)
    given = dict(dtype=dtype, head=head, embed=embed, attention=attention, kv=kv, prefill_logits=prefill_logits,
                 expand_gqa=expand_gqa, prefill_graphs=prefill_graphs, decode_graphs=decode_graphs,
                 compile=compile_, compile_prefill=compile_prefill, compile_decode=compile_decode,
                 collective=collective, kv_dtype=kv_dtype, ar_norm_fusion=ar_norm_fusion)
    given = model_given(spec, given)          # an FP8 checkpoint's linears are FP8 (sim/fp8.py)
    # what the user said wins; then the --stack preset; then what the profile's cluster runs by default;
    # then Stack's defaults
    # (an engine's all-reduce that its engine would refuse here is priced as its fallback, with a note:
    # sim/price/comm/custom_allreduce.py)
    stack = make_stack(given, prof.stack_defaults, preset=preset.values if preset else None)
    check_collective_impl(prof, stack.collective)
    return Workload(spec, tp, prof, batch, prompt_len, gen_len, stack, gpus_per_node,
                    memory_check=memory_check, comm_group=comm_group)


def stack_dict(stack: Stack, stack_name: str | None = None) -> dict:
    """The priced stack as JSON (every Stack field, the host lane's among them); with --stack, the
    preset ("preset_info": its engine, file, and the source of each value it set that no flag
    overrode)."""
    out = asdict(stack)
    if stack_name is not None:
        p = load_stack(stack_name)
        info = p.to_dict()
        host = p.values.get("host", {})
        info["sources"] = {k: src for k, src in p.sources.items()
                           if (getattr(stack.host, k[5:]) == host.get(k[5:]) if k.startswith("host.")
                               else getattr(stack, k) == p.values.get(k))}
        out["preset_info"] = info
    return out


def stack_given(compile_, compile_prefill, compile_decode, decode_graphs, prefill_graphs, **flags) -> dict:
    """The stack flags (compile_options + stack_options) as make_stack's `given`; None = not given."""
    return dict(flags, compile=compile_, compile_prefill=compile_prefill, compile_decode=compile_decode,
                decode_graphs=decode_graphs, prefill_graphs=prefill_graphs)
