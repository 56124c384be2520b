"""Topology-derived collective costs, checked against the measured tables of the same boxes.

Errors measured (model vs aiconfigurator 0.12.0 NCCL tables, all_reduce, printed by
`pytest -s tests/test_topology.py -k report`):
  busbw at the largest measured size (512 MiB):
    h100-sxm  n=2 +14%  n=4 +5%  n=8 +7%     h200-sxm  n=2 +14%  n=4 +6%  n=8 +3%
    (the 2-GPU tables still climb at 512 MiB; against the published 2-4 GiB peaks of nccl#1455 the
    H100 model is within 3% at every group size 2..8)
    a100-sxm  n=2 +5%   n=4 -7%  n=8 -9%     l40s-pcie n=2 +19%  (n=4, 8: measured 5.2 and 1.4 GB/s,
    far below any PCIe link; that server's cross-socket P2P path is not modelled; tables win there)
  small-message latency (<= 4 KiB): within 14% (h100), 18% (h200), 17% (a100), 24% (l40s)
"""
import math

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack
from tpsim.sim.hardware.topology import build_graph, ring_busbw_gbps, route
from tpsim.sim.price.comm.topology import TopologyModel

NVSWITCH = ("h100-sxm", "h200-sxm", "a100-sxm")


def _model(name):
    return TopologyModel(load_profile(name).topology)


def _measured(name, collective="all_reduce"):
    return [t for t in load_profile(name).collective_tables
            if t.impl == "nccl" and t.mode == "graph" and t.collective == collective]


def _busbw(collective, n, nbytes, seconds):
    f = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n
    return nbytes / seconds / 1e9 * f


def errors(name, collective="all_reduce"):
    """{group: (busbw error at the largest size, worst small-message latency error)}."""
    tm = _model(name)
    out = {}
    for t in _measured(name, collective):
        n, b, s = t.group, t.bytes[-1], t.time_s[-1]
        bw_err = _busbw(collective, n, b, tm.collective_s(collective, b, n)) / _busbw(collective, n, b, s) - 1
        lat = [tm.collective_s(collective, x, n) / y - 1 for x, y in zip(t.bytes, t.time_s) if x <= 4096]
        out[n] = (bw_err, max(lat, key=abs))
    return out


# ------------------------------------------------------------------ graph

def test_graph_has_the_declared_parts():
    spec = load_profile("h100-sxm").topology
    g = build_graph(spec, nodes=2)
    kinds = [d.get("kind") for _, d in g.nodes(data=True)]
    assert kinds.count("gpu") == 16 and kinds.count("cpu") == 4 and kinds.count("mem") == 4
    assert g.has_edge("n0.gpu3", "n0.nvswitch") and g.has_edge("n1.nic7", "fabric")
    assert g.edges["n0.gpu0", "n0.nvswitch"]["gbps"] == spec.nvlink_gbps


def test_routes_follow_the_transport():
    on = load_profile("h100-sxm").topology
    off = load_profile("h100-sxm-p2p-off").topology
    g_on, g_off = build_graph(on, 2), build_graph(off, 2)
    assert route(g_on, on, (0, 0), (0, 5)) == ["n0.gpu0", "n0.nvswitch", "n0.gpu5"]
    p = route(g_off, off, (0, 0), (0, 3))          # same socket: SHM through host memory
    assert "n0.nvswitch" not in p and any(".mem" in v for v in p) and p[1].startswith("n0.pcisw")
    # across sockets with P2P off NCCL uses NET/IB (shmCanConnect -> ncclTopoCheckNet): own NICs, fabric
    assert route(g_off, off, (0, 0), (0, 5)) == ["n0.gpu0", "n0.pcisw0", "n0.nic0", "fabric", "n0.nic5",
                                                 "n0.pcisw2", "n0.gpu5"]
    x = route(g_on, on, (0, 2), (1, 3))
    assert "fabric" in x and "n0.nic2" in x and "n1.nic3" in x


