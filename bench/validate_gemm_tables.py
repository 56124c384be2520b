"""The decode GEMM prices of h100-sxm against public measurements. Validation
only: nothing here sets a constant.

Three checks, each a table (source, shape, m, public us, priced us, ratio public / priced):

1. cuBLAS fp16 F.linear at m = 1..16 on an H100, published as the `torch-w16a16` baseline of the
   Humming weight-only kernels (TFLOPS of a dense n = k = 8192 problem):
   - inclusionAI/humming#2 description (mgoin, 2026-03-24; "Device: H100", float16):
     m 1, 2, 4: 2.30, 4.63, 9.26 TFLOPS;
   - the same thread (jinzhen-lin, 2026-03-30) and vllm-project/vllm#34556, same table:
     m 1, 2, 4, 8, 16: 2.68, 5.32, 10.63, 21.23, 42.09 TFLOPS.
   time = 2 m n k / TFLOPS. Priced: the profile's gemm table row (n 8192, k 8192).
2. aiconfigurator's other H100 SXM collections of the same torch linear (bf16; systems/data/
   h100_sxm/gemm/{sglang/0.5.6.post2 'sglang', trtllm/1.3.0rc20 'torch_flow', vllm/0.24.0
   'torch.nn.functional.linear'}) at the 70B-TP8 and 8B-TP1 decode shapes they collected, m 1, 4,
   16, 64 (needs the unpacked aiconfigurator data: --aic DIR; skipped when absent). Priced: the
   profile's table, which is the sglang 0.5.14 collection.
3. The batch-1 GEMV (Inductor's generated mul + sum reduction, priced by bytes at the profile's
   memory curve, a curve derived from cuBLAS rows) against Triton streaming kernels measured on an
   H100 80GB HBM3: pytorch/ao benchmarks/prototype/blockwise_fp8_training/README.md (captured
   2026-03-20; kernel_us and effective_logical_io_gbps per kernel and shape). Priced: the same
   bytes at mem_bw x memory_efficiency(bytes).
4. Which table rows were timed with their weights warm in L2 (an audit, no public time): the table's
   collector (ai-dynamo/aiconfigurator collector/sglang/collect_gemm.py at e23be5a79, the commit that
   collected sglang 0.5.14) times `outside_loop_count` = min(6, 0.45 x GPU memory // (2mk + 2mn + 2nk))
   copies of (a, w) one after another in a replayed CUDA graph and divides by the copies, so each
   weight is swept again after the other copies' bytes (tools/derive_profiles/aic_collector.py); the
   share of such a repeated sweep that L2 serves is the profile's `compute.l2.sweep` (te42kyfo/gpu-benches
   gpu-l2-cache, l2_hit_fraction).
   In a decode step every layer's weight is read once, after the rest of the model: cold. Rows with a
   hit share above 0 price those linears as they ran warm. A bound from the table itself: the rows
   run by the same cuBLAS grid (sim/hardware/gemm_grids.py cublas-sm90, ceil(n / 64) CTAs at m <= 64)
   that rotated cold (share <= curves.COLD_SHARE, the memory curve's rule) give a line t = a + W / rate through their (weight bytes, time);
   a warm row under that line ran that much faster than a cold one of its grid would (a line, not a
   measurement: how the time bends toward small weights is unsourced). bench/gpu_kernels.py linear's
   `graph_aic_us` (this rotation) against `graph_cold_us` settles it on a GPU.

    python bench/validate_gemm_tables.py [--aic /work/aic/core/aiconfigurator_core/systems/data]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "derive_profiles"))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

import aic_collector  # noqa: E402  (how the GEMM table's rows were timed: one definition)
from curves import COLD_SHARE  # noqa: E402  (what "ran cold" means, as the memory curve reads it)

from tpsim.sim.price.cost import CostModel  # noqa: E402
from tpsim.sim.price.l2_traffic import l2_hit_fraction  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.hardware.gemm_grids import gemm_tile  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.schedule.language import Op  # noqa: E402
from tpsim.sim.stack.spec import Stack  # noqa: E402

# (source, n, k, {m: TFLOPS}) -- check 1 (module doc)
HUMMING = [
    ("humming#2 (mgoin)", 8192, 8192, {1: 2.30, 2: 4.63, 4: 9.26}),
    ("humming#2 / vllm#34556", 8192, 8192, {1: 2.68, 2: 5.32, 4: 10.63, 8: 21.23, 16: 42.09}),
]

# check 2: the decode linears of the two reference shapes, (n, k) per rank (sim/model/presets.py shard)
DECODE_SHAPES = {"70B TP8": {"qkv": (1280, 8192), "wo": (8192, 1024), "w13": (7168, 8192), "w2": (8192, 3584)},
                 "8B TP1": {"qkv": (6144, 4096), "wo": (4096, 4096), "w13": (28672, 4096), "w2": (4096, 14336)}}
AIC_OTHERS = [("sglang/0.5.6.post2", "sglang"), ("trtllm/1.3.0rc20", "torch_flow"),
              ("vllm/0.24.0", "torch.nn.functional.linear")]
DECODE_M = (1, 4, 16, 64)

# check 3: pytorch/ao blockwise_fp8_training README, H100 80GB HBM3: (kernel, shape, kernel_us, GB/s)
TORCHAO_TRITON = [
    ("act_quant_transposed_lhs", "32768x4096", 154.46, 2633.9), ("weight_quant_transposed_rhs", "32768x4096", 150.53, 2675.2),
    ("act_quant_lhs", "32768x4096", 150.86, 2696.8), ("act_quant_rhs", "32768x4096", 148.70, 2736.0),
    ("weight_quant_rhs", "32768x4096", 144.99, 2777.3), ("weight_quant_transposed_rhs", "131072x4096", 581.89, 2768.1),
    ("act_quant_lhs", "131072x4096", 586.98, 2772.5), ("act_quant_transposed_lhs", "131072x4096", 581.47, 2798.7),
    ("act_quant_rhs", "131072x4096", 562.56, 2892.8), ("weight_quant_rhs", "131072x4096", 555.30, 2900.7),
]


def _gemm(m: int, n: int, k: int) -> Op:
    return Op("g", "gemm", ("x",), ("y",), (("m", m), ("n", n), ("k", k)), "fp16")


def table_us(cost: CostModel, m: int, n: int, k: int) -> float:
    """The profile's price of an extern fp16 GEMM, device time (the table row or its interpolation)."""
    return cost._measured(_gemm(m, n, k), True) * 1e6


