"""Co-scheduling a collective beside compute kernels (sim/price/coschedule.py), pinned on toy integer
timelines in both engines; the channel and grid rules of sim/price/occupancy.py; the profiles' section."""
import json

import pytest

from tpsim.sim.price.coschedule import Comm, CoSchedule, Kernel, memory_waves_s, pair_factors, start_delay_s
from tpsim.sim.hardware.schema import GpuSpec
from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.step import Interference
from tpsim.sim.model.presets import get_model
from tpsim.sim.price.occupancy import nccl_channels, op_kernels
from tpsim.sim.hardware.gemm_grids import RULE, GemmTile, gemm_tile
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.hardware.profile import ProfileError, load_profile
from tpsim.sim.stack.spec import Stack
from toy import AT_1, COSCHED_COST as COST, COSCHED_PASS as PASS, ONE_LAYER, both, span, toy_schedule, toy_time


def hook(kernels: dict, sms=2, high_priority=False, comm_ctas=1, comm_hbm=0.0):
    """Toy hook: kernels by op name, every collective `comm_ctas` CTAs demanding `comm_hbm`."""
    return CoSchedule(GpuSpec(sms, high_priority), lambda s, op: kernels.get(op.name, ()),
                      lambda s, op: Comm(comm_ctas, comm_hbm))


def test_high_priority_starts_at_the_next_wave_boundary():
    # 2 SMs; k = 6 tile-bound CTAs, one per SM: 3 waves of 2 units [0,2] [2,4] [4,6]. ar (1 SM) is
    # ready at 1 and starts at the wave boundary 2, runs [2,3]. Beside it k's tiles wave over the 1
    # SM left: 6 waves instead of 3 -> factor 2. k: 2 units by 2, 0.5 in [2,3], 3.5 after -> ends 6.5;
    # tail [6.5, 7.5]; nothing waits on the compute stream.
    res = both(PASS, COST, Interference(coschedule=hook({"k": (Kernel(1.0, 6, 1, True),)}, high_priority=True)),
               host=AT_1)
    assert span(res, "ar") == pytest.approx((2, 3))
    assert span(res, "k", "compute") == pytest.approx((0, 6.5))
    assert res.duration_s == pytest.approx(7.5) and res.exposed_comm_s == 0


def test_default_priority_waits_for_the_kernel_that_holds_every_sm():
    # the same k, the comm stream at default priority: k's CTAs are dispatched first and its last
    # wave [4,6] fills both SMs, so ar waits to k's end: ar [6,7], tail waits [6,7], runs [7,8]
    res = both(PASS, COST, Interference(coschedule=hook({"k": (Kernel(1.0, 6, 1, True),)})), host=AT_1)
    assert span(res, "ar") == (6, 7)
    assert res.duration_s == 8 and res.exposed_comm_s == 1


def test_default_priority_starts_when_the_last_wave_leaves_room():
    # k = 5 memory-bound CTAs: waves [0,2] [2,4] [4,6], the last of 1 CTA leaves 1 SM: ar [4,5];
    # memory-bound k keeps its pace on 1 SM (factor 1) and ends at 6; tail [6,7]
    res = both(PASS, COST, Interference(coschedule=hook({"k": (Kernel(1.0, 5, 1, False),)})), host=AT_1)
    assert span(res, "ar") == (4, 5) and res.duration_s == 7 and res.exposed_comm_s == 0


def test_free_sms_start_it_at_once_and_hbm_sharing_slows_both():
    # k = 1 CTA leaves 1 SM free: ar starts when ready (1). k demands 3 GB/s, ar 3, HBM gives 4:
    # both run at 4/6 while together. ar (2 units) [1, 4]; k: 1 unit by 1, 2 in [1,4], 3 after -> 7;
    # tail [7, 8]
    cost = dict(COST, ar=2.0)
    k = (Kernel(1.0, 1, 1, False, hbm_gbps=3.0, hbm_cap_gbps=4.0),)
    res = both(PASS, cost, Interference(coschedule=hook({"k": k}, comm_hbm=3.0)), host=AT_1)
    assert span(res, "ar") == pytest.approx((1, 4))
    assert span(res, "k", "compute") == pytest.approx((0, 7))
    assert res.duration_s == pytest.approx(8)


def test_ladder_loses_its_hiding_when_the_next_gemm_holds_the_sms():
    # one-layer ladder, C = 2: attn [0,2], a0 issued at 2 as mlp.up (2 units, 4 CTAs on 2 SMs: waves
    # [2,3] [3,4]) starts. No hook: a0 [2,4] hidden by mlp [2,5], m0 [5,7]: 7.
    # Default priority: a0 waits to up's end, [4,6]; down [4,5]; m0 is issued at 5 but follows a0: [6,8];
    # the compute stream waits for a0 [5,6] and m0 [6,8]: 8, exposed 3.
    # High priority: a0 starts at the wave boundary 3, [3,5]; m0 [5,7]: 7 again, exposed 2.
    s = toy_schedule("ladder", ONE_LAYER)
    up = {"L0.mlp.up": (Kernel(1.0, 4, 1, False),)}
    assert both(s, toy_time(2), Interference()).duration_s == 7
    low = both(s, toy_time(2), Interference(coschedule=hook(up)))
    assert span(low, "L0.attn.allreduce") == (4, 6) and span(low, "L0.mlp.allreduce") == (6, 8)
    assert low.duration_s == 8 and low.exposed_comm_s == 3
    high = both(s, toy_time(2), Interference(coschedule=hook(up, high_priority=True)))
    assert span(high, "L0.attn.allreduce") == (3, 5) and high.duration_s == 7 and high.exposed_comm_s == 2