def test_ring_bottleneck_moves_with_the_topology():
    on = load_profile("h100-sxm").topology
    off = load_profile("h100-sxm-p2p-off").topology
    ranks = [(0, i) for i in range(8)]
    assert ring_busbw_gbps(build_graph(on), on, ranks) == pytest.approx(on.nvlink_gbps)
    # P2P off: two GPUs share each PCIe switch uplink to the CPU (48 / 2 = 24 per GPU), and each SHM
    # flow runs at most at the per-GPU rate of SM-driven host traffic in both directions with every
    # GPU busy (nvbandwidth host_to_all_bidirectional_memcpy_sm on 8x H800: 23.3 GB/s)
    assert off.shm_gbps == pytest.approx(23.3)
    assert ring_busbw_gbps(build_graph(off), off, ranks) == pytest.approx(23.3)
    # spanning two nodes, 8 channels over 8 NICs: each NIC carries 1/8 of the ring, so the ring
    # runs at the node's aggregate NIC rate (8 x 50 GB/s), capped by each NIC's PCIe link (8 x 48)
    two = [(k, i) for k in range(2) for i in range(8)]
    bw = ring_busbw_gbps(build_graph(on, 2), on, two, channels=8)
    assert bw == pytest.approx(min(on.nic_gbps, on.pcie_gbps) * on.nics_per_node)
    # one channel: a single NIC carries every byte that crosses
    assert ring_busbw_gbps(build_graph(on, 2), on, two, channels=1) == pytest.approx(min(on.nic_gbps, on.pcie_gbps))


# ------------------------------------------------------------------ against measurements

# Peak all-reduce busbw on one 8xH100 SXM node at 2-4 GiB messages, per group size, as reported in
# NVIDIA/nccl#1455 (nccl-tests `all_reduce_perf -b 2G -e 4G -g N`): Ring 365-370 GB/s for 2..8 GPUs;
# the default (NVLS from 5 GPUs) 365-370 at 2..4, then 420 / 440 / 460 / 480 at 5 / 6 / 7 / 8,
# algbw 258 / ~265 / 270 / 273. The profile takes only the 8-GPU values (367 ring, 480 NVLS); how the
# bandwidth changes with group size is the topology model's own, and this is what checks it.
NCCL_1455_BUSBW = {2: 367.5, 3: 367.5, 4: 367.5, 5: 420.0, 6: 440.0, 7: 460.0, 8: 480.0}
NCCL_1455_NVLS_ALGBW = {5: 258.0, 6: 265.0, 7: 270.0, 8: 273.0}


def test_peak_busbw_every_group_size_matches_published_large_message_runs():
    tm = _model("h100-sxm")
    size = 2 ** 31
    for n, published in NCCL_1455_BUSBW.items():
        algbw = size / tm.collective_s("all_reduce", size, n) / 1e9
        assert algbw * 2 * (n - 1) / n == pytest.approx(published, rel=0.03), n
        if n in NCCL_1455_NVLS_ALGBW:
            assert algbw == pytest.approx(NCCL_1455_NVLS_ALGBW[n], rel=0.03), n
    # ring below 5 GPUs, NVLS from 5: the crossover the published runs show
    assert [tm.choices("all_reduce", size, n)[0][0] for n in (2, 3, 5, 8)] == \
        ["ring/simple", "ring/simple", "nvls", "nvls"]


def test_two_and_four_h100_nodes_match_published_runs():
    """Peak all-reduce busbw across 8-GPU H100 nodes with 8x400 Gb/s NICs, NVIDIA/nccl-tests#309
    (all_reduce_perf up to 16 GB): 2 nodes 470 GB/s with NCCL's default (NVLSTree) and 368.76 with
    NVLS disabled (ring); 4 nodes 365.84. Nothing in the profile comes from these runs."""
    tm = _model("h100-sxm")
    size = 2 ** 34

    def busbw(n, algo=None):
        t = min(s for name, s in tm.choices("all_reduce", size, n) if algo is None or name.startswith(algo))
        return size / t / 1e9 * 2 * (n - 1) / n
    assert busbw(16) == pytest.approx(470, rel=0.10)
    assert tm.choices("all_reduce", size, 16)[0][0] == "nvls-tree"
    assert busbw(16, "ring") == pytest.approx(368.76, rel=0.10)
    assert busbw(32) == pytest.approx(365.84, rel=0.10)
    # small messages across nodes stay on the LL tree: NVLSTree's latency is for bandwidth
    assert tm.choices("all_reduce", 32 * 1024, 16)[0][0] == "tree/ll"