def humming_rows(cost: CostModel) -> list[tuple]:
    """(source, shape, m, public us, priced us) of check 1; public us = 2 m n k / TFLOPS."""
    return [(src, f"{n}x{k}", m, 2.0 * m * n * k / (tf * 1e12) * 1e6, table_us(cost, m, n, k))
            for src, n, k, pts in HUMMING for m, tf in pts.items()]


def aic_rows(cost: CostModel, data: Path) -> list[tuple]:
    import pandas as pd                         # lazy: optional, only with the aiconfigurator data

    out = []
    for rel, kernel in AIC_OTHERS:
        f = data / "h100_sxm" / "gemm" / rel / "gemm_perf.parquet"
        if not f.exists():
            continue
        d = pd.read_parquet(f)
        d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
        t = d.groupby(["m", "n", "k"]).latency.first()
        for model, shapes in DECODE_SHAPES.items():
            for name, (n, k) in shapes.items():
                for m in DECODE_M:
                    if (m, n, k) in t.index:
                        out.append((f"aic {rel}", f"{model} {name} {n}x{k}", m, float(t[(m, n, k)]) * 1e3,
                                    table_us(cost, m, n, k)))
    return out


def triton_rows(profile) -> list[tuple]:
    """(source, shape, bytes, public us, priced us) of check 3."""
    out = []
    for kernel, shape, us, gbps in TORCHAO_TRITON:
        nbytes = gbps * 1e9 * us * 1e-6
        priced = nbytes / (profile.mem_bytes_per_s * profile.memory_efficiency(nbytes)) * 1e6
        out.append((f"torchao {kernel}", shape, nbytes, us, priced))
    return out


# check 4: the decode linears of these (model, TP), one rank's weight [n, k] (sim/model/presets.py shard)
WARM_CASES = [("llama-3.1-8b", 1), ("llama-3.1-8b", 8), ("llama-3.1-70b", 8), ("llama-3.2-1b", 8),
              ("llama-3.2-3b", 8), ("qwen2.5-7b", 4)]


def rotation_hit(profile, m: int, n: int, k: int) -> tuple[int, float, float | None]:
    """(copies, rotation bytes, L2 hit share of its repeated sweep) of one table row (check 4)."""
    rotation = aic_collector.rotation_bytes(m, n, k, profile.memory_gib)
    return aic_collector.copies(m, n, k, profile.memory_gib), rotation, l2_hit_fraction(profile.l2, rotation)


def cold_lines(profile, m: int) -> dict[int, tuple[float, float, float]]:
    """CTAs -> (a s, s per weight byte, rms residual s) of the least-squares line t = a + W x slope
    through the table's rows at `m` that rotated cold (share <= COLD_SHARE), per cuBLAS grid size (at least
    2 weight sizes)."""
    pts: dict[int, list[tuple[float, float]]] = {}
    for t in profile.gemm_tables:
        if m not in t.m:
            continue
        for n, k, times, *_ in t.rows:
            hit = rotation_hit(profile, m, n, k)[2]
            if hit is not None and hit <= COLD_SHARE:
                pts.setdefault(gemm_tile("cublas-sm90", m).ctas(m, n), []).append((n * k * 2.0, times[t.m.index(m)]))
    lines = {}
    for ctas, xy in pts.items():
        if len({x for x, _ in xy}) < 2:
            continue
        mx, my = statistics.fmean(x for x, _ in xy), statistics.fmean(y for _, y in xy)
        slope = sum((x - mx) * (y - my) for x, y in xy) / sum((x - mx) ** 2 for x, _ in xy)
        a = my - slope * mx
        lines[ctas] = (a, slope, math.sqrt(statistics.fmean((y - a - slope * x) ** 2 for x, y in xy)))
    return lines


