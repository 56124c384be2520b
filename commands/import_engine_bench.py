"""`tpsim profiles import-engine-bench`: the click command of calib/engine_bench.py (a deployment's
engine benchmarks -> its host step terms, in a stack file)."""
from __future__ import annotations

from pathlib import Path

import click

from tpsim.sim.model.hf.config import config_path
from tpsim.sim.model.presets import MODELS, get_model, is_config_path, split_layers
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.presets import load_stack, names as preset_names
from tpsim.fileio.lock import check_writable
from tpsim.fileio.policy import write_json_atomic

from tpsim.calib.engine_bench import build_stack, fit, load_stack_doc_check, read_runs
from tpsim.calib.nccl_import import refuse_overwriting_inputs

from tpsim.commands.console import echo_wrapped
from tpsim.commands.errors import user_errors
from tpsim.commands.options import not_empty


@click.command("import-engine-bench")
@click.argument("files", nargs=-1, required=True, callback=not_empty)
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=not_empty,
              help="stack file (JSON) to write")
@click.option("--model", required=True, callback=not_empty,
              help="the model the runs served (a preset or a Hugging Face config.json)")
@click.option("--profile", default="h100-sxm", show_default=True, callback=not_empty,
              help="the profile of the runs' GPUs")
@click.option("--stack", "preset", default=None, callback=not_empty,
              help=f"the preset the engine's choices come from [default: the engine of the files: vllm or sglang]; "
                   f"one of {', '.join(preset_names())} or a stack file")
@click.option("--tp", type=int, default=None, help="TP of every file that does not say (else FILE:tp=N)")
@click.option("--batch", type=int, default=None, help="batch of every file that does not say [vLLM default: 8]")
@click.option("--input-len", type=int, default=None, help="prompt tokens [vLLM default: 32]")
@click.option("--output-len", type=int, default=None, help="generated tokens [vLLM default: 128]")
@click.option("--name", default=None, callback=not_empty, help="stack name [default: the --out file's stem]")
@user_errors
def import_engine_bench_cmd(files, out, model, profile, preset, tp, batch, input_len, output_len, name):
    """Fit a deployment's host step terms from its engine benchmarks (`vllm bench latency --output-json`,
    SGLang bench_one_batch) at two or more TP degrees into a stack file: FILE[:tp=N,batch=B,...]."""
    check_writable(out)                    # the output-path policy: a regular file or a new name; `-` refused
    runs = read_runs(files, tp=tp, batch=batch, input_len=input_len, output_len=output_len)
    preset = preset or runs[0].engine
    base = load_stack(preset)
    # --out naming a benchmark, the --stack file (which the output would then extend: itself), the
    # model's config or a profile of --profile's chain would overwrite what the fit reads
    refuse_overwriting_inputs(out, [*{r.path for r in runs}, *base.files, *_model_config(model)], profile,
                              "the --profile")
    result = fit(runs, get_model(model), load_profile(profile), base)
    doc = build_stack(result, runs, preset=preset, name=name or Path(out).stem, model=model, profile=profile)
    load_stack_doc_check(doc, out)
    write_json_atomic(out, doc)
    t = result["terms"]
    echo_wrapped(f"wrote {out}: extends {preset}; per step {t['schedule_s'] * 1e3:.3f} ms + "
                 f"{t['handoff_per_rank_s'] * 1e6:.1f} us x (TP-1)"
                 + (f" + {t['schedule_per_seq_s'] * 1e6:.1f} us x batch" if "schedule_per_seq_s" in t else ""))
    for r in result["runs"]:
        echo_wrapped(f"  TP {r['tp']} batch {r['batch']}: measured {r['measured_step_s'] * 1e3:.3f} ms/step, "
                     f"tpsim GPU {r['gpu_step_s'] * 1e3:.3f}, fitted host {r['fitted_step_s'] * 1e3:.3f} "
                     f"(residual {(r['residual_step_s'] - r['fitted_step_s']) * 1e3:+.3f})  ({r['path']})")
    for p in result["negative"]:
        echo_wrapped(f"  note: {p} ran faster than tpsim's GPU-only prediction: the GPU model is slow there, "
                     f"not the host (host terms are kept >= 0)", err=True)


def _model_config(model: str) -> list[str]:
    """The config.json the --model argument reads ([] for a preset): a folder's config.json, NAME[:K]'s
    NAME. The argument as given was the only one checked, so `--model DIR --out DIR/config.json` (or
    `--model CONFIG[:4] --out CONFIG`) overwrote the model's config with the stack file."""
    try:
        base = split_layers(model)[0]
        return [] if base in MODELS or not is_config_path(base) else [str(config_path(base))]
    except ValueError:                 # a bad K, or no config there: get_model says so, naming it
        return []
