"""What a serving run measured, by the definitions vLLM's benchmark client uses (vllm/benchmarks/serve.py
calculate_metrics, v0.11.0; SGLang's bench_serving computes TPOT the same way):

  TTFT    first token - arrival
  TPOT    per request (E2E - TTFT) / (output - 1), requests with output > 1
  ITL     every gap between two consecutive tokens of a request, all requests pooled
  E2E     last token - arrival
  percentiles: numpy's linear interpolation (np.percentile), ITL weighted by how many gaps share a value
  duration: from the first arrival to the last token; throughput: requests and tokens over it
  goodput: requests meeting every SLO bound given (TTFT, TPOT, E2E), per second of the duration
           (vLLM's request_goodput, --goodput)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2e")


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """np.percentile's linear interpolation over `values` each repeated `weights` times (without repeating)."""
    if not len(values):
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    ends = np.cumsum(w)                           # value i covers ranks ends[i-1] .. ends[i]-1 (0-based)
    n = ends[-1]
    out = []
    for q in qs:
        pos = (n - 1) * q / 100.0
        lo = int(np.floor(pos))
        hi = min(lo + 1, n - 1)
        a = v[np.searchsorted(ends, lo, side="right")]
        b = v[np.searchsorted(ends, hi, side="right")]
        out.append(float(a + (b - a) * (pos - lo)))
    return out


@dataclass
class Summary:
    """One run's metrics (seconds), per-request arrays kept for the SLO checks."""

    requests: int
    duration_s: float
    ttft: np.ndarray
    tpot_all: np.ndarray                         # per request, 0 where the output is one token (vLLM's goodput)
    e2e: np.ndarray
    output: np.ndarray                           # output tokens per request
    itl: tuple                                   # (gap seconds, weights)
    input_tokens: int
    output_tokens: int
    preemptions: int
    iterations: int
    busy: float                                  # mean fraction of the duration the engines ran iterations
    pct: dict = field(default_factory=dict)      # metric -> {p: seconds}

    @property
    def tpot(self) -> np.ndarray:
        """TPOT of the requests with more than one output token (vLLM's metric leaves the others out)."""
        return self.tpot_all[self.output > 1]

    @property
    def request_rate(self) -> float:
        return self.requests / self.duration_s

    @property
    def output_rate(self) -> float:
        return self.output_tokens / self.duration_s

    @property
    def total_token_rate(self) -> float:
        return (self.input_tokens + self.output_tokens) / self.duration_s

    def good(self, slo: dict) -> np.ndarray:
        """Per request: meets every bound in `slo` (metric -> seconds; TPOT 0 for one-token outputs)."""
        ok = np.ones(self.requests, dtype=bool)
        for k, bound in slo.items():
            ok &= getattr(self, k if k != "tpot" else "tpot_all") <= bound
        return ok

    def goodput(self, slo: dict) -> float:
        return float(self.good(slo).sum()) / self.duration_s

    def to_dict(self) -> dict:
        out = {"requests": self.requests, "duration_s": self.duration_s, "request_throughput": self.request_rate,
               "output_throughput": self.output_rate, "total_token_throughput": self.total_token_rate,
               "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
               "preemptions": self.preemptions, "iterations": self.iterations, "busy": self.busy}
        for m in METRICS:
            a = self.pct[m]
            out[m] = {"mean_s": a["mean"], **{f"p{p}_s": a[p] for p in PERCENTILES}}
        return out


def summarize(run) -> Summary:
    """The metrics of a sim.serve.cluster.Run."""
    reqs = run.requests
    arr = np.array([r.arrival_s for r in reqs])
    first = np.array([r.first_s for r in reqs])
    done = np.array([r.done_s for r in reqs])
    out = np.array([r.output for r in reqs])
    ttft, e2e = first - arr, done - arr
    multi = out > 1
    tpot_all = np.zeros(len(reqs))
    tpot_all[multi] = (done[multi] - first[multi]) / (out[multi] - 1)
    gaps = [g for e in run.engines for g in e.itl]
    itl = (np.array([g for g, _ in gaps]), np.array([n for _, n in gaps], dtype=np.int64))
    duration = max(float(done.max() - arr.min()), 1e-12)
    s = Summary(len(reqs), duration, ttft, tpot_all, e2e, out, itl, int(sum(r.prompt for r in reqs)),
                int(out.sum()), sum(e.preempted for e in run.engines), sum(e.iterations for e in run.engines),
                float(np.mean([e.busy_s for e in run.engines])) / duration)
    for m, v in (("ttft", ttft), ("tpot", s.tpot), ("e2e", e2e)):
        s.pct[m] = {"mean": float(v.mean()) if len(v) else float("nan"),
                    **dict(zip(PERCENTILES, np.percentile(v, PERCENTILES).tolist() if len(v) else
                               [float("nan")] * 3))}
    g, w = itl
    mean = float((g * w).sum() / w.sum()) if len(g) else float("nan")
    s.pct["itl"] = {"mean": mean, **dict(zip(PERCENTILES, weighted_percentiles(g, w, PERCENTILES)))}
    return s