def warm_rows(profile, cost: CostModel, m: int = 4) -> list[tuple]:
    """(case, linear, n x k, weight MB, copies, rotation MB, L2 hit share, table us, cold-line us or None,
    that line's rms residual us or None) of check 4."""
    out, lines = [], cold_lines(profile, m)
    for model, tp in WARM_CASES:
        s = get_model(model).shard(tp)
        for name, (n, k) in {"qkv": (s.qkv_dim, s.hidden), "wo": (s.hidden, s.q_dim),
                             "w13": (2 * s.ffn, s.hidden), "w2": (s.hidden, s.ffn)}.items():
            c, rotation, hit = rotation_hit(profile, m, n, k)
            line = lines.get(gemm_tile("cublas-sm90", m).ctas(m, n))
            out.append((f"{model} TP{tp}", name, f"{n}x{k}", n * k * 2 / 1e6, c, rotation / 1e6,
                        hit, table_us(cost, m, n, k), (line[0] + line[1] * n * k * 2) * 1e6 if line else None,
                        line[2] * 1e6 if line else None))
    return out


def _print_warm(rows: list[tuple], m: int) -> None:
    print(f"4. table rows timed with the weight warm in L2 (aiconfigurator's rotation; m = {m}; audit, no public time)")
    print(f"  {'case':20s} {'linear':6s} {'n x k':12s} {'weight MB':>9s} {'copies':>6s} {'rotation MB':>11s} "
          f"{'L2 share':>8s} {'table us':>8s} {'cold line':>9s}")
    for case, name, shape, w_mb, c, rot_mb, hit, us, cold, _ in rows:
        share = "-" if hit is None else f"{hit:.2f}"
        line = "-" if cold is None else f"{cold:.2f}"
        print(f"  {case:20s} {name:6s} {shape:12s} {w_mb:9.1f} {c:6d} {rot_mb:11.1f} {share:>8s} {us:8.2f} {line:>9s}")
    warm = [r for r in rows if r[6]]
    under = [r[8] - r[7] for r in warm if r[8] is not None]
    print(f"  {len(warm)} of {len(rows)} linears were timed with an L2 hit share above 0 "
          f"(largest weight among them {max((r[3] for r in warm), default=0):.1f} MB)"
          + (f"; the cold line of their grid lies {min(under):.2f} to {max(under):.2f} us above them "
             f"(median {statistics.median(under):.2f}), where the cold rows themselves scatter about those "
             f"lines by {statistics.median(r[9] for r in warm if r[9] is not None):.2f} us rms (median)"
             if under else ""))


def _print(title: str, rows: list[tuple], xname: str) -> None:
    print(title)
    print(f"  {'source':36s} {'shape':26s} {xname:>8s} {'public us':>10s} {'priced us':>10s} {'ratio':>6s}")
    for src, shape, x, pub, priced in rows:
        xs = f"{x / 1e6:.0f} MB" if xname == "bytes" else str(x)
        print(f"  {src:36s} {shape:26s} {xs:>8s} {pub:10.2f} {priced:10.2f} {pub / priced:6.2f}")
    if rows:
        r = [pub / priced for *_, pub, priced in rows]
        print(f"  ratio public / priced: median {statistics.median(r):.2f}, range {min(r):.2f}-{max(r):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="h100-sxm")
    ap.add_argument("--aic", default="/work/aic/core/aiconfigurator_core/systems/data",
                    help="unpacked aiconfigurator systems/data (check 2; skipped when absent)")
    a = ap.parse_args()
    prof = load_profile(a.profile)
    cost = CostModel(prof, Stack())
    _print("1. cuBLAS fp16 F.linear on H100 (Humming's torch-w16a16 baseline) vs the gemm table", humming_rows(cost), "m")
    data = Path(a.aic)
    if data.is_dir():
        _print("2. aiconfigurator's other H100 SXM torch-linear collections vs the table (sglang 0.5.14)",
               aic_rows(cost, data), "m")
    else:
        print(f"2. skipped: no aiconfigurator data at {data}")
    _print("3. Triton streaming kernels on H100 SXM (pytorch/ao) vs bytes at the memory curve (batch-1 GEMV pricing)",
           triton_rows(prof), "bytes")
    if prof.l2 is None or not prof.l2.sweep:
        print(f"4. skipped: {a.profile} has no compute.l2 sweep curve")
    elif prof.compute_capability != 9.0:
        print(f"4. skipped: the cold lines group rows by Hopper's sourced cuBLAS grid (cublas-sm90); "
              f"{a.profile} states compute capability {prof.compute_capability}")
    else:
        _print_warm(warm_rows(prof, cost), 4)


if __name__ == "__main__":
    main()
