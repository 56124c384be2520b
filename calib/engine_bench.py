"""`tpsim profiles import-engine-bench`: a deployment's own engine benchmarks -> its host step terms,
in a stack file (sim/stack/presets: `tpsim predict --stack my-vllm.json`).

Input: `vllm bench latency --output-json` files (or their .pytorch.json sibling) or SGLang
`bench_one_batch --result-filename` lines (calib.engine_bench_read.parse_engine_bench), at two or more TP
degrees, of one model on one profile. For each run tpsim predicts the GPU side alone (the preset's
stack with its host lane off, the standard schedule); what the run measured beyond it, per engine
step, is the deployment's exposed host time:

    vLLM:   (avg_latency - predicted prefill + decode) / output_len     (output_len engine steps)
    SGLang: median_decode_latency - predicted decode step                (bench_one_batch runs the
            model runner without the scheduler: the runner's own host time per step)

fitted by non-negative least squares to  schedule_s + handoff_per_rank_s * (tp - 1)  (+
schedule_per_seq_s * batch when the runs span two or more batch sizes): sim.stack.host_lane's in-series lane,
whose hand-off term grows with the ranks waiting at the first collective. The stack file extends the
preset with those terms (overlap off: what the runs show is the host time left exposed), every other
host term 0, each value sourced to the files it came from, and the fit's per-run table beside it.
These are the user's measurements of the user's deployment, as `import-nccl-tests` imports a
cluster's collectives: they never become a built-in constant. The fitted terms hold whatever the GPU
model misses as well; the per-run residuals say how well two terms explain them.
"""
from __future__ import annotations

import json
from dataclasses import fields, replace

import numpy as np

from tpsim.sim.stack.host_lane import COUNTS, FLAGS, HostStep
from tpsim.sim.stack.presets import parse_stack
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.stack.spec import make_stack
from tpsim.sim.stack.presets import STACK_FORMAT, preset as builtin_preset
from tpsim.fileio.policy import MAX_LOG_BYTES, read_input_text
from tpsim.fileio.shape import short

from tpsim.calib.engine_bench_read import RUN_KEYS, EngineRun, check_run_value, parse_engine_bench


def parse_file_spec(spec: str) -> tuple[str, dict]:
    """FILE[:tp=N,batch=B,input_len=P,output_len=G] -> (FILE, {key: int}), each key once and
    within the bounds table."""
    path, sep, tail = spec.rpartition(":")
    if not sep or "=" not in tail:
        return spec, {}
    given = {}
    where = spec if len(spec) <= 120 else path      # a 5,000-digit value is not echoed whole
    for part in tail.split(","):
        k, eq, v = part.partition("=")
        k, v = k.strip().replace("-", "_"), v.strip()
        if not eq or k not in RUN_KEYS or not v.isdigit():
            raise ValueError(f"{where}: after ':' give {', '.join(f'{k}=N' for k in RUN_KEYS)} (comma-separated), "
                             f"got {short(part)}")
        if k in given:               # the last one winning silently hid a typo in the other
            raise ValueError(f"{where}: {k} is given twice; give each of {', '.join(RUN_KEYS)} once")
        if len(v) > 19:              # int() of 4,300+ digits raises Python's own message; none is in bounds
            raise ValueError(f"{where}: {k} must be a count of at most 19 digits, got one of {len(v)} digits")
        given[k] = check_run_value(k, int(v), f"{where}: {k}")
    return path, given


def read_runs(specs, **defaults) -> list[EngineRun]:
    """The runs of every FILE[:k=v,...] spec; `defaults` (the --tp/--batch/... options, None where
    not given) fill what neither the file nor its spec says. Files are read by the input policy."""
    # an option's bad value names the option, not the first file it would have been applied to
    defaults = {k: check_run_value(k, v, f"--{k.replace('_', '-')}") for k, v in defaults.items() if v is not None}
    runs = []
    for spec in specs:
        path, given = parse_file_spec(spec)
        text = read_input_text(path, "engine benchmark", MAX_LOG_BYTES)
        runs += parse_engine_bench(text, path, **(defaults | given))
    if not runs:
        raise ValueError("no benchmark runs in the files given")
    return runs


