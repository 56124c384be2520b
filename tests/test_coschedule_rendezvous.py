"""A collective is a rendezvous of its ranks' kernels (sim/price/coschedule.py): it starts when its kernel
holds its SMs on every rank, and a rank whose kernel got them earlier spins on them, slowing the
compute beside it. Toy integer timelines, both engines where both can run them."""
import dataclasses

import numpy as np
import pytest

from tpsim.sim.price.coschedule import Bound, Comm, CoSchedule, Kernel
from tpsim.sim.hardware.schema import GpuSpec
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import Schedule, build_plan, plan_of
from tpsim.sim.stack.spec import Step
from toy import ONE_LAYER, STACK, toy_op, toy_schedule, toy_time

# 2 SMs, every collective 1 CTA. z: 1 memory-bound CTA, leaves an SM free (a collective beside it
# starts at once; on 1 SM it keeps its pace: x1). y: 2 tile-bound CTAs, one wave holding both SMs
# (a collective ready during it waits to its end); on the 1 SM a collective's kernel leaves it, 2
# waves: x2, the same whether that kernel moves data or spins.
KERNELS = {"z": (Kernel(1.0, 1, 1, False),), "y": (Kernel(1.0, 2, 1, True),)}
INTER = Interference(coschedule=CoSchedule(GpuSpec(2), lambda s, op: KERNELS.get(op.name, ()),
                                           lambda s, op: Comm(1)))

# pre 0 -> a1 (reads pre) beside z 2 -> y 4 -> a2 (reads y) -> tail 1 (reads a1, a2); collectives 2
SKEW = Schedule("skew", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
    toy_op("pre", "gemm", ["tokens"]), toy_op("a1", "all_reduce", ["pre"]), toy_op("z", "gemm", ["pre"]),
    toy_op("y", "gemm", ["z"]), toy_op("a2", "all_reduce", ["y"]), toy_op("tail", "gemm", ["a1", "a2"])))
SKEW_COST = {"pre": 0.0, "a1": 2.0, "z": 2.0, "y": 4.0, "a2": 2.0, "tail": 1.0}
TIME = lambda op: SKEW_COST[op.name]   # noqa: E731


def span(res, name, rank=0, stream="comm"):
    r = next(r for r in res.records if r.op == name and r.stream == stream and r.rank == rank)
    return r.start_s, r.end_s


def test_a_late_rank_holds_the_collective_and_the_early_rank_spins_beside_its_compute():
    # rank 1 starts 4 late (rank_delay_s / start_s). a1's kernel gets an SM at once beside z on each
    # rank: rank 0 at 0, rank 1 at 4, so a1 runs [4, 6] on both. Rank 0's kernel spins [0, 4]: z [0, 2]
    # keeps its pace; y, launched at 2 on the SM left, runs at 1/2: [2, 4] 1 unit, beside a1 in flight
    # [4, 6] 1 more, alone 2 -> y [2, 8] (without the spin: [2, 4] 2 units, [4, 6] 1, 1 left -> 7).
    # Rank 1: z [4, 6] (x1 beside a1), y [6, 10]. a2: rank 0 issues it at 8 and spins, rank 1 at 10 with
    # nothing computing: a2 [10, 12]; tail [12, 13] on both. Rank 0 waits for a2 [8, 12]: 4 exposed
    # (5 without the spin). Rank 1 was late throughout: the end, 13, does not move.
    res = simulate(SKEW, TIME, ranks=2, interference=INTER, rank_delay_s=(0.0, 4.0))
    assert span(res, "a1") == span(res, "a1", 1) == (4, 6)
    assert span(res, "y", 0, "compute") == pytest.approx((2, 8))
    assert span(res, "y", 1, "compute") == (6, 10)
    assert span(res, "a2") == (10, 12)
    assert res.duration_s == pytest.approx(13) and res.exposed_comm_s == pytest.approx(4)
    d, e = simulate_ranks(compile_schedule(SKEW, TIME, INTER), 2, INTER, start_s=(0.0, 4.0))
    assert (d, e) == pytest.approx((13, 4))


def test_one_ranks_gemm_holds_its_sms_so_every_rank_waits_and_the_spin_costs_the_step():
    # the rank engine's arrival delays (the sampled mode's jitter draws), integers here: rank 1 reaches
    # a1 3 late, rank 0 reaches a2 2 late. a1: rank 0's kernel gets its SM at 0 beside z; rank 1 at 3 finds
    # y [2, 6] holding both SMs in its only wave and waits to y's end: its kernel at 6, a1 [6, 8] on both
    # ranks. Rank 0 spins [0, 6]: z [0, 2], y from 2 at 1/2 to 6 (2 units), beside a1 [6, 8] (1 more),
    # alone 1 -> y [2, 9]. a2: rank 0 issues it at 9 and arrives 2 later, 11; rank 1 (y ended 6) arrives
    # when a1 ends, 8: a2 [11, 13], tail [13, 14]: 14; rank 0 waits [9, 13], 4 exposed.
    # Without the spin rank 0's y ends at 6, a2 arrives at 8 + 2 = 10: a2 [10, 12], 13 in all.
    delays = np.array([[0.0, 3.0], [2.0, 0.0]])
    d, e = simulate_ranks(compile_schedule(SKEW, TIME, INTER), 2, INTER, delays)
    assert d == pytest.approx(14) and e == pytest.approx(4)
    # identical ranks (no delays): nothing spins. a1 [0, 2] beside z (x1), y [2, 6], a2 [6, 8], tail [8, 9];
    # rank 0 waits [6, 8]
    assert simulate_ranks(compile_schedule(SKEW, TIME, INTER), 2, INTER) == pytest.approx((9, 2))


