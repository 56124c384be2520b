"""The serving engine's host lane (sim/stack/host_lane.py): a step's CPU work in series with the pass or
overlapped with it, and TP ranks handed their inputs at different times. Timelines pinned by hand on
the toy pass (seg0 2 -> ar0 4 -> seg1 3 -> ar1 4 -> seg2 1 = 14); sim.engine.simpy_engine and sim.engine.heap_engine
must agree on the staggered starts."""
import math
from dataclasses import replace

import pytest

from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.stack.host_lane import HostStep, lane, spread_offsets, step_s, tree_hops
from tpsim.sim.schedule.ir import COMM
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack
from tpsim.sim.stack.presets import PRESETS
from toy import TWO_AR_COST, TWO_AR_PASS, no_jitter


def _cost(op):
    return TWO_AR_COST[op.name]


def _pass(ranks=1, offsets=(), **kw) -> float:
    """The toy pass's duration in both engines (they must agree)."""
    a = simulate(TWO_AR_PASS, _cost, ranks=ranks, record=False, rank_delay_s=offsets, **kw).duration_s
    b = simulate_ranks(compile_schedule(TWO_AR_PASS, _cost, host_s=kw.get("host_s")), ranks, start_s=offsets)[0]
    assert a == pytest.approx(b, rel=1e-12)
    return a


def test_in_series_the_lane_adds_before_and_after_the_pass():
    """schedule 1 + prepare 2 (lead 3) -> pass 14 -> output 3: 3 + 14 + 3 = 20 per step."""
    h = HostStep(schedule_s=1.0, prepare_s=2.0, output_s=3.0)
    ln = lane(h, tp=1, batch=1)
    assert (ln.lead_s, ln.offsets_s, ln.post_s) == (3.0, (0.0,), 3.0)
    assert step_s(h, ln, _pass()) == 20.0
    # per-sequence terms: batch 4, schedule 0.5/seq, output 0.25/seq: lead 2, post 1: 2 + 14 + 1 = 17
    h4 = HostStep(schedule_per_seq_s=0.5, output_per_seq_s=0.25)
    assert step_s(h4, lane(h4, 1, 4), _pass()) == 17.0


def test_overlapped_the_host_hides_under_the_pass_until_it_is_longer():
    """Overlap: the host prepares step j+1 while the GPU runs step j, so a step lasts
    max(pass, host lane). Lane 3 + 3 = 6 < 14: 14. Lane schedule 10 + output 8 = 18 > 14: 18."""
    short = HostStep(schedule_s=1.0, prepare_s=2.0, output_s=3.0, overlap=True)
    assert step_s(short, lane(short, 1, 1), _pass()) == 14.0
    long = HostStep(schedule_s=10.0, output_s=8.0, overlap=True)
    assert step_s(long, lane(long, 1, 1), _pass()) == 18.0


def test_ranks_handed_their_inputs_late_meet_at_the_first_collective():
    """handoff_per_rank 1.5 on 3 ranks: starts 0, 1.5, 3. Rank 2: seg0 3-5, issues ar0 at 5: ar0 5-9 for
    all, seg1 9-12, ar1 12-16, seg2 16-17: 17 = 14 + the last rank's offset (the fast path's identity).
    Rank 0 waits 2-9 on ar0 and 12-16 on ar1: exposed 7 + 4 = 11 (8 when all start together)."""
    h = HostStep(handoff_s=2.0, handoff_per_rank_s=1.5)
    ln = lane(h, tp=3, batch=1)
    assert ln.offsets_s == (0.0, 1.5, 3.0) and ln.lead_s == 2.0 and ln.stagger_s == 3.0
    assert _pass(3, ln.offsets_s) == 17.0
    r = simulate(TWO_AR_PASS, _cost, ranks=3, rank_delay_s=ln.offsets_s)
    ar0 = next(x for x in r.records if x.op == "ar0" and x.stream == COMM)
    assert (ar0.start_s, ar0.end_s) == (5.0, 9.0)
    assert r.exposed_comm_s == 11.0
    assert simulate_ranks(compile_schedule(TWO_AR_PASS, _cost), 3, start_s=ln.offsets_s)[1] == 11.0
    # in series: hand-off 2 + the staggered pass 17 = 19; the fast path's identity (14 + 3) agrees
    assert step_s(h, ln, 14.0, 17.0) == step_s(h, ln, 14.0) == 19.0
    # one process (TP 1): no hand-off and no stagger: the bare pass
    one = lane(h, tp=1, batch=1)
    assert (one.lead_s, one.offsets_s) == (0.0, (0.0,)) and step_s(h, one, _pass()) == 14.0
    # overlapped, the inputs arrive while the previous pass runs: the stagger is hidden (lane 2 + 3 = 5 < 14)
    ho = HostStep(handoff_s=2.0, handoff_per_rank_s=1.5, overlap=True)
    assert step_s(ho, lane(ho, 3, 1), 14.0, 17.0) == 14.0