@pytest.mark.parametrize("name", NVSWITCH)
def test_large_message_busbw_within_10_percent(name):
    """The bandwidths come from datasheets / NCCL constants / published 8-GPU busbw (docs/sources.md §6);
    the check is against an independent measurement set (aiconfigurator's NCCL tables) at their
    largest size, 512 MiB."""
    errs = errors(name)
    groups = (2, 4, 8) if name == "a100-sxm" else (4, 8)
    for n in groups:
        assert abs(errs[n][0]) <= 0.10, (name, n, errs[n])
    # H100/H200 at 2 GPUs: the table's 512 MiB point is not yet peak (its busbw still climbs ~4% per
    # doubling there; "256M is too small to reach peak bandwidth", nccl-tests#212), while at 2-4 GiB
    # the published 2-GPU peak is the model's to 1% (test above). Reported, looser bound.
    assert abs(errs[2][0]) <= 0.20, (name, errs[2])


@pytest.mark.parametrize("name", ("h100-sxm", "h200-sxm"))
def test_two_gpu_table_is_still_climbing_at_its_largest_size(name):
    """Why the 2-GPU comparison above is looser: the measurement, not the model, stops short of peak."""
    t = [t for t in _measured(name) if t.group == 2][0]
    bw = [b / s for b, s in zip(t.bytes[-3:], t.time_s[-3:])]
    assert bw[2] / bw[1] > 1.03 and bw[1] / bw[0] > 1.04


@pytest.mark.parametrize("name", NVSWITCH)
def test_small_message_latency_within_25_percent(name):
    for n, (_, lat) in errors(name).items():
        assert abs(lat) <= 0.25, (name, n, lat)


def test_pcie_box_two_gpus():
    errs = errors("l40s-pcie")
    assert abs(errs[2][0]) <= 0.20, errs[2]
    for n, (_, lat) in errs.items():
        assert abs(lat) <= 0.25, (n, lat)
    # the measured 4- and 8-GPU tables are far below any PCIe link rate; measured tables win
    c = CostModel(load_profile("l40s-pcie"), Stack())
    t8 = _measured("l40s-pcie")[2]
    assert t8.group == 8
    added = c.profile.graph_extra_s + c.profile.graph_nccl_node_s       # l40s: the copy only (no node measured)
    assert c.collective_s("all_reduce", t8.bytes[-1], 8, "graph") == pytest.approx(t8.time_s[-1] + added)


def test_other_collectives_reported_within_bounds():
    """all_gather / reduce_scatter at 8 GPUs (the TP decode sizes use all_reduce; these matter for a
    vocab-parallel head): within 10% at 8 GPUs."""
    for name in NVSWITCH:
        for coll in ("all_gather", "reduce_scatter"):
            assert abs(errors(name, coll)[8][0]) <= 0.10, (name, coll, errors(name, coll)[8])


def _documented():
    """The errors this module's docstring states: ({(profile, n): busbw %}, {profile: latency bound %})."""
    import re
    doc = __doc__
    bw = {(m.group(1), int(n)): int(v)
          for m in re.finditer(r"([a-z0-9]+-[a-z]+)\s+((?:n=\d+ [+-]\d+%\s+)+)", doc)
          for n, v in re.findall(r"n=(\d+) ([+-]\d+)%", m.group(2))}
    short = {"h100": "h100-sxm", "h200": "h200-sxm", "a100": "a100-sxm", "l40s": "l40s-pcie"}
    lat = {short[k]: int(v) for v, k in re.findall(r"(\d+)% \((h100|h200|a100|l40s)\)", doc)}
    return bw, lat


def test_report(capsys):
    """The docstring's error table is what the model really does: each documented busbw error holds
    to the printed percent (+-1), and every small-message error stays inside its documented bound."""
    bw_doc, lat_doc = _documented()
    assert len(bw_doc) == 10 and set(lat_doc) == set(NVSWITCH) | {"l40s-pcie"}
    rows = []
    for name in NVSWITCH + ("l40s-pcie",):
        for n, (bw, lat) in sorted(errors(name).items()):
            rows.append(f"{name:10s} all_reduce n={n}: busbw {bw:+.1%}  small-message latency {lat:+.1%}")
            if (name, n) in bw_doc:
                assert abs(100 * bw - bw_doc[name, n]) <= 1.0, (name, n, bw, bw_doc[name, n])
            assert abs(100 * lat) <= lat_doc[name], (name, n, lat, lat_doc[name])
    with capsys.disabled():
        print("\ntopology model vs measured (aiconfigurator 0.12.0 NCCL tables):\n  " + "\n  ".join(rows))


# ------------------------------------------------------------------ orderings that must hold

