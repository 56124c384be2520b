"""NCCL's per-collective host node in a captured CUDA graph, for collectives that cross the network
(enqueue.cc hostStreamPlanCallback; NVIDIA/nccl#1805): one chain per rank on NCCL's host stream from the
graph's launch, and collective k's kernel waits for the k-th node. Timelines pinned by hand on the toy
pass (sim.engine.simpy_engine and sim.engine.heap_engine must agree), and the pricing gate (graph mode, spanning nodes,
profile field set)."""
import dataclasses

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.schedule.ir import COMM
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack
from toy import TWO_AR_COST, TWO_AR_PASS, toy_op


def _cost(op):
    return TWO_AR_COST[op.name]


def test_host_chain_runs_ahead_and_is_exposed_only_where_it_falls_behind():
    """seg0 2 -> ar0 4 -> seg1 3 -> ar1 4 -> seg2 1 (14 without host nodes).
    h = 1: chain ends at 1 and 2, before each issue (2 and 9): nothing changes.
    h = 5: ar0 waits for 5 (issued at 2): ar0 5-9, seg1 9-12, ar1 needs 10: issued 12, 12-16, seg2 -> 17.
    h = 8: ar0 at 8-12, seg1 12-15, ar1 needs 16: 16-20, seg2 -> 21."""
    for h, want in ((1.0, 14.0), (5.0, 17.0), (8.0, 21.0)):
        r = simulate(TWO_AR_PASS, _cost, record=True, host_s=lambda op, h=h: h)
        assert r.duration_s == pytest.approx(want), h
        c = compile_schedule(TWO_AR_PASS, _cost, host_s=lambda op, h=h: h)
        assert simulate_ranks(c, 1)[0] == pytest.approx(want), h
        assert simulate_ranks(c, 3)[0] == pytest.approx(want), h
    ar0 = next(x for x in simulate(TWO_AR_PASS, _cost, host_s=lambda op: 5.0).records if x.op == "ar0" and x.stream == COMM)
    assert (ar0.start_s, ar0.end_s) == (5.0, 9.0)


def test_without_host_nodes_nothing_changes():
    a = simulate(TWO_AR_PASS, _cost, record=False)
    b = simulate(TWO_AR_PASS, _cost, record=False, host_s=lambda op: 0.0)
    assert a.duration_s == b.duration_s == 14.0
    assert compile_schedule(TWO_AR_PASS, _cost, host_s=lambda op: 0.0).comm_host_ready_s == ()


def test_engines_agree_with_host_nodes_and_interference():
    inter = Interference(1.3, 1.2, 0.3)
    for h in (0.5, 3.0, 7.0):
        a = simulate(TWO_AR_PASS, _cost, ranks=2, interference=inter, record=False, host_s=lambda op, h=h: h)
        d, e = simulate_ranks(compile_schedule(TWO_AR_PASS, _cost, inter, host_s=lambda op, h=h: h), 2, inter)
        assert d == pytest.approx(a.duration_s, rel=1e-12)
        assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-15)


def test_host_node_only_for_graph_mode_collectives_spanning_nodes():
    prof = dataclasses.replace(load_profile("h100-sxm"), graph_net_host_s=20e-6)
    c = CostModel(prof, Stack())
    net = dataclasses.replace(toy_op("ar", "all_reduce", ["x"]), attrs=(("rows", 1), ("width", 8192), ("group", 16)))
    node = dataclasses.replace(net, attrs=(("rows", 1), ("width", 8192), ("group", 8)))
    assert c.host_s(net, "decode") == 20e-6                      # the reference stack graphs decode
    assert c.host_s(net, "prefill") == 0.0                       # eager prefill: the enqueueing thread posts
    assert c.host_s(node, "decode") == 0.0                       # one node: NCCL skips the host callback
    unset = dataclasses.replace(prof, graph_net_host_s=0.0)
    assert CostModel(unset, Stack()).host_s(net, "decode") == 0.0                      # field unset
    assert CostModel(load_profile("h100-sxm"), Stack()).host_s(net, "decode") == 26e-6  # the built-in's


def test_predict_charges_the_chain_only_when_it_falls_behind():
    """405B at TP16: 252 decode all-reduces. A host node far below the compute between two of them is
    hidden; one far above it makes the step the chain's length."""
    base = load_profile("h100-sxm")
    model = get_model("llama-3.1-405b").truncated(4)

    def decode_s(h_us):
        p = dataclasses.replace(base, graph_net_host_s=h_us * 1e-6)
        w = Workload(model, 16, p, gen_len=4)
        return Simulator(w).step("standard", w.decode_step(1)).duration_s
    t0, small, big = decode_s(0), decode_s(1), decode_s(5000)
    assert small == pytest.approx(t0, rel=1e-9)
    assert big >= 8 * 5000e-6                                    # 4 layers x 2 all-reduces, chained