def test_staggered_starts_feed_the_graph_host_node_chain_in_both_engines():
    """NCCL's host-node chain (5 per collective) starts with each rank: rank 2 (start 3) has ar0's node
    done at 8 and ar1's at 13. Rank 2 issues ar0 at 5, waits for 8: ar0 8-12, seg1 12-15, ar1 (chain
    ready 13) 15-19, seg2 -> 20."""
    assert _pass(3, (0.0, 1.5, 3.0), host_s=lambda op: 5.0) == 20.0


def test_engines_agree_on_staggered_starts_with_interference():
    inter = Interference(1.3, 1.2, 0.3)
    for offsets in ((0.0, 0.7), (0.0, 2.5, 5.0)):
        a = simulate(TWO_AR_PASS, _cost, ranks=len(offsets), interference=inter, record=False, rank_delay_s=offsets)
        d, e = simulate_ranks(compile_schedule(TWO_AR_PASS, _cost, inter), len(offsets), inter, start_s=offsets)
        assert d == pytest.approx(a.duration_s, rel=1e-12)
        assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-15)


def test_bad_host_terms_are_refused():
    with pytest.raises(ValueError, match="host.output_s"):
        HostStep(output_s=-1.0)
    with pytest.raises(ValueError, match="host.overlap"):
        HostStep(overlap="yes")


def test_predict_wraps_each_step_in_the_lane():
    """A real model on the fast path: the step is lead + pass + stagger + post (in series), and the
    pass alone when overlapped under a short lane; TP 1 pays no hand-off."""
    model, prof = get_model("llama-3.1-8b").truncated(2), load_profile("h100-sxm")
    h = HostStep(schedule_per_seq_s=1e-5, handoff_s=2e-4, handoff_per_rank_s=1e-4, output_s=3e-4)

    def step(tp, host):
        w = Workload(model, tp, prof, batch=4, gen_len=4, stack=Stack(host=host))
        sim = Simulator(w)
        return sim.step_time("standard", w.decode_step(1))[0], sim._pass_time("standard", w.decode_step(1))[0]
    with_lane, bare = step(2, h)
    assert with_lane == pytest.approx(4e-5 + 2e-4 + bare + 1e-4 + 3e-4, rel=1e-12)
    with_lane1, bare1 = step(1, h)
    assert with_lane1 == pytest.approx(4e-5 + bare1 + 3e-4, rel=1e-12)
    over, bare = step(2, HostStep(output_s=1e-6, overlap=True))
    assert over == bare


def test_fast_path_identity_matches_every_rank_simulated():
    """The fast path adds the last rank's offset to one rank's pass; brute force starts every rank at
    its offset (h100-sxm: interference 1.21 both ways). Same step time, in series and overlapped;
    brute force also shows rank 0 waiting for the others (3 x 0.2 ms more exposed comm)."""
    m, p = get_model("llama-3.1-8b").truncated(3), no_jitter(load_profile("h100-sxm"))
    for overlap in (False, True):
        w = Workload(m, 4, p, batch=2, gen_len=4,
                     stack=Stack(host=HostStep(handoff_per_rank_s=2e-4, output_s=1e-4, overlap=overlap)))
        st = w.decode_step(1)
        fast, brute = Simulator(w).step_time("ladder", st), Simulator(w, mode="brute").step_time("ladder", st)
        assert brute[0] == pytest.approx(fast[0], rel=1e-9)
        assert brute[1] >= fast[1] + 6e-4 - 1e-9


def test_sampled_mode_draws_jitter_over_the_staggered_pass():
    """With arrival jitter (20 us per collective here) every rank simulated in sampled mode starts at its
    host-lane offset: a 1 ms stagger makes the other ranks wait at the first collective anyway, so
    part of the jitter costs nothing there and the jitter's mean cost falls (never rises)."""
    import dataclasses
    base = load_profile("h100-sxm")
    prof = dataclasses.replace(base, arrival_jitter={k: dataclasses.replace(v, mean_s=20e-6)
                                                     for k, v in base.arrival_jitter.items()})
    m = get_model("llama-3.1-8b").truncated(4)

    def jitter_cost(per_rank_s):
        w = Workload(m, 4, prof, batch=2, gen_len=8, stack=Stack(host=HostStep(handoff_per_rank_s=per_rank_s,
                                                                               output_s=1e-6)))
        return Simulator(w, mode="sampled", record=False).predict("standard").jitter_decode.delta_s
    flat, staggered = jitter_cost(0.0), jitter_cost(1e-3)
    assert 0 < staggered < flat