SIZES = [2 ** k for k in range(7, 31)]


@pytest.mark.parametrize("name", NVSWITCH)
@pytest.mark.parametrize("mode", ("graph", "eager"))
def test_tp16_over_two_nodes_costs_more_than_tp8_in_one(name, mode):
    c = CostModel(load_profile(name), Stack())
    for b in SIZES:
        t8, t16 = c.collective_s("all_reduce", b, 8, mode), c.collective_s("all_reduce", b, 16, mode)
        assert t16 > t8, (name, mode, b, t8, t16)


@pytest.mark.parametrize("name", NVSWITCH)
def test_groups_spanning_nodes_never_undercut_the_measured_node(name):
    """Uneven placements too (9 = 5 + 4, 12 = 6 + 6): the derived cross-node time is corrected by the
    model's error on a measured one-node group at least the per-node size."""
    c = CostModel(load_profile(name), Stack())
    for b in SIZES:
        t8 = c.collective_s("all_reduce", b, 8, "graph")
        for n in (9, 12, 16, 24):
            assert c.collective_s("all_reduce", b, n, "graph") > t8, (name, n, b)


def test_nvls_without_a_network_nvls_latency_falls_back_to_simple():
    import dataclasses
    spec = load_profile("h100-sxm").topology
    hop = {k: dict(v) for k, v in spec.latency.hop_us.items()}
    del hop["net"]["nvls"]
    bare = TopologyModel(dataclasses.replace(spec, latency=dataclasses.replace(spec.latency, hop_us=hop)))
    assert bare.collective_s("all_reduce", 2 ** 30, 16) > 0


@pytest.mark.parametrize("base", ("h100-sxm", "a100-sxm"))
def test_p2p_off_costs_more_than_p2p_on(base):
    """Off never beats on; where NVLS carries both (large messages, > 2 GPUs) they are equal, since
    NVLS stays on with P2P off; at decode sizes (<= 32 KiB) and at 2 GPUs (no NVLS) off is dearer."""
    on, off = _model(base), _model(f"{base}-p2p-off")
    c_on, c_off = CostModel(load_profile(base), Stack()), CostModel(load_profile(f"{base}-p2p-off"), Stack())
    for n in (2, 4, 8, 16):
        for b in SIZES:
            t_on, t_off = on.collective_s("all_reduce", b, n), off.collective_s("all_reduce", b, n)
            assert t_off >= t_on * (1 - 1e-9), (n, b)
            if b <= 32768 or n == 2:
                assert t_off > t_on, (n, b)
                for mode in ("graph", "eager"):
                    assert c_off.collective_s("all_reduce", b, n, mode) > c_on.collective_s("all_reduce", b, n, mode)
    # without NVLS (2 GPUs) the bandwidth is bounded by PCIe/host memory: far below NVLink
    assert off.busbw_gbps("all_reduce", 2) < on.busbw_gbps("all_reduce", 2) / 5


def test_p2p_off_keeps_nvls_and_nccl_picks_by_its_own_pci_constants():
    """NCCL 2.21: NVLS has no P2P condition (ncclNvlsInit) but needs > 2 GPUs; LL128 is off the
    NVLink path. TP4 on one socket stays one NCCL node (tests/test_p2p_off_nodes.py), so NVLS stays.
    NCCL's tuner prices an SHM step as a PCI hop (1.0 us LL), so at 8 B over 4 ranks it picks Ring
    LL (6.6 + 6 x 1.0 = 12.6 us < NVLS 25) -- and that ring really pays 6 SHM steps of
    shm_hop_us.ll (3.54 us) each. At 256 KiB the tuner's Ring/Tree LL (bandwidth-bound at PCIe
    rates) lose to NVLS, which is then what it costs."""
    off = _model("h100-sxm-p2p-off")
    spec = load_profile("h100-sxm-p2p-off").topology
    names = {n for n, _ in off.choices("all_reduce", 1024, 4)}
    assert "nvls" in names and not any("ll128" in n for n in names)
    assert "nvls" not in {n for n, _ in off.choices("all_reduce", 1024, 2)}
    on_names = {n for n, _ in _model("h100-sxm").choices("all_reduce", 1024, 8)}
    assert "nvls" in on_names and "ring/ll128" in on_names
    assert spec.shm_hop_us["ll"] == pytest.approx(3.54)
    name, t = off.pick("all_reduce", 8, 4)
    assert name == "ring/ll"
    assert t * 1e6 == pytest.approx(6.6 + 6 * 3.54 + spec.latency_offset_us, abs=0.01)
    on = _model("h100-sxm")
    name, t = off.pick("all_reduce", 2 ** 18, 4)
    assert name == "nvls"
    assert t == pytest.approx(dict(on.choices("all_reduce", 2 ** 18, 4))["nvls"])


