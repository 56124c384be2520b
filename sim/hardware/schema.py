"""The profile format's vocabulary: its name and version, the limits a file must keep, and the typed
values a parsed profile is made of (sim/hardware/profile.py reads and writes the JSON; sim/hardware/check.py
validates it field by field)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from tpsim.sim.bounds import BOUNDS
from tpsim.sim.errors import UserError
from tpsim.fileio.policy import MAX_JSON_DEPTH, MAX_PROFILE_BYTES
from tpsim.fileio.shape import finite, short  # noqa: F401  (the profile modules read them from here)
from tpsim.sim.hardware.gpc import PLACEMENTS, fits
from tpsim.sim.hardware.topology import TopologySpec

FORMAT, VERSION = "tpsim-profile", 1


SCOPES = ("node", "net")          # collective within one node, or spanning nodes


MODES = ("eager", "graph")        # collective launched eagerly or replayed in a CUDA graph


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


MAX_FILE_BYTES = MAX_PROFILE_BYTES   # fileio/policy.py's input limit for a profile


MAX_DEPTH = MAX_JSON_DEPTH       # nesting of objects/lists (the deepest real profile is ~10)


MAX_TABLE_POINTS = BOUNDS["table_points"].hi   # per measured table (sim/bounds.py)
MIN_TIME_S = 1e-9            # a measured op or collective: no kernel is shorter than a nanosecond


@dataclass(frozen=True)
class GpuSpec:
    """What the co-scheduling needs of a GPU and its comm stream (profile overlap.gpu)."""

    sms: int                          # streaming multiprocessors (H100 SXM: 132, datasheet)
    high_priority: bool = False       # TORCH_NCCL_HIGH_PRIORITY=1: the comm stream outranks compute
    coll_channels: int = 1            # NCCL's ring/tree channels at most (its "N coll channels" log line)
    nvls_channels: int = 16           # NCCL's NVLS channels (src/transport/nvls.cc NVLS_NCHANNELS)
    hbm_per_bus_byte: float = 0.0     # HBM bytes a collective moves per bus byte (NVIDIA/nccl#1428)
    gemm_grids: str = "rule"          # the extern-GEMM grid table of sim/price/occupancy.py (GEMM_GRIDS) it uses
    sm_hbm_gbps: float = 0.0          # HBM bandwidth one SM's CTAs draw at most; 0: not modelled (a
                                      # memory-bound kernel keeps its pace on fewer SMs)
    gpc_sms: tuple[int, ...] = ()     # SMs of each GPC (sim/hardware/gpc.py); (): idle SMs counted per GPU
    nccl_cluster_size: int = 1        # NCCL's cgaClusterSize on this GPU (4 on sm90); 1: no clusters
    idle_sm_placement: str = "packed"  # where a wave leaves its idle SMs: sim/hardware/gpc.py PLACEMENTS

    def __post_init__(self) -> None:
        if self.sms < 1:
            raise ValueError(f"sms must be >= 1, got {self.sms}")
        if self.gpc_sms and (sum(self.gpc_sms) != self.sms or min(self.gpc_sms) < 1):
            raise ValueError(f"gpc_sms must be positive and sum to sms {self.sms}, got {self.gpc_sms}")
        if not 1 <= self.nccl_cluster_size <= 8:            # NCCL_MAX_CGA_CLUSTER_SIZE, src/init.cc
            raise ValueError(f"nccl_cluster_size must be in 1..8, got {self.nccl_cluster_size}")
        if self.idle_sm_placement not in PLACEMENTS:
            raise ValueError(f"idle_sm_placement must be one of {PLACEMENTS}, got {self.idle_sm_placement!r}")

    def room(self, c: int, busy: int) -> bool:
        """Whether a collective of `c` CTAs starts beside a wave holding `busy` SMs (sim/hardware/gpc.py)."""
        return fits(c, busy, self.sms, self.gpc_sms, self.nccl_cluster_size, self.idle_sm_placement)


@dataclass(frozen=True)
class L2Spec:
    """A profile's `compute.l2`: the GPU's L2 -> SM rate and, optionally, the measured transition of a
    repeated sweep from the L2 plateau to the DRAM plateau (rows (data set kB, GB/s), kB increasing)."""

    bytes_per_s: float
    sweep: tuple[tuple[float, float], ...] = ()
    sweep_dram_gbps: float | None = None        # the benchmark's DRAM plateau (with `sweep`)


@dataclass(frozen=True)
class DecodeAttentionSpec:
    """A profile's `compute.decode_attention`: what the grid of a split-KV decode kernel is priced with
    (sim/price/decode_grid.py): the GPU's SM count (the split heuristics read it) and the rate one decode
    CTA streams its share of the KV at."""

    sms: int
    cta_bytes_per_s: float


class ProfileError(UserError):
    """A profile that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Curve:
    """Piecewise-linear in log(x): efficiency as a function of work size (flops or bytes)."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, v: float) -> float:
        if len(self.x) == 1 or v <= self.x[0]:
            return self.y[0]
        if v >= self.x[-1]:
            return self.y[-1]
        lv = math.log(v)
        for i in range(1, len(self.x)):
            if v <= self.x[i]:
                l0, l1 = math.log(self.x[i - 1]), math.log(self.x[i])
                t = (lv - l0) / (l1 - l0)
                return self.y[i - 1] + t * (self.y[i] - self.y[i - 1])
        return self.y[-1]


@dataclass(frozen=True)
class ComputePoint:
    """One measured op time (from `tpsim calibrate` or an imported database)."""

    kind: str
    attrs: tuple[tuple[str, int | str], ...]
    dtype: str
    time_s: float
    mode: str = "any"     # "eager": unfused kernels launched one by one; "graph": as a captured/compiled step


@dataclass(frozen=True)
class GemmTable:
    """`compute.gemm_tables[i]`: measured GEMM times, one row per weight shape, kept in this compact
    form (a built-in profile's tables hold ~11k times, of which a prediction reads a few dozen).
    Each row is (n, k, seconds at each m of `m`), for every dtype of `dtypes`; mode any (the same
    cuBLAS kernel eager and compiled). The cost model indexes them after `compute_points`, so
    calibrated points win."""

    source: str
    dtypes: tuple[str, ...]
    m: tuple[int, ...]                                 # increasing
    rows: tuple[tuple[int, int, tuple[float, ...]], ...]
    # "fp8": the times of FP8 linears (e4m3 weights and inputs, output in each of `dtypes`): they price
    # the gemm ops with attr fp8 (sim/price/cost.py); "": 16-bit GEMMs
    quant: str = ""

    def points(self) -> tuple[ComputePoint, ...]:
        """The same times as gemm ComputePoints (attrs k, m, n; fp8 for an FP8 table): what a reader of
        points sees."""
        q = (("fp8", 1),) if self.quant == "fp8" else ()
        return tuple(ComputePoint("gemm", q + (("k", k), ("m", m), ("n", n)), dt, t)
                     for n, k, ts in self.rows for dt in self.dtypes for m, t in zip(self.m, ts))


@dataclass(frozen=True)
class CollectiveTable:
    """Measured latency vs message size for one collective configuration."""

    collective: str       # all_reduce | all_gather | reduce_scatter
    group: int            # ranks in the group
    scope: str            # node | net
    mode: str             # eager | graph
    impl: str             # nccl | custom | gloo | ...
    bytes: tuple[float, ...]
    time_s: tuple[float, ...]
    source: str


@dataclass(frozen=True)
class LinkModel:
    """One NCCL algorithm/protocol: time = base + steps * hop + bytes / algbw (docs/sources.md §4)."""

    name: str             # e.g. "ring_ll", "ring_simple", "nvls"
    base_s: float
    hop_s: float
    busbw_gbps: float     # bus bandwidth (nccl-tests convention), GB/s = 1e9 B/s
    per_step: bool = True  # hop paid per ring step (ring/tree) or once (NVLS)


@dataclass(frozen=True)
class ArrivalJitter:
    """Per-rank delay before each arrival at a collective of one scope: iid draws per rank and
    collective. "exponential": mean mean_s (what the spread of arrivals measures directly: with
    iid exponential delays, each rank's lag behind the first arrival is again exponential with
    that mean). Zero: no jitter simulated, which is not a claim that real ranks have none."""

    dist: str                         # "exponential"
    mean_s: float
    source: str


JITTER_DISTS = ("exponential",)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpus_per_node: int
    memory_gib: float
    device: str                                  # "cuda" | "cpu": how launches overlap compute
    peak_flops: dict                             # dtype -> FLOP/s of dense matrix math
    mem_bytes_per_s: float
    gemm_efficiency: Curve                       # achieved/peak FLOP/s vs flops per kernel
    memory_efficiency: Curve                     # achieved/peak bandwidth vs bytes per kernel
    launch_s: dict                               # mode ("eager"/"graph") -> seconds per kernel launch
    compute_points: tuple[ComputePoint, ...]     # calibrated / listed points (compute.tables)
    collective_tables: tuple[CollectiveTable, ...]
    link_models: dict                            # scope -> tuple[LinkModel, ...] (fastest wins)
    eager_extra_s: float                         # extra per collective in eager mode when only graph data exists
    default_impl: str                            # collective implementation the cluster runs ("nccl", "gloo")
    stack_defaults: dict                         # Stack fields this cluster runs by default (e.g. fp32, no graphs on CPU)
    compute_slowdown: float                      # factor on compute while a collective runs on the rank
    comm_slowdown: float                         # factor on a collective while compute runs on the rank
    jitter_s: float                              # legacy jitter.launch_us (the simulator reads arrival_jitter)
    wake_s: float = 0.0                          # part of a collective's time that wakes a rank blocked on it
    graph_extra_s: float = 0.0                   # extra per NCCL collective inside a compiled CUDA-graph step
    graph_nccl_node_s: float = 0.0               # NCCL's graph-mixing nodes per captured NCCL collective (0: unset)
    graph_net_host_s: float = 0.0                # NCCL's host node per network collective in a CUDA graph (0: unset)
    arrival_jitter: dict = field(default_factory=dict)  # scope ("node"/"net") -> ArrivalJitter (exact mode)
    source_path: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    topology: TopologySpec | None = field(default=None, compare=False, repr=False)
    coschedule: GpuSpec | None = None            # overlap.gpu: per-kernel co-scheduling (sim/price/coschedule.py)
    gemm_tables: tuple[GemmTable, ...] = ()      # compute.gemm_tables (after compute_points: those win)
    l2: L2Spec | None = None                     # compute.l2: L2 rate and sweep curve (None: DRAM term only)
    compute_capability: float | None = None      # CUDA compute capability (9.0 Hopper); None: not stated
    decode_attention: DecodeAttentionSpec | None = None   # compute.decode_attention (None: bytes-only decode)
    # field path -> (lo, hi): the interval a number's source supports ("range" beside its "value");
    # sim/sensitivity.py reruns a prediction at each end
    ranges: dict = field(default_factory=dict, compare=False, repr=False)


def has_source(obj: dict) -> bool:
    """A non-empty string says where the number came from (a list or a number says nothing)."""
    src = obj.get("source")
    return isinstance(src, str) and bool(src.strip())


# a JSON number that is real and finite, a value cut to one line for a message: fileio/shape.py's
# (one definition); sim's modules import them from here
