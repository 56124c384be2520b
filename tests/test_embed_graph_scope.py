"""Two per-step mechanisms of the serving engines (sim/stack/spec.py): the vocab-parallel input embedding
(masked lookup of the rank's vocab shard + one all-reduce of [tokens, hidden]) and what a decode CUDA
graph covers (graph_scope: the ops left outside it pay eager launches). Op lists and toy timelines
pinned by hand."""
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step, make_stack
from tpsim.sim.stack.presets import PRESETS
from toy import ONE_LAYER, no_jitter, toy_time

VP = Stack(embed="vocab-parallel")


def _decode(stack: Stack, tp: int = 2, spec: str = "standard"):
    return build(spec, ONE_LAYER, tp, Step.decode(1, 8, 4, 1, stack), stack)


def test_vocab_parallel_embed_is_a_shard_lookup_then_one_all_reduce():
    ops = _decode(VP).ops
    e, ar, first = ops[0], ops[1], ops[2]
    # toy: vocab 256 over TP 2 -> 128 rows per rank; decode batch 1 -> 1 token row of width 64
    assert (e.name, e.kind, e.outputs, dict(e.attrs)) == \
        ("embed", "embed", ("embed.partial",), {"rows": 1, "width": 64, "vocab": 128, "masked": 1})
    assert (ar.name, ar.kind, ar.inputs, dict(ar.attrs), ar.layer) == \
        ("embed.allreduce", "all_reduce", ("embed.partial",), {"rows": 1, "width": 64, "group": 2}, None)
    assert "embed.allreduce_out" in first.inputs                 # layer 0 reads the summed rows
    # replicated (the default), or TP 1: the one lookup of the whole table, no collective
    for st, tp in ((Stack(), 2), (VP, 1)):
        e0 = _decode(st, tp).ops[0]
        assert dict(e0.attrs) == {"rows": 1, "width": 64, "vocab": 256} and e0.outputs == ("embed.x",)
    assert sum(op.is_comm for op in _decode(VP).ops) == sum(op.is_comm for op in _decode(Stack()).ops) + 1


def test_vocab_parallel_embed_adds_one_collective_to_the_toy_timeline():
    """Toy costs (tests/toy.py), collective 4: standard layer = attn 2 -> AR 4 -> MLP 3 -> AR 4 = 13;
    the vocab-parallel embedding's all-reduce comes first: 4 + 13 = 17 (embed, head ops: 0)."""
    assert simulate(_decode(Stack()), toy_time(4.0), ranks=2).duration_s == 13.0
    assert simulate(_decode(VP), toy_time(4.0), ranks=2).duration_s == 17.0


def _pass_s(stack: Stack, eager_s: float = 5.0) -> float:
    """The toy decode pass on h100-sxm with integer launch costs (eager `eager_s` s, graph 1 s: every
    toy kernel's GPU time, microseconds, is under the 1 s device floor, so a kernel costs 1 s on the
    GPU; an eagerly launched one also costs `eager_s` on the rank's CPU launch chain)."""
    prof = replace(load_profile("h100-sxm"), launch_s={"eager": eager_s, "graph": 1.0})
    cost = CostModel(prof, stack)
    sched = _decode(stack)
    return simulate(sched, lambda op: cost.comm_s(op, "decode") if op.is_comm else
                    cost.compute_s(op, "decode", sched), ranks=2,
                    issue_s=lambda op: cost.issue_s(op, "decode", sched)).duration_s


def test_ops_outside_the_graph_are_launched_from_the_cpu_while_the_graph_runs():
    """graph_scope "forward" (vLLM V1): the head gemm (1 kernel) and the sampler (2) are launched by
    the CPU after the replay's launch, at 0 + 5 = 5 and 5 + 10 = 15, while the graph's ops run to 14 on
    the GPU (embed, 2 norms, 4 GEMMs -- w2 two kernels -- 5 attention kernels, final norm: 1 s each):
    head 14-15, sampler 15-17, the same 17 s as with them in the graph (step scope). With a 10 s
    launch the CPU falls behind: head issued at 10 runs 14-15, sampler issued at 30 runs 30-32
    (+15 s); "logits" (SGLang, TRT-LLM): only the sampler outside, issued at 20, graph with the head
    to 15: 20-22 (+5 s). Eager decode (no graphs): the scope changes nothing."""
    step = _pass_s(Stack())
    assert step == pytest.approx(17.0, abs=1e-3)
    assert _pass_s(Stack(graph_scope="forward")) == pytest.approx(step)
    assert _pass_s(Stack(graph_scope="logits")) == pytest.approx(step)
    assert _pass_s(Stack(graph_scope="forward"), 10.0) == pytest.approx(32.0, abs=1e-3)
    assert _pass_s(Stack(graph_scope="logits"), 10.0) == pytest.approx(22.0, abs=1e-3)
    eager = Stack(decode_graphs=False)
    assert _pass_s(replace(eager, graph_scope="forward")) == pytest.approx(_pass_s(eager))