def test_spanning_nodes_offers_only_nccl_algorithms_and_placement_matters():
    """One ncclAllReduce never runs a framework's two-level RS/AR/AG, so the tuner does not pick it."""
    tm = _model("h100-sxm")
    names = [n for n, _ in tm.choices("all_reduce", 2 ** 20, 16)]
    assert not any(n.startswith("two-level") for n in names)
    assert {n.split("/")[0] for n in names} == {"ring", "tree", "nvls-tree"}
    # the same 8 ranks as 2 nodes x 4 cost more than one node x 8
    for b in SIZES:
        assert tm.collective_s("all_reduce", b, 8, gpus_per_node=4) > tm.collective_s("all_reduce", b, 8)
    c4 = CostModel(load_profile("h100-sxm"), Stack(), gpus_per_node=4)
    c8 = CostModel(load_profile("h100-sxm"), Stack())
    assert c4.collective_s("all_reduce", 16384, 8, "graph") > c8.collective_s("all_reduce", 16384, 8, "graph")


def test_unmeasured_group_sizes_are_derived_and_monotone():
    c = CostModel(load_profile("h100-sxm"), Stack())
    for b in (1024, 16384, 2 ** 20):
        t = [c.collective_s("all_reduce", b, n, "graph") for n in (2, 3, 4, 6, 8)]
        assert all(math.isfinite(x) and x > 0 for x in t)
        assert t[1] >= t[0] * 0.9 and t[3] >= t[2] * 0.9


def test_table_extension_uses_topology_bandwidth():
    c = CostModel(load_profile("h100-sxm"), Stack())
    t = _measured("h100-sxm")[2]
    big = t.bytes[-1]
    extra = c.collective_s("all_reduce", 4 * big, 8, "graph") - t.time_s[-1] - c.profile.graph_extra_s \
        - c.profile.graph_nccl_node_s
    tm = _model("h100-sxm")
    assert extra == pytest.approx(tm.collective_s("all_reduce", 4 * big, 8) - tm.collective_s("all_reduce", big, 8))
    assert extra > 0


def test_topology_without_nics_cannot_span_nodes(no_nic_profile):
    c = CostModel(load_profile(no_nic_profile), Stack())
    assert c.collective_s("all_reduce", 1024, 8, "graph") > 0
    with pytest.raises(ValueError, match="no measured table, no topology NICs"):
        c.collective_s("all_reduce", 1024, 16, "graph")


def test_two_node_tree_matches_nccls_own_tuner_print():
    """NVIDIA/nccl#1453 posts NCCL's tuner lines (NCCL_DEBUG_SUBSYS=TUNING) for all-reduce over
    2 nodes x 8 H100: "4096 Bytes -> Algo 0 proto 0 time 25.874907", "8192 Bytes -> ... 26.549810"
    (Algo 0 = Tree, proto 0 = LL). Their intercept is 25.874907 - 4096 x (26.549810 - 25.874907)
    / 4096 = 25.20 us: tuning.cc's 6.8 + 2 x ((8 - 1) x 0.6 + log2(2) x 5.0), which the model's
    tuner latency must reproduce. Tree LL algbw follows tuning.cc: min(bw x .92 / 3.8, llMaxBw 39)
    x .5 = 19.5 GB/s (bw = the node's NVLink chain, 367 GB/s, under its 8 NICs, 400; llMaxBw across
    nodes is indexed by the CPU vendor: Intel, 2 nodes, 39.0)."""
    tm = _model("h100-sxm")
    tree = next(t for t in tm._terms("all_reduce", tuple(tm.placement(16))) if t.name == "tree/ll")
    intercept = 25.874907 - 4096 * (26.549810 - 25.874907) / 4096
    assert tree.tuner_us == pytest.approx(intercept, abs=0.01)
    assert tree.algbw_gbps == pytest.approx(min(367 * 0.92 / 3.8, 39) * 0.5)
    assert tm.pick("all_reduce", 4096, 16)[0] == "tree/ll"
