"""A generated kernel's time with the bytes it moves through L2, not only from DRAM.

Inductor's byte estimate for a kernel (sim/fusion.py, Kernel.bytes) counts each buffer once:
min(elements accessed, buffer size). That is the DRAM traffic. Decode attention on the GPU path
reaches the unexpanded KV cache through index arithmetic (`bh // G`, the repeat_interleave GQA
expand is never materialized), so each of the G query heads of a KV head loads that head's K / V
rows again: G x (K + V) bytes pass from L2 to the SMs (the table marks those reads `passes: G`,
hw/inductor_gpu.py mark_rereads). A kernel costs

    max(DRAM bytes / (HBM bandwidth x the profile's memory efficiency),
        L2 bytes / L2 bandwidth)

with L2 bytes = sum over buffers of passes x bytes x sector waste. Sector waste: L2 hands out 32 B
sectors, so a program that reads `run_bytes` < 32 contiguous bytes of a row pays a whole sector
(waste 32 / run_bytes); a buffer without `run_bytes` is read in whole sectors (the reference's
K / V rows are 128 fp16 = 256 B contiguous, and q@k^T reduces along them).

L2 bandwidth (L2 -> SM, data sets that fit in L2), from te42kyfo/gpu-benches `gpu-l2-cache`
(commit 1c36d509, result files gpu-l2-cache/*.txt, mean "Eff. bw" over the 4-30 MB data sets):
H200 10.03 TB/s (h200.txt; the H100 SXM has the same GH100 configuration: 132 SMs, 50 MB L2,
same boost clock, so h100-sxm takes it too), H100 PCIe 6.99 TB/s (114 SMs), A100 80 GB 5.33 TB/s.
Unsourced here, so left out (DRAM term only): L40S and every calibrated profile; and what
partial sectors, L1 hits between the G re-reads of one program, and the tile shapes that
coordinate-descent tuning picks at the first launch on a GPU do to the achieved rate.
"""
from __future__ import annotations

SECTOR_BYTES = 32

REFERENCE_WO = "reference wo: bmm over the expanded weight -> generated reduction"

# profile name (before any "-p2p-off" style suffix) -> L2 -> SM bytes/s (module doc)
L2_BYTES_PER_S = {"h100-sxm": 10.03e12, "h200-sxm": 10.03e12, "h100-pcie": 6.99e12, "a100-sxm": 5.33e12}


def l2_bytes_per_s(profile_name: str) -> float | None:
    """The sourced L2 bandwidth of a built-in profile (None: not sourced, no L2 term)."""
    for name, bw in L2_BYTES_PER_S.items():
        if profile_name == name or profile_name.startswith(name + "-"):
            return bw
    return None


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


def _has(numel: str, sym: str) -> bool:
    return sym in numel.split("*")


def mark_rereads(k: dict) -> dict:
    """Mark (in place, in the tables' JSON form) the loads a generated kernel repeats through L2
    (Inductor's byte estimate, min(accessed, buffer size), counts each buffer once):
    * GQA through index arithmetic: a kernel that reads a KV-cache-shaped buffer (L, kvh and dh in
      its count, no G: the unexpanded static cache) and writes per query head (G in an output's
      count) loads each K / V row once per query head of the group (`bh // G`): passes "G".
    * A reduction with one row per batch row over a weight (hidden and dh or ffn in its count, no
      b) while writing per batch row: the weight once per batch row, passes "b" (the reference's wo
      at batch > 1, below)."""
    if k["kind"] != "generated":
        return k
    outs = [b["numel"] for b in k["buffers"] if b["mode"] == "write"]
    for b in k["buffers"]:
        n = b["numel"]
        if b["mode"] != "read":
            continue
        if any(_has(o, "G") for o in outs) and all(_has(n, s) for s in ("L", "kvh", "dh")) and not _has(n, "G"):
            b["passes"] = "G"
        elif (any(_has(o, "b") for o in outs) and _has(n, "hidden") and not _has(n, "b")
              and (_has(n, "dh") or _has(n, "ffn"))):
            b["passes"] = "b"
    return k


def reference_wo(k: dict) -> dict:
    """The CPU-derived table's extern wo matmul as the reference harness's GPU path runs it at
    batch > 1 (hw/inductor_gpu.py derives it): the attention output reaches wo as [b, 1, H*D] with
    a stride matmul cannot fold, so F.linear is a bmm over the weight expanded b times, which
    Inductor's bmm decomposition (one row per batch) turns into a generated reduction reading the
    weight once per batch row. Returns a new kernel dict (generated, weight passes "b")."""
    out = dict(k, kind="generated", kernel=f"{k['kernel']} ({REFERENCE_WO})",
               buffers=[dict(b) for b in k["buffers"]])
    return mark_rereads(out)
