"""Collectives across nodes: NCCL's multi-node candidates as tuning.cc (2.21-2.30) builds them,
pinned to hand-computed values on h100-sxm (DGX H100: 8 GPUs on NVSwitch, 8 x 400 Gb/s NICs, one per
GPU behind its own PCIe switch), 2 nodes x 8 = 16 ranks.

Numbers used below (profile h100-sxm, all from tuning.cc or the datasheet-sourced topology):
  NVLink ring busbw 367 GB/s (8-GPU chain), NIC 50 GB/s x 8, latency offset -0.92 us;
  LL busbw cap across 2 nodes 39.0 GB/s (llMaxBws, Intel host row);
  Tree:  base LL 6.8, LL128 14.0, Simple 8.4; hop NVLink 0.6 / 1.25 / 4.0; NET 5.0 / 8.5 / 14.
  Ring:  base LL128 14.0, Simple 8.4; hop NVLink LL128 1.9, Simple 3.4; NET LL128 4.0, Simple 14.
  NVLSTree: hwLat NVLink 25, NET 14 (its own column; NVLS's NET column is 18).
"""
import json

import pytest

from tpsim.sim.hardware.profile import load_profile, read_raw
from tpsim.sim.price.comm.topology import RING_PLATEAU, TREE_CORRECTION, TopologyModel, nvls_tree_chunk_bytes

OFFSET_US = -0.92


def _terms(profile="h100-sxm", group=16):
    tm = TopologyModel(load_profile(profile).topology)
    return tm, {t.name: t for t in tm._terms("all_reduce", tuple(tm.placement(group)))}


def test_tree_ll128_and_simple_across_nodes():
    """tuning.cc Tree latency: base + 2 x ((ppn - 1) x intra hop + log2(nodes) x NET hop);
    bandwidth: min(chain 367, NICs 8 x 50) x .92 (x 120/128 for LL128) x .5 (bus -> alg)."""
    _, t = _terms()
    assert t["tree/ll128"].tuner_us == pytest.approx(14.0 + 2 * (7 * 1.25 + 8.5))      # 48.5
    assert t["tree/ll128"].algbw_gbps == pytest.approx(367 * 0.92 * 120 / 128 * 0.5)   # 158.27
    assert t["tree/simple"].tuner_us == pytest.approx(8.4 + 2 * (7 * 4.0 + 14.0))      # 92.4
    assert t["tree/simple"].algbw_gbps == pytest.approx(367 * 0.92 * 0.5)              # 168.82


def test_one_node_keeps_its_ll_tree_only():
    _, t = _terms(group=8)
    assert [n for n in t if n.startswith("tree/")] == ["tree/ll"]


def test_ring_ll128_across_nodes_when_each_gpu_has_its_nic_on_its_switch():
    """NCCL 2.19+ tuning.cc enables LL128 across nodes where typeInter <= PATH_PXB (every DGX H100 GPU
    has its NIC on its own PCIe switch): latency 14 + (30 - 4) x 1.9 + 4 x 4.0 (2 nNodes NET steps)."""
    _, t = _terms()
    assert t["ring/ll128"].tuner_us == pytest.approx(14.0 + 26 * 1.9 + 4 * 4.0)        # 79.4
    # the same payload factor as inside a node, on the ring's cross-node busbw
    assert t["ring/ll128"].algbw_gbps == pytest.approx(t["ring/simple"].algbw_gbps * 0.92)


def test_no_ll128_across_nodes_when_gpus_reach_their_nic_through_the_cpu(tmp_path):
    """2 NICs for 8 GPUs in pairs behind 4 PCIe switches: NIC 0 serves GPUs 0-3, and GPUs 2-3 reach it
    through the CPU (PHB), so NCCL keeps LL128 off across nodes (not PXB; PXN is not modelled)."""
    data, _ = read_raw("h100-sxm")
    data["topology"]["nics_per_node"] = {"value": 2, "source": "test: 2 NICs per node"}
    p = tmp_path / "two-nic.json"
    p.write_text(json.dumps(data))
    tm = TopologyModel(load_profile(str(p)).topology)
    names = {t.name for t in tm._terms("all_reduce", tuple(tm.placement(16)))}
    assert "ring/ll128" not in names and "tree/ll128" not in names
    assert "ring/ll128" in {t.name for t in tm._terms("all_reduce", tuple(tm.placement(8)))}


def test_nvls_tree_latency_uses_its_own_net_column():
    """25 (NVLink) + 2 x log2(2) x 14 (NET, NVLSTree) = 53 us; with NVLS's NET 18 it was 61. A forced
    NVLSTree run on 2 x 8 H20 with 8 NDR NICs per node (nccl#1244, NCCL 2.21.5) measured 46-48 us."""
    tm, t = _terms()
    assert t["nvls-tree"].tuner_us == pytest.approx(25 + 2 * 14)
    assert dict(tm.choices("all_reduce", 8, 16))["nvls-tree"] * 1e6 == pytest.approx(53 + OFFSET_US)


