"""The fast path (one rank, compressed layer runs, sampled decode) against brute-force simulation
(every rank, every layer, every decode step) on a grid, without jitter: within 0.5%.

The 1B cases run by default (about 1 s each); the bigger models are `slow` (about 4 s each)."""
import dataclasses
import itertools

import pytest

from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack

H100 = load_profile("h100-sxm")
INTERFERING = dataclasses.replace(H100, compute_slowdown=1.3, comm_slowdown=1.2)
SCHEDS = ["standard", "ladder", "ladder:5", "spd:0.4", "spd:1,2,6-9", "parallel", "upper-bound"]


def _case(model, tp, batch, kv, profile):
    quick = model == "llama-3.2-1b" and batch == 1
    return pytest.param(model, tp, batch, kv, profile, marks=() if quick else pytest.mark.slow)


@pytest.mark.parametrize("model, tp, batch, kv, profile", [
    _case(m, tp, b, kv, p) for (m, tp), b, kv, p in itertools.product(
        [("llama-3.2-1b", 2), ("llama-3.1-8b", 4), ("llama-3.1-70b[:12]", 8)], [1, 8], ["static", "filled"],
        [H100, INTERFERING])])
def test_fast_path_within_half_a_percent_of_exact(model, tp, batch, kv, profile):
    w = Workload(get_model(model), tp, profile, batch=batch, prompt_len=96, gen_len=10, stack=Stack(kv=kv))
    fast = predict(w, SCHEDS, record=False)
    exact = predict(w, SCHEDS, mode="brute", record=False)
    for f, e in zip(fast, exact):
        for field in ("prefill_s", "decode_s", "tokens_per_s"):
            assert getattr(f, field) == pytest.approx(getattr(e, field), rel=5e-3), (f.schedule, field)
