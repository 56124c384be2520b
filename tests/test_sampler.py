"""The serving engines' samplers (sim/stack/sampler.py, Stack.sampler): the kernels each engine launches per
step over the logits [batch, vocab] on its latency benchmark's path, their bytes, their launches and
where they fall in a toy timeline, pinned by hand. The reference harness keeps its one argmax."""
from dataclasses import replace

import pytest

from tpsim.sim.stack import sampler
from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.schema import Curve
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step, make_stack
from tpsim.sim.stack.presets import PRESETS
from tpsim.sim.price.work import Work, op_work
from toy import ONE_LAYER

# toy: batch 2 over the toy model's vocab 256 (TP 2, vocab-parallel head + all-gather: every rank samples
# the full 256), bf16 logits: [2, 256] = 512 elements, 1024 bytes in bf16, 2048 in fp32
EL = 2 * 256


def _stack(name: str) -> Stack:
    return make_stack({}, preset=PRESETS[name].values)


def _sample_op(stack: Stack, batch: int = 2):
    sched = build("standard", ONE_LAYER, 2, Step.decode(batch, 8, 4, 1, stack), stack)
    return sched, next(op for op in sched.ops if op.kind == "sample")


def test_each_engine_sampler_is_its_kernels_bytes_over_the_logits():
    _, op = _sample_op(_stack("vllm"))
    assert dict(op.attrs) == {"batch": 2, "rows": 2, "vocab": 256, "sampler": "vllm-v1-random"}
    assert op_work(op) == [
        Work(EL, EL * (2 + 4), 1),            # to_fp32: read bf16, write fp32          = 3072
        Work(EL, EL * 8 + 2 * 4, 1),          # temperature div_: fp32 in and out + temp [2] fp32 = 4104
        Work(EL, EL * 8, 1),                  # softmax: fp32 in, fp32 out              = 4096
        Work(EL, EL * 4, 1),                  # q.exponential_(): writes fp32           = 2048
        Work(EL, EL * 12, 1),                 # probs.div_(q): reads probs and q, writes probs = 6144
        Work(EL, EL * 4 + 2 * 8, 1),          # argmax: reads fp32, writes int64 [2]    = 2064
        Work(2, 2 * 12, 1),                   # .to(int32): int64 [2] in, int32 [2] out = 24
    ]
    assert sum(w.bytes for w in op_work(op)) == 21552
    _, op = _sample_op(_stack("sglang"))
    assert op_work(op) == [Work(EL, EL * 6, 1),            # .float() in the logits processor = 3072
                           Work(EL, EL * 4 + 16, 1)]       # torch.argmax, int64 out      = 2064
    _, op = _sample_op(_stack("trtllm"))
    assert op_work(op) == [Work(EL, EL * 6, 1),            # LogitsProcessor's logits.float() = 3072
                           Work(EL, EL * 4 + 16, 1),       # greedy argmax                = 2064
                           Work(2, 2 * 12, 1),             # copy_ into the int32 token buffer = 24
                           Work(2, 2 * 16, 1)]             # scatter_: int64 idx + int32 in, int32 out = 32
    # the reference harness (and eager): no sampler attr, the one argmax Work as before (bf16 [2, 256])
    for name in ("reference", "eager"):
        _, op = _sample_op(_stack(name))
        assert "sampler" not in dict(op.attrs)
        assert op_work(op) == [Work(EL, EL * 2, 2)]


def _toy_cost(stack: Stack) -> CostModel:
    """h100-sxm at 8 bytes/s, efficiency 1 at every size, launches eager 5 s, graph 1 s: a kernel's GPU
    time is its bytes / 8 (the toy samplers' bytes are far above the 1 s floor per kernel)."""
    prof = replace(load_profile("h100-sxm"), mem_bytes_per_s=8.0, memory_efficiency=Curve((1.0,), (1.0,)),
                   launch_s={"eager": 5.0, "graph": 1.0})
    return CostModel(prof, stack)


