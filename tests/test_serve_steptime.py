"""The serving layer's iteration times: the interpolated step table against the exact step model of
real mixed batches (sim/serve/steptime.py; issue 46)."""
import random

import pytest

from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.serve.steptime import StepTable, _bracket
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import Step, make_stack


def batches(seed: int, n: int):
    """Mixed batches as engines hold them: decodes at their own contexts, 0-2 chunks at their own starts."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        dec = rng.choice([0, 1, 3, 7, 20, 50, 130, 300, 700])
        ctx = [rng.randint(10, 6000) for _ in range(dec)]
        chunks = [(rng.randint(1, 3000), rng.choice([0, rng.randint(0, 8000)]))
                  for _ in range(rng.choice([0, 1, 1, 2]) if dec else rng.choice([1, 2]))]
        if sum(q for q, _ in chunks) <= 8192:
            out.append((ctx, chunks))
    return out


@pytest.mark.parametrize("engine,spec", [("vllm", "standard"),
                                         pytest.param("vllm", "ladder", marks=pytest.mark.slow),
                                         pytest.param("sglang", "spd:0.7", marks=pytest.mark.slow)])
def test_the_table_prices_real_batches_within_3_percent(engine, spec):
    """Llama 3.1 70B at TP 8 on H100: 24 batches with decodes at different contexts and up to two
    chunks each; the table (from the batch's four numbers) against the exact step of the very groups:
    at most 3% apart, the median under 0.5%."""
    prof = load_profile("h100-sxm")
    st = make_stack({}, prof.stack_defaults, preset=load_stack(engine).values)
    sim = Simulator(Workload(get_model("llama-3.1-70b"), 8, prof, stack=st, memory_check=False), record=False)
    table = StepTable(lambda step: sim.step_time(spec, step)[0], st, 1024, 131072, 8192, sim.w.causal_prefill)
    errs = []
    for ctx, chunks in batches(7, 24):
        groups = [(1, 1, c + 1) for c in ctx] + [(1, q, s + q) for q, s in chunks]
        exact = sim.step_time(spec, Step.mixed(groups, st))[0]
        got = table(len(ctx), sum(c + 1 for c in ctx), sum(q for q, _ in chunks),
                    sum(q * (s + q) for q, s in chunks), len(chunks), sum(q * q for q, _ in chunks))
        errs.append(abs(got / exact - 1))
    errs.sort()
    assert errs[-1] < 0.03 and errs[len(errs) // 2] < 0.005, errs


def test_the_table_is_exact_on_its_nodes_and_linear_between():
    """A toy step model, seconds = 1 + dec x L / 1000 + T / 10 + T x C / 10^5 (bilinear in each pair):
    multilinear interpolation reproduces it anywhere in the grid."""
    def toy(step: Step) -> float:
        dec = [(c, kv) for c, q, kv in step.mix if q == 1]
        ch = [(q, kv - q) for c, q, kv in step.mix if q > 1]
        d = sum(c for c, _ in dec)
        L = sum(c * kv for c, kv in dec) / d if d else 0
        T = sum(q for q, _ in ch)
        C = sum(q * s for q, s in ch) / T if T else 0
        return 1 + d * L / 1000 + T / 10 + T * C / 1e5
    st = make_stack({}, {}, preset=load_stack("vllm").values)
    t = StepTable(toy, st, 1024, 131072, 8192)
    assert t(64, 64 * 1024, 0, 0) == pytest.approx(1 + 64 * 1024 / 1000)        # on nodes
    assert t(50, 50 * 700, 0, 0) == pytest.approx(1 + 50 * 700 / 1000)          # between them
    assert t(40, 40 * 900, 600, 600 * (3000 + 600)) == pytest.approx(1 + 40 * 900 / 1000 + 60 + 600 * 3000 / 1e5)


def test_chunks_under_the_causal_mask_extra_chunks_and_jumps_in_rows():
    """A toy step model with what the real one has (sim/serve/steptime.py's module doc), in seconds:
    1 + dec x L / 1000 + T / 10 + W / 10^5 + 0.5 per chunk after the first + 3 from 300 rows (dec + T) on,
    W the causal flash work sum(q x s + q^2 / 2). The table finds the jump at 300 rows, takes chunks at
    the start that does their causal work and adds the extra chunks' 0.5: exact where T is on a node
    (W's T^2 / 2 is not linear in T between nodes). Without `causal` the same batch is priced as the full
    square's start: the table is off."""
    def toy(step: Step) -> float:
        d = sum(c for c, q, _ in step.mix if q == 1)
        L = sum(c * kv for c, q, kv in step.mix if q == 1) / d if d else 0
        ch = [(q, kv - q) for c, q, kv in step.mix if q > 1 for _ in range(c)]
        T = sum(q for q, _ in ch)
        W = sum(q * s + q * q / 2 for q, s in ch)
        return 1 + d * L / 1000 + T / 10 + W / 1e5 + 0.5 * max(len(ch) - 1, 0) + (3 if d + T >= 300 else 0)
    st = make_stack({}, {}, preset=load_stack("vllm").values)
    t = StepTable(toy, st, 1024, 131072, 8192, causal=True)
    assert t.jump_rows == (300,) and t.jump_sums == pytest.approx((0, 3), abs=1e-4)    # W's 1e-5 curvature
    assert {299, 300} <= set(t.dec_nodes)                                   # the decode line's two sides
    assert t(296, 296 * 1000, 0, 0) == pytest.approx(1 + 296)               # between 256 and 299
    assert t(310, 310 * 1000, 0, 0) == pytest.approx(1 + 310 + 3)
    # 40 decodes (nodes 32, 64) and 256 tokens: 296 rows, under the jump; the node at 64 decodes is over it
    assert t(40, 40 * 900, 256, 256 * (1000 + 256)) == pytest.approx(1 + 36 + 25.6 + (256 * 1000 + 256 ** 2 / 2) / 1e5,
                                                                      abs=1e-4)
    # two chunks, 200 tokens from 1000 and 312 from 0: T = 512 (a node), W = 200000 + 20000 + 48672
    chunks = [(200, 1000), (312, 0)]
    args = (40, 40 * 900, 512, sum(q * (s + q) for q, s in chunks), 2, sum(q * q for q, _ in chunks))
    want = 1 + 36 + 51.2 + 268672 / 1e5 + 0.5 + 3
    assert t(*args) == pytest.approx(want, abs=1e-4)
    square = StepTable(toy, st, 1024, 131072, 8192, causal=False)
    assert abs(square(*args) - want) > 0.02       # off by 0.03 (the extra-chunk term makes up the rest)


def test_brackets():
    assert _bracket((0, 10, 20), 10) == ((1, 1.0),)
    assert _bracket((0, 10, 20), 15) == ((1, 0.5), (2, 0.5))
    assert _bracket((0, 10, 20), 30) == ((1, -1.0), (2, 2.0))             # past the end: extrapolated
    assert _bracket((0, 10, 20), -5) == ((0, 1.5), (1, -0.5))