@pytest.mark.parametrize("spec", ["standard", "ladder", "spd:0.5", "parallel", "ladder:1"])
@pytest.mark.parametrize("high_priority", [False, True])
@pytest.mark.parametrize("wake", [0.0, 0.3])
def test_engines_agree_under_coscheduling(spec, high_priority, wake):
    # every toy GEMM a tile-bound 3-wave kernel on 2 SMs with HBM demand; the collectives want 1 SM
    ks = {}
    s = toy_schedule(spec)
    for op in s.ops:
        if not op.is_comm:
            ks[op.name] = (Kernel(0.25, 1, 1, False, 1.0, 2.0), Kernel(0.75, 5, 1, True, 1.5, 2.0))
    inter = Interference(wake_s=wake, coschedule=hook(ks, high_priority=high_priority, comm_hbm=1.0))
    for c in (0.5, 2.5, 4):
        for ranks in (1, 3):
            both(s, toy_time(c), inter, ranks=ranks)


def test_wave_rules():
    gpu = GpuSpec(132)
    gemm = Kernel(1.0, 132, 1, True)
    # FACTS §7: a 132-tile GEMM beside a 24-CTA NCCL kernel takes a second wave: twice as long
    assert pair_factors(gemm, Comm(24), gpu) == (2.0, 1.0)
    assert pair_factors(Kernel(1.0, 100, 1, True), Comm(24), gpu) == (1.0, 1.0)   # 108 SMs still hold 100
    # one wave of 120 CTAs leaves 12 SMs: a 24-CTA collective 3 us into it waits to its end (10);
    # 108 CTAs leave exactly 24: it starts at once
    assert start_delay_s(Kernel(1.0, 120, 1, True), 10.0, 3.0, 24, gpu) == 7.0
    assert start_delay_s(Kernel(1.0, 108, 1, True), 10.0, 3.0, 24, gpu) == 0.0
    # 8 CTAs per SM, 2112 CTAs = 2 waves of 5 us; 1 us in, high priority waits 4 us, default 9
    k = Kernel(1.0, 2112, 8, False)
    assert start_delay_s(k, 10.0, 1.0, 1, GpuSpec(132, True)) == pytest.approx(4.0)
    assert start_delay_s(k, 10.0, 1.0, 1, gpu) == pytest.approx(9.0)


def test_memory_bound_waves_on_the_sms_left():
    # 6 SMs drawing 1 GB/s each, HBM 4 GB/s; a memory-bound kernel of 5 equal CTAs (1 per SM).
    # Alone: one wave of 5 CTAs at min(4, 5 x 1) = 4 -> 1/4 of its bytes per GB/s.
    # Beside a 2-CTA collective (4 SMs left): 4 CTAs (4/5 of the bytes) at min(4, 4) = 4 -> 0.2,
    # then 1 CTA (1/5) on 1 SM at 1 -> 0.2: 0.4 / 0.25 = x1.6
    gpu = GpuSpec(6, sm_hbm_gbps=1.0)
    k = Kernel(1.0, 5, 1, False, hbm_gbps=0.0, hbm_cap_gbps=4.0)
    assert memory_waves_s(k, 6, 1.0) == pytest.approx(0.25)
    assert pair_factors(k, Comm(2), gpu) == pytest.approx((1.6, 1.0))
    # 3 CTAs beside it: still one wave on the 4 SMs left, at min(4, 3 x 1) = 3 both ways: x1
    assert pair_factors(Kernel(1.0, 3, 1, False, hbm_cap_gbps=4.0), Comm(2), gpu) == pytest.approx((1.0, 1.0))
    # sm_hbm_gbps 0 (not modelled) keeps the rule: a memory-bound kernel keeps its pace
    assert pair_factors(k, Comm(2), GpuSpec(6)) == (1.0, 1.0)
    # H100: 70B TP8 b64 gate/up, 112 CTAs, beside 24 NCCL CTAs at 50 GB/s per SM, HBM 2847.5 GB/s:
    # 108 CTAs at HBM's rate, 4 on 4 SMs at 200 GB/s: (108/2847.5 + 4/200) / (112/2847.5) = x1.473
    up = Kernel(1.0, 112, 1, False, hbm_cap_gbps=2847.5)
    f, _ = pair_factors(up, Comm(24), GpuSpec(132, sm_hbm_gbps=50.0))
    assert f == pytest.approx((108 / 2847.5 + 4 / 200) / (112 / 2847.5))
    assert load_profile("h100-sxm-coschedule").coschedule.sm_hbm_gbps == 50.0


