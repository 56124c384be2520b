"""Read serving engines' latency benchmarks (`vllm bench latency --output-json` or its .pytorch.json
sibling, SGLang's `bench_one_batch --result-filename` lines) into `EngineRun`s for `tpsim profiles
import-engine-bench` (calib/engine_bench.py fits them). Pure Python: no torch needed."""
from __future__ import annotations

import json
from dataclasses import dataclass

from tpsim.sim.bounds import check, check_time
from tpsim.fileio.policy import parse_json
from tpsim.fileio.shape import short

# `vllm bench latency`'s defaults (vllm/benchmarks/latency.py add_cli_args): --batch-size 8,
# --input-len 32, --output-len 128; its --output-json holds no run parameters, so a file's TP must be
# given (FILE:tp=N) and these stand for the rest unless given too.
VLLM_LATENCY_DEFAULTS = {"batch": 8, "input_len": 32, "output_len": 128}
# a run's shape: its keys (FILE:tp=N,batch=B,...) and the bounds-table entry of each
RUN_KEYS = {"tp": "tp", "batch": "batch", "input_len": "tokens", "output_len": "tokens"}


def check_run_value(key: str, value, where: str) -> int:
    """`value` of shape key `key` as an int within the bounds table (a run of 10^8 sequences is a
    typo, not a measurement); ValueError "`where` must be in LO..HI (why), got V" otherwise."""
    return check(RUN_KEYS[key], value, where)


@dataclass(frozen=True)
class EngineRun:
    """One engine benchmark run: its shape and what it measured (seconds)."""

    engine: str                     # "vllm" | "sglang"
    path: str
    layout: str                     # "vllm-latency-json" | "vllm-pytorch-json" | "sglang-one-batch-jsonl"
    tp: int
    batch: int
    input_len: int
    output_len: int
    latency_s: float | None = None          # vllm: mean latency of one generate() (prefill + output_len-1 decode steps)
    decode_step_s: float | None = None      # sglang: median decode step


def parse_engine_bench(text: str, name: str = "<bench>", **given) -> list[EngineRun]:
    """The runs in one benchmark output. `given` (tp, batch, input_len, output_len) fills what the
    file does not hold and must agree with what it does. ValueError (file, reason) otherwise.

    Layouts (shapes from the engines' source):
      * vllm/benchmarks/latency.py --output-json: {"avg_latency", "std_latency", "latencies": [...],
        "percentiles": {"10": ..., "99": ...}} (no run parameters: tp must be given);
      * its PyTorch-benchmark-format sibling (SAVE_TO_PYTORCH_BENCHMARK_FORMAT=1, *.pytorch.json,
        vllm/benchmarks/lib/utils.py): records whose benchmark.extra_info.args hold
        tensor_parallel_size, batch_size, input_len, output_len;
      * SGLang python/sglang/bench_one_batch.py --result-filename: JSON lines with batch_size,
        input_len, output_len, prefill_latency, median_decode_latency, ... (tp must be given)."""
    given = {k: check_run_value(k, v, f"{name}: {k}") for k, v in given.items() if v is not None}
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) > 1 and _one_value(lines[0][1]):    # JSON lines (bench_one_batch appends one per run)
        docs = [parse_json(line, f"{name} line {n}") for n, line in lines]
    else:                                 # one document, by the input policy (no NaN, 5,000-digit numbers, ...)
        docs = [parse_json(text, name)]
    if len(docs) == 1 and isinstance(docs[0], dict) and "avg_latency" in docs[0]:
        return [_vllm_latency(docs[0], name, given)]
    if len(docs) == 1 and isinstance(docs[0], list) and docs[0] and all(isinstance(r, dict) for r in docs[0]) \
            and all("benchmark" in r for r in docs[0]):
        return [_vllm_pytorch(r, name, given) for r in docs[0] if _get(r, name, "metric", "name") == "latency"]
    if docs and all(isinstance(d, dict) and "median_decode_latency" in d for d in docs):
        return [_sglang(d, f"{name} line {i + 1}", name, given) for i, d in enumerate(docs)]
    raise ValueError(f"{name}: neither `vllm bench latency --output-json` output (avg_latency, latencies, "
                     f"percentiles) nor SGLang bench_one_batch results (median_decode_latency per line)")


