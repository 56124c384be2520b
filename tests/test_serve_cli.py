"""`tpsim serve`: its outputs (--json, --perfetto, --plot), the trace formats, the rate sweep and every
bad input as one line and exit 2 (commands/serve.py, sim/serve/; issue 46)."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.serve.metrics import weighted_percentiles
from tpsim.sim.serve.slo import SloUnmet, max_rate, parse_slo
from tpsim.sim.serve.traces import read_trace
from tpsim.sim.serve.traffic import arrival_times

FIX = Path(__file__).parent / "fixtures" / "serve"
SMALL = ["serve", "--model", "llama-3.2-1b", "--tp", "1", "--requests", "60"]


def cli(*args):
    return CliRunner().invoke(main, [*SMALL, *args])


def test_json_has_every_metric_at_every_percentile():
    r = cli("--rate", "20", "--schedule", "standard", "--schedule", "upper-bound", "--slo", "ttft=500ms", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [x["schedule"] for x in doc["runs"]] == ["standard", "upper-bound"]
    run = doc["runs"][0]
    for m in ("ttft", "tpot", "itl", "e2e"):
        assert set(run[m]) == {"mean_s", "p50_s", "p90_s", "p99_s"}
        assert run[m]["p50_s"] <= run[m]["p90_s"] <= run[m]["p99_s"]
    assert run["requests"] == 60 and "goodput" in run and doc["engine"]["engine"] == "vllm"
    assert doc["engine"]["sources"]["budget"].startswith("vllm/engine/arg_utils.py")


@pytest.mark.parametrize("name,fmt,n", [("azure_conv.csv", "azure", 4), ("burstgpt.csv", "burstgpt", 3),
                                        ("mooncake.jsonl", "mooncake", 3), ("vidur.csv", "vidur", 3),
                                        ("requests.csv", "csv", 4)])
def test_trace_formats(name, fmt, n):
    t = read_trace(str(FIX / name))
    assert fmt in t.source and len(t) == n and t.arrival_s[0] == 0
    assert (np.diff(t.arrival_s) >= 0).all()


def test_trace_times_and_lengths_as_published():
    """Azure's 7-digit fraction (4.3145790 s between its first two rows, as Vidur's processed copy has it);
    Mooncake's milliseconds; BurstGPT's failed row (0 response tokens) left out."""
    az = read_trace(str(FIX / "azure_conv.csv"))
    assert az.arrival_s[1] == pytest.approx(4.314579) and az.prompt[:2].tolist() == [374, 396]
    assert read_trace(str(FIX / "mooncake.jsonl")).arrival_s[1] == pytest.approx(27.482)
    b = read_trace(str(FIX / "burstgpt.csv"))
    assert b.output.tolist() == [18, 276, 312] and "1 failed" in b.source


def test_a_trace_replays_its_own_times():
    r = cli("--trace", str(FIX / "requests.csv"), "--schedule", "standard", "--json")
    doc = json.loads(r.output)
    assert doc["traffic"]["requests"] == 4 and doc["runs"][0]["rate"] is None


def test_perfetto_trace_of_request_lifetimes(tmp_path):
    out = tmp_path / "t.json"
    r = cli("--rate", "40", "--schedule", "standard", "--perfetto", str(out))
    assert r.exit_code == 0, r.output
    ev = json.loads(out.read_text())["traceEvents"]
    phases = {e["name"] for e in ev if e.get("cat") == "request"}
    assert {"queued", "prefill", "decode"} <= phases
    begins = [e for e in ev if e.get("ph") == "b"]
    assert len({e["id"] for e in begins}) == 60
    assert any(e.get("ph") == "C" and e["name"] == "requests" for e in ev)


def test_plot_needs_several_rates_and_writes_a_png(tmp_path):
    assert "several --rate" in cli("--rate", "5", "--plot", str(tmp_path / "p.png")).output
    r = cli("--rate", "5", "--rate", "40", "--schedule", "standard", "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args,msg", [
    (["--trace", str(FIX / "negative.csv")], "prompt_tokens -5 is not a token count"),
    (["--trace", str(FIX / "sharegpt.json")], "holds text, not token counts"),
    (["--rate", "1", "--prompt", "200000"], "longer than the model's context"),
    (["--rate", "1", "--kv-cache-gib", "0.001"], "too small for a single request"),
    (["--sweep"], "give --slo"),
    (["--rate", "1", "--stack", "reference"], "has no request scheduler"),
    (["--rate", "1", "--slo", "ttft=fast"], "--slo 'ttft=fast'"),
    (["--rate", "0"], "--rate must be a positive number"),
    (["--rate", "1", "--replicas", "0"], "--replicas must be >= 1"),
    (["--rate", "1", "--stack", "trtllm", "--prompt", "9000"], "max_num_tokens 8192"),
    (["--sweep", "--slo", "tpot=0.1ms", "--schedule", "standard"], "no rate meets the SLO"),
])
def test_bad_input_is_one_line_and_exit_2(args, msg):
    r = cli(*args)
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith("Error: ") and "\n" not in line and msg in line, line


def test_an_unmeetable_slo_says_the_best_achievable():
    with pytest.raises(SloUnmet, match=r"the best achievable is p99 TTFT 3000.0 ms"):
        max_rate(lambda rate: _Summary(3.0), {"ttft": 1.0})


class _Summary:
    """A run whose every request has the same TTFT (s)."""

    def __init__(self, ttft: float):
        self.ttft = np.full(10, ttft)


def test_bisection_stops_within_the_tolerance():
    """The SLO holds below 7.3 req/s: doubling from 1 brackets it in [4, 8], then halving the
    bracket at its geometric middle until hi / lo - 1 <= 2%; the answer passes, hi fails."""
    s = max_rate(lambda rate: _Summary(0.5 if rate < 7.3 else 2.0), {"ttft": 1.0}, start=1.0, rel_tol=0.02)
    assert s.rate < 7.3 <= s.fail_rate and s.fail_rate / s.rate - 1 <= 0.02
    assert sorted(s.points)[:4] == [1.0, 2.0, 4.0, pytest.approx(5.656854)]


def test_slo_parsing():
    assert parse_slo(["ttft=2s", "tpot=100ms", "e2e:30000"]) == {"ttft": 2.0, "tpot": 0.1, "e2e": 30.0}


def test_arrivals_at_a_rate_close_the_gap():
    """Gamma gaps scaled so the last of n arrivals is at n / rate; one pattern at every rate."""
    a, b = arrival_times(300, 4.0, seed=0), arrival_times(300, 8.0, seed=0)
    assert a[-1] == pytest.approx(75.0) and np.allclose(a, 2 * b)
    assert arrival_times(3, float("inf")).tolist() == [0, 0, 0]


def test_weighted_percentiles_are_numpys_on_the_repeated_values():
    v, w = np.array([5.0, 1.0, 3.0]), np.array([2, 3, 1])
    flat = np.repeat(v, w)
    assert weighted_percentiles(v, w, (50, 90, 99)) == pytest.approx(np.percentile(flat, (50, 90, 99)).tolist())