def test_identical_ranks_never_spin_their_timelines_are_unchanged():
    # the ladder of tests/test_coschedule.py (default priority, mlp.up 4 CTAs on 2 SMs): a0 [4, 6],
    # m0 [6, 8], 8 in all, 3 exposed -- on 1 rank as before, and on 2 and 3 identical ranks, both engines
    up = {"L0.mlp.up": (Kernel(1.0, 4, 1, False),)}
    inter = Interference(coschedule=CoSchedule(GpuSpec(2), lambda s, op: up.get(op.name, ()), lambda s, op: Comm(1)))
    s = toy_schedule("ladder", ONE_LAYER)
    for ranks in (1, 2, 3):
        res = simulate(s, toy_time(2), ranks=ranks, interference=inter)
        assert [span(res, n, r) for r in range(ranks) for n in ("L0.attn.allreduce", "L0.mlp.allreduce")] == \
            [(4, 6), (6, 8)] * ranks
        assert (res.duration_s, res.exposed_comm_s) == (8, 3)
        assert simulate_ranks(compile_schedule(s, toy_time(2), inter), ranks, inter) == pytest.approx((8, 3))


def test_a_spinning_kernel_holds_sms_but_moves_no_hbm_bytes():
    # a memory-bound kernel of 1 CTA demanding 3 GB/s of a 4 GB/s HBM, beside a collective demanding 3:
    # in flight both want 6 > 4 -> x1.5; while the collective's kernel spins it moves nothing -> x1.
    # A tile-bound kernel of 4 CTAs on 4 SMs beside 1 CTA: 2 waves on the 3 SMs left -> x2 either way.
    ks = {"m": (Kernel(1.0, 1, 1, False, hbm_gbps=3.0, hbm_cap_gbps=4.0),),
          "t": (Kernel(0.5, 4, 1, True), Kernel(0.5, 1, 1, False))}
    sched = Schedule("u", ONE_LAYER, 2, Step.decode(1, 8, 4, 1, STACK), STACK, (
        toy_op("m", "gemm", ["tokens"]), toy_op("t", "gemm", ["tokens"]), toy_op("ar", "all_reduce", ["m"])))
    b = CoSchedule(GpuSpec(4), lambda s, op: ks.get(op.name, ()), lambda s, op: Comm(1, 3.0)).bind(
        sched, {"m": 1.0, "t": 1.0, "ar": 1.0})
    assert isinstance(b, Bound)
    assert b.compute_slowdown("m", "ar") == pytest.approx(1.5) and b.spin_slowdown("m", "ar") == 1.0
    # an op of two kernels: the time-weighted mean, 0.5 x 2 + 0.5 x 1
    assert b.spin_slowdown("t", "ar") == pytest.approx(1.5) == b.compute_slowdown("t", "ar")


class _NoSpin(Bound):
    """The rule before the rendezvous mechanism: a spinning kernel slows nothing (the counterfactual)."""

    def spin_slowdown(self, compute: str, comm: str) -> float:
        return 1.0


def _decode(spec: str, batch: int, layers: int):
    """70B TP8 decode on h100-sxm-coschedule, `layers` layers: the schedule, its op times, the interference."""
    w = Workload(get_model("llama-3.1-70b"), 8, load_profile("h100-sxm-coschedule"), gen_len=8, batch=batch)
    sim = Simulator(w)
    s = build_plan(spec, plan_of(spec, layers), w.model.truncated(layers), 8, w.decode_step(1), w.stack)
    return s, (lambda op: sim._op_time(op, "decode")), sim.interference


@pytest.mark.parametrize("spec", ["standard", "ladder", "parallel"])
def test_engines_agree_when_jittered_ranks_spin_on_h100_shapes(spec):
    # 70B TP8 b64 decode, 2 layers, 20 us exponential arrival jitter (a what-if: the built-in's is 0):
    # SimPy's draws rank by rank per collective are the rank engine's [collective, rank] matrix from the
    # same seed (tests/test_sampled.py), so the two timelines coincide with the spin in both
    s, op_time, inter = _decode(spec, 64, 2)
    c = compile_schedule(s, op_time, inter)
    delays = np.random.default_rng(7).exponential(20e-6, (len(c.comm_names), 8))
    a = simulate(s, op_time, ranks=8, interference=inter, jitter_s=20e-6, seed=7, record=False)
    d, e = simulate_ranks(c, 8, inter, delays)
    assert d == pytest.approx(a.duration_s, rel=1e-12)
    assert e == pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("batch", [16, 64])
def test_jittered_ladder_pays_for_the_spin_where_its_gemms_need_the_sms(batch):
    # the ladder's all-reduce kernels, early on some ranks, spin beside the next GEMMs: at b64 gate/up's
    # 112 CTAs beside a 24-CTA ring kernel (x1.47) and down's 128 (x1.29) lose SMs, so the mean pass over
    # 5 draws of 5 us jitter (8 layers) is longer than the counterfactual that charges the spin nothing;
    # at b16 (8-CTA kernels beside GEMMs that leave them free: x1) the two are the same
    s, op_time, inter = _decode("ladder", batch, 8)
    c = compile_schedule(s, op_time, inter)
    no_spin = dataclasses.replace(c, cosched=_NoSpin(c.cosched.cs, s, c.cosched.times))
    rng = np.random.default_rng(7)
    draws = [rng.exponential(5e-6, (len(c.comm_names), 8)) for _ in range(5)]
    spin = np.mean([simulate_ranks(c, 8, inter, d)[0] for d in draws])
    free = np.mean([simulate_ranks(no_spin, 8, inter, d)[0] for d in draws])
    if batch == 64:
        assert spin > free + 8 * 2e-6          # more than 2 us a layer
    else:
        assert spin == pytest.approx(free, rel=1e-12)
