"""A serving iteration's mixed batch (Step.mixed): prefill chunks and decodes at their own context
lengths, built into the IR by every schedule and priced by both engines (issue 46)."""
import pytest

from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.schedule.language import DEFAULT_SCHEDULES, build
from tpsim.sim.stack.presets import load_stack
from tpsim.sim.stack.spec import Stack, Step, make_stack

H100 = load_profile("h100-sxm")
SCHEDULES = list(DEFAULT_SCHEDULES) + ["token-split", "seq-parallel", "ladder:8"]
M70 = get_model("llama-3.1-70b")


def engine_stack(name: str) -> Stack:
    return make_stack({}, H100.stack_defaults, preset=load_stack(name).values)


def sim(stack: Stack, model=M70, tp=8) -> Simulator:
    return Simulator(Workload(model, tp, H100, stack=stack, memory_check=False), record=False)


def sdpa(sched) -> list[dict]:
    """Layer 0's attention ops, as attr dicts."""
    return [dict(op.attrs) for op in sched.ops if op.kind == "attention" and op.layer == 0]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_uniform_mix_prices_as_the_uniform_step(engine):
    """One group of decodes is the decode step of that batch; one chunk from position 0 is the prefill
    of that prompt: the same ops, so the same seconds, for every schedule (the mix adds nothing)."""
    st = engine_stack(engine)
    s = sim(st)
    for spec in SCHEDULES:
        assert s.step_time(spec, Step.mixed([(37, 1, 503)], st)) == s.step_time(spec, Step.decode(37, 500, 600, 3, st))
        assert s.step_time(spec, Step.mixed([(1, 700, 700)], st)) == s.step_time(spec, Step.prefill(1, 700, 9, st))


def test_the_mix_packs_tokens_for_gemms_and_splits_attention_by_group():
    """30 decodes at contexts 500 and 2 at 99 (mean (30*501 + 2*100)/32 = 475.9 -> 476 keys each) and
    a 700-token chunk at positions 1200..1899: the GEMMs see 32 + 700 = 732 rows; attention is one op
    for the 32 decodes and one for the chunk, whose RoPE/cache write rides in the first's kernels."""
    st = engine_stack("vllm")
    step = Step.mixed([(30, 1, 501), (1, 700, 1900), (2, 1, 100)], st)
    assert (step.phase, step.batch, step.q_len, step.tokens, step.seqs) == ("prefill", 1, 732, 732, 33)
    assert step.mix == ((30, 1, 501), (2, 1, 100), (1, 700, 1900))       # decodes first, as packed
    sched = build("standard", M70, 8, step, st)
    assert {dict(op.attrs)["m"] for op in sched.ops if op.kind == "gemm" and op.layer == 0} == {732}
    dec, chunk = sdpa(sched)
    assert (dec["batch"], dec["q_len"], dec["kv_len"], "prep_shared" in dec) == (32, 1, 476, False)
    assert (chunk["batch"], chunk["q_len"], chunk["start_pos"], chunk["kv_len"], chunk["prep_shared"]) == \
        (1, 700, 1200, 1900, 1)
    head = next(op for op in sched.ops if op.name == "head")
    assert dict(head.attrs)["m"] == 33                                  # logits at each sequence's last token
    assert dict(next(op for op in sched.ops if op.kind == "sample").attrs)["batch"] == 33


def test_token_split_cuts_the_packed_tokens_of_a_mix():
    """token-split:2 of 4 decodes + a 10-token chunk at 20..29 (14 packed tokens): micro-batch 0 holds
    tokens 0..6 (the 4 decodes, chunk tokens 0..2 at 20..22), micro-batch 1 tokens 7..13 (chunk tokens
    3..9, attending to 30 keys); every token's attention is built once."""
    st = engine_stack("vllm")
    sched = build("token-split:2", M70, 8, Step.mixed([(4, 1, 50), (1, 10, 30)], st), st)
    parts = [(dict(op.attrs)["batch"], dict(op.attrs)["q_len"], dict(op.attrs)["kv_len"])
             for op in sched.ops if op.kind == "attention" and op.layer == 0]
    assert parts == [(4, 1, 50), (1, 3, 23), (1, 7, 30)]


def test_attention_of_a_chunk_grows_with_the_context_before_it():
    """The same 512-token chunk after 0 and after 8000 cached tokens: same GEMMs, more attention."""
    st = engine_stack("vllm")
    s = sim(st)
    early = s.step_time("standard", Step.mixed([(16, 1, 1000), (1, 512, 512)], st))[0]
    late = s.step_time("standard", Step.mixed([(16, 1, 1000), (1, 512, 8512)], st))[0]
    assert late > early * 1.05


@pytest.mark.parametrize("spec", SCHEDULES)
def test_both_engines_run_a_mixed_step_alike(spec):
    """The SimPy engine and the heap engine give one timeline for a mixed step on every rank."""
    st = engine_stack("vllm")
    s = sim(st, get_model("llama-3.2-1b"), 2)
    sched = build(spec, s.w.model, 2, Step.mixed([(5, 1, 300), (1, 64, 200)], st), st)

    def op_time(op):
        return s._op_time(op, sched.step.phase, sched)
    a = simulate(sched, op_time, ranks=2, interference=s.interference, record=False)
    d, e = simulate_ranks(compile_schedule(sched, op_time, s.interference), 2, s.interference)
    assert d == pytest.approx(a.duration_s, rel=1e-12)
    assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-15)


def test_bad_mixes_are_refused():
    st = engine_stack("vllm")
    for groups in ([], [(0, 1, 5)], [(1, 10, 5)]):
        with pytest.raises(ValueError):
            Step.mixed(groups, st)
