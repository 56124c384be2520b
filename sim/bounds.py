"""One table of bounds for every count a user or a file can set (docs/reliability.md, issue #29).

Work and memory grow with each of these (layers, micro-batches and ranks are simulated one by
one; sockets and NICs become topology links; table points are read and indexed), so one value
must not buy unbounded work: `token-split:1000` ran for 11 minutes, `collective --group 2000000`
and a profile with 10^9 sockets ran out of memory. Each bound is what a real cluster or model
has, with headroom, and says why. The profile checks, the HF config reader, the schedule parser,
the collective command and the CLI's workload sizes all read this table (`check`).

Times a file sets (a stack file's host lane, an engine benchmark's latencies, an nccl-tests table's
times) are bounded the same way, by SECONDS (`check_time`): finite, within a span with its reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    lo: int
    hi: int
    why: str              # what real system the upper bound is measured against


BOUNDS: dict[str, Bound] = {
    # model shapes (Hugging Face config.json, presets)
    "layers": Bound(1, 1024, "the deepest published dense decoders have ~128 layers (Llama 3.1 405B: 126, "
                             "PaLM 540B: 118)"),
    "hidden": Bound(1, 1 << 17, "the widest published LLMs have hidden sizes of ~20k (MT-NLG 530B: 20480, "
                                "PaLM 540B: 18432)"),
    "heads": Bound(1, 1024, "published LLMs have at most ~128 attention heads (Llama 3.1 405B, MT-NLG)"),
    "head_dim": Bound(1, 1024, "published head sizes are 64..256 (Gemma: 256)"),
    "ffn": Bound(1, 1 << 20, "the widest published MLPs are ~74k (PaLM 540B: 73728)"),
    "vocab": Bound(1, 1 << 22, "the largest published vocabularies are ~262k tokens (Gemma 3: 262144)"),
    "sliding_window": Bound(1, 1 << 24, "windows are at most the context length (<= 2^20 tokens here)"),
    # the workload (CLI)
    "tp": Bound(1, 1024, "a TP group spans one model replica's GPUs; NVLink domains reach 576 GPUs (NVL576)"),
    "batch": Bound(1, 1 << 16, "serving batches are at most a few thousand sequences"),
    "tokens": Bound(1, 1 << 20, "the longest production context windows are ~1M tokens"),
    "micro_batches": Bound(2, 64, "overlap schedules split a batch into 2-4 micro-batches (NanoFlow's "
                                  "nano-batches, SGLang's two-batch overlap); more only shrinks each GEMM"),
    # the cluster (profiles, collective command)
    "gpus_per_node": Bound(1, 1024, "one NVLink/PCIe domain: 8 GPUs in a DGX, 72 in an NVL72 rack, 576 in NVL576"),
    "collective_group": Bound(1, 16384, "the largest single training jobs run on ~16k GPUs (Llama 3 405B: "
                                        "16,384 H100s)"),
    "sockets": Bound(1, 32, "the largest shared-memory x86 servers have 32 sockets (HPE Superdome Flex)"),
    "nics_per_node": Bound(0, 2048, "at most two NICs per GPU (DGX H100: 8 compute NICs for 8 GPUs)"),
    "message_bytes": Bound(1, 1 << 40, "no GPU holds 1 TiB (B300: 288 GB), so no collective moves more"),
    # measured tables (profiles)
    "table_points": Bound(1, 10_000, "an nccl-tests sweep of 8 B..16 GiB doubling is 32 sizes"),
    "tables": Bound(0, 1000, "one table per (collective, group, mode, impl): a few hundred at most"),
    "compute_points": Bound(0, 50_000, "a full calibration records ~10^3 op shapes; the built-in GEMM "
                                        "tables expand to ~11k points (100k points took 8 s to load)"),
    # the harness and the sweep (CLI)
    "jobs": Bound(1, 1024, "one worker process per core; the largest single hosts have ~1k hardware threads"),
    "repeats": Bound(1, 10 ** 6, "a benchmark repeats each generation a few to a few hundred times"),
    "warmup": Bound(0, 10 ** 6, "unmeasured generations: a few (compile and caches warm after the first)"),
    # predict --exhaustive: schedules x steps (prefill + gen - 1 decode) x layers x ranks, each simulated
    "exhaustive_steps": Bound(1, 4_000_000, "~4,500 rank-layer steps a second on one core (8B TP8 gen 512, 5 "
                                            "schedules: 655,360 in 135 s): 4M is ~15 minutes"),
    "seed": Bound(0, 2 ** 32 - 1, "numpy's seed range; torch.manual_seed takes it too (10^20 crashed the ranks)"),
}


def problem(name: str, value) -> str | None:
    """None when `value` is an int within BOUNDS[name], else what it must be ("must be in 1..1024
    (why), got 2000"): the one wording of check's errors and of a document's field checks
    (fileio/shape.py). Booleans and non-integers are refused, not truncated."""
    b = BOUNDS[name]
    shown = _shown(value) if isinstance(value, (int, float)) and abs(value) >= 1e15 else repr(value)
    if isinstance(value, bool) or not isinstance(value, int):
        if not (isinstance(value, float) and value.is_integer()):
            return f"must be an integer in {b.lo}..{b.hi}, got {value!r}"
        value = int(value)
    if not b.lo <= value <= b.hi:
        return f"must be in {b.lo}..{b.hi} ({b.why}), got {shown}"
    return None


def check(name: str, value, what: str | None = None) -> int:
    """`value` as an int within BOUNDS[name]; ValueError naming `what` (default: the bound's name),
    the range and the reason otherwise (`problem`)."""
    bad = problem(name, value)
    if bad:
        raise ValueError(f"{what or name} {bad}")
    return int(value)


@dataclass(frozen=True)
class Span:
    """A time's range in seconds (a real number, unlike a Bound's count)."""

    lo: float
    hi: float
    why: str              # what real system the upper bound is measured against


# Times a file can set (a stack file's host lane, an engine benchmark, an nccl-tests table): each must
# be finite and within its span, or one value buys a nonsense answer (a host term of 1e308 s gave a
# ZeroDivisionError in predict: tokens/s of 0 over 0; 9.2e18 s was accepted).
SECONDS: dict[str, Span] = {
    "host_step": Span(0.0, 60.0, "the presets' host terms are 0.3-255 us per step, rank or sequence "
                                 "(sim/stack/presets/); a minute is no serving engine's"),
    "bench_latency": Span(1e-9, 86400.0, "one benchmarked generation or engine step; a day is no latency "
                                         "benchmark"),
    "measured_op": Span(1e-9, 1e6, "no kernel or collective is shorter than a nanosecond; one of 11 days "
                                   "is no measurement"),
}
UNITS = {"s": (1.0, "seconds"), "ms": (1e-3, "ms"), "us": (1e-6, "us")}   # unit -> (seconds, its name)


def time_problem(name: str, value, unit: str = "s") -> str | None:
    """None when `value` (in `unit`) is a finite number within SECONDS[name], else what it must be
    ("must be a number of s in 0..60 (why), got 1e+308"), the value cut to a short line."""
    s, (u, unit) = SECONDS[name], UNITS[unit]
    span = f"{s.lo / u:g}..{s.hi / u:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        return f"must be a finite number of {unit} in {span}, got {_shown(value)}"
    if not s.lo <= value * u <= s.hi:
        return f"must be a number of {unit} in {span} ({s.why}), got {_shown(value)}"
    return None


def check_time(name: str, value, what: str, unit: str = "s") -> float:
    """`value` (in `unit`) as a float within SECONDS[name]; ValueError "`what` must be ..." otherwise."""
    bad = time_problem(name, value, unit)
    if bad:
        raise ValueError(f"{what} {bad}")
    return float(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:              # an int past float's range (a 400-digit JSON number)
        return False


def _shown(value) -> str:
    """A value for an error message: a number in 3 significant digits, anything else cut to 60 characters
    (a 5,000-digit number is not echoed whole)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return f"{value:.3g}"
        except OverflowError:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
