"""The requests a serving run replays: arrival times, prompt and output lengths (`Traffic`), and the
request objects an engine works on (`Request`).

Arrivals at a rate follow vLLM's benchmark client (vllm/benchmarks/serve.py get_request, v0.11.0):
inter-arrival gaps ~ Gamma(shape = burstiness, scale = 1 / (rate x burstiness)), so the mean gap is
1/rate and its coefficient of variation 1/sqrt(burstiness); burstiness 1 is a Poisson process. The
arrival times are the cumulative sums starting with the first gap (the first request does not come at
0), then scaled so that the last falls at N / rate (get_request's "close the gap" step, without a
ramp-up): the run's offered rate is the rate asked for, not a draw's (300 Poisson gaps of seed 0 sum to
1.16 x their mean). The gaps are drawn once for rate 1 and divided by the rate, so one seed gives the
same pattern at every rate (the rate sweep's bisection compares like with like).

Lengths without a trace follow vLLM's random dataset (vllm/benchmarks/datasets.py RandomDataset,
v0.11.0): each uniform in [L (1 - r), L (1 + r)] for --prompt / --gen L and --range-ratio r. The output
length is what the request generates: the benchmark's max_tokens with ignore_eos, as a trace's replay
must force it (the Azure and Mooncake traces release lengths, not text).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Traffic:
    """N requests: arrival times (seconds from the start, non-decreasing), prompt and output tokens."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    source: str = ""                 # where it came from, for the report

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.prompt) == len(self.output) == n) or n == 0:
            raise ValueError("traffic needs at least one request, with one prompt and output length each")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def at_rate(self, rate: float, burstiness: float = 1.0, seed: int = 0) -> "Traffic":
        """The same lengths, arriving at `rate` requests/s (vLLM's gamma gaps, see the module doc)."""
        return Traffic(arrival_times(len(self), rate, burstiness, seed), self.prompt, self.output,
                       f"{self.source}, arrivals at {rate:g} req/s" + (f" burstiness {burstiness:g}"
                                                                      if burstiness != 1 else ""))

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1])


def arrival_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """n arrival times at `rate` req/s with gamma gaps (vllm/benchmarks/serve.py get_request: np.random.gamma
    (shape=burstiness, scale=theta) with theta = 1 / (request_rate * burstiness)), the last at n / rate;
    one seed, one pattern at every rate (drawn at rate 1, divided by `rate`). Rate inf: all at 0."""
    if not rate > 0:
        raise ValueError(f"the request rate must be a positive number of requests/s, got {rate}")
    if rate == np.inf:                  # vLLM's default request_rate inf: every request at once
        return np.zeros(n)
    if not (burstiness > 0 and np.isfinite(burstiness)):
        raise ValueError(f"--burstiness must be positive (1: Poisson), got {burstiness}")
    t = np.cumsum(np.random.default_rng(seed).gamma(burstiness, 1.0 / burstiness, size=n))
    return t * (n / t[-1]) / rate


def random_lengths(n: int, prompt: int, gen: int, range_ratio: float = 0.0, seed: int = 0) -> tuple:
    """(prompt, output) lengths as vLLM's random dataset draws them: uniform integers in
    [L (1 - r), L (1 + r)] (RandomDataset.sample: np.random.randint(int(L * (1 - r)), int(L * (1 + r)) + 1)),
    at least 1."""
    if not 0 <= range_ratio < 1:
        raise ValueError(f"--range-ratio must be in [0, 1), got {range_ratio}")
    if prompt < 1 or gen < 1:
        raise ValueError(f"--prompt and --gen must be >= 1 token, got {prompt} and {gen}")
    rng = np.random.default_rng(seed + 1)           # not the arrivals' stream
    out = []
    for length in (prompt, gen):
        lo, hi = int(length * (1 - range_ratio)), int(length * (1 + range_ratio))
        out.append(np.maximum(rng.integers(lo, hi + 1, size=n), 1))
    return out[0], out[1]


def synthetic(n: int, rate: float, prompt: int, gen: int, range_ratio: float = 0.0, burstiness: float = 1.0,
              seed: int = 0) -> Traffic:
    """n requests of vLLM's random dataset at `rate` (see the module doc)."""
    p, o = random_lengths(n, prompt, gen, range_ratio, seed)
    src = f"random lengths prompt {prompt} gen {gen}" + (f" range {range_ratio:g}" if range_ratio else "")
    return Traffic(np.zeros(n), p, o, src).at_rate(rate, burstiness, seed)


class Request:
    """One request as an engine sees it. Lengths are tokens; times seconds. `computed` counts the
    tokens whose KV is in the cache (vLLM's num_computed_tokens); `generated` the output tokens emitted.
    A decoding request's two are kept by its engine's clock (engine.py) rather than each iteration."""

    __slots__ = ("rid", "arrival_s", "prompt", "output", "computed", "generated", "first_s", "last_s",
                 "done_s", "preemptions", "base", "ver", "key", "events", "alone", "order", "state")

    def __init__(self, rid: int, arrival_s: float, prompt: int, output: int):
        self.rid, self.arrival_s, self.prompt, self.output = rid, arrival_s, prompt, output
        self.computed = 0            # tokens with KV computed (waiting / prefilling requests)
        self.generated = 0           # output tokens emitted
        self.first_s = -1.0          # first token (TTFT = first_s - arrival_s)
        self.last_s = -1.0           # the token before the next one (ITL = next - last_s)
        self.done_s = -1.0
        self.preemptions = 0
        self.base = 0                # a decoding request: generated = base + its engine's clock
        self.ver = 0                 # bumps when its finish entry in the engine's heap goes stale
        self.key = 0                 # a decoding request: (computed - clock) mod block size
        self.events: list | None = None   # (time_s, phase) when the run records lifetimes
        self.alone = 1               # its last token was not its engine's cohort's (1; 2: skipped this iteration)
        self.order = 0               # admission order in its engine
        self.state = 0               # engine.WAITING, PREFILL, DECODE or DONE

    @property
    def tokens(self) -> int:
        """Prompt plus what it generated so far: what a recompute after preemption prefills."""
        return self.prompt + self.generated

    def mark(self, t: float, phase: str) -> None:
        if self.events is not None:
            self.events.append((t, phase))