def test_sampler_cost_is_its_bytes_at_the_bandwidth_and_one_launch_per_eager_kernel():
    """GPU time: bytes / 8 (the test above's sums); CPU issue: 5 s per kernel launched outside the
    graph. vLLM (graph_scope forward): all 7 eager; SGLang, TRT-LLM (logits): the cast is captured
    with the LM head, the rest eager; no graphs at all: every kernel eager."""
    for name, gpu_s, issue_s in (("vllm", 21552 / 8, 7 * 5),      # 2694 s, 35 s
                                 ("sglang", 5136 / 8, 1 * 5),     # 642 s: argmax only launched eagerly
                                 ("trtllm", 5192 / 8, 3 * 5)):    # 649 s: argmax, copy_, scatter_
        st = _stack(name)
        sched, op = _sample_op(st)
        cost = _toy_cost(st)
        assert cost.compute_s(op, "decode", sched) == pytest.approx(gpu_s), name
        assert cost.issue_s(op, "decode", sched) == pytest.approx(issue_s), name
    sg = _stack("sglang")
    sched, op = _sample_op(replace(sg, graph_scope="forward"))    # the logits processor outside the graph too
    assert _toy_cost(replace(sg, graph_scope="forward")).issue_s(op, "decode", sched) == pytest.approx(2 * 5)
    sched, op = _sample_op(replace(sg, decode_graphs=False))      # eager decode: both kernels launched
    assert _toy_cost(replace(sg, decode_graphs=False)).issue_s(op, "decode", sched) == pytest.approx(2 * 5)


def _pass_s(stack: Stack, eager_s: float = 5.0) -> float:
    """The toy decode pass on h100-sxm with integer launch costs (as tests/test_embed_graph_scope.py):
    every toy kernel's GPU time is under the 1 s device floor, so a kernel costs 1 s on the GPU and an
    eagerly launched one `eager_s` on the rank's CPU launch chain."""
    prof = replace(load_profile("h100-sxm"), launch_s={"eager": eager_s, "graph": 1.0})
    cost = CostModel(prof, stack)
    sched = build("standard", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, stack), stack)
    return simulate(sched, lambda op: cost.comm_s(op, "decode") if op.is_comm else
                    cost.compute_s(op, "decode", sched), ranks=2,
                    issue_s=lambda op: cost.issue_s(op, "decode", sched)).duration_s


def test_the_sampler_kernels_in_a_toy_decode_timeline():
    """The reference sampler's 2 kernels end the toy step at 17 s (tests/test_embed_graph_scope.py: the
    graph's ops run to 14, head 14-15, sampler 15-17). vLLM's 7 kernels outside the forward graph: the CPU
    issues the head at 0 + 5 = 5 and the sampler at 5 + 7 x 5 = 40, so it runs 40-47. SGLang's (logits
    scope) with a 10 s launch: the argmax alone is launched eagerly, issued at 10, graph with the head and
    the cast to 16, argmax 16-17; TRT-LLM's argmax, copy_ and scatter_ issued at 3 x 10 = 30: 30-34."""
    base = Stack()                                  # replicated head: no all-gather in the toy pass
    assert _pass_s(replace(base, graph_scope="forward")) == pytest.approx(17.0, abs=1e-3)
    assert _pass_s(replace(base, graph_scope="forward", sampler="vllm-v1-random")) == pytest.approx(47.0, abs=1e-3)
    assert _pass_s(replace(base, graph_scope="logits", sampler="sglang-greedy"), 10.0) == pytest.approx(17.0, abs=1e-3)
    assert _pass_s(replace(base, graph_scope="logits", sampler="trtllm-torch-greedy"), 10.0) == \
        pytest.approx(34.0, abs=1e-3)


def test_presets_name_their_sampler_and_unknown_names_are_refused():
    assert {n: _stack(n).sampler for n in PRESETS} == {
        "reference": "argmax", "eager": "argmax", "vllm@0.11": "vllm-v1-random", "vllm@0.6": "vllm-v0-random",
        "sglang@0.5": "sglang-greedy", "trtllm@1": "trtllm-torch-greedy",
        "trtllm@0.11": "trtllm-torch-greedy"}
    for s in sampler.SAMPLERS.values():
        assert s.path and all(k.source for k in s.kernels), s.name
    assert [s.logits_kernels for s in sampler.SAMPLERS.values()] == [0, 0, 1, 1]
    # V0's random path: V1's passes plus log_softmax and the probs[indices] copy. Batch 1, vocab 10, bf16:
    # per logit 6 (cast) + 8 (temperature) + 8 (softmax) + 8 (log_softmax) + 8 (index) + 4 (exponential)
    # + 12 (div) + 4 (argmax) = 58 B, 580 in all, plus [batch] rows 4 + 8 + 8: 600
    v0 = sampler.SAMPLERS["vllm-v0-random"]
    assert len(v0.kernels) == 8 and sum(k.bytes(1, 10, 2) for k in v0.kernels) == 600
    with pytest.raises(ValueError, match="unknown sampler 'multinomial'"):
        Stack(sampler="multinomial")