def test_a_tree_broadcast_hands_rank_r_its_inputs_after_popcount_r_hops():
    """gloo's binomial-tree broadcast (SGLang's per-step broadcast_pyobj), hop 1. The root posts its
    sends to 1, 2, 4 back to back, rank r's data crosses popcount(r) hops (tree_hops): on 4 ranks
    starts 0, 1, 1, 2 (rank 3: 0->1->3). Rank 3: seg0 2-4, ar0 4-8 for all, seg1 8-11, ar1 11-15,
    seg2 15-16: 16 = 14 + 2 hops. On 8 ranks the last (rank 7, 0->1->3->7) is 3 hops late: 17; on 2
    ranks 1 hop: 15 -- the stagger grows as log2 N."""
    assert [tree_hops(r) for r in range(8)] == [0, 1, 1, 2, 1, 2, 2, 3]
    h = HostStep(handoff_tree_hop_s=1.0)
    assert lane(h, 4, 1).offsets_s == (0.0, 1.0, 1.0, 2.0)
    assert _pass(4, lane(h, 4, 1).offsets_s) == 16.0
    assert lane(h, 8, 1).offsets_s == (0.0, 1.0, 1.0, 2.0, 1.0, 2.0, 2.0, 3.0)
    assert [step_s(h, lane(h, n, 1), 14.0) for n in (1, 2, 4, 8)] == [14.0, 15.0, 16.0, 17.0]
    # 6 ranks (0..5): the deepest are 3 = 0->1->3 and 5 = 0->1->5, 2 hops, not log2ceil(6) = 3 rounds:
    # in series 14 + 2 = 16
    assert lane(h, 6, 1).stagger_s == 2.0 and step_s(h, lane(h, 6, 1), 14.0) == 16.0
    # the polling order and the tree add per rank: per-rank 0.5 + hop 1 on 4 ranks:
    # 0 + 0, 0.5 + 1, 1 + 1, 1.5 + 2 = 0, 1.5, 2, 3.5
    both = HostStep(handoff_per_rank_s=0.5, handoff_tree_hop_s=1.0)
    assert lane(both, 4, 1).offsets_s == (0.0, 1.5, 2.0, 3.5)
    # overlapped (SGLang's overlap scheduler) the tree is hidden under the previous pass: 3 < 14
    ho = HostStep(handoff_tree_hop_s=1.0, overlap=True)
    assert step_s(ho, lane(ho, 8, 1), 14.0, 17.0) == 14.0


def test_an_overlapped_tree_shows_once_the_host_is_the_bottleneck():
    """Overlapped, a step lasts max(pass, lane): schedule 10 + the tree's stagger + output 1. Hop 1 on
    the toy pass (14): TP 1 lane 10 + 0 + 1 = 11 -> 14; TP 2 10 + 1 + 1 = 12 -> 14; TP 4 10 + 2 + 1 = 13
    -> 14; TP 8 10 + 3 + 1 = 14 -> 14; TP 16 10 + 4 + 1 = 15 -> 15 (the host now sets the pace).
    Hop 3: TP 8 10 + 9 + 1 = 20 > 14: 20, TP 2 10 + 3 + 1 = 14: 14 -- the step grows with TP only there."""
    h = HostStep(schedule_s=10.0, output_s=1.0, handoff_tree_hop_s=1.0, overlap=True)
    assert [step_s(h, lane(h, n, 1), 14.0) for n in (1, 2, 4, 8, 16)] == [14.0, 14.0, 14.0, 14.0, 15.0]
    h3 = replace(h, handoff_tree_hop_s=3.0)
    assert [step_s(h3, lane(h3, n, 1), 14.0) for n in (2, 8)] == [14.0, 20.0]


def test_the_sglang_preset_hands_off_by_its_gloo_tree():
    """The sglang preset: every TP rank's scheduler receives the step's request broadcast over gloo,
    tree_hops(r) measured hops after rank 0 (bench/gloo_broadcast_hops.py). Its lane's stagger is
    1 / 2 / 3 hops at TP 2 / 4 / 8 plus the last rank's place in the spread (E[max of N] = 0.5642 /
    1.0294 / 1.4236 spreads), none at TP 1, and it overlaps the pass."""
    h = HostStep(**PRESETS["sglang"].values["host"])
    hop, sd = h.handoff_tree_hop_s, h.rank_spread_s
    assert h.overlap and hop > 0 and sd > 0
    assert [lane(h, n, 8).stagger_s for n in (1, 2, 4, 8)] == pytest.approx(
        [0.0, hop + 0.5642 * sd, 2 * hop + 1.0294 * sd, 3 * hop + 1.4236 * sd], abs=1e-8)
    assert "bench/gloo_broadcast_hops.py" in PRESETS["sglang"].sources["host.handoff_tree_hop_s"]


