"""Pricing a collective on a topology graph (sim/hardware/topology.py builds the graph): NCCL's cost model,
for every enabled (algorithm, protocol) `time = base + steps * hop + bytes / algbw`, the fastest
wins; the topology decides which hop latency applies and the bandwidth of each ring edge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

from tpsim.sim.hardware.topology import (TopologySpec, hop_class, nic_of, switch_of, build_graph,
                                         nccl_nodes, ring_busbw_gbps)


class TopologyModel:
    """Collective time (seconds) from a TopologySpec; builds and caches one graph per node count.

    Every candidate (algorithm/protocol) is a Term: the latency NCCL's tuner assumes for it (which
    decides the pick), the latency it really costs (which prices it) and its algorithm bandwidth.
    """

    def __init__(self, spec: TopologySpec):
        self.spec = spec
        self._graphs: dict = {}
        self._cache: dict = {}

    def graph(self, nodes: int) -> nx.DiGraph:
        if nodes not in self._graphs:
            self._graphs[nodes] = build_graph(self.spec, nodes)
        return self._graphs[nodes]

    def placement(self, group: int, gpus_per_node: int | None = None) -> list[tuple[int, int]]:
        """Ranks fill nodes in order, `gpus_per_node` (default: all the node's GPUs) per node."""
        per = min(gpus_per_node or self.spec.gpus_per_node, self.spec.gpus_per_node)
        nodes = math.ceil(group / per)
        if nodes > 1 and not self.spec.multi_node:
            raise ValueError(f"group of {group} spans {nodes} nodes but the topology declares no NICs "
                             f"(nic_gbps, nics_per_node)")
        base, extra = divmod(group, nodes)
        out = []
        for k in range(nodes):
            out.extend((k, i) for i in range(base + (1 if k < extra else 0)))
        return out

    def collective_s(self, collective: str, nbytes: float, group: int, gpus_per_node: int | None = None) -> float:
        return self.pick(collective, nbytes, group, gpus_per_node)[1]

    def pick(self, collective: str, nbytes: float, group: int, gpus_per_node: int | None = None) -> tuple[str, float]:
        """(candidate name, seconds): the candidate NCCL's tuner picks, at what it really costs."""
        if group <= 1:
            return "local", 0.0
        terms = self._terms(collective, tuple(self.placement(group, gpus_per_node)))
        t = min(terms, key=lambda x: x.time_us(nbytes, real=False))
        return t.name, max(t.time_us(nbytes) + self.spec.latency_offset_us, 0.0) * 1e-6

    def choices(self, collective: str, nbytes: float, group: int, gpus_per_node: int | None = None) -> list:
        """[(name, real seconds)] for every candidate, in the tuner's order (its pick first)."""
        ranks = self.placement(group, gpus_per_node)
        terms = sorted(self._terms(collective, tuple(ranks)), key=lambda x: x.time_us(nbytes, real=False))
        return [(x.name, (x.time_us(nbytes) + self.spec.latency_offset_us) * 1e-6) for x in terms]

    def busbw_gbps(self, collective: str, group: int, gpus_per_node: int | None = None) -> float:
        """Large-message bus bandwidth the model predicts (nccl-tests convention)."""
        ranks = self.placement(group, gpus_per_node)
        algbw = max(x.algbw_gbps for x in self._terms(collective, tuple(ranks)))
        n = group
        return algbw * (2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n)

    def _terms(self, collective: str, ranks: tuple) -> list["Term"]:
        key = (collective, ranks)
        if key not in self._cache:
            self._cache[key] = self._derive_terms(collective, list(ranks))
        return self._cache[key]

    def _hops(self, cls: str, key: str, fallback: str) -> tuple[float, float]:
        """(tuner, real) latency of one step over a link class. Over SHM (P2P off, inside a node)
        the tuner uses NCCL's PCI column, the real step costs shm_hop_us where the profile has it."""
        lat = self.spec.latency
        tuner = lat.hop_us[cls].get(key, lat.hop_us[cls][fallback])
        if cls == "pci" and not self.spec.p2p and self.spec.shm_hop_us:
            return tuner, self.spec.shm_hop_us.get(key, self.spec.shm_hop_us.get(fallback, tuner))
        return tuner, tuner

    def _derive_terms(self, collective: str, ranks: list) -> list["Term"]:
        spec, lat = self.spec, self.spec.latency
        n = len(ranks)
        # NCCL's nodes, not the boxes: with P2P off a box whose CPU link NCCL rates below its NICs
        # is several (topology.nccl_domains); nNodes drives every multi-node rule below, as in NCCL
        groups = nccl_nodes(spec, ranks)
        nodes = len(groups)
        g = self.graph(len({k for k, _ in ranks}))
        local = groups[0]
        intra_cls = hop_class(g, spec, local[0], local[1]) if len(local) > 1 else "net"
        ar = collective == "all_reduce"
        steps = 2 * (n - 1) if ar else n - 1
        to_alg = n / (2 * (n - 1)) if ar else n / (n - 1)     # busbw -> algbw

        channels = self._node_nics(local) if nodes > 1 else 1
        ring_bus = ring_busbw_gbps(g, spec, ranks, channels)
        # NCCL 2.21 tuning.cc: an all-reduce ring counts 2 * nNodes network steps (later releases 2(nNodes-1))
        inter_steps = min(steps, (2 * nodes if ar else nodes - 1) if nodes > 1 else 0)
        protos = self._protocols(intra_cls, nodes)
        terms = []
        for p, payload, cap in protos:
            if nodes == 1 or len(local) > 1:
                hop_t, hop_r = self._hops(intra_cls, p, p)
            else:
                hop_t = hop_r = 0.0
            if nodes > 1:
                # tuning.cc: inter-node rings pay at least the network overhead on every step
                # (getNetOverhead: 1 us on Intel hosts; x3 for Simple)
                over = NET_OVERHEAD_US * (3 if p == "simple" else 1)
                hop_t, hop_r = max(hop_t, over), max(hop_r, over)
            hop_net = lat.hop_us["net"][p] if nodes > 1 else 0.0
            base = lat.base_us[f"ring_{p}"] + inter_steps * hop_net
            bus = min(ring_bus * payload, cap) if cap else ring_bus * payload
            # tuning.cc ncclTopoGetAlgoTime: "Plateau effect of ring" -- an all-reduce ring Simple over
            # nodes pays 1.4x its latency (sm80+) once nBytes / (nChannels x nRanks) >= 64
            plateau = (64.0 * channels * n, RING_PLATEAU) if nodes > 1 and ar and p == "simple" else NO_PLATEAU
            terms.append(Term(f"ring/{p}", base + (steps - inter_steps) * hop_t,
                              base + (steps - inter_steps) * hop_r, bus * to_alg, plateau=plateau))
        if ar:
            terms += self._tree_terms(g, ranks, local, nodes, intra_cls, protos)
            gl = min(len(x) for x in groups)      # = n // nodes for an even placement; a P2P-off split can be uneven
            # NCCL 2.21 ncclNvlsInit: NVLS needs more than 2 GPUs in the node; no P2P condition. With
            # nNodes > 1 and no CollNet, plain NVLS is off (tuning.cc ncclTopoTuneModel l. 284-290,
            # enqueue.cc topoGetAlgoInfo l. 1502-1505) and NVLSTree is what remains (_nvls_term)
            if spec.intra == "nvswitch" and spec.nvls_busbw_gbps > 0 and gl > 2:
                terms.append(self._nvls_term(gl, nodes))     # the smallest node sets the pace
            # The two-level reduce-scatter/all-reduce/all-gather (_two_level_terms) is not one of
            # NCCL's algorithms: one ncclAllReduce call never runs it, so NCCL's tuner never picks
            # it (tuning.cc evaluates Tree/Ring/CollNet/NVLS/NVLSTree only).
        return terms

    def _node_nics(self, local: list) -> int:
        """NICs one NCCL node drives: every NIC of a box (nics_per_node), or, where P2P off splits
        the box, the rail NICs of the node's own GPUs (the other socket's NICs are PATH_SYS away,
        and ncclTopoCheckNet/the ring search use NICs at PXB or better)."""
        spec = self.spec
        if len(local) == spec.gpus_per_node:
            return spec.nics_per_node
        if len(nccl_nodes(spec, [(0, i) for i in range(spec.gpus_per_node)])) == 1:
            return spec.nics_per_node                 # a partly filled box, not a split one: as before
        return len({nic_of(spec, i) for _, i in local})

    def nccl_nnodes(self, group: int, gpus_per_node: int | None = None) -> int:
        """NCCL's nNodes for this group (init.cc: one per trimmed domain), as `tpsim collective` shows it."""
        return len(nccl_nodes(self.spec, self.placement(group, gpus_per_node))) if group > 1 else 1

    def _nvls_term(self, gl: int, nodes: int) -> "Term":
        """NVLS inside a node (the switch reduces; each GPU moves S(1 + 1/g) each way, so
        algbw = B * g / (g + 1), B from the published busbw at gpus_per_node ranks) and, across
        nodes, NVLSTree: a tree over the nodes' NICs between an NVLS reduce and an NVLS broadcast.
        With two nodes each node sends and receives S once over its NICs (each is the root of one
        of the two trees); beyond two an inner node of a tree also serves two children, so half
        that rate (the same halving NCCL's tuning.cc applies to NVLS_TREE's bwInter beyond 2 nodes).
        Latency: NVLS's whole-op NVLink term plus 2 * ceil(log2 nodes) network hops."""
        spec, lat = self.spec, self.spec.latency
        m = spec.gpus_per_node
        b = spec.nvls_busbw_gbps * (m + 1) / (2 * (m - 1))
        algbw = b * gl / (gl + 1)
        t_lat = lat.base_us["nvls"] + lat.hop_us["nvlink"]["nvls"]
        if nodes == 1:
            return Term("nvls", t_lat, t_lat, algbw)
        # NVLSTree has its own hwLat columns (tuning.cc 2.19+: NVLink 25 like NVLS, but NET 14, not NVLS's 18)
        t_lat = lat.base_us["nvls"] + lat.hop_us["nvlink"].get("nvls_tree", lat.hop_us["nvlink"]["nvls"])
        nics = len({nic_of(spec, i) for i in range(gl)})       # the rail NICs of the GPUs in use
        net = min(spec.nic_gbps, spec.pcie_gbps) * nics / (1 if nodes == 2 else 2)
        hop = lat.hop_us["net"].get("nvls_tree", lat.hop_us["net"].get("nvls", lat.hop_us["net"]["simple"]))
        depth = math.ceil(math.log2(nodes))
        t_lat += 2 * depth * hop
        # NVLS heads: the NVLS graph search gives one channel (head) per rail NIC, at most one per GPU
        # (search.cc: maxChannels = ngpus; NCCL logs "NVLS Head 0..7" on 8-NIC nodes)
        fill = NvlsTreeFill(heads=min(nics, gl), depth=depth, nodes=nodes, net_gbps=net)
        return Term("nvls-tree", t_lat, t_lat, min(algbw, net), fill=fill)

    def _protocols(self, link_cls: str, nodes: int) -> list[tuple[str, float, float]]:
        """(protocol, payload fraction, busbw cap) enabled on this path (docs/sources.md §4):
        LL capped (tuning.cc llMaxBws); LL128 over NVLink (tuning.cc: typeIntra <= PATH_NVB) and,
        across nodes, only where every GPU reaches its NIC through its own PCIe switch
        (NCCL 2.19+ tuning.cc: typeInter <= PATH_PXB; Hopper also PXN, not modelled)."""
        spec = self.spec
        cap = spec.ll_busbw_cap_gbps if nodes == 1 else spec.ll_busbw_cap_multi_node_gbps
        out = [("ll", spec.ll_payload, cap), ("simple", 1.0, 0.0)]
        if link_cls == "nvlink" and (nodes == 1 or self._nic_behind_own_switch()):
            out.insert(1, ("ll128", spec.ll128_payload, 0.0))
        return out

    def _nic_behind_own_switch(self) -> bool:
        """Every GPU's rail NIC hangs off the GPU's own PCIe switch (NCCL path type PIX/PXB)."""
        spec = self.spec
        if not spec.multi_node:
            return False
        owner = {j: min(i for i in range(spec.gpus_per_node) if nic_of(spec, i) == j)
                 for j in {nic_of(spec, i) for i in range(spec.gpus_per_node)}}
        return all(switch_of(spec, i) == switch_of(spec, owner[nic_of(spec, i)])
                   for i in range(spec.gpus_per_node))

    def _tree_terms(self, g, ranks, local, nodes, intra_cls, protos) -> list["Term"]:
        """Double binary tree: a chain inside each node, a binary tree across nodes.
        Latency: base + 2 * ((g - 1) intra hops + ceil(log2 nodes) network hops);
        algbw: the chain's link (each GPU sends and receives the whole message once per direction)
        and, across nodes, the node's NICs shared by the two trees."""
        spec, lat = self.spec, self.spec.latency
        per_node = len(local)
        chain_bw = ring_busbw_gbps(g, spec, local) if per_node > 1 else math.inf
        net_bw = spec.nic_gbps * self._node_nics(local) if nodes > 1 else math.inf
        bw = min(chain_bw, net_bw)
        if not math.isfinite(bw):
            return []
        out = []
        for p, payload, cap in protos:
            # one node keeps its LL tree only; across nodes NCCL's tree runs every enabled protocol
            if nodes == 1 and p != "ll":
                continue
            key = f"tree_{p}"
            if key not in lat.base_us:
                continue
            hop_t, hop_r = self._hops(intra_cls, key, p) if per_node > 1 else (0.0, 0.0)
            hop_net = lat.hop_us["net"].get(key, lat.hop_us["net"][p]) if nodes > 1 else 0.0
            net = math.ceil(math.log2(nodes)) * hop_net
            # NCCL 2.21 tuning.cc ncclTopoTuneModel, Tree: busBw = bw * .92; LL: busBw / 3.8, capped
            # at llMaxBw (the cap bounds busBw, not algbw); then busBw -> algbw with ratio .5
            # (every algorithm but Ring and NVLS/NVLSTree).
            bus = bw * TREE_BUSBW_FACTOR
            if p == "ll":
                bus = bus / TREE_LL_DIVISOR
            if p == "ll128":
                bus = bus * TREE_LL128_INTER_FACTOR
            if cap:
                bus = min(bus, cap)
            b = bus * TREE_ALGBW_RATIO
            out.append(Term(f"tree/{p}", lat.base_us[key] + 2 * ((per_node - 1) * hop_t + net),
                            lat.base_us[key] + 2 * ((per_node - 1) * hop_r + net), b,
                            bw_factors=TREE_CORRECTION[p]))
        return out

    def _two_level_terms(self, g, ranks, local, nodes, intra_cls) -> list["Term"]:
        """Reduce-scatter in the node, all-reduce of 1/g across nodes on each GPU's rail,
        all-gather in the node: three NCCL calls, so three base latencies, and their times add
        (not pipelined). Not one of NCCL's algorithms (a framework would have to issue the three
        calls), so the tuner's and the real latency are the same."""
        spec, lat = self.spec, self.spec.latency
        gl = len(local)
        intra_bus = ring_busbw_gbps(g, spec, local)
        # across nodes: GPU i of every node forms one ring over its rail's NIC
        rail = [(k, local[0][1]) for k in range(nodes)]
        nics_share = spec.nic_gbps * spec.nics_per_node / gl      # NICs shared by the node's GPUs
        inter_bus = min(ring_busbw_gbps(g, spec, rail), nics_share)
        out = []
        inter_caps = {p: cap for p, _, cap in self._protocols("net", nodes)}
        for p, payload, cap in self._protocols(intra_cls, 1):
            if p == "ll128" or p not in inter_caps:
                continue
            _, hop_in = self._hops(intra_cls, p, p)
            hop_net = lat.hop_us["net"][p]
            # three NCCL calls, each with its base latency
            t_lat = (3 * lat.base_us[f"ring_{p}"] + 2 * (gl - 1) * hop_in + 2 * (nodes - 1) * hop_net)
            b_in = min(intra_bus * payload, cap) if cap else intra_bus * payload
            b_net = min(inter_bus * payload, inter_caps[p]) if inter_caps[p] else inter_bus * payload
            # seconds per byte of the whole message S, as 1/algbw
            per_byte = (2 * (gl - 1) / gl) / b_in + (2 * (nodes - 1) / nodes) / gl / b_net
            out.append(Term(f"two-level/{p}", t_lat, t_lat, 1.0 / per_byte))
        return out


# tuning.cc getNetOverhead: the per-step floor of an inter-node ring on an Intel x86 host (us)
NET_OVERHEAD_US = 1.0


# NCCL 2.21 src/graph/tuning.cc ncclTopoTuneModel, Tree all-reduce: `busBw = min(busBw*.92, ...)`,
# `if (a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL) busBw = min(busBw*1.0/3.8, llMaxBw)`, and the
# bus -> algorithm bandwidth ratio `.5` for every algorithm other than Ring and NVLS/NVLSTree.
TREE_BUSBW_FACTOR = 0.92


TREE_LL_DIVISOR = 3.8


TREE_ALGBW_RATIO = 0.5


# tuning.cc, Tree LL128 across nodes: busBw x 120/128 (7/9 inside one node, not offered there)
TREE_LL128_INTER_FACTOR = 120.0 / 128.0


# tuning.cc treeCorrectionFactor (NCCL 2.19-2.29): "Trees are not perfectly sticking to the model for
# medium sizes" -- a factor on Tree all-reduce bandwidth per power of two of nBytes >> 6 (64 B .. 256 MB),
# 1 beyond. NCCL's tuner applies it to pick; it is NVIDIA's own measured correction, so it prices too.
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


# NCCL 2.21 src/transport/nvls.cc: NCCL_PARAM(NvlsChannels, "NVLS_NCHANNELS", 16) -- the CTAs an
# NVLS/NVLSTree kernel runs on (enqueue.cc getChannnelThreadInfo: `nc = comm->nvlsChannels`) -- and
# NCCL_PARAM(NvlsChunkSize, "NVLS_CHUNKSIZE", 128*1024), the largest NVLSTree chunk.
NVLS_CHANNELS = 16
NVLS_CHUNK_BYTES = 128 * 1024


def nvls_tree_chunk_bytes(nbytes: float, channels: int, heads: int, nodes: int) -> int:
    """NCCL 2.21 enqueue.cc computeCollChunkInfo, NCCL_ALGO_NVLS_TREE (concurrentOps = nChannels x
    nHeads): 128 KiB (64 KiB from 4 nodes), halved to 64 KiB below 4 x concurrentOps x chunk and to
    32 KiB below 1 x concurrentOps x chunk (its steps down to 256 and 128 KiB never apply to a start
    of at most 128 KiB, so they are left out)."""
    ops = channels * heads
    chunk = NVLS_CHUNK_BYTES if nodes < 4 else min(NVLS_CHUNK_BYTES, 65536)
    if nbytes < 4 * ops * chunk and chunk > 65536:
        chunk = 65536
    if nbytes < ops * chunk and chunk > 32768:
        chunk = 32768
    return chunk


@dataclass(frozen=True)
class NvlsTreeFill:
    """The network hops of an NVLSTree all-reduce that its pipeline does not hide (NCCL 2.21).

    src/device/all_reduce.h, RunWorkElement<..., NCCL_ALGO_NVLS_TREE, NCCL_PROTO_SIMPLE>: each of the
    `NVLS_CHANNELS` channels takes nbytes / channels and walks it in loops of nHeads x chunk; in each loop
    every head GPU NVLS-reduces its chunk, sends it up the tree over its NIC (a Simple step: the whole
    chunk lands before the receiver uses it), the root reduces it with its own NVLS reduce and sends it
    back down, and the broadcast warps multicast it. Loops pipeline (NCCL_STEPS slots per connection), so
    past the first one the network overlaps the NVLS phases and the pace is the slowest stage (the
    Term's algbw); the first loop's trip up and down the tree is in series with them. With two nodes,
    half the channels' trees are rooted on each node, so in each direction a NIC carries half its head's
    share of one loop: per hop D / (2 x heads x NIC) for D = nbytes / loops. So the real time adds
    2 x depth x D / (2 x net) = depth x D / net (net: the node's NICs, as in the Term's bandwidth).
    NCCL's tuner (tuning.cc: latency + size / bandwidth) does not know it: it prices, it never picks."""

    heads: int
    depth: int             # ceil(log2 nodes): tree levels a chunk climbs and descends
    nodes: int
    net_gbps: float        # the node's network bandwidth the tree uses (GB/s)
    channels: int = NVLS_CHANNELS

    def loops(self, nbytes: float) -> int:
        chunk = nvls_tree_chunk_bytes(nbytes, self.channels, self.heads, self.nodes)
        return max(1, math.ceil(nbytes / (self.channels * self.heads * chunk)))

    def extra_us(self, nbytes: float) -> float:
        return self.depth * (nbytes / self.loops(nbytes)) / (self.net_gbps * 1e3)


# tuning.cc ncclTopoGetAlgoTime: ring Simple all-reduce over nodes, latency x 1.4 on sm80+ ("plateau
# effect of ring"; 1.9 before sm80 -- every built-in profile's GPU is sm80+)
RING_PLATEAU = 1.4
NO_PLATEAU = (math.inf, 1.0)


@dataclass(frozen=True)
class Term:
    """One candidate algorithm/protocol: time = latency + bytes / algbw, with NCCL's two
    size-dependent refinements (ncclTopoGetAlgoTime): a bandwidth factor per power of two of the
    size (Tree), and a latency factor from a size on (ring Simple across nodes)."""

    name: str
    tuner_us: float          # the latency NCCL's tuner assumes (decides the pick)
    real_us: float           # the latency the path really costs (prices the pick)
    algbw_gbps: float
    bw_factors: tuple = ()   # factor on algbw at log2(nbytes >> 6) = 0, 1, ...; 1 beyond (or if empty)
    plateau: tuple = NO_PLATEAU   # (from nbytes, latency factor)
    fill: NvlsTreeFill | None = None   # NVLSTree's unhidden network hops: real time only, not the tuner's

    def time_us(self, nbytes: float, real: bool = True) -> float:
        lat = self.real_us if real else self.tuner_us
        if nbytes >= self.plateau[0]:
            lat *= self.plateau[1]
        bw = self.algbw_gbps
        log_size = int(nbytes) >> 6
        log_size = log_size.bit_length() - 1          # tuning.cc log2i; -1 below 64 B
        if self.bw_factors and 0 <= log_size < len(self.bw_factors):
            bw *= self.bw_factors[log_size]
        extra = self.fill.extra_us(nbytes) if real and self.fill else 0.0
        return lat + nbytes / (bw * 1e3) + extra
