"""One collective priced size by size, the way nccl-tests prints it: what `tpsim collective` shows.

Each row is (bytes, priced time, bus bandwidth, path): the path says where the number came from --
a measured table of the profile, the topology model (with the algorithm/protocol NCCL's tuner
would pick) or the plain protocol model -- so a user can hold a profile against their own
nccl-tests output (`measured` adds the measured time and the error per size).

Modes: "graph" and "eager" price the collective as the running stack pays it (a compiled CUDA-graph
step pays the profile's graph_extra and graph_nccl_node, an eager call its eager_extra); "nccl" prices
the bare NCCL kernel back to back, which is what nccl-tests times without -G (with -G each captured
call adds graph_nccl_node: sim/price/comm/timing.py). Sizes follow nccl-tests:
all-reduce / reduce-scatter `bytes` is the input buffer, all-gather `bytes` the gathered output.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tpsim.sim.price.cost import CostModel
from tpsim.sim.hardware.profile import Profile
from tpsim.sim.stack.spec import Stack

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
MODES = ("graph", "eager", "nccl")
DEFAULT_BYTES = tuple(2 ** k for k in range(10, 29))        # 1 KiB .. 256 MiB, doubling
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class Row:
    bytes: int
    time_us: float
    busbw_gbps: float
    path: str
    measured_us: float | None = None

    @property
    def error_pct(self) -> float | None:
        """(priced - measured) / measured, in percent."""
        if self.measured_us is None:
            return None
        return 100.0 * (self.time_us - self.measured_us) / self.measured_us

    def as_dict(self) -> dict:
        d = {"bytes": self.bytes, "time_us": round(self.time_us, 3), "busbw_gbps": round(self.busbw_gbps, 3),
             "path": self.path}
        if self.measured_us is not None:
            d["measured_us"] = self.measured_us
            d["error_pct"] = round(self.error_pct, 2)
        return d


def parse_size(text: str) -> int:
    """'4096', '16K', '1M', '2G' (binary units, as nccl-tests -b/-e take them) -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)I?B?\s*", str(text).upper())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"size must be a positive number of bytes like 4096, 16K, 1M or 2G, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def busbw_factor(collective: str, group: int) -> float:
    """nccl-tests busbw = algbw * factor: 2(n-1)/n for all-reduce, (n-1)/n for gather/scatter."""
    if group <= 1:
        return 0.0
    return 2 * (group - 1) / group if collective == "all_reduce" else (group - 1) / group


def collective_rows(profile: Profile, collective: str, group: int, mode: str = "graph",
                    sizes: tuple[int, ...] | None = None, gpus_per_node: int | None = None,
                    measured: dict[int, float] | None = None, impl: str = "auto", width: int | None = None,
                    notes: list | None = None, dtype: str = "bf16") -> list[Row]:
    """Price `collective` over `group` ranks at each size; `measured` (bytes -> us) adds a column.
    Without `sizes`, the measured sizes, else DEFAULT_BYTES. `impl`: the implementation to price
    (a profile table's impl, e.g. "custom", or an engine all-reduce of sim/stack/impls.py); auto: the
    profile's default. `width`: the tensor's hidden size (engine kernels picked by shape). `notes`:
    a list that receives what the pricing said (an engine refusing its kernel). `dtype`: the tensor's,
    which decides whether symmetric memory takes a message (sim/price/comm/custom_allreduce.py); bf16, what the
    engines serve in."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; choose from {', '.join(COLLECTIVES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if group < 2:
        raise ValueError(f"group (--group) must be at least 2 ranks, got {group}")
    per_node = gpus_per_node or profile.gpus_per_node
    if gpus_per_node is not None and not 1 <= gpus_per_node <= profile.gpus_per_node:
        raise ValueError(f"--gpus-per-node must be 1..{profile.gpus_per_node} for profile {profile.name}, "
                         f"got {gpus_per_node}")
    if group > per_node and (profile.topology is None or not profile.topology.multi_node) \
            and not profile.link_models.get("net"):
        raise ValueError(f"group of {group} ranks spans {-(-group // per_node)} nodes of {per_node} GPUs, but "
                         f"profile {profile.name} describes no network (topology NICs or collectives.model.net)")
    sizes = tuple(sizes) if sizes else tuple(sorted(measured)) if measured else DEFAULT_BYTES
    cm = CostModel(profile, Stack(collective=impl, dtype=dtype), gpus_per_node)
    rows = []
    for b in sizes:
        if mode == "nccl":
            # the bare kernel: device time of the graph-mode pricing, without the stack's extra
            t, path = cm.price(collective, b, group, "graph", width=width)
            head, sep, tail = path.partition(" (NCCL for ")         # an engine's NCCL fallback keeps its mark
            for s, label in (("graph_nccl_node_s", "+graph_nccl_node"), ("graph_extra_s", "+graph_extra")):
                if head.endswith(label):
                    t, head = t - getattr(profile, s), head[:-len(label)]
            path = head + sep + tail
        else:
            t, path = cm.price(collective, b, group, mode, width=width)
        bus = b / t / 1e9 * busbw_factor(collective, group) if t > 0 else 0.0
        rows.append(Row(int(b), t * 1e6, bus, path, None if measured is None else measured.get(int(b))))
    if notes is not None:
        notes.extend(n for n in cm.notes if n not in notes)
    return rows


def to_json(profile: str, collective: str, group: int, mode: str, rows: list[Row]) -> dict:
    return {"profile": profile, "collective": collective, "group": group, "mode": mode,
            "rows": [r.as_dict() for r in rows]}
