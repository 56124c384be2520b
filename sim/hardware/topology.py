"""Collective cost derived from a topology graph, for configurations nobody measured.

A profile's `topology` section (docs/profile-format.md) declares a node: GPUs, how they reach
each other (NVSwitch or PCIe), PCIe switches, CPU sockets with their host memory, NICs and the
inter-node fabric, each link with a sourced bandwidth. `build_graph` turns it into a networkx
DiGraph, one edge per link direction, each edge naming the *resource* it consumes (a full-duplex
link has one resource per direction; host memory is one resource that writes and reads share).

Pricing follows NCCL's own cost model (docs/sources.md §4, tuning.cc): for every enabled (algorithm,
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
  But a pair whose CPU path is slower than both GPUs' NIC paths is not SHM: it goes over the
  network, and NCCL splits the box into several "nodes" (`nccl_domains`, below): a DGX-H100 TP8
  is two 4-GPU NCCL nodes joined by the NICs, priced as a two-node job (no NVLS, NVLSTree).
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    shm_gbps: float = 0.0           # per-GPU rate of an SHM flow, every GPU reading and writing host memory at once
                                    # (0: the PCIe links alone bound it)
    nccl_cpu_link_gbps: float = 0.0  # NCCL's OWN rating of the CPU<->CPU link (topo.cc ncclTopoGetInterCpuBw),
                                     # which decides SHM vs NET with P2P off; 0: not declared (one NCCL node)
    nccl_cpu_nodes: int = 0         # NCCL's CPU nodes (NUMA domains) the PCIe switches spread over; 0: one per socket
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


def switch_of(spec: TopologySpec, i: int) -> int:
    return i // spec.gpus_per_pcie_switch


def _socket_of_switch(spec: TopologySpec, s: int) -> int:
    switches = math.ceil(spec.gpus_per_node / spec.gpus_per_pcie_switch)
    return min(spec.sockets - 1, s * spec.sockets // switches)


def nic_of(spec: TopologySpec, i: int) -> int:
    """NIC used by local GPU i: the rail it sits on (NICs spread evenly over the GPUs)."""
    return i * spec.nics_per_node // spec.gpus_per_node


# ------------------------------------------------------------------ NCCL's node split with P2P off

def _nccl_gpu_gpu_gbps(spec: TopologySpec, a: int, b: int) -> float:
    """NCCL's path bandwidth GPU a -> GPU b with P2P off (NCCL 2.21 src/graph/paths.cc).
    ncclTopoCheckP2p (l. 253-345): NCCL_P2P_DISABLE=1 sets p2pLevel PATH_LOC (ncclGetLevel), so no
    GPU pair passes; ncclTopoComputePaths (l. 542-580) then diverts a -> b through getLocalCpu(b)
    (addInterStep, l. 176-193: the path's bw is the min of its two halves; ncclTopoSetPaths, l. 34-111:
    a half's bw is the min of its links). GPU -> PCIe switch -> CPU links are PCIe (topo.cc
    ncclTopoAddPci l. 450-460: width x speed / 80, Gen5 x16 = 48 GB/s); crossing sockets adds the
    CPU <-> CPU link at NCCL's own rating (topo.cc ncclTopoConnectCpus l. 252-265)."""
    sa, sb = _nccl_cpu_of(spec, a), _nccl_cpu_of(spec, b)
    return spec.pcie_gbps if sa == sb else min(spec.pcie_gbps, spec.nccl_cpu_link_gbps)