def _shape(where: str, path: str, found: dict, given: dict, defaults: dict) -> dict:
    """The run's shape at `where` (a file, or a line of one): the file's values, else those given for
    file `path` (already checked by parse_engine_bench), else `defaults`."""
    out = {}
    for k in RUN_KEYS:
        f, g = found.get(k), given.get(k)
        if f is not None:
            f = check_run_value(k, f, f"{where}: {k}")
            if g is not None and f != g:
                raise ValueError(f"{where}: the file says {k} {f}, but {k}={g} was given")
        v = f if f is not None else (g if g is not None else defaults.get(k))
        if v is None:
            raise ValueError(f"{where}: the file does not say its {k}; give it as {_spec_with(path, given, k)} "
                             f"(or --{k.replace('_', '-')} N for every file)")
        out[k] = v
    return out


def _spec_with(path: str, given: dict, key: str) -> str:
    """The command line's FILE:k=v,... for `path` with what was given and `key`=N added."""
    keys = [f"{k}={given[k]}" for k in RUN_KEYS if k != key and given.get(k) is not None]
    return f"{path}:{','.join(keys + [f'{key}=N'])}"


def _one_value(line: str) -> bool:
    """The line is one whole JSON value (the first of JSON lines), not the start of a document."""
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _seconds(v, name: str, what: str) -> float:
    """A measured latency within the bounds table's span (sim/bounds.py), naming the file and field."""
    return check_time("bench_latency", v, f"{name}: {what}")


def _get(d, name: str, *keys):
    """d[k0][k1]... or None where a key is absent; an object expected and something else found is
    an error naming the field (a string there was an AttributeError)."""
    for i, k in enumerate(keys):
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ValueError(f"{name}: '{'.'.join(keys[:i]) or 'the record'}' must be an object, got {short(d)}")
        d = d.get(k)
    return d


def _vllm_latency(d: dict, name: str, given: dict) -> EngineRun:
    lats = d.get("latencies")
    if not isinstance(lats, list) or not lats:
        raise ValueError(f"{name}: 'latencies' must be a non-empty list of seconds")
    for x in lats:
        _seconds(x, name, "each of 'latencies'")
    avg = _seconds(d["avg_latency"], name, "avg_latency")
    return EngineRun("vllm", name, "vllm-latency-json", **_shape(name, name, {}, given, VLLM_LATENCY_DEFAULTS),
                     latency_s=avg)


def _vllm_pytorch(r: dict, name: str, given: dict) -> EngineRun:
    args = lambda k: _get(r, name, "benchmark", "extra_info", "args", k)      # noqa: E731
    found = {"tp": args("tensor_parallel_size"), "batch": args("batch_size"),
             "input_len": args("input_len"), "output_len": args("output_len")}
    vals = _get(r, name, "metric", "benchmark_values")
    avg = _get(r, name, "metric", "extra_info", "avg_latency")
    if avg is None and isinstance(vals, list) and vals:
        avg = sum(_seconds(v, name, "each of metric.benchmark_values") for v in vals) / len(vals)
    return EngineRun("vllm", name, "vllm-pytorch-json", **_shape(name, name, found, given, VLLM_LATENCY_DEFAULTS),
                     latency_s=_seconds(avg, name, "metric.extra_info.avg_latency"))


def _sglang(d: dict, where: str, name: str, given: dict) -> EngineRun:
    found = {"batch": d.get("batch_size"), "input_len": d.get("input_len"), "output_len": d.get("output_len")}
    return EngineRun("sglang", name, "sglang-one-batch-jsonl", **_shape(where, name, found, given, {}),
                     decode_step_s=_seconds(d["median_decode_latency"], where, "median_decode_latency"))
