"""P2P off (NCCL SHM transport): the per-GPU flow rate derived from public nvbandwidth runs, and a
priced P2P-off all-reduce, pinned from hand-computed values."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.topology import build_graph, ring_busbw_gbps
from tpsim.sim.price.comm.topology import TopologyModel

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "sim" / "hardware" / "profiles" / "_data"
sys.path.insert(0, str(ROOT / "tools" / "derive_profiles"))      # the derivation's parts, beside its script
from shm import nvbandwidth_row, shm_flow_gbps  # noqa: E402


def test_nvbandwidth_row_reads_the_per_gpu_row():
    text = (DATA / "nvbandwidth-8xH800-host.txt").read_text()
    row = nvbandwidth_row(text, "host_to_all_bidirectional_memcpy_sm")
    assert row == [20.87, 34.09, 21.54, 23.16, 22.16, 26.02, 17.97, 20.36]
    with pytest.raises(StopIteration):
        nvbandwidth_row(text, "no_such_test")


def test_shm_flow_rate_per_gpu_generation():
    """Hopper: (20.87 + 34.09 + 21.54 + 23.16 + 22.16 + 26.02 + 17.97 + 20.36) / 8 = 186.17 / 8 = 23.27
    -> 23.3 GB/s. Ampere: 11 GB/s (one GPU, both directions busy) / 2 GPUs per PCIe switch uplink = 5.5."""
    got = shm_flow_gbps((DATA / "nvbandwidth-8xH800-host.txt").read_text(),
                        (DATA / "nvbandwidth-A100-host-bidirectional.txt").read_text())
    assert got["hopper"]["value"] == 23.3
    assert got["ampere"]["value"] == 5.5
    assert "nvbandwidth#53" in got["ampere"]["source"]
    assert "host_to_all_bidirectional_memcpy_sm" in got["hopper"]["source"]
    assert load_profile("h100-sxm-p2p-off").topology.shm_gbps == 23.3
    assert load_profile("a100-sxm-p2p-off").topology.shm_gbps == 5.5


def test_shm_rate_caps_each_flow_not_each_link():
    """The rate is measured with every GPU busy, shared uplinks included: an 8-GPU A100 SHM ring runs
    at 5.5 GB/s per edge (not 5.5 / 2), and below it the PCIe datasheet bound still applies."""
    spec = load_profile("a100-sxm-p2p-off").topology
    g = build_graph(spec)
    for n in (2, 4, 8):
        assert ring_busbw_gbps(g, spec, [(0, i) for i in range(n)]) == pytest.approx(5.5)
    on = load_profile("a100-sxm").topology
    assert ring_busbw_gbps(build_graph(on), on, [(0, i) for i in range(8)]) == pytest.approx(on.nvlink_gbps)


def test_p2p_off_large_all_reduce_price_path():
    """4 x A100, P2P off, 1 GiB (the shape of the held-apart LLM-Insights run, not its numbers): GPUs 0-1
    and 2-3 sit behind two PCIe switches on two NUMA nodes, so NCCL makes 2 nodes of 2 joined by the NICs
    (tests/test_p2p_off_nodes.py). NCCL's tuner picks Ring Simple; algbw = 5.5 x 4 / (2 x 3) = 3.667 GB/s
    (the SHM flow cap; the NICs carry 25 GB/s); latency = 1.4 (tuning.cc ring plateau across nodes) x
    (ring_simple base 8.4 + 2 x nNodes = 4 network Simple steps x 14.0 + 2 SHM Simple steps x 8.24) + the
    profile's latency offset."""
    prof = load_profile("a100-sxm-p2p-off")
    tm = TopologyModel(prof.topology)
    assert tm.nccl_nnodes(4) == 2
    name, t = tm.pick("all_reduce", 2 ** 30, 4, gpus_per_node=8)
    assert name == "ring/simple"
    assert prof.topology.shm_hop_us["simple"] == pytest.approx(8.24)
    want_us = 1.4 * (8.4 + 4 * 14.0 + 2 * 8.24) + prof.topology.latency_offset_us + 2 ** 30 / (5.5 * 4 / 6 * 1e3)
    assert t * 1e6 == pytest.approx(want_us, rel=1e-9)
    assert t * 1e6 == pytest.approx(292900, rel=1e-3)
    # A100 has no NVLS: the same call with P2P on rides NVLink, ~37x faster
    t_on = TopologyModel(load_profile("a100-sxm").topology).collective_s("all_reduce", 2 ** 30, 4)
    assert t / t_on > 30


def test_validator_prints_but_never_prices_a_system_without_profile():
    """bench/data files with "profile": null (e.g. the 8x A40 PCIe P2P-off runs) are listed, not priced,
    and stay out of every median; the P2P-off median counts only the A100 SXM points."""
    sys.path.insert(0, str(ROOT / "bench"))
    import validate_collectives as vc
    srcs = vc.load()
    rows = vc.evaluate(srcs)
    a40 = [r for r in rows if r["file"].startswith("llm-insights-4xa40")]
    assert len(a40) == 4 and all(r["priced_us"] is None and not r["in_median"] for r in a40)
    off = vc.summary(rows)["P2P off"]
    assert off["points"] == 4
    assert all(r["profile"] == "a100-sxm-p2p-off" for r in rows if not r["p2p"] and r["in_median"])