def test_the_ranks_host_spread_makes_the_last_rank_set_the_pace():
    """Spread sqrt(pi) (std dev of each rank's host time) on 2 ranks: the later rank comes
    E[max of 2 standard normals] = 1/sqrt(pi) spreads = 1.0 after the mean; the other waits at the
    mean (offset 0). Toy pass: rank 1 seg0 1-3, ar0 3-7, seg1 7-10, ar1 10-14, seg2 14-15: 15. In
    series with schedule 2: 2 + 15 = 17; TP 1 has no one to wait for: 2 + 14 = 16. Overlapped under a
    short lane (2 + 1 = 3 < 14): 14. On 4 and 8 ranks the last comes 1.0294 and 1.4236 spreads late
    (the normal order statistics' table values): the stagger grows with N."""
    h = HostStep(schedule_s=2.0, rank_spread_s=math.sqrt(math.pi))
    ln = lane(h, 2, 1)
    assert ln.offsets_s == pytest.approx((0.0, 1.0), abs=1e-6)
    assert _pass(2, ln.offsets_s) == pytest.approx(15.0, abs=1e-6)
    assert step_s(h, ln, 14.0) == pytest.approx(17.0, abs=1e-6)
    assert step_s(h, lane(h, 1, 1), 14.0) == 16.0
    assert step_s(replace(h, overlap=True), ln, 14.0) == 14.0
    one = HostStep(rank_spread_s=1.0)
    assert lane(one, 4, 1).offsets_s == pytest.approx((0.0, 0.0, 0.2970, 1.0294), abs=1e-4)
    assert lane(one, 8, 1).stagger_s == pytest.approx(1.4236, abs=1e-4)
    # both engines start each rank at its offset (4 ranks, spread 1): the last rank's 1.0294 late start
    assert _pass(4, lane(one, 4, 1).offsets_s) == pytest.approx(14.0 + 1.0294, abs=1e-4)


def test_a_hand_off_that_grows_with_the_batch_is_paid_at_tp_above_one_only():
    """handoff 2 + handoff_per_seq 0.5 x batch 4 = 4 at TP 2 (lead 4 + pass 14 = 18); TP 1 runs in one
    process: the bare pass, 14."""
    h = HostStep(handoff_s=2.0, handoff_per_seq_s=0.5)
    assert lane(h, 2, 4).lead_s == 4.0 and step_s(h, lane(h, 2, 4), _pass()) == 18.0
    assert lane(h, 1, 4).lead_s == 0.0 and step_s(h, lane(h, 1, 4), _pass()) == 14.0


def test_sleeping_readers_wake_within_the_window_and_the_last_sets_the_pace():
    """Window W = 8: rank 0 writes, ranks 1..n-1 wake at the expected order statistics of n-1 uniforms
    on [0, 8): r x 8 / n. n = 2: (0, 4); n = 4: (0, 2, 4, 6); n = 8: the last 7. Toy pass on 2 ranks:
    rank 1 seg0 4-6, ar0 6-10, seg1 10-13, ar1 13-17, seg2 17-18 = 14 + 4; in series with schedule 1:
    1 + 18 = 19; TP 1 has no reader: 1 + 14 = 15."""
    h = HostStep(schedule_s=1.0, handoff_wake_s=8.0)
    assert lane(h, 2, 1).offsets_s == (0.0, 4.0)
    assert lane(h, 4, 1).offsets_s == (0.0, 2.0, 4.0, 6.0)
    assert lane(h, 8, 1).stagger_s == 7.0
    assert _pass(2, lane(h, 2, 1).offsets_s) == 18.0
    assert step_s(h, lane(h, 2, 1), 14.0) == 19.0 and step_s(h, lane(h, 1, 1), 14.0) == 15.0
    # with a spread on top, each rank sums both (wake 4 + spread 1/sqrt(pi) x sqrt(pi) = 1): 5
    both = replace(h, rank_spread_s=math.sqrt(math.pi))
    assert lane(both, 2, 1).offsets_s == pytest.approx((0.0, 5.0), abs=1e-6)