def gpu_step_s(run: EngineRun, model, profile, preset) -> float:
    """tpsim's GPU-only time per engine step of `run` (the preset's stack, its host lane off)."""
    stack = replace(make_stack({}, profile.stack_defaults, preset=preset.values), host=HostStep(), host_ranges=())
    w = Workload(model, run.tp, profile, run.batch, run.input_len, run.output_len, stack, memory_check=False)
    p = Simulator(w, record=False).predict("standard")
    if run.decode_step_s is not None:
        if run.output_len < 2:
            raise ValueError(f"{run.path}: output_len {run.output_len} has no decode step to compare")
        return p.decode_s / (run.output_len - 1)
    return (p.prefill_s + p.decode_s) / run.output_len


def fit(runs: list[EngineRun], model, profile, preset) -> dict:
    """The host terms and the per-run table (see the module docstring)."""
    tps = sorted({r.tp for r in runs})
    if len(tps) < 2:
        raise ValueError(f"the runs are all at TP {tps[0]}: give runs at two or more TP degrees (the hand-off "
                         f"term is what changes with TP)")
    if len({r.engine for r in runs}) > 1:
        raise ValueError("mixing vLLM and SGLang runs: fit each engine's files on their own")
    per_seq = len({r.batch for r in runs}) > 1
    rows, y = [], []
    table = []
    for r in runs:
        gpu = gpu_step_s(r, model, profile, preset)
        meas = r.decode_step_s if r.decode_step_s is not None else r.latency_s / r.output_len
        rows.append([1.0, r.tp - 1.0] + ([float(r.batch)] if per_seq else []))
        y.append(meas - gpu)
        table.append({"path": r.path, "layout": r.layout, "tp": r.tp, "batch": r.batch, "input_len": r.input_len,
                      "output_len": r.output_len, "measured_step_s": meas, "gpu_step_s": gpu,
                      "residual_step_s": meas - gpu})
    from scipy.optimize import nnls       # lazy: scipy.optimize takes ~0.3 s to import; only the fit needs it
    coef, _ = nnls(np.array(rows), np.array(y))
    terms = {"schedule_s": float(coef[0]), "handoff_per_rank_s": float(coef[1])}
    if per_seq:
        terms["schedule_per_seq_s"] = float(coef[2])
    for row, x in zip(table, rows):
        row["fitted_step_s"] = float(np.dot(coef, x))
    return {"terms": terms, "runs": table, "negative": [t["path"] for t in table if t["residual_step_s"] < 0]}


def build_stack(result: dict, runs: list[EngineRun], *, preset: str, name: str, model: str, profile: str) -> dict:
    files = ", ".join(sorted({r.path for r in runs}))
    shape = "; ".join(f"TP {r.tp} batch {r.batch} in {r.input_len} out {r.output_len}" for r in runs)
    src = (f"fitted by tpsim profiles import-engine-bench from {files} ({shape}): measured step time minus "
           f"tpsim's GPU-only prediction ({model}, profile {profile}, stack {preset} without its host lane)")
    # every host field set: a fitted value replaces the preset's value and its range (sim.stack.presets)
    host = {f.name: (False if f.name in FLAGS else 0 if f.name in COUNTS else 0.0) for f in fields(HostStep)} \
        | result["terms"]
    sources = {f"host.{k}": (src if k in result["terms"] else
                             ("the runs show the exposed host time: fitted in series" if k in FLAGS else
                              "0: held in the fitted terms")) for k in host}
    return {"format": STACK_FORMAT, "name": name, "extends": preset,
            "engine": f"{builtin_preset(preset).engine if builtin_preset(preset) else preset}, host terms fitted to a "
                      f"deployment",
            "host": host, "sources": sources,
            "fit": {"model": model, "profile": profile, "runs": result["runs"]}}


def load_stack_doc_check(doc: dict, out: str) -> None:
    """The document reads back as a stack (the same parser --stack uses)."""
    parse_stack(json.loads(json.dumps(doc)), out)
