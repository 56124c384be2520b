"""Request traces in the common public formats -> Traffic (arrival times, prompt and output tokens).

  azure     Azure LLM inference traces (Azure/AzurePublicDataset, AzureLLMInferenceTrace_{code,conv}.csv
            2023, *_1week.csv 2024): TIMESTAMP (a date-time, e.g. 2023-11-16 18:15:46.6805900),
            ContextTokens, GeneratedTokens
  burstgpt  BurstGPT (HPMLL/BurstGPT data/BurstGPT_*.csv): Timestamp (seconds), Model, Request tokens,
            Response tokens, Total tokens, Log Type; rows with Response tokens 0 are failed requests
            and are left out (the *_without_fails_* files hold none)
  mooncake  Mooncake (kvcache-ai/Mooncake FAST25-release traces, *.jsonl): one object per line,
            timestamp (milliseconds), input_length, output_length (hash_ids, the prefix blocks, are
            not used: tpsim does not model prefix caching)
  vidur     Vidur's trace CSV (microsoft/vidur data/processed_traces): arrived_at (s),
            num_prefill_tokens, num_decode_tokens
  csv       tpsim's own: arrival_s, prompt_tokens, output_tokens

Times are made relative to the first request and sorted (stable). ShareGPT (the JSON of conversations
vLLM's benchmark samples) holds text, not token counts: tokenize it with the model's tokenizer first
and write the csv format. A length that is not a whole number in 1..2^20 tokens, or a time that is not
a finite number, is refused naming its line.
"""
from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from tpsim.fileio.policy import read_input_text
from tpsim.sim.bounds import BOUNDS
from tpsim.sim.serve.traffic import Traffic

FORMATS = ("azure", "burstgpt", "mooncake", "vidur", "csv")
MAX_TRACE_BYTES = 1 << 30             # the Azure 2024 week-long code trace is ~0.2 GB of CSV
MAX_TOKENS = BOUNDS["tokens"].hi      # 2^20: the longest production contexts are ~1M tokens

# format -> (time column, prompt column, output column, time unit in seconds; None: a date-time)
COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", None),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens", 1.0),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens", 1.0),
    "csv": ("arrival_s", "prompt_tokens", "output_tokens", 1.0),
    "mooncake": ("timestamp", "input_length", "output_length", 1e-3),
}


def read_trace(path: str, fmt: str = "auto", limit: int | None = None) -> Traffic:
    """The requests of a trace file (the first `limit` of them when given)."""
    text = read_input_text(path, "trace", MAX_TRACE_BYTES)
    name = Path(path).name
    if fmt == "auto":
        fmt = detect(text, name)
    elif fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from: auto, {', '.join(FORMATS)}")
    rows = _mooncake_rows(text, name) if fmt == "mooncake" else _csv_rows(text, name, fmt)
    times, prompt, output, skipped = [], [], [], 0
    tcol, pcol, ocol, unit = COLUMNS[fmt]
    for line, row in rows:
        if fmt == "burstgpt" and _int(row, ocol, name, line, low=0) == 0:
            skipped += 1                          # a failed request (no response)
            continue
        times.append(_time(row, tcol, unit, name, line))
        prompt.append(_int(row, pcol, name, line))
        output.append(_int(row, ocol, name, line))
        if limit is not None and len(times) >= limit:
            break
    if not times:
        raise ValueError(f"trace {name}: no requests in it")
    t = np.array(times, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    src = f"trace {name} ({fmt}, {len(times)} requests" + (f"; {skipped} failed rows left out" if skipped else "") + ")"
    return Traffic(t, np.array(prompt, dtype=np.int64)[order], np.array(output, dtype=np.int64)[order], src)


def detect(text: str, name: str) -> str:
    """The format of a trace by its header (CSV) or first object (JSON lines)."""
    head = text.lstrip()[:4096]
    if head.startswith("[") or (head.startswith("{") and '"conversations"' in head.split("\n", 1)[0]):
        raise ValueError(f"trace {name}: a JSON document of conversations (ShareGPT?) holds text, not token counts: "
                         f"tokenize it with the model's tokenizer and write a CSV of arrival_s,prompt_tokens,"
                         f"output_tokens (--trace-format csv)")
    if head.startswith("{"):
        return "mooncake"
    first = [c.strip() for c in next(csv.reader([head.split("\n", 1)[0]]), [])]
    for fmt, (tcol, pcol, ocol, _) in COLUMNS.items():
        if fmt != "mooncake" and {tcol, pcol, ocol} <= set(first):
            return fmt
    raise ValueError(f"trace {name}: its header {','.join(first)[:120]!r} is none of the known formats "
                     f"({', '.join(FORMATS)}); give --trace-format")


def _csv_rows(text: str, name: str, fmt: str):
    reader = csv.DictReader(io.StringIO(text))
    reader.fieldnames = [f.strip() for f in reader.fieldnames or []]
    missing = [c for c in COLUMNS[fmt][:3] if c not in reader.fieldnames]
    if missing:
        raise ValueError(f"trace {name}: not a {fmt} trace: no column {missing[0]!r} in its header")
    for i, row in enumerate(reader, start=2):
        yield i, row


def _mooncake_rows(text: str, name: str):
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"trace {name} line {i}: not a JSON object ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"trace {name} line {i}: not a JSON object")
        yield i, row


def _int(row: dict, col: str, name: str, line: int, low: int = 1) -> int:
    v = row.get(col)
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"trace {name} line {line}: {col} {str(v)[:40]!r} is not a number") from None
    if not (math.isfinite(f) and f == int(f) and low <= f <= MAX_TOKENS):
        raise ValueError(f"trace {name} line {line}: {col} {str(v)[:40]} is not a token count in {low}..{MAX_TOKENS}")
    return int(f)


def _time(row: dict, col: str, unit: float | None, name: str, line: int) -> float:
    v = row.get(col)
    if unit is None:                              # a date-time (Azure), fractional seconds of any length
        try:
            date, _, frac = str(v).strip().partition(".")
            t = datetime.fromisoformat(date).replace(tzinfo=timezone.utc).timestamp()
            return t + (float("0." + frac) if frac else 0.0)
        except ValueError:
            raise ValueError(f"trace {name} line {line}: {col} {str(v)[:40]!r} is not a date-time") from None
    try:
        t = float(v) * unit
    except (TypeError, ValueError):
        t = math.nan
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"trace {name} line {line}: {col} {str(v)[:40]!r} is not a time >= 0")
    return t
