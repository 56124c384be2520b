"""One model in the harness: the compiled pass (Runner.functional_pass) is the eager kernels traced
(hw.kernels.attention with the SDPA implementation as its one parameter), on every HF fixture the
harness builds, held against check's reference. The compiled pass used to skip Qwen3's q/k norm
(logits 3.56 off on tiny-qwen3); run eagerly, functional_pass now must equal forward."""
import os

import pytest

torch = pytest.importorskip("torch")

from tpsim.hw import model as hm  # noqa: E402
from tpsim.hw.check import Reference  # noqa: E402
from tpsim.hw.runner import Runner  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build, plan_of  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402

pytestmark = pytest.mark.hw
HF = os.path.join(os.path.dirname(__file__), "fixtures", "hf")
FIXTURES = ["tiny", os.path.join(HF, "tiny-qwen2"), os.path.join(HF, "tiny-qwen3"), os.path.join(HF, "tiny-llama3-v5")]
PROMPT, GEN, BATCH = 6, 3, 2


def _passes(name, stack, run):
    """Prefill + teacher-forced decode of upper-bound at TP 1 (the whole model, no collectives) with
    `run(runner, sched, tokens, pos)` -> logits; returns (logits per pass, the reference's)."""
    m = get_model(name)
    rm = hm.build_rank_model(m, 1, 0, batch=BATCH, max_seq=PROMPT + GEN, dtype=stack.dtype)
    runner = Runner(rm, None)
    tokens = torch.randint(0, m.vocab, (BATCH, PROMPT + GEN - 1), generator=torch.Generator().manual_seed(5))
    pre = build("upper-bound", m, 1, Step.prefill(BATCH, PROMPT, GEN, stack), stack)
    dec = build("upper-bound", m, 1, Step.decode(BATCH, PROMPT, GEN, 1, stack), stack)
    ref = Reference(m, hm.full_weights(m), plan_of("standard", m.layers), 1, BATCH, PROMPT + GEN)
    got, want = [run(runner, pre, tokens[:, :PROMPT], 0)], [ref.forward(tokens[:, :PROMPT], 0)]
    for p in range(PROMPT, PROMPT + GEN - 1):
        got.append(run(runner, dec, tokens[:, p:p + 1], p))
        want.append(ref.forward(tokens[:, p:p + 1], p))
    return got, want


def _eager(runner, sched, tokens, pos):
    return runner.forward(sched, tokens, pos).logits


def _functional(runner, sched, tokens, pos):
    return runner.functional_pass(sched, tokens, torch.tensor(pos))[0]


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("stack", [Stack(dtype="fp32"), Stack(dtype="fp32", attention="flash")])
def test_functional_pass_is_the_eager_model(name, stack):
    eager, ref = _passes(name, stack, _eager)
    functional, _ = _passes(name, stack, _functional)
    for e, f, r in zip(eager, functional, ref):
        torch.testing.assert_close(f, e, rtol=0, atol=1e-5 * max(1.0, e.abs().max().item()))
        torch.testing.assert_close(e, r, rtol=0, atol=1e-4 * max(1.0, r.abs().max().item()))


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_compiled_logits_equal_eager_and_the_reference(name):
    """torch.compile(fullgraph) of the whole pass, Inductor C++ on CPU, as `check --compile` runs it."""
    torch._dynamo.reset()
    stack = Stack(dtype="fp32")
    compiled = {}

    def run(runner, sched, tokens, pos):
        fn = compiled.setdefault("fn", torch.compile(runner.functional_pass, fullgraph=True, dynamic=False))
        return fn(sched, tokens, torch.tensor(pos))[0].clone()
    got, ref = _passes(name, stack, run)
    eager, _ = _passes(name, stack, _eager)
    for c, e, r in zip(got, eager, ref):
        scale = max(1.0, r.abs().max().item())
        assert (c - e).abs().max().item() <= 1e-4 * scale
        assert (c - r).abs().max().item() <= 1e-4 * scale
