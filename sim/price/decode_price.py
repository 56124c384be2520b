"""What a decode attention grid costs (the grid: sim/price/decode_grid.py), and the lines that say it.

Price: the larger of
  * the bandwidth-bound time: the kernel's measured achieved-bandwidth curve over the KV bytes where it has
    one (sim/price/flash_decode.py; its measured times hold the split's combine), else the profile's memory
    roofline over the KV bytes plus the combine; and
  * the time the CTAs that exist need to stream their share: the most bytes one CTA reads over the
    profile's per-CTA rate (compute.decode_attention.cta_gbps, a kernel-level number with the range its
    sources give), plus the combine where the split has one.
So an unsplit kernel at long context grows with the context at one CTA's rate, a split one is bandwidth-
bound. The combine: a separate kernel (FA2/FA3 combine, FlashInfer's merge, paged v2's reduce) reads the
splits' fp32 partials and writes the output, at the profile's roofline with one kernel's device floor;
XQA and masked MHA merge in-kernel (the last CTA per head reads the others' partials, at the per-CTA rate) after a
semaphore memset (one more node, a device floor).
"""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.price.decode_grid import Grid, Shape, shape_of
from tpsim.sim.price.work import Work, roofline_s

# the profile numbers only a decode grid reads (sim/sensitivity.py reruns them only where one is priced)
GRID_PATHS = ("compute.decode_attention.",)


def reads(path: str, stack) -> bool:
    """Whether pricing under `stack` can read the profile number at `path`: a decode grid's numbers only
    when the stack's attention is a kernel with a grid (its fallback for other models never is math)."""
    return not path.startswith(GRID_PATHS) or stack.attention != "math"


def rate_binds(cost, ops, graphs_of, rate_lo: float) -> bool:
    """Whether the per-CTA rate at its range's low end `rate_lo` (B/s) makes any of these decode attention
    ops CTA-bound on `cost` (a CostModel): its stream term and combine repriced at that rate (XQA's merge
    read is; a roofline's bandwidth term holds the same combine) reach its bandwidth-bound time."""
    for op in ops:
        got = cost.decode_attention(op, graphs_of(op))
        if got is None:
            continue
        grid, t = got
        stream = t.stream_s * cost.profile.decode_attention.cta_bytes_per_s / rate_lo
        comb = combine_s(grid, cost.profile, rate_lo)
        bw = t.bandwidth_s + (comb - t.combine_s if t.combine_in_bandwidth else 0.0)
        if stream + comb >= bw:
            return True
    return False


@dataclass(frozen=True)
class Terms:
    """The priced decode kernel: each limit and the result, seconds."""

    bandwidth_s: float       # bytes-bound (the curve, or roofline + combine)
    stream_s: float          # the most bytes one CTA reads, at the per-CTA rate
    combine_s: float
    s: float                 # max(bandwidth_s, stream_s + combine_s)
    combine_in_bandwidth: bool = False      # bandwidth_s is a roofline with combine_s added

    @property
    def bound(self) -> str:
        return "CTAs" if self.stream_s + self.combine_s > self.bandwidth_s else "bandwidth"


def price(grid: Grid, shape: Shape, bandwidth_s: float, cta_bytes_per_s: float, combine_s: float,
          curve_holds_combine: bool) -> Terms:
    """The module doc's price: max(bandwidth-bound, one CTA's share at the per-CTA rate + the combine).
    `bandwidth_s` is the kernel's curve time (its measured times hold the combine: `curve_holds_combine`)
    or its roofline over the KV bytes (the combine is added to it)."""
    bw = bandwidth_s + (0.0 if curve_holds_combine else combine_s)
    stream = grid.tokens * shape.token_bytes / cta_bytes_per_s
    return Terms(bw, stream, combine_s, max(bw, stream + combine_s), not curve_holds_combine)


def combine_s(grid: Grid, profile, cta_bytes_per_s: float) -> float:
    """Seconds of the kernels beside the main one: the split's combine, where a separate kernel reads the partials and writes the bf16/fp16
    output at the profile's memory roofline, at least one kernel's device floor (launch_s graph); XQA's
    in-kernel merge is a semaphore memset node (a floor) and the last CTA's read of the partials at the
    per-CTA rate; plus a device floor for each other kernel (FA3's in-call prepare)."""
    floor = profile.launch_s["graph"]
    others = (grid.extra_kernels - (1 if grid.combine else 0)) * floor     # FA3's prepare kernel: a floor
    if grid.combine == "kernel":
        return others + max(roofline_s(profile, [Work(0.0, grid.combine_bytes, 1)], "fp32"), floor)
    if grid.combine == "in-kernel":
        return others + floor + grid.combine_bytes / cta_bytes_per_s
    return others


def describe(op, cost, graphs: bool) -> list[str]:
    """Lines for `tpsim show` and bench/breakdown.py, each starting "decode attention: " (one-line prose,
    kept whole to be greppable): the decode attention's kernel, grid and split, and its priced limits on
    `cost`'s profile (a CostModel); what is said instead where there is no grid."""
    a = dict(op.attrs)
    if op.kind != "attention" or a["q_len"] != 1:
        return []
    head = f"{PREFIX}{op.name}, kv_len {a['kv_len']}, {a['heads']}/{a['kv_heads']} heads per rank:"
    if a["impl"] == "math":
        return [f"{head} math SDPA, bmm + softmax + bmm over the cache (no split-KV kernel; priced by the kernels' "
                f"FLOPs and bytes)"]
    if cost.profile.device != "cuda":
        return [f"{head} {a['impl']} on a CPU device: no GPU grid"]
    got = cost.decode_attention(op, graphs)
    if got is None:
        return [f"{head} {a['impl']}; profile {cost.profile.name} has no compute.decode_attention (SM count, "
                f"per-CTA rate): priced by its bytes alone"]
    grid, t = got
    spec = cost.profile.decode_attention
    per_cta = grid.tokens * shape_of(op).token_bytes
    return [f"{head} {grid.describe()}",
            f"{PREFIX}priced {t.s * 1e6:.1f} us = max(bandwidth {t.bandwidth_s * 1e6:.1f} us, one CTA's "
            f"{per_cta / 1024:.0f} KiB at {spec.cta_bytes_per_s / 1e9:g} GB/s {t.stream_s * 1e6:.1f} us + combine "
            f"{t.combine_s * 1e6:.1f} us): {t.bound}-bound on {spec.sms} SMs" + (" (CUDA graph)" if graphs else "")]


PREFIX = "decode attention: "