def test_nccl_channels_follow_enqueue_cc():
    gpu = GpuSpec(132, coll_channels=24, nvls_channels=16)
    # Ring LL: 512 threads x (8 x 8 ranks) bytes = 32 KiB per channel before NCCL adds one
    assert nccl_channels(gpu, "ring/ll", 16384, 8) == 1
    assert nccl_channels(gpu, "ring/ll", 65536, 8) == 2
    assert nccl_channels(gpu, "ring/ll", 1 << 20, 8) == 24          # 32 capped at the coll channels
    assert nccl_channels(gpu, "tree/ll", 65536, 8) == 16           # Tree LL: 4 KiB per channel
    assert nccl_channels(gpu, "nvls", 1024, 8) == 16


def test_occupancy_on_h100_uses_the_sourced_cublas_grids():
    # 70B TP8 decode at batch 64: the down projection [64 x 3584] x [3584 x 8192] is an extern cuBLAS
    # GEMM (wo at batch > 1 is a generated reduction on the GPU path, sim/price/l2_traffic.py). Under the
    # "cublas-sm90" table (sim/hardware/gemm_grids.py) its 64-feature tiles give 8192 / 64 = 128 CTAs, where
    # the 128 x 128 rule gives 8192 / 128 = 64; the fused gate/up (n 7168) 112 CTAs, qkv (n 1280) 20
    w = Workload(get_model("llama-3.1-70b"), 8, load_profile("h100-sxm-coschedule"), batch=64)
    assert w.profile.coschedule.gemm_grids == "cublas-sm90"
    sched = w.schedule("ladder", w.decode_step(1))
    cost = CostModel(w.profile, w.stack)
    ops = {o.name: o for o in sched.ops}
    (k,) = op_kernels(cost, sched, ops["L0.mlp.down"])
    assert k.ctas == 128 and k.per_sm == 1 and not k.tile_bound and k.share == 1.0
    assert k.hbm_cap_gbps == pytest.approx(3350 * max(w.profile.memory_efficiency.y))   # the plateau, 0.85
    assert [k.ctas for k in op_kernels(cost, sched, ops["L0.mlp.up"])] == [112]
    assert [k.ctas for k in op_kernels(cost, sched, ops["L0.attn.qkv"])] == [20]


def test_gemm_grid_tables_and_their_fallback():
    # decode m <= 64 under cublas-sm90: ceil(n / 64) CTAs whatever m (one 64-token row of tiles)
    assert gemm_tile("cublas-sm90", 1).ctas(1, 8192) == 128
    assert gemm_tile("cublas-sm90", 64).ctas(64, 1280) == 20                      # ceil(1280 / 64)
    # m = 65 leaves the sourced class: the rule's 128 x 128 tiles, ceil(65/128) x ceil(8192/128) = 64
    assert gemm_tile("cublas-sm90", 65) is RULE and RULE.ctas(65, 8192) == 64
    assert RULE.ctas(256, 8192) == 2 * 64
    # the "rule" table is the rule at every m, and a split-K tile multiplies its grid
    assert gemm_tile("rule", 16) is RULE and RULE.ctas(16, 1280) == 10
    assert GemmTile(64, 64, split_k=3).ctas(16, 1280) == 60


def test_an_unknown_grid_table_is_a_profile_error(tmp_path):
    data = {"format": "tpsim-profile", "version": 1, "extends": "h100-sxm-coschedule", "name": "mine",
            "overlap": {"gpu": {"gemm_grids": {"value": "cublas-sm42", "source": "a typo"}}}}
    path = tmp_path / "grids.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert "'overlap.gpu.gemm_grids'" in str(e.value) and "cublas-sm90" in str(e.value)


def test_gpu_profiles_coschedule_cpu_factors_stay():
    """The -coschedule built-ins opt in to the mechanism; the plain ones keep the flat factors."""
    for name in ("h100-sxm", "h200-sxm", "h100-sxm-p2p-off"):
        p = load_profile(f"{name}-coschedule")
        assert p.coschedule is not None and p.coschedule.sms == 132
        assert p.compute_slowdown == 1.0 and not p.coschedule.high_priority
        assert Simulator(Workload(get_model("llama-3.1-8b"), 8, p)).interference.coschedule is not None
        flat = load_profile(name)
        assert flat.coschedule is None and flat.compute_slowdown > 1.0
    assert load_profile("h100-sxm-p2p-off-coschedule").coschedule.coll_channels == 2
    a100 = load_profile("a100-sxm")
    assert a100.coschedule is None and a100.compute_slowdown > 1.0
    assert Simulator(Workload(get_model("llama-3.1-8b"), 8, a100)).interference.coschedule is None


def test_stack_default_still_predicts():
    w = Workload(get_model("llama-3.1-8b"), 8, load_profile("h100-sxm"), batch=4, gen_len=4, stack=Stack())
    sim = Simulator(w)
    assert sim.predict("ladder").tokens_per_s > sim.predict("standard").tokens_per_s * 0.5