def test_the_logits_all_gather_outside_the_graph_is_priced_eager():
    prof = load_profile("h100-sxm")
    st = Stack(head="vocab-parallel", graph_scope="forward")
    sched = _decode(st)
    gather = next(op for op in sched.ops if op.name == "head.allgather")
    nbytes = 2 * 1 * 128 * 2                      # fp16 x 1 row x 128-vocab shard x 2 ranks (gathered size)
    cost = CostModel(prof, st)
    assert cost.comm_s(gather, "decode") == cost.collective_s("all_gather", nbytes, 2, "eager", width=128)
    inside = CostModel(prof, replace(st, graph_scope="step"))
    assert inside.comm_s(gather, "decode") == inside.collective_s("all_gather", nbytes, 2, "graph", width=128)
    assert st.graphs("decode") and not st.graphs("decode", "head.allgather") and st.graphs("decode", "L0.attn.qkv")


def test_presets_set_both_fields_and_predict_json_shows_them():
    for name, (embed, scope) in {"reference": ("replicated", "step"), "eager": ("replicated", "step"),
                                 "vllm": ("vocab-parallel", "forward"), "sglang": ("vocab-parallel", "logits"),
                                 "trtllm": ("vocab-parallel", "logits")}.items():
        st = make_stack({}, preset=PRESETS[name].values)
        assert (st.embed, st.graph_scope) == (embed, scope), name
    with pytest.raises(ValueError, match="unknown graph_scope"):
        Stack(graph_scope="everything")
    r = CliRunner().invoke(main, ["predict", "--stack", "vllm", "--model", "llama-3.1-70b", "--tp", "4", "--batch", "8",
                                  "--prompt", "32", "--gen", "16", "--profile", "h100-sxm", "--schedule", "standard",
                                  "--json"])
    assert r.exit_code == 0, r.output
    st = json.loads(r.output)["stack"]
    assert (st["embed"], st["graph_scope"]) == ("vocab-parallel", "forward")


def test_fast_path_matches_brute_force_with_both_mechanisms():
    """The embedding's all-reduce sits outside every layer run, the eager head ops after them: the
    fast path (compressed runs) must price them as the brute-force simulation does (without arrival jitter:
    with it they agree in expectation, tests/test_sampled.py)."""
    prof = no_jitter(load_profile("h100-sxm"))
    st = make_stack({}, prof.stack_defaults, preset=PRESETS["vllm"].values)
    st = replace(st, host=replace(st.host, rank_spread_s=0.0))     # the 0.3 us hand-off stagger alone (below)
    w = Workload(get_model("llama-3.2-1b"), 2, prof, batch=8, prompt_len=96, gen_len=10, stack=st)
    scheds = ["standard", "ladder", "spd:0.4"]
    for f, e in zip(predict(w, scheds, record=False), predict(w, scheds, mode="brute", record=False)):
        assert f.decode_s == pytest.approx(e.decode_s, rel=1e-9)
        # vLLM's prefill has no CUDA graph: each rank's Python thread launches its kernels (the launch
        # chain), a resource no collective synchronises. So a rank that starts late (the host lane's
        # 0.3 us hand-off stagger) does not simply shift by its offset, as the fast path adds it: under
        # ladder, which never blocks on a collective, the brute-force pass ends 10.9 ns later than that
        # (of 2.535 ms, 4e-6). Pinned to a tenth of the stagger
        assert f.prefill_s == pytest.approx(e.prefill_s, abs=0.1 * 0.3e-6)