def test_gpu_side_input_broadcasts_run_before_the_pass_at_tp_above_one():
    """9 broadcasts of 0.5 each (the caller's price on N ranks): lead 4.5 at TP 2, 0 at TP 1 (V0 returns
    before broadcasting on one rank). In series: 4.5 + 14 = 18.5."""
    h = HostStep(step_broadcasts=9)
    assert h.active
    assert lane(h, 2, 1, broadcast_s=0.5).lead_s == 4.5
    assert lane(h, 1, 1, broadcast_s=0.5).lead_s == 0.0
    assert step_s(h, lane(h, 2, 1, 0.5), _pass()) == 18.5
    with pytest.raises(ValueError, match="host.step_broadcasts must be a count"):
        HostStep(step_broadcasts=1.5)


def test_hidden_output_work_runs_during_the_next_pass():
    """V0's async output processing: lead 3, pass 14, output 5 -> 3 + max(14, 5) = 17 (not 3 + 14 + 5 = 22);
    an output longer than the pass shows its excess: output 20 -> 3 + 20 = 23."""
    h = HostStep(schedule_s=3.0, output_s=5.0, output_hidden=True)
    assert step_s(h, lane(h, 1, 1), 14.0) == 17.0
    assert step_s(replace(h, output_hidden=False), lane(h, 1, 1), 14.0) == 22.0
    long = replace(h, output_s=20.0)
    assert step_s(long, lane(long, 1, 1), 14.0) == 23.0
    with pytest.raises(ValueError, match="host.output_hidden"):
        HostStep(output_hidden=1)


def test_predict_prices_each_input_broadcast_as_the_profiles_small_eager_all_gather():
    """The V0 broadcast count reaches the simulator's lane priced by the profile: TP 2 on h100-sxm, 9
    broadcasts of batch 4 int64s cost 9 x the eager NCCL all-gather of 64 bytes on 2 ranks."""
    model, prof = get_model("llama-3.1-8b").truncated(2), load_profile("h100-sxm")
    w = Workload(model, 2, prof, batch=4, gen_len=4, stack=Stack(host=HostStep(step_broadcasts=9)))
    sim = Simulator(w)
    one = sim.cost.collective_s("all_gather", 8 * 4 * 2, 2, "eager", impl="nccl")
    assert one > 0
    assert sim.lane(w.decode_step(1)).lead_s == pytest.approx(9 * one, rel=1e-12)


def test_the_vllm_v0_preset_pays_its_broadcasts_and_wake_window_at_tp_above_one_only():
    """vllm@0.6: 9 NCCL broadcasts and the sleep-polling window (the last of N waits W (N-1)/N) at TP > 1;
    neither at TP 1. Its output work hides under the pass (async output processing)."""
    h = HostStep(**PRESETS["vllm@0.6"].values["host"])
    assert h.step_broadcasts == 9 and h.output_hidden and not h.overlap
    w = h.handoff_wake_s
    assert [lane(h, n, 1).offsets_s[-1] - lane(replace(h, handoff_wake_s=0.0), n, 1).offsets_s[-1]
            for n in (2, 4, 8)] == pytest.approx([w / 2, 3 * w / 4, 7 * w / 8])
    assert lane(h, 1, 1, broadcast_s=1.0).lead_s == pytest.approx(lane(h, 1, 1, broadcast_s=0.0).lead_s)
    assert lane(h, 2, 1, broadcast_s=1.0).lead_s == pytest.approx(lane(h, 2, 1, broadcast_s=0.0).lead_s + 9)


def test_spread_offsets_are_the_trapezoid_sums_of_the_upper_order_statistics():
    """A rank's place in the spread is max(0, E[Z_(k:n)]): only k at and above the median are summed by
    the trapezoid (the grid made once for every k, sim/stack/host_lane.py), bit for bit the plain sum
    point by point written out here; n = 3: the median's own sum (about 0, its sign as summed), n = 4:
    0.2970 and 1.0294; the ranks below the median wait nothing."""
    def direct(n, k):
        tot = 0.0
        for j in range(20001):
            x = j * 1e-3 - 10.0
            F = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
            f = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
            w = 0.5 if j in (0, 20000) else 1.0
            tot += w * x * (math.comb(n - 1, k - 1) * n) * F ** (k - 1) * (1.0 - F) ** (n - k) * f
        return tot * 1e-3
    assert spread_offsets(3, 1.0) == (0.0, max(0.0, direct(3, 2)), direct(3, 3))
    assert spread_offsets(4, 1.0) == (0.0, 0.0, direct(4, 3), direct(4, 4))
    assert spread_offsets(4, 1.0)[2:] == pytest.approx((0.2970, 1.0294), abs=1e-4)
