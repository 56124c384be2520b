"""The GPU table's `splits` section: what Inductor launches at the real decode shapes beyond its probe.

Written into sim/compiled_kernels_gpu.json beside the layers hw/derive/inductor_gpu.py derives.

The GPU table (hw/derive/inductor_gpu.py) is derived at a probe whose sizes are distinct primes, so every
buffer's size factors into named symbols. Inductor's size-dependent decisions then never fire
there. This module compiles the reference's decode step (same path, same flags, hw.derive.inductor_gpu
compile_decode) at every per-rank decode shape of the built-in models (TP 1-16, batch 1/4/16/64,
cache 1536), reads from each step's launches what splits (`pv_splits`, `norm_splits`: a reduction
over rows x N then a persistent one over (rows, N), ir.Reduction.num_splits), and counts the
launches beyond the probe's and the p@v combines (`other_launches`). sim/price/fusion.py prices what it
finds (Kernel.when; docs/compiled-stack-reference.md); tests/test_gpu_decode.py pins the classes.

Run: python -m tpsim.hw.derive.inductor_splits [--out sim/compiled_kernels_gpu.json]   (about 15 min on 2
     cores; writes only the `splits` section; with the reference's torch 2.5.1 for the shipped table)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import torch

from tpsim.fileio.policy import write_json_atomic
from tpsim.sim.model.presets import MODELS

from tpsim.hw.derive.inductor_gpu import (LAYERS, VARIANTS, call_launches, compile_decode, probe_shapes,
                                          real_shapes)
from tpsim.hw.derive.inductor_probe import PROBE

SPLIT_CACHE = 1536      # the reference workload's static cache: prompt 1024 + 512 generated
SPLIT_BATCHES = (1, 4, 16, 64)
SPLIT_TPS = (1, 2, 4, 8, 16)


def launch_numels(code: str) -> list[tuple[str, tuple[int, ...]]]:
    """call()'s Triton launches in order (hw.derive.inductor_gpu.call_launches): (kernel, its numel arguments,
    the integers before grid=: xnumel[, rnumel])."""
    out = []
    for name, args in call_launches(code):
        if not name.startswith("triton_"):
            continue
        ints = []
        for a in reversed([a.strip() for a in args.split("grid=")[0].split(",") if a.strip()]):
            if not a.isdigit():
                break
            ints.append(int(a))
        out.append((name, tuple(reversed(ints))))
    return out


def pv_splits(launches: list[tuple[str, tuple[int, ...]]], outputs: int) -> int:
    """How many parts Inductor splits p@v's reduction over the cache into, read from one decode step's
    launches (`launch_numels`): p@v is the launch after layer 1's softmax. Its xnumel is the outputs
    [b, heads, 1, D] (one kernel: 1) or outputs x S (a split: the partial sums), and then the next launch
    is the combine, xnumel = outputs and rnumel = S (ir.Reduction.num_splits, the OUTER case; torch 2.5.1
    at 70B TP8 batch 4: 12 parts of 128 cache rows, then a persistent reduction over the 12)."""
    soft = [i for i, (n, _) in enumerate(launches) if "softmax" in n]
    if len(soft) < 2:
        raise RuntimeError(f"expected a softmax launch per layer, found {len(soft)}")
    i = soft[1] + 1                      # layer 1 (the kept layer has a neighbour on each side)
    (_, pv), (_, nxt) = launches[i], launches[i + 1]
    if pv[0] == outputs:
        return 1
    if pv[0] % outputs == 0 and nxt[:2] == (outputs, pv[0] // outputs):
        return pv[0] // outputs
    raise RuntimeError(f"p@v launch {launches[i]} then {launches[i + 1]}: neither one kernel over the "
                       f"{outputs} outputs nor a split and its combine")


def norm_splits(launches: list[tuple[str, tuple[int, ...]]]) -> int:
    """How many parts Inductor splits an RMSNorm's reduction over the hidden size into, read from one
    decode step's launches: a split is a mean-of-squares reduction over rows x N then a persistent
    one over (rows, N) (ir.Reduction.num_splits, the INNER case: more than 8192 columns over fewer
    than 2 x SMs rows; torch 2.5.1 at 405B TP16 batch 64: (128, 8192) then (64, 2)). 1: no norm of
    the step splits. Every split norm of the step must agree."""
    parts = {a[0] // b[0] for (n, a), (m, b) in zip(launches, launches[1:])
             if "mean" in n and n.startswith("triton_red_") and "mean" in m and m.startswith("triton_per_")
             and len(a) == 2 and len(b) == 2 and b[0] * b[1] == a[0]}
    if len(parts) > 1:
        raise RuntimeError(f"norms split in different part counts: {sorted(parts)}")
    return parts.pop() if parts else 1


def split_grid() -> dict[tuple[int, int, int, int, int], tuple[str, int, int]]:
    """(batch, heads, kv_heads, head_dim, hidden) per rank -> the first (model, tp, batch) of the
    built-in models (toys left out) at TP 1-16 and the reference batches that has it: the shapes a
    decode step at the protocol's sizes can take (hidden: the norms' reduction)."""
    grid: dict = {}
    for name, m in MODELS.items():
        if name == "tiny" or name.startswith("toy-"):
            continue
        for tp in SPLIT_TPS:
            try:
                s = m.shard(tp)
            except ValueError:
                continue
            for b in SPLIT_BATCHES:
                grid.setdefault((b, s.heads, s.kv_heads, s.head_dim, s.hidden), (name, tp, b))
    return grid


def probe_launches(batch: int) -> int:
    """Triton launches of the prime probe's decode step (LAYERS layers) at `batch` (1: decode-m1)."""
    return len(launch_numels(compile_decode(probe_shapes(batch), False, dict(PROBE, b=batch)).code))


