"""NCCL's thread-block clusters beside a compute kernel, counted per GPC (sim/hardware/gpc.py through
sim/price/coschedule.py's start rule), pinned on hand-computed toy GPUs in both engines; the built-in
profiles' GPC section and its checks."""
import json

import pytest

from tpsim.sim.price.coschedule import Comm, CoSchedule, Kernel, start_delay_s
from tpsim.sim.hardware.schema import GpuSpec
from tpsim.sim.engine.step import Interference
from tpsim.sim.hardware.gpc import cluster_size, clusters_free, fits, spread_idle
from tpsim.sim.hardware.profile import ProfileError, load_profile
from toy import AT_1, COSCHED_COST as COST, COSCHED_PASS as PASS, both, span

# a toy GPU: 4 GPCs x 4 SMs; NCCL kernels in clusters of 2 CTAs
TOY = (4, 4, 4, 4)
H100 = (16,) * 6 + (18,) * 2


def toy_gpu(placement: str, cga: int = 2) -> GpuSpec:
    return GpuSpec(16, gpc_sms=TOY, nccl_cluster_size=cga, idle_sm_placement=placement)


def run(gpu: GpuSpec, k_ctas: int, comm_ctas: int = 4):
    hook = CoSchedule(gpu, lambda s, op: {"k": (Kernel(1.0, k_ctas, 1, False),)}.get(op.name, ()),
                      lambda s, op: Comm(comm_ctas))
    return both(PASS, COST, Interference(coschedule=hook), host=AT_1)


def test_spread_idle_sms_hold_no_cluster_so_the_collective_waits_to_the_kernels_end():
    # k: 12 CTAs, one wave on 16 SMs [0,6]; ar: 4 CTAs = 2 clusters of 2, ready at 1.
    # spread: 3 busy SMs per GPC, 1 idle in each: no GPC holds a cluster of 2 -> ar waits to k's end,
    # [6,7]; tail waits for ar: [7,8]; the compute stream waits [6,7]: exposed 1
    res = run(toy_gpu("spread"), 12)
    assert span(res, "ar") == (6, 7) and res.duration_s == 8 and res.exposed_comm_s == 1


def test_packed_idle_sms_start_it_at_once():
    # the same k, its 4 idle SMs packed in one GPC: 2 clusters fit -> ar [1,2], k [0,6], tail [6,7]
    res = run(toy_gpu("packed"), 12)
    assert span(res, "ar") == (1, 2) and span(res, "k", "compute") == (0, 6)
    assert res.duration_s == 7 and res.exposed_comm_s == 0


def test_without_clusters_spread_idle_sms_still_serve_single_ctas():
    # NCCL falls back to clusters of 1 when the grid does not divide (enqueue.cc): 3 CTAs in clusters
    # of 2 -> 1 each, the 4 scattered idle SMs hold them: ar [1,2]; and cgaClusterSize 1 likewise
    assert span(run(toy_gpu("spread"), 12, comm_ctas=3), "ar") == (1, 2)
    assert span(run(toy_gpu("spread", cga=1), 12), "ar") == (1, 2)


def test_the_last_wave_leaves_room_per_gpc():
    # 16 SMs, k of 6 units. 20 CTAs: waves [0,3] [3,6], the last of 4 CTAs, one per GPC under spread:
    # 3 idle in each, a cluster of 2 in each -> 2 clusters start at the last wave's dispatch (3): wait 2.
    # 28 CTAs: the last wave of 12 leaves 1 idle per GPC -> spread waits to the end (5), packed 2.
    assert start_delay_s(Kernel(1.0, 20, 1, False), 6.0, 1.0, 4, toy_gpu("spread")) == 2.0
    assert start_delay_s(Kernel(1.0, 28, 1, False), 6.0, 1.0, 4, toy_gpu("spread")) == 5.0
    assert start_delay_s(Kernel(1.0, 28, 1, False), 6.0, 1.0, 4, toy_gpu("packed")) == 2.0


def test_round_robin_over_gpcs_and_cluster_counts():
    # busy SMs dealt one per GPC in turn, a full GPC skipped: 5 over (2, 4) -> (2, 3) busy, (0, 1) idle
    assert spread_idle(5, (2, 4)) == (0, 1)
    assert spread_idle(12, TOY) == (1, 1, 1, 1) and clusters_free(12, 2, 16, TOY, "spread") == 0
    assert clusters_free(12, 2, 16, TOY, "packed") == 2
    # NCCL's clusters: the grid must divide by cgaClusterSize, else 1 (enqueue.cc line 1382)
    assert (cluster_size(24, 4), cluster_size(8, 4), cluster_size(2, 4), cluster_size(24, 1)) == (4, 4, 1, 1)
    # H100, 6 x 16 + 2 x 18 SMs. A 112-CTA GEMM (70B TP8 gate/up) spread: 14 busy per GPC, idle 2 in
    # the 16-SM GPCs and 4 in the 18-SM ones -> 2 clusters of 4, where packed counts 20 // 4 = 5
    assert spread_idle(112, H100) == (2,) * 6 + (4,) * 2
    assert clusters_free(112, 4, 132, H100, "spread") == 2 and clusters_free(112, 4, 132, H100, "packed") == 5
    # so an 8-CTA all-reduce (2 clusters) starts beside it either way, a 16-CTA one only when packed,
    # a 24-CTA one (6 clusters) under neither
    assert fits(8, 112, 132, H100, 4, "spread") and fits(16, 112, 132, H100, 4, "packed")
    assert not fits(16, 112, 132, H100, 4, "spread") and not fits(24, 112, 132, H100, 4, "packed")
    # a 128-CTA GEMM spread leaves 2 idle SMs in each 18-SM GPC only: no cluster of 4, 2 of 1
    assert clusters_free(128, 4, 132, H100, "spread") == 0 and fits(2, 128, 132, H100, 4, "spread")


def test_built_in_profiles_name_the_gpcs_and_keep_packed():
    for name in ("h100-sxm-coschedule", "h200-sxm-coschedule", "h100-sxm-p2p-off-coschedule"):
        g = load_profile(name).coschedule
        assert g.gpc_sms == H100 and g.nccl_cluster_size == 4 and g.idle_sm_placement == "packed"
    assert load_profile("h100-sxm-coschedule").coschedule.room(24, 108)     # packed: 24 idle SMs hold 6 clusters


@pytest.mark.parametrize("gpu, msg", [
    ({"gpc_sms": {"value": [16] * 8, "source": "x"}}, "summing to overlap.gpu.sms"),
    ({"gpc_sms": {"value": [16.5] * 8, "source": "x"}}, "positive whole SM counts"),
    ({"idle_sm_placement": {"value": "random", "source": "x"}}, "'packed', 'spread'"),
    ({"nccl_cluster_size": {"value": 9, "source": "x"}}, "at most 8"),
    ({"nccl_cluster_size": {"value": 2.5, "source": "x"}}, "whole number in 1..8"),
])
def test_bad_gpc_fields_are_profile_errors(tmp_path, gpu, msg):
    data = {"format": "tpsim-profile", "version": 1, "extends": "h100-sxm-coschedule", "name": "mine",
            "overlap": {"gpu": gpu}}
    path = tmp_path / "gpc.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert f"'overlap.gpu.{next(iter(gpu))}'" in str(e.value) and msg in str(e.value)


def test_gpu_spec_checks_its_layout():
    with pytest.raises(ValueError):
        GpuSpec(16, gpc_sms=(4, 4, 4))
    with pytest.raises(ValueError):
        GpuSpec(16, idle_sm_placement="random")
