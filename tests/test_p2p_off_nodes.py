"""NCCL 2.21's node split with P2P off (sim/hardware/topology.py nccl_net_pair / nccl_domains).

With NCCL_P2P_DISABLE=1 every GPU pair is routed through the CPU (paths.cc ncclTopoComputePaths);
shm.cc shmCanConnect asks ncclTopoCheckNet first, which sends a pair over NET/IB when both GPUs reach
a NIC faster than each other. On a DGX H100 (PCIe Gen5 48 GB/s, NIC min(48, 50) = 48, Sapphire Rapids
inter-socket link rated SKL_QPI_BW = 10 GB/s) that is every cross-socket pair: ncclTopoTrimSystem
keeps one socket's GPUs and init.cc counts one NCCL node per socket. Prices are hand-computed on a toy
copy of the profile with round numbers (every term written below).
"""
import dataclasses

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack
from tpsim.sim.hardware.topology import nccl_domains, nccl_net_pair
from tpsim.sim.price.comm.topology import TopologyModel
from toy import toy_op

OFF = "h100-sxm-p2p-off"


def _spec(**kw):
    return dataclasses.replace(load_profile(OFF).topology, **kw)


def _toy():
    """h100-sxm-p2p-off with round numbers: SHM flow 20 GB/s, an SHM step 4 us (LL) / 8 us (Simple),
    no latency offset. NCCL's own constants stay (tuning.cc): base ring LL 6.6, tree LL 6.8; PCI hop
    LL 1.0 (the tuner's SHM step); NET hop ring LL 2.7, tree LL 5.0, NVLSTree 14; NVLink NVLSTree 25."""
    return TopologyModel(_spec(shm_gbps=20.0, shm_hop_us={"ll": 4.0, "tree_ll": 4.0, "simple": 8.0},
                               latency_offset_us=0.0))


def test_nnodes_per_tp_on_a_p2p_off_dgx_h100():
    """TP2 and TP4 sit on socket 0 (GPUs 0-3): one NCCL node. TP8 spans both sockets: two 4-GPU
    nodes. TP16 over two boxes: four. P2P on, every box is one node whatever the TP."""
    off = TopologyModel(load_profile(OFF).topology)
    assert off.spec.nccl_cpu_link_gbps == 10.0                     # SKL_QPI_BW for Sapphire Rapids
    assert nccl_domains(off.spec) == (0, 0, 0, 0, 4, 4, 4, 4)
    assert [off.nccl_nnodes(n) for n in (2, 4, 8, 16)] == [1, 1, 2, 4]
    on = TopologyModel(load_profile("h100-sxm").topology)
    assert [on.nccl_nnodes(n) for n in (2, 4, 8, 16)] == [1, 1, 1, 2]
    c = CostModel(load_profile(OFF), Stack())
    assert [c.nccl_nnodes(n) for n in (4, 8, 16)] == [1, 2, 4]
    # DGX A100: NCCL's CPU nodes are its 4 GPU-hosting NUMA domains (one per PCIe switch, AMD_BW 16 <
    # NIC path min(24, 25) = 24): GPUs 0-1 one node, TP4 two, TP8 four
    a100 = TopologyModel(load_profile("a100-sxm-p2p-off").topology)
    assert a100.spec.nccl_cpu_link_gbps == 16.0 and a100.spec.nccl_cpu_nodes == 4
    assert nccl_domains(a100.spec) == (0, 0, 2, 2, 4, 4, 6, 6)
    assert [a100.nccl_nnodes(n) for n in (2, 4, 8)] == [1, 2, 4]


def test_net_pair_follows_ncclTopoCheckNet_strictly():
    """speed = GPU->CPU->GPU path bw: 48 inside a socket, min(48, 10) = 10 across; netSpeed =
    min(PCIe 48, NIC 50) = 48 for a GPU with a NIC behind its own switch; NET iff netSpeed > speed
    for both GPUs (strict: 48 > 48 is false, so a socket stays SHM)."""
    s = _spec()
    assert not nccl_net_pair(s, 0, 1) and not nccl_net_pair(s, 0, 3)      # 48 > 48: no
    assert nccl_net_pair(s, 0, 4) and nccl_net_pair(s, 7, 2)              # 48 > 10: yes
    # a CPU link NCCL rated at PCIe speed (48): 48 > 48 is false -> one NCCL node
    assert nccl_domains(_spec(nccl_cpu_link_gbps=48.0)) == (0,) * 8
    # a NIC slower than the CPU link (8 GB/s < 10): SHM everywhere
    assert not nccl_net_pair(_spec(nic_gbps=8.0), 0, 4)
    # no NICs, no rating declared, or P2P on: never NET
    assert not nccl_net_pair(_spec(nic_gbps=0.0, nics_per_node=0), 0, 4)
    assert not nccl_net_pair(_spec(nccl_cpu_link_gbps=0.0), 0, 4)
    assert not nccl_net_pair(_spec(p2p=True), 0, 4)
    # one NIC, behind switch 0 (GPUs 0-1): GPUs 2-7 have no NIC at PXB or better (netSpeed 0), and
    # NET needs a fast NIC on BOTH sides, so no cross-socket pair qualifies: one NCCL node
    assert nccl_domains(_spec(nics_per_node=1)) == (0,) * 8