def _nccl_cpu_of(spec: TopologySpec, i: int) -> int:
    """NCCL's CPU node of GPU i: a NUMA domain, not a socket (topo.h `#define CPU 3 // Actually NUMA
    domains`); every pair of CPU nodes gets the same SYS link (ncclTopoConnectCpus)."""
    n = spec.nccl_cpu_nodes or spec.sockets
    switches = math.ceil(spec.gpus_per_node / spec.gpus_per_pcie_switch)
    return min(n - 1, switch_of(spec, i) * n // switches)


def _nccl_net_gbps(spec: TopologySpec, i: int) -> float:
    """NCCL's best GPU i -> NET path bandwidth over a path of type PXB or better (a NIC behind the
    GPU's own PCIe switch; NCCL 2.21 paths.cc ncclTopoCheckNet l. 456-465): min(PCIe links, the NIC's
    NET link = port speed / 8000, topo.cc ncclTopoAddNet l. 356-358); 0 without such a NIC."""
    if not spec.multi_node:
        return 0.0
    own = switch_of(spec, i)
    nic_switches = {switch_of(spec, min(k for k in range(spec.gpus_per_node) if nic_of(spec, k) == j))
                    for j in {nic_of(spec, k) for k in range(spec.gpus_per_node)}}
    return min(spec.pcie_gbps, spec.nic_gbps) if own in nic_switches else 0.0


def nccl_net_pair(spec: TopologySpec, a: int, b: int) -> bool:
    """True when NCCL 2.21 connects GPUs a and b of one box over the network (NET/IB), not SHM.

    P2P off, so p2pCanConnect fails and shmCanConnect decides (src/transport/shm.cc l. 50-71): it
    calls ncclTopoCheckNet first (paths.cc l. 439-468), which answers "use the network" when BOTH
    GPUs reach a NIC (PXB or better) faster than each other (`netSpeed1 > speed && netSpeed2 >
    speed`, strictly; NCCL_NET_DISABLE_INTRA defaults to 0, l. 436). Then ncclTopoComputePaths marks
    the pair PATH_NET (l. 583-597). Unchanged in NCCL master as fetched (5067397c)."""
    if spec.p2p or spec.nccl_cpu_link_gbps <= 0 or a == b:
        return False
    speed = _nccl_gpu_gpu_gbps(spec, a, b)
    return _nccl_net_gbps(spec, a) > speed and _nccl_net_gbps(spec, b) > speed


def nccl_domains(spec: TopologySpec) -> tuple[int, ...]:
    """The NCCL node of each local GPU of one box: ncclTopoTrimSystem (paths.cc l. 642-686) gives
    GPU g the smallest domain of any earlier GPU it reaches by a path below PATH_NET, and keeps only
    the GPUs of this rank's domain; init.cc (l. 1110-1125) then counts one node per distinct first
    ring rank, i.e. one per domain. DGX H100 with P2P off: PCIe 48 GB/s inside a socket is not below
    the NIC's min(48, 50), so SHM; across sockets SKL_QPI_BW 10 GB/s is: NET -- domains (0,0,0,0,4,4,4,4)."""
    n = spec.gpus_per_node
    dom = list(range(n))
    for g in range(n):
        for p in range(g):
            if not nccl_net_pair(spec, g, p):
                dom[g] = min(dom[g], dom[p])
    return tuple(dom)


def nccl_nodes(spec: TopologySpec, ranks: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The ranks grouped as NCCL counts nodes (nNodes = len): per box, per NCCL domain, in rank order."""
    dom = nccl_domains(spec)
    out: dict = {}
    for k, i in ranks:
        out.setdefault((k, dom[i]), []).append((k, i))
    return list(out.values())


def _same_nccl_node(spec: TopologySpec, a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] == b[0] and not nccl_net_pair(spec, a[1], b[1])


def build_graph(spec: TopologySpec, nodes: int = 1) -> nx.DiGraph:
    """Nodes x (GPUs, NVSwitch, PCIe switches, CPU sockets, host memory, NICs) + one fabric.

    Edge attributes: gbps (capacity), res (resource name; shared capacity), cls (link class)."""
    import networkx as nx        # lazy: ~130 ms to import; only a topology-derived price builds a graph
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
            link(gpu(k, i), f"n{k}.pcisw{switch_of(spec, i)}", spec.pcie_gbps, "pci")
            if spec.intra == "nvswitch":
                link(gpu(k, i), f"n{k}.nvswitch", spec.nvlink_gbps, "nvlink")
        if spec.multi_node:
            for j in range(spec.nics_per_node):
                nic = f"n{k}.nic{j}"
                owner = min(i for i in range(n) if nic_of(spec, i) == j) if any(
                    nic_of(spec, i) == j for i in range(n)) else 0
                link(nic, f"n{k}.pcisw{switch_of(spec, owner)}", spec.pcie_gbps, "pci")
                link(nic, "fabric", spec.nic_gbps, "net")
    return g


def route(g: nx.DiGraph, spec: TopologySpec, a: tuple[int, int], b: tuple[int, int]) -> list[str]:
    """The path NCCL's transport takes from GPU a=(node, local) to GPU b."""
    (ka, ia), (kb, ib) = a, b
    src, dst = gpu(ka, ia), gpu(kb, ib)
    if not _same_nccl_node(spec, a, b):     # another box, or a P2P-off pair NCCL sends over NET
        # GPUDirect RDMA: GPU -> its PCIe switch -> its rail's NIC -> fabric -> NIC -> GPU
        na, nb = f"n{ka}.nic{nic_of(spec, ia)}", f"n{kb}.nic{nic_of(spec, ib)}"
        return (_pci_path(g, src, na) + ["fabric"] + _pci_path(g, nb, dst))
    if not spec.p2p:
        # SHM transport: through a buffer in host memory (on the receiver's socket)
        mem = f"n{kb}.mem{_socket_of_switch(spec, switch_of(spec, ib))}"
        cpu = mem.replace("mem", "cpu")
        return _pci_path(g, src, cpu) + [mem] + _pci_path(g, cpu, dst)
    if spec.intra == "nvswitch":
        return [src, f"n{ka}.nvswitch", dst]
    return _pci_path(g, src, dst)


def _pci_path(g: nx.DiGraph, a: str, b: str) -> list[str]:
    """Shortest path that avoids NVSwitch, host memory and the fabric (plain PCIe / CPU links)."""
    import networkx as nx        # lazy: see build_graph
    view = nx.subgraph_view(g, filter_node=lambda v: v in (a, b) or not (
        v.endswith("nvswitch") or ".mem" in v or v == "fabric"))
    return nx.shortest_path(view, a, b)


def ring_busbw_gbps(g: nx.DiGraph, spec: TopologySpec, ranks: list[tuple[int, int]], channels: int = 1) -> float:
    """Bus bandwidth of ring channels over `ranks` (node-major order): the tightest resource.

    Nodes are NCCL's (nccl_nodes: a P2P-off box may be several). Channel c rotates the order inside each node so that its node-crossing edges leave from
    different GPUs (and NICs), as NCCL's rings over multi-rail nodes do; each channel carries
    1/channels of the data."""
    load: dict = {}
    cap: dict = {}
    shm = False
    for c in range(channels):
        for a, b in _ring_edges(spec, ranks, c):
            path = route(g, spec, a, b)
            shm = shm or (not spec.p2p and _same_nccl_node(spec, a, b))
            for u, v in zip(path, path[1:]):
                e = g.edges[u, v]
                load[e["res"]] = load.get(e["res"], 0.0) + 1.0 / channels
                cap[e["res"]] = e["gbps"]
    bw = min(cap[r] / load[r] for r in load) if load else math.inf
    # An SHM (P2P off) edge is moved by the GPUs' own SMs (shm.cc: NCCL_SHM_USE_CUDA_MEMCPY=0): the
    # sender stores into host memory while the receiver loads from it, every GPU of the ring at once,
    # so each GPU's link carries both directions. shm_gbps is the per-GPU rate measured for exactly
    # that pattern (nvbandwidth *_all_bidirectional_*), shared uplinks included: a per-flow cap.
    if shm and spec.shm_gbps > 0:
        bw = min(bw, spec.shm_gbps)
    return bw


def _ring_edges(spec: TopologySpec, ranks: list[tuple[int, int]], channel: int) -> list[tuple]:
    order = []
    for loc in nccl_nodes(spec, ranks):          # node-major, as NCCL's rings cross each node once
        r = (channel + 1) % len(loc)
        order.extend(loc[r:] + loc[:r])
    return list(zip(order, order[1:] + order[:1]))


def hop_class(g: nx.DiGraph, spec: TopologySpec, a, b) -> str:
    path = route(g, spec, a, b)
    classes = {g.edges[u, v]["cls"] for u, v in zip(path, path[1:])}
    return "net" if "net" in classes else "nvlink" if classes == {"nvlink"} else "pci"


