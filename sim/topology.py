"""Collective cost derived from a topology graph, for configurations nobody measured.

A profile's `topology` section (README "Profile format") declares a node: GPUs, how they reach
each other (NVSwitch or PCIe), PCIe switches, CPU sockets with their host memory, NICs and the
inter-node fabric, each link with a sourced bandwidth. `build_graph` turns it into a networkx
DiGraph, one edge per link direction, each edge naming the *resource* it consumes (a full-duplex
link has one resource per direction; host memory is one resource that writes and reads share).

Pricing follows NCCL's own cost model (FACTS.md §4, tuning.cc): for every enabled (algorithm,
protocol), `time = base + steps * hop + bytes / algbw`, and the fastest wins. What the topology
adds is *which* hop latency applies (NVLink, PCI, network) and the bandwidth: every ring edge
(rank r -> r+1) is routed through the graph and the busbw is the tightest resource,
capacity / (number of ring edges routed over it). This is what changes when placement or links
change:

- one node, NVSwitch, P2P on: ring over NVLink, NVLS (in-switch reduction) when the switch has it.
- P2P off (NCCL_P2P_DISABLE=1): every ring/tree edge goes GPU -> PCIe -> host memory -> PCIe ->
  GPU (NCCL's SHM transport): no LL128; two GPUs behind one PCIe switch share its uplink and all
  flows of a socket share its memory bandwidth. NVLS stays on: NCCL 2.21's ncclNvlsInit has no
  P2P condition (NCCL_NVLS_ENABLE and > 2 GPUs), and P2P_DISABLE only reroutes GPU->GPU paths
  through the CPU (paths.cc), not the GPU<->NVSwitch paths the NVLS search follows.
- NCCL's tuner picks the algorithm/protocol by ITS OWN constants (tuning.cc: an SHM step is a
  "PCI" hop, 1 us for LL), but a step through host memory really costs what the topology's
  `shm_hop_us` says (public p2pBandwidthLatencyTest "P2P=Disabled" matrices). So each candidate
  carries two latencies: the tuner's (to choose) and the real one (to price); where they agree
  (every P2P-on path) nothing changes.
- spanning nodes: a flat ring (one channel per NIC, each crossing the fabric through another NIC),
  a tree (NCCL's inter-node default for small messages), the two-level all-reduce
  (intra-node reduce-scatter -> inter-node all-reduce of 1/g of the data over the GPU's own NIC
  -> intra-node all-gather) and, on NVLS boxes, NVLSTree (NVLS in the node, a tree over the
  NICs across nodes); the fastest wins.

`latency_offset_us` shifts every derived time by a per-box constant: the shift that minimizes the
largest relative error against that box's measured small all-reduce latencies (stated as a
derivation in the profile). Beyond this one constant nothing is fitted: bandwidths are datasheet
values, NCCL's constants or published busbw, latencies are NCCL's tuning.cc constants.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

INTRA_KINDS = ("nvswitch", "pcie")
PROTOCOLS = ("ll", "ll128", "simple")
LINK_CLASSES = ("nvlink", "pci", "net")


@dataclass(frozen=True)
class NcclLatency:
    """NCCL's latency constants (µs): base per (algorithm, protocol), hop per link class.

    base keys: ring_ll, ring_ll128, ring_simple, tree_ll, tree_ll128, tree_simple, nvls.
    hop keys: hop[link_class][key] with key ll/ll128/simple (ring), tree_ll..., nvls (whole op)."""

    base_us: dict
    hop_us: dict


@dataclass(frozen=True)
class TopologySpec:
    """The declarative `topology` section of a profile (bandwidths in GB/s per direction)."""

    gpus_per_node: int
    intra: str                      # nvswitch | pcie
    p2p: bool                       # NCCL P2P transport (NVLink / PCIe) on; off = host shared memory
    nvlink_gbps: float              # per-GPU NVLink bandwidth a ring achieves (busbw); 0 for pcie boxes
    nvls_busbw_gbps: float          # NVLS all-reduce busbw at gpus_per_node ranks; 0 = no NVLS
    ll_busbw_cap_gbps: float        # NCCL's LL bandwidth cap for one node; 0 = none
    ll_busbw_cap_multi_node_gbps: float  # the same cap when the group spans nodes; 0 = none
    ll_payload: float               # fraction of LL line bandwidth that is payload (0.5)
    ll128_payload: float            # fraction for LL128 (~0.92)
    pcie_gbps: float                # GPU <-> PCIe switch, and switch <-> CPU uplink
    gpus_per_pcie_switch: int
    sockets: int
    host_mem_gbps: float            # per socket, reads and writes together
    cpu_link_gbps: float            # socket <-> socket per direction
    nic_gbps: float                 # per NIC per direction; 0 = single node only
    nics_per_node: int
    latency: NcclLatency
    latency_offset_us: float = 0.0
    shm_hop_us: dict = field(default_factory=dict, hash=False)   # real per-step latency over SHM, per protocol
    shm_gbps: float = 0.0           # rate one staged GPU->host->GPU flow reaches (0: the PCIe links bound it)
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.intra not in INTRA_KINDS:
            raise ValueError(f"topology intra must be one of {INTRA_KINDS}, got {self.intra!r}")
        if self.intra == "nvswitch" and self.nvlink_gbps <= 0:
            raise ValueError("topology with intra 'nvswitch' needs nvlink_gbps > 0")
        if self.gpus_per_node < 1 or self.gpus_per_pcie_switch < 1 or self.sockets < 1:
            raise ValueError("topology counts (gpus_per_node, gpus_per_pcie_switch, sockets) must be >= 1")

    @property
    def multi_node(self) -> bool:
        return self.nic_gbps > 0 and self.nics_per_node > 0


# ------------------------------------------------------------------ the graph

def gpu(k: int, i: int) -> str:
    return f"n{k}.gpu{i}"


def _switch_of(spec: TopologySpec, i: int) -> int:
    return i // spec.gpus_per_pcie_switch


def _socket_of_switch(spec: TopologySpec, s: int) -> int:
    switches = math.ceil(spec.gpus_per_node / spec.gpus_per_pcie_switch)
    return min(spec.sockets - 1, s * spec.sockets // switches)


def _nic_of(spec: TopologySpec, i: int) -> int:
    """NIC used by local GPU i: the rail it sits on (NICs spread evenly over the GPUs)."""
    return i * spec.nics_per_node // spec.gpus_per_node


def build_graph(spec: TopologySpec, nodes: int = 1) -> nx.DiGraph:
    """Nodes x (GPUs, NVSwitch, PCIe switches, CPU sockets, host memory, NICs) + one fabric.

    Edge attributes: gbps (capacity), res (resource name; shared capacity), cls (link class)."""
    g = nx.DiGraph()

    def link(a: str, b: str, gbps: float, cls: str, res: str | None = None, duplex: bool = True):
        g.add_edge(a, b, gbps=gbps, cls=cls, res=res or f"{a}->{b}")
        if duplex:
            g.add_edge(b, a, gbps=gbps, cls=cls, res=res or f"{b}->{a}")

    n = spec.gpus_per_node
    switches = math.ceil(n / spec.gpus_per_pcie_switch)
    for k in range(nodes):
        for c in range(spec.sockets):
            cpu, mem = f"n{k}.cpu{c}", f"n{k}.mem{c}"
            g.add_node(cpu, kind="cpu")
            g.add_node(mem, kind="mem")
            # host memory: one pool of bandwidth for writes and reads alike
            link(cpu, mem, spec.host_mem_gbps, "pci", res=f"{mem}.bw")
        for c in range(spec.sockets - 1):
            link(f"n{k}.cpu{c}", f"n{k}.cpu{c + 1}", spec.cpu_link_gbps, "pci")
        for s in range(switches):
            link(f"n{k}.pcisw{s}", f"n{k}.cpu{_socket_of_switch(spec, s)}", spec.pcie_gbps, "pci")
        for i in range(n):
            g.add_node(gpu(k, i), kind="gpu", node=k, local=i)
            link(gpu(k, i), f"n{k}.pcisw{_switch_of(spec, i)}", spec.pcie_gbps, "pci")
            if spec.intra == "nvswitch":
                link(gpu(k, i), f"n{k}.nvswitch", spec.nvlink_gbps, "nvlink")
        if spec.multi_node:
            for j in range(spec.nics_per_node):
                nic = f"n{k}.nic{j}"
                owner = min(i for i in range(n) if _nic_of(spec, i) == j) if any(
                    _nic_of(spec, i) == j for i in range(n)) else 0
                link(nic, f"n{k}.pcisw{_switch_of(spec, owner)}", spec.pcie_gbps, "pci")
                link(nic, "fabric", spec.nic_gbps, "net")
    return g


def route(g: nx.DiGraph, spec: TopologySpec, a: tuple[int, int], b: tuple[int, int]) -> list[str]:
    """The path NCCL's transport takes from GPU a=(node, local) to GPU b."""
    (ka, ia), (kb, ib) = a, b
    src, dst = gpu(ka, ia), gpu(kb, ib)
    if ka != kb:
        # GPUDirect RDMA: GPU -> its PCIe switch -> its rail's NIC -> fabric -> NIC -> GPU
        na, nb = f"n{ka}.nic{_nic_of(spec, ia)}", f"n{kb}.nic{_nic_of(spec, ib)}"
        return (_pci_path(g, src, na) + ["fabric"] + _pci_path(g, nb, dst))
    if not spec.p2p:
        # SHM transport: through a buffer in host memory (on the receiver's socket)
        mem = f"n{kb}.mem{_socket_of_switch(spec, _switch_of(spec, ib))}"
        cpu = mem.replace("mem", "cpu")
        return _pci_path(g, src, cpu) + [mem] + _pci_path(g, cpu, dst)
    if spec.intra == "nvswitch":
        return [src, f"n{ka}.nvswitch", dst]
    return _pci_path(g, src, dst)