def test_tp8_picks_and_toy_prices():
    """Toy TP8 = 2 NCCL nodes x 4 GPUs; NVLS is off (nNodes > 1, no CollNet), NVLSTree remains.
    Bandwidths: the 4-GPU SHM chain runs at the 20 GB/s flow cap (each PCIe uplink carries 2 flows:
    48 / 2 = 24 > 20); 4 NICs per node (GPUs 0-3's rails) = 200 GB/s.
      tree LL algbw = 20 x .92 / 3.8 x .5 = 2.42105 GB/s; ring LL algbw = 20 x .5 x 8 / 14 = 5.71429;
      NVLSTree algbw = min(NVLS 480 x 9/14 x 4/5 = 246.9, NICs min(50, 48) x 4 = 192) = 192.
    Tuner latencies (its PCI hop 1.0 for an SHM step):
      tree LL = 6.8 + 2 x (3 x 1.0 + 1 x 5.0) = 22.8;  ring LL = 6.6 + 10 x 1.0 + 4 x 2.7 = 27.4
      (14 steps, 2 x nNodes = 4 of them network);  NVLSTree = 25 + 2 x 1 x 14 = 53.
    8 B: tree LL wins (22.8 + 0.003); it really costs 6.8 + 2 x (3 x 4 + 5.0) + 8 / 2421.05 = 40.8033 us.
    32 KiB: ring LL 27.4 + 5.734 = 33.13 < tree LL 22.8 + 13.53 / .7 (treeCorrectionFactor at log2(32 KiB
    / 64) = 9) = 42.14, NVLSTree 53.17: ring LL,
    really 6.6 + 10 x 4 + 4 x 2.7 + 32768 / 5714.29 = 57.4 + 5.734 = 63.134 us.
    1 MiB: NVLSTree 53 + 5.46 = 58.46 beats ring LL 27.4 + 183.5."""
    tm = _toy()
    names = {n for n, _ in tm.choices("all_reduce", 1024, 8)}
    assert names == {"ring/ll", "ring/simple", "tree/ll", "tree/simple", "nvls-tree"}     # no NVLS, no LL128
    name, t = tm.pick("all_reduce", 8, 8)
    assert name == "tree/ll" and t * 1e6 == pytest.approx(40.8 + 8 / 2421.0526, abs=1e-4)
    name, t = tm.pick("all_reduce", 32768, 8)
    assert name == "ring/ll" and t * 1e6 == pytest.approx(57.4 + 32768 / 5714.2857, abs=1e-3)
    tuner = {n: t for n, t in ((x.name, x.time_us(32768, real=False)) for x in tm._terms("all_reduce",
                                                                                           tuple(tm.placement(8))))}
    assert tuner["tree/ll"] == pytest.approx(22.8 + 32768 / 2421.0526 / 0.7, abs=1e-3)
    assert tm.pick("all_reduce", 2 ** 20, 8)[0] == "nvls-tree"
    # the same box at TP4 is one node: NVLS is there and wins at 1 MiB
    assert tm.pick("all_reduce", 2 ** 20, 4)[0] == "nvls"


def test_tp16_over_two_boxes_is_four_nccl_nodes():
    """Toy TP16, P2P off, two DGX boxes: 4 NCCL nodes of 4 (one per socket).
    Tuner: tree LL = 6.8 + 2 x (3 x 1.0 + log2(4) = 2 x 5.0) = 32.8; ring LL = 6.6 + (30 - 8) x 1.0
    + 8 x 2.7 = 50.2 (2 x nNodes = 8 network steps); NVLSTree = 25 + 2 x 2 x 14 = 81. Tree LL wins and
    costs 6.8 + 2 x (3 x 4 + 2 x 5.0) = 50.8 us (+ 8 B / 2421.05 GB/s). NCCL's LL cap at 4 Intel nodes
    (llMaxBws 20.4) would not bind: tree LL busbw 20 x .92 / 3.8 = 4.84, ring LL 10 GB/s."""
    tm = _toy()
    assert tm.nccl_nnodes(16) == 4
    name, t = tm.pick("all_reduce", 8, 16)
    assert name == "tree/ll" and t * 1e6 == pytest.approx(50.8 + 8 / 2421.0526, abs=1e-4)
    # P2P on, the same 16 ranks are 2 nodes of 8 over NVLink: far cheaper at 8 B
    assert TopologyModel(load_profile("h100-sxm").topology).collective_s("all_reduce", 8, 16) < t / 1.5


def test_split_group_pays_the_graph_host_node():
    """NET transport means proxy ops, so a captured P2P-off TP8 all-reduce gets NCCL's host node
    (enqueue.cc hostStreamPlanCallback) when the profile sets graph_net_host_us; TP4 (SHM only) does not."""
    prof = dataclasses.replace(load_profile(OFF), graph_net_host_s=20e-6)
    c = CostModel(prof, Stack())
    op = toy_op("ar", "all_reduce", ["x"])
    tp8 = dataclasses.replace(op, attrs=(("rows", 1), ("width", 8192), ("group", 8)))
    tp4 = dataclasses.replace(op, attrs=(("rows", 1), ("width", 8192), ("group", 4)))
    assert c.host_s(tp8, "decode") == 20e-6 and c.host_s(tp4, "decode") == 0.0
    on = CostModel(dataclasses.replace(load_profile("h100-sxm"), graph_net_host_s=20e-6), Stack())
    assert on.host_s(tp8, "decode") == 0.0