def test_nvls_tree_chunk_size_follows_enqueue_cc():
    """NCCL 2.21 enqueue.cc computeCollChunkInfo, NVLS_TREE, 16 channels x 8 heads = 128 concurrent ops:
    128 KiB; 64 KiB below 4 x 128 x 128 KiB = 64 MiB; 32 KiB below 128 x 64 KiB = 8 MiB; from 4 nodes
    at most 64 KiB."""
    assert nvls_tree_chunk_bytes(2 ** 20, 16, 8, 2) == 32768
    assert nvls_tree_chunk_bytes(8 * 2 ** 20 - 1, 16, 8, 2) == 32768
    assert nvls_tree_chunk_bytes(8 * 2 ** 20, 16, 8, 2) == 65536
    assert nvls_tree_chunk_bytes(64 * 2 ** 20 - 1, 16, 8, 2) == 65536
    assert nvls_tree_chunk_bytes(64 * 2 ** 20, 16, 8, 2) == 131072
    assert nvls_tree_chunk_bytes(2 ** 30, 16, 8, 4) == 65536


def test_nvls_tree_prices_its_first_loop_network_trip_but_picks_without_it():
    """all_reduce.h NVLS_TREE: each of 16 channels walks nbytes / 16 in loops of 8 heads x chunk; the first
    loop's trip up and down the tree (2 nodes: per hop D / (2 x 8 NICs x 48 GB/s), D = nbytes / loops) is
    not hidden. NVLSTree algbw 480 x 9/14 x 8/9 = 274.29 GB/s (the NICs, 8 x 48 = 384, do not bind).
    NCCL's tuner does not know the trip: the pick is unchanged, only the price."""
    tm, t = _terms()
    nv = t["nvls-tree"]
    assert nv.algbw_gbps == pytest.approx(480 * 8 / 14)
    assert [nv.fill.loops(s) for s in (2 ** 20, 2 ** 22, 2 ** 24, 2 ** 26, 2 ** 30)] == [1, 1, 2, 4, 64]
    s = 2 ** 22                                                    # 4 MiB: chunk 32 KiB, one loop
    assert nv.time_us(s, real=False) == pytest.approx(53 + s / (274.2857 * 1e3), rel=1e-6)    # 68.29
    assert nv.time_us(s) == pytest.approx(53 + s / 274.2857e3 + s / 384e3, rel=1e-6)          # 79.21
    s = 2 ** 26                                                    # 64 MiB: chunk 128 KiB, 4 loops
    assert nv.time_us(s) - nv.time_us(s, real=False) == pytest.approx(s / 4 / 384e3)          # 43.69
    # the pick follows the tuner's estimate; the priced time is the real one
    assert tm.pick("all_reduce", 2 ** 22, 16) == ("nvls-tree", pytest.approx((79.2144 + OFFSET_US) * 1e-6))


def test_tree_correction_factor_by_size():
    """tuning.cc treeCorrectionFactor indexes log2(nBytes >> 6): 16 KiB -> 8 -> LL .7; 64 B -> 0 -> 1.0;
    below 64 B no factor; beyond 256 MiB (index 23+) 1.0."""
    _, t = _terms()
    ll = t["tree/ll"]
    assert TREE_CORRECTION["ll"][8] == 0.7
    assert ll.algbw_gbps == pytest.approx(39.0 * 0.5)            # llMaxBw (Intel host, 2 nodes) x .5
    assert ll.time_us(16384) == pytest.approx(25.2 + 16384 / (19.5 * 0.7 * 1e3))         # 26.400
    assert ll.time_us(64) == pytest.approx(25.2 + 64 / (19.5 * 1e3))
    assert ll.time_us(8) == pytest.approx(25.2 + 8 / (19.5 * 1e3))
    simple = t["tree/simple"]
    big = 2 ** 30                                                  # 1 GiB: index 24, beyond the table
    assert simple.time_us(big) == pytest.approx(92.4 + big / (367 * 0.92 * 0.5 * 1e3))
    mid = 2 ** 20                                                  # 1 MiB: index 14 -> Simple .5
    assert simple.time_us(mid) == pytest.approx(92.4 + mid / (367 * 0.92 * 0.5 * 0.5 * 1e3))


def test_ring_simple_plateau_across_nodes_only():
    """tuning.cc: ring Simple all-reduce over nodes pays latency x 1.4 once nBytes / (nChannels x nRanks)
    >= 64 (nChannels: the model's 8 rails); inside a node never."""
    _, t = _terms()
    ring = t["ring/simple"]
    lat = 8.4 + 26 * max(3.4, 3.0) + 4 * 14.0                     # 152.8 (NET overhead floor 3 us)
    assert ring.tuner_us == pytest.approx(lat)
    assert ring.time_us(2 ** 20) == pytest.approx(lat * RING_PLATEAU + 2 ** 20 / (ring.algbw_gbps * 1e3))
    assert ring.time_us(4096) == pytest.approx(lat + 4096 / (ring.algbw_gbps * 1e3))   # 4096 < 64 x 8 x 16
    _, one = _terms(group=8)
    assert one["ring/simple"].time_us(2 ** 20) == pytest.approx(
        one["ring/simple"].tuner_us + 2 ** 20 / (one["ring/simple"].algbw_gbps * 1e3))


def test_two_node_picks_follow_nccls_tuner():
    """Tree LL for decode sizes, Tree LL128 at 256 KiB, NVLSTree from 1 MiB (8 x 400 Gb/s)."""
    tm = TopologyModel(load_profile("h100-sxm").topology)
    picks = {b: tm.pick("all_reduce", b, 16)[0] for b in (8, 16384, 2 ** 18, 2 ** 20, 2 ** 28)}
    assert picks == {8: "tree/ll", 16384: "tree/ll", 2 ** 18: "tree/ll128", 2 ** 20: "nvls-tree",
                     2 ** 28: "nvls-tree"}