def _pci_path(g: nx.DiGraph, a: str, b: str) -> list[str]:
    """Shortest path that avoids NVSwitch, host memory and the fabric (plain PCIe / CPU links)."""
    view = nx.subgraph_view(g, filter_node=lambda v: v in (a, b) or not (
        v.endswith("nvswitch") or ".mem" in v or v == "fabric"))
    return nx.shortest_path(view, a, b)


def ring_busbw_gbps(g: nx.DiGraph, spec: TopologySpec, ranks: list[tuple[int, int]], channels: int = 1) -> float:
    """Bus bandwidth of ring channels over `ranks` (node-major order): the tightest resource.

    Channel c rotates the order inside each node so that its node-crossing edges leave from
    different GPUs (and NICs), as NCCL's rings over multi-rail nodes do; each channel carries
    1/channels of the data."""
    load: dict = {}
    cap: dict = {}
    for c in range(channels):
        for a, b in _ring_edges(ranks, c):
            path = route(g, spec, a, b)
            # a staged (SHM) flow runs at the rate the public P2P=Disabled copies reach, below the
            # PCIe datasheet rate: its PCIe links carry at most shm_gbps each
            shm = not spec.p2p and a[0] == b[0] and spec.shm_gbps > 0
            for u, v in zip(path, path[1:]):
                e = g.edges[u, v]
                load[e["res"]] = load.get(e["res"], 0.0) + 1.0 / channels
                pcie = e["cls"] == "pci" and ".mem" not in u + v        # host memory keeps its own rate
                cap[e["res"]] = min(e["gbps"], spec.shm_gbps) if shm and pcie else e["gbps"]
    return min(cap[r] / load[r] for r in load) if load else math.inf


