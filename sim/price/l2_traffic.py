"""A generated kernel's time with the bytes it moves through L2, not only from DRAM.

Inductor's byte estimate for a kernel (sim/price/fusion.py, Kernel.bytes) counts each buffer once:
min(elements accessed, buffer size). That is the DRAM traffic. Decode attention on the GPU path
reaches the unexpanded KV cache through index arithmetic (`bh // G`, the repeat_interleave GQA
expand is never materialized), so each of the G query heads of a KV head loads that head's K / V
rows again: G x (K + V) bytes pass from L2 to the SMs (the table marks those reads `passes: G`,
hw/derive/inductor_gpu.py mark_rereads). A kernel costs

    max(DRAM bytes / (HBM bandwidth x the profile's memory efficiency),
        L2 bytes / L2 bandwidth)

with L2 bytes = sum over buffers of passes x bytes x sector waste. Sector waste: L2 hands out 32 B
sectors, so a program that reads `run_bytes` < 32 contiguous bytes of a row pays a whole sector
(waste 32 / run_bytes); a buffer without `run_bytes` is read in whole sectors (the reference's
K / V rows are 128 fp16 = 256 B contiguous, and q@k^T reduces along them).

L2 bandwidth (L2 -> SM, data sets that fit in L2) is a property of the GPU, so it sits in the
profile beside the HBM rate: `compute.l2` (L2Spec, parsed by sim/hardware/l2_section.py; docs/profile-format.md).
The built-ins' numbers (tools/derive_profiles/l2.py writes them, each with its source) are from
te42kyfo/gpu-benches `gpu-l2-cache` (commit 1c36d509, result files gpu-l2-cache/*.txt, mean
"Eff. bw" over the 4-30 MB data sets): H200 10.03 TB/s (h200.txt; the H100 SXM has the same GH100
configuration: 132 SMs, 50 MB L2, same boost clock, so h100-sxm takes it too), A100 80 GB 5.33 TB/s,
L40 5.21 TB/s (l40.txt; the L40S has the L40's AD102 configuration: 142 SMs, 96 MB L2, the same
GDDR6, so l40s-pcie takes it) (and H100 PCIe 6.99 TB/s, 114 SMs, for a profile of that board). A
profile without `compute.l2` (a calibrated profile of a GPU with no built-in) prices the DRAM term
only, and predict says so in a note. Unsourced: what partial sectors, L1 hits between the G re-reads of one program, and
the tile shapes that coordinate-descent tuning picks at the first launch on a GPU do to the
achieved rate.

Sequential sweeps (passes "b": a generated reduction that reads a weight once per batch row). Its
grid is batch-major (x1 = xindex // hidden the batch row, x0 = xindex % hidden the output column, in
the Triton code Inductor emits for such a reduction), so the b reads of the weight are b whole
sweeps one after another, not re-reads interleaved with the first DRAM stream as the GQA ones are (`bh // G`: the G heads of a KV head are
neighbouring programs). The first sweep is the kernel's DRAM time; each further sweep adds its
bytes at the rate a repeated sweep of that many bytes gets: from L2 while the buffer fits, from
DRAM once it does not. That rate is the same benchmark's (gpu-l2-cache: every block sweeps the data
set repeatedly) transition from its L2 plateau to its DRAM plateau, read as an L2 hit fraction
f = (1/bw - 1/bw_dram) / (1/bw_l2 - 1/bw_dram) at each measured data set (the profile's
`compute.l2.sweep`: kB, GB/s and the DRAM plateau), the misses priced at this profile's own DRAM
rate. h200.txt stands for h100-sxm (both 50 MB of L2 on a GH100). Unsourced: how far consecutive
sweeps overlap (the CTAs of sweep j+1 start while the last of sweep j still run; their share
depends on the block size coordinate descent keeps): none is assumed, an upper bound of the time by
at most one resident wave per sweep. No kernel of the shipped tables has such a buffer: the one that
did, the reference's wo at batch > 1, came from a plain make_fx trace (a bmm over the expanded
weight); traced as torch.compile sees views (hw/derive/fake_views.py) it is one extern mm.
"""
from __future__ import annotations