def derive_splits(progress=print, grid: dict | None = None) -> dict:
    """The table's `splits` section: p@v's split count at each attention shape of `grid`
    (split_grid()), from Inductor's own output code for the reference's decode step (upper-bound graph:
    the attention is the same in the dense one), at the cache SPLIT_CACHE."""
    grid = split_grid() if grid is None else grid
    probe = {v: probe_launches(b) for v, b in VARIANTS.items()}
    rows = []
    for i, ((b, h, kvh, d, hidden), (model, tp, _)) in enumerate(sorted(grid.items())):
        t0 = time.perf_counter()
        shapes = dataclasses.replace(real_shapes(model, tp, b), seq=SPLIT_CACHE)
        launches = launch_numels(compile_decode(shapes, False).code)
        s, ns = pv_splits(launches, b * h * d), norm_splits(launches)
        # every launch the probe's step lacks beyond the p@v combines (one a layer): what the table misses
        other = len(launches) - probe["decode-m1" if b == 1 else "decode"] - (LAYERS if s > 1 else 0)
        rows.append({"b": b, "heads": h, "kv_heads": kvh, "head_dim": d, "hidden": hidden, "pv_splits": s,
                     "norm_splits": ns, "other_launches": other, "at": f"{model}:{tp}"})
        progress(f"[{i + 1}/{len(grid)}] {model} TP{tp} batch {b}: heads {h}/{kvh}, D {d}, hidden {hidden}: "
                 f"p@v in {s} part{'s' if s > 1 else ''}, norms in {ns}, {other} other launches "
                 f"({time.perf_counter() - t0:.0f} s)")
    return {"what": "p@v's split reduction (attn.sdpa) at the real per-rank attention shapes: Inductor splits "
                    "a long reduction over few outputs into pv_splits partial sums plus a combine kernel "
                    "(ir.Reduction.num_splits); the prime probe's sizes never split, so the table's p@v is one "
                    "kernel and `combine` runs where pv_splits > 1",
            "other_launches": f"Triton launches of the real shapes' {LAYERS}-layer decode step beyond the prime "
                              "probe's and the p@v combines: what the table does not price (a norm over more "
                              "than 8192 columns split the same way: docs/compiled-stack.md)",
            "command": "python -m tpsim.hw.derive.inductor_splits",
            "torch": torch.__version__, "cache": SPLIT_CACHE, "probe_launches": probe,
            "combine": COMBINE, "norm": NORM_SPLIT, "shapes": rows}


# The combine kernel of a split p@v (a persistent reduction over the pv_splits fp32 partial sums of
# each output [b, heads, 1, D]), in the table's kernel form; `when`: it launches where pv_splits > 1.
# The first stage is the table's p@v kernel, whose output then is pv_splits fp32 partials per output
# instead of one fp16 value: 4 S - 2 bytes more per output, not added (at 70B TP8 batch 4, 192 KB:
# 0.06 us at the HBM rate, against the combine's launch floor)
COMBINE = {"role": "attn.sdpa", "kind": "generated", "kernel": "p@v split: combine (triton_per_fused__to_copy_bmm)",
           "fuses": [], "when": "pv_splits",
           "buffers": [{"mode": "read", "buffer": "partials", "dtype": "float32", "numel": "pv_splits*2*b*kvh*G*dh"},
                       {"mode": "write", "buffer": "out", "dtype": "float16", "numel": "2*b*kvh*G*dh"}],
           "triton": {"heuristic": "persistent_reduction", "reduction_hint": "OUTER"}}


# A split norm (ir.Reduction.num_splits, INNER: more than 8192 columns over few rows), in the table's
# kernel form, each charged to the norm op's role (sim/price/fusion.py gpu_overlay) and launched where
# norm_splits > 1: the combine of the partial sums of squares into each row's statistic, and the
# apply, which reads the norm's input rows and weight again (at 405B TP16 batch 64: (64, 2), then a
# pointwise kernel over the 64 x 16384 rows). The table's norm kernel stands for the first stage: it
# reads the inputs and writes what the apply writes, so the apply carries only its reads.
NORM_SPLIT = [
    {"role": "", "kind": "generated", "kernel": "norm split: combine (triton_per_fused_..._mean_mul)", "fuses": [],
     "when": "norm_splits",
     "buffers": [{"mode": "read", "buffer": "partials", "dtype": "float32", "numel": "norm_splits*nrows"},
                 {"mode": "write", "buffer": "rstd", "dtype": "float32", "numel": "nrows"}],
     "triton": {"heuristic": "persistent_reduction", "reduction_hint": "INNER"}},
    {"role": "", "kind": "generated", "kernel": "norm split: apply (triton_poi_fused_..._mean_mul_rsqrt)", "fuses": [],
     "when": "norm_splits",
     "buffers": [{"mode": "read", "buffer": "x", "dtype": "float16", "numel": "nrows*hidden"},
                 {"mode": "read", "buffer": "weight", "dtype": "float16", "numel": "hidden"},
                 {"mode": "read", "buffer": "rstd", "dtype": "float32", "numel": "nrows"}],
     "triton": {"heuristic": "pointwise", "reduction_hint": ""}},
]


def write_splits(path: str, splits: dict) -> None:
    """Replace the `splits` section of the table at `path`, the rest as it is."""
    with open(path) as f:
        doc = json.load(f)
    doc["splits"] = splits
    write_json_atomic(path, doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "sim", "price", "compiled_kernels_gpu.json"),
                    help="the GPU table whose `splits` section to replace (the rest is kept)")
    a = ap.parse_args(argv)
    write_splits(a.out, derive_splits(lambda s: print(s, file=sys.stderr, flush=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