def _ring_edges(ranks: list[tuple[int, int]], channel: int) -> list[tuple]:
    by_node: dict = {}
    for k, i in ranks:
        by_node.setdefault(k, []).append((k, i))
    order = []
    for k in sorted(by_node):
        loc = by_node[k]
        r = (channel + 1) % len(loc)
        order.extend(loc[r:] + loc[:r])
    return list(zip(order, order[1:] + order[:1]))


def _hop_class(g: nx.DiGraph, spec: TopologySpec, a, b) -> str:
    path = route(g, spec, a, b)
    classes = {g.edges[u, v]["cls"] for u, v in zip(path, path[1:])}
    return "net" if "net" in classes else "nvlink" if classes == {"nvlink"} else "pci"


# ------------------------------------------------------------------ pricing

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
        t = min(terms, key=lambda x: x.tuner_us + nbytes / (x.algbw_gbps * 1e3))
        real_us = t.real_us + nbytes / (t.algbw_gbps * 1e3)
        return t.name, max(real_us + self.spec.latency_offset_us, 0.0) * 1e-6

    def choices(self, collective: str, nbytes: float, group: int, gpus_per_node: int | None = None) -> list:
        """[(name, real seconds)] for every candidate, in the tuner's order (its pick first)."""
        ranks = self.placement(group, gpus_per_node)
        terms = sorted(self._terms(collective, tuple(ranks)),
                       key=lambda x: x.tuner_us + nbytes / (x.algbw_gbps * 1e3))
        return [(x.name, (x.real_us + nbytes / (x.algbw_gbps * 1e3) + self.spec.latency_offset_us) * 1e-6)
                for x in terms]

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
        nodes = len({k for k, _ in ranks})
        g = self.graph(nodes)
        local = [r for r in ranks if r[0] == 0]
        intra_cls = _hop_class(g, spec, local[0], local[1]) if len(local) > 1 else "net"
        ar = collective == "all_reduce"
        steps = 2 * (n - 1) if ar else n - 1
        to_alg = n / (2 * (n - 1)) if ar else n / (n - 1)     # busbw -> algbw

        channels = spec.nics_per_node if nodes > 1 else 1
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
            terms.append(Term(f"ring/{p}", base + (steps - inter_steps) * hop_t,
                              base + (steps - inter_steps) * hop_r, bus * to_alg))
        if ar:
            terms += self._tree_terms(g, ranks, local, nodes, intra_cls, protos)
            gl = n // nodes
            # NCCL 2.21 ncclNvlsInit: NVLS needs more than 2 GPUs in the node; no P2P condition
            if spec.intra == "nvswitch" and spec.nvls_busbw_gbps > 0 and gl > 2:
                terms.append(self._nvls_term(gl, nodes))     # the smallest node sets the pace
            # The two-level reduce-scatter/all-reduce/all-gather (_two_level_terms) is not one of
            # NCCL's algorithms: one ncclAllReduce call never runs it, so NCCL's tuner never picks
            # it (tuning.cc evaluates Tree/Ring/CollNet/NVLS/NVLSTree only).
        return terms

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
        nics = len({_nic_of(spec, i) for i in range(gl)})       # the rail NICs of the GPUs in use
        net = min(spec.nic_gbps, spec.pcie_gbps) * nics / (1 if nodes == 2 else 2)
        hop = lat.hop_us["net"].get("nvls", lat.hop_us["net"]["simple"])
        t_lat += 2 * math.ceil(math.log2(nodes)) * hop
        return Term("nvls-tree", t_lat, t_lat, min(algbw, net))

    def _protocols(self, link_cls: str, nodes: int) -> list[tuple[str, float, float]]:
        """(protocol, payload fraction, busbw cap) enabled on this path (FACTS.md §4):
        LL128 only over NVLink inside a node (and P2P on); LL capped (tuning.cc llMaxBws)."""
        spec = self.spec
        cap = spec.ll_busbw_cap_gbps if nodes == 1 else spec.ll_busbw_cap_multi_node_gbps
        out = [("ll", spec.ll_payload, cap), ("simple", 1.0, 0.0)]
        if link_cls == "nvlink" and nodes == 1:
            out.insert(1, ("ll128", spec.ll128_payload, 0.0))
        return out

    def _tree_terms(self, g, ranks, local, nodes, intra_cls, protos) -> list["Term"]:
        """Double binary tree: a chain inside each node, a binary tree across nodes.
        Latency: base + 2 * ((g - 1) intra hops + ceil(log2 nodes) network hops);
        algbw: the chain's link (each GPU sends and receives the whole message once per direction)
        and, across nodes, the node's NICs shared by the two trees."""
        spec, lat = self.spec, self.spec.latency
        per_node = len(local)
        chain_bw = ring_busbw_gbps(g, spec, local) if per_node > 1 else math.inf
        net_bw = spec.nic_gbps * spec.nics_per_node if nodes > 1 else math.inf
        bw = min(chain_bw, net_bw)
        if not math.isfinite(bw):
            return []
        out = []
        for p, payload, cap in protos:
            if p == "ll128":
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
            if cap:
                bus = min(bus, cap)
            b = bus * TREE_ALGBW_RATIO
            out.append(Term(f"tree/{p}", lat.base_us[key] + 2 * ((per_node - 1) * hop_t + net),
                            lat.base_us[key] + 2 * ((per_node - 1) * hop_r + net), b))
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


@dataclass(frozen=True)
class Term:
    """One candidate algorithm/protocol: time = latency + bytes / algbw."""

    name: str
    tuner_us: float          # the latency NCCL's tuner assumes (decides the pick)
    real_us: float           # the latency the path really costs (prices the pick)
    algbw_gbps: float