from tpsim.sim.hardware.schema import L2Spec

SECTOR_BYTES = 32

SEQUENTIAL_PASSES = frozenset({"b"})    # re-reads that sweep the whole buffer again (module doc)


def l2_hit_fraction(l2: L2Spec | None, nbytes: float) -> float | None:
    """Share of a repeated sweep over `nbytes` that L2 serves (module doc): 1 below the benchmark's
    transition, 0 beyond it, in between from the measured rate (linear in the data set between
    rows). None where the profile has no L2 rate or no sweep curve."""
    if l2 is None or not l2.sweep:
        return None
    rows, dram = l2.sweep, l2.sweep_dram_gbps
    kb = nbytes / 1024.0
    if kb <= rows[0][0]:
        return 1.0
    if kb >= rows[-1][0]:
        return 0.0
    i = next(j for j in range(1, len(rows)) if kb <= rows[j][0])
    (x0, y0), (x1, y1) = rows[i - 1], rows[i]
    bw = y0 + (kb - x0) / (x1 - x0) * (y1 - y0)
    f = (1.0 / bw - 1.0 / dram) / (1.0e9 / l2.bytes_per_s - 1.0 / dram)
    return min(1.0, max(0.0, f))


def resweep_s(nbytes: float, extra: float, hit: float, l2_bw: float, dram_bytes_per_s: float) -> float:
    """Time of `extra` further sweeps over a buffer of `nbytes` after the first (sequential passes):
    the hit share from L2, the rest from DRAM at the given rate."""
    return extra * nbytes * (hit / l2_bw + (1.0 - hit) / dram_bytes_per_s)


def sector_waste(run_bytes: float | None) -> float:
    """Bytes moved per useful byte when each program reads `run_bytes` contiguous bytes of a row."""
    if not run_bytes or run_bytes >= SECTOR_BYTES:
        return 1.0
    return SECTOR_BYTES / run_bytes


def l2_bytes(buffers, nbytes_of, passes_of) -> float:
    """L2 -> SM bytes of one kernel: each buffer's bytes (nbytes_of(b)) x its passes x sector waste."""
    return sum(nbytes_of(b) * passes_of(b) * sector_waste(getattr(b, "run_bytes", None)) for b in buffers)


def kernel_s(dram_s: float, l2_traffic_bytes: float, l2_bw: float | None) -> float:
    """A generated kernel's time: its DRAM time, or its L2 time when that is longer."""
    if not l2_bw or l2_traffic_bytes <= 0:
        return dram_s
    return max(dram_s, l2_traffic_bytes / l2_bw)


def has_symbol(numel: str, sym: str) -> bool:
    """Whether a table buffer's element count (a product of symbols, "2*b*L*kvh*dh") has `sym`."""
    return sym in numel.split("*")


def mark_rereads(k: dict) -> dict:
    """Mark (in place, in the tables' JSON form) the loads a generated kernel repeats through L2
    (Inductor's byte estimate, min(accessed, buffer size), counts each buffer once):
    * GQA through index arithmetic: a kernel that reads a KV-cache-shaped buffer (L, kvh and dh in
      its count, no G: the unexpanded static cache) and writes per query head (G in an output's
      count) loads each K / V row once per query head of the group (`bh // G`): passes "G".
    * A reduction with one row per batch row over a weight (hidden and dh or ffn in its count, no
      b) while writing per batch row: the weight once per batch row, passes "b"."""
    if k["kind"] != "generated":
        return k
    outs = [b["numel"] for b in k["buffers"] if b["mode"] == "write"]
    for b in k["buffers"]:
        n = b["numel"]
        if b["mode"] != "read":
            continue
        if (any(has_symbol(o, "G") for o in outs) and all(has_symbol(n, s) for s in ("L", "kvh", "dh"))
                and not has_symbol(n, "G")):
            b["passes"] = "G"
        elif (any(has_symbol(o, "b") for o in outs) and has_symbol(n, "hidden") and not has_symbol(n, "b")
              and (has_symbol(n, "dh") or has_symbol(n, "ffn"))):
            b["passes"] = "b"
    return k
