"""tpsim serve's predictions beside public serving-engine benchmark results (validation only).

    python bench/validate_serving.py

Published end-to-end results never set a constant; this script prints how far tpsim's serving
simulation (sim/serve/, the standard schedule, the engine's stack preset) is from them, each run set up
as its source states, and where the source leaves something out, what tpsim assumed (docs/validation.md,
"Serving"):

  vLLM CI, Buildkite performance-benchmark build 9515 (buildkite.com/vllm/performance-benchmark/builds/9515),
    H200, vLLM commit not shown (2024 pipeline; priced as the vllm preset, V1 0.11):
    latency tests: `vllm bench latency` input 32, output 128, batch 8: 8 requests at once, mean latency;
    throughput tests: `vllm bench throughput`, 200 ShareGPT prompts at once, requests/s. The prompts'
    token lengths are not in the page: each request gets the ShareGPT means the vLLM v0.6.0 blog states
    for Llama 3's tokenizer (202 in, 179 out; blog.vllm.ai 2024-09-05), so ShareGPT's long tail of
    outputs, which stretches a real run, is missing (tpsim's req/s is then an upper side).
    Offline runs use the LLM class's budget (max_num_batched_tokens 16384 on >= 70 GiB GPUs).
  sgl-project/sglang#1639 (a community run): vLLM 0.6.2 (the V0 engine; priced as V1 0.11), 2 x H100,
    Llama-3-8B (llama-3.1-8b's shapes) at TP 2, 50 ShareGPT requests at once (bench_serving's default
    rate inf): 12180 input and 11255 output tokens in 5.30 s; each request gets the means (244 in,
    225 out).
  vLLM v0.6.0 blog: "Llama3 8B can generate 1 token every 13 ms under light load" on one H100 (V0 with
    --num-scheduler-steps 10); light load taken as 1 req/s of 202/179-token requests, TPOT p50.

Not compared: the TensorRT-LLM v1.0 perf tables and NVIDIA NIM's Llama 3.3 70B tables are FP8 (tpsim
prices fp16/bf16 GEMMs), and NIM's runs are closed-loop (fixed concurrency), which tpsim serve does not
drive.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.serve.scheduler import engine_of, setup  # noqa: E402
from tpsim.sim.serve.service import Service  # noqa: E402
from tpsim.sim.serve.traffic import Traffic  # noqa: E402
from tpsim.sim.stack.presets import load_stack  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402


def service(model: str, tp: int, profile: str, budget: int | None = None) -> Service:
    prof, m = load_profile(profile), get_model(model)
    st = make_stack({}, prof.stack_defaults, preset=load_stack("vllm").values)
    return Service(m, tp, prof, st, setup(engine_of("vllm"), m, tp, prof, st, budget=budget))


def at_once(n: int, prompt: int, output: int) -> Traffic:
    return Traffic(np.zeros(n), np.full(n, prompt), np.full(n, output), "at once")


def main() -> None:
    rows = []
    for model, name, tp, pub in (("llama-3.1-8b", "8B", 1, 833.421), ("llama-3.1-70b", "70B", 4, 2077.53)):
        s = service(model, tp, "h200-sxm", 16384).run("standard", at_once(8, 32, 128)).summary
        rows.append((f"vLLM CI H200 latency, {name} TP{tp}: in 32, out 128, batch 8", "mean latency",
                     f"{pub:.0f} ms", f"{s.pct['e2e']['mean'] * 1e3:.0f} ms"))
    for model, name, tp, pub in (("llama-3.1-8b", "8B", 1, 22.5674), ("llama-3.1-70b", "70B", 4, 9.83905)):
        s = service(model, tp, "h200-sxm", 16384).run("standard", at_once(200, 202, 179)).summary
        rows.append((f"vLLM CI H200 throughput, {name} TP{tp}: 200 ShareGPT* at once", "req/s",
                     f"{pub:.2f}", f"{s.request_rate:.2f}"))
    s = service("llama-3.1-8b", 2, "h100-sxm").run("standard", at_once(50, 244, 225)).summary
    rows.append(("sglang#1639 vLLM 0.6.2, 8B TP2 2xH100: 50 ShareGPT* at once", "output tok/s",
                 f"{11255 / 5.30:.0f}", f"{s.output_rate:.0f}"))
    sv = service("llama-3.1-8b", 1, "h100-sxm")
    s = sv.run("standard", at_once(100, 202, 179).at_rate(1.0)).summary
    rows.append(("vLLM v0.6.0 blog, 8B 1xH100, light load (1 req/s of ShareGPT*)", "ms/token",
                 "13", f"{s.pct['tpot'][50] * 1e3:.1f}"))
    w = max(len(r[0]) for r in rows)
    print(f"{'result (* ShareGPT at its mean lengths)':{w}}  {'metric':>12}  {'published':>9}  {'tpsim':>8}")
    for what, metric, pub, pred in rows:
        print(f"{what:{w}}  {metric:>12}  {pub:>9}  {pred:>8}")


if __name__ == "__main__":
    main()
