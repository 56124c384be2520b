"""Compute constants of the built-in profiles: GEMM efficiency curves and exact-shape GEMM tables from
the aiconfigurator database, launch costs. Imported by derive_builtin.py (run that)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd

from common import AIC, DATA, GPU_SMS
from curves import COLD_SHARE, MIN_ROWS, binned, streams_like_generated
from l2 import l2_section

from tpsim.sim.hardware.schema import L2Spec
from tpsim.sim.model.presets import MODELS, valid_tp

# The sourced cuBLAS grid table of a GPU's decode GEMMs (sim/hardware/gemm_grids.py): Hopper's 64-feature
# tiles at m <= 64. A GPU without one (A100, L40S: the 128 x 128 rule is not a source) keeps every row
# in its memory curve
GEMM_GRID = {"h100_sxm": "cublas-sm90", "h200_sxm": "cublas-sm90"}


def _l2_spec(system: str) -> L2Spec | None:
    """The GPU's L2 sweep curve as the profile will carry it (l2.py), None where none is sourced."""
    sec = l2_section(system)
    if sec is None:
        return None
    sw = sec["sweep"]
    return L2Spec(sec["gbps"]["value"] * 1e9, tuple(zip(sw["kb"], sw["gbps"])), sw["dram_gbps"])

# ---------------------------------------------------------------- compute

def gemm_curves(system, rel, kernel, peak_tflops, bw_gbps, memory_gib):
    d = pd.read_parquet(DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
    m, n, k, t = (d[c].to_numpy(float) for c in ("m", "n", "k", "latency"))
    t = t * 1e-3
    flops = 2 * m * n * k
    nbytes = 2 * (m * k + k * n + m * n)
    peak, bw = peak_tflops * 1e12, bw_gbps * 1e9
    comp = flops / peak >= nbytes / bw

    gx, gy = binned(flops[comp], flops[comp] / t[comp] / peak, 5, 15)
    mem = m <= 16
    # The memory curve prices streaming kernels that spread over the whole GPU and, in a decode step,
    # read weights cold (Inductor's generated GEMV at batch 1: one program per output row or block of
    # rows). A GEMM of the same bytes whose cuBLAS grid leaves SMs idle (qkv at 70B TP8: 20 CTAs of
    # 132) moves them at a fraction of the GPU's rate, and one whose collector rotation fit in L2 ran
    # warm (aic_collector); so a bin takes the rows whose grid fills the GPU and that ran cold, where it
    # has MIN_ROWS of them (from ~10 MB: the rotation of 6 copies of less fits in a 50 MB L2). Below,
    # where no such row exists, every row, as before: there a GEMM is mostly its fixed cost, and what a
    # small generated kernel costs is an open point of its own (docs/compiled-stack-reference.md)
    sms, sms_src = GPU_SMS[system]
    grid, l2 = GEMM_GRID.get(system), _l2_spec(system)
    prefer = streams_like_generated(m, n, k, sms, grid, l2, memory_gib)
    mx, my = binned(nbytes[mem], nbytes[mem] / t[mem] / bw, 3, 11, prefer=prefer[mem])
    src = (f"{AIC} database: systems/data/{system}/gemm/{rel}/gemm_perf.parquet, kernel_source {kernel}, bf16")
    gemm = {"flops": gx, "efficiency": gy,
            "source": f"derived: {src}; {int(comp.sum())} compute-bound shapes (flops/peak >= bytes/bw), "
                      f"median achieved/peak per half-decade of flops"}
    memc = {"bytes": mx, "efficiency": my,
            "source": f"derived: {src}; {int(mem.sum())} memory-bound shapes (m <= 16), median achieved "
                      f"bytes/s / datasheet HBM bandwidth per half-decade of bytes (bytes = 2(mk+kn+mn))"
                      + (f"; in a bin holding {MIN_ROWS}+ of them, only the shapes ({int((prefer & mem).sum())} in "
                         f"all) whose cuBLAS grid fills the GPU (sim/hardware/gemm_grids.py "
                         f"'{grid}' CTAs >= {sms} SMs: {sms_src}) and whose collector rotation ran cold (L2 hit share "
                         f"<= {COLD_SHARE} in compute.l2.sweep; aiconfigurator collect_gemm.py rotates min(6, ...) "
                         f"copies), as a generated GEMV reads a weight in a decode step; below, every shape"
                         if grid and l2 else "; every shape (no sourced cuBLAS grid and L2 sweep for this GPU "
                         "say which rows fill it and ran cold)")}
    floor_us = round(float(t.min() * 1e6), 2)
    floor_src = (f"derived: smallest kernel time in {src} ({floor_us} us, tiny shapes): the floor one kernel "
                 f"costs when replayed back to back, as aiconfigurator times kernels")
    return gemm, memc, floor_us, floor_src


# m of every GEMM table row: powers of two 1..65536. They hold the decode batches (m = batch:
# 1, 4, 16, 64) and the prefill shapes of the protocol (m = batch x 1024: 1024, 4096, 16384,
# 65536) exactly; cost.py interpolates log-log between them for any other m.
GEMM_M = [2 ** i for i in range(17)]
GEMM_DTYPES = ["fp16", "bf16"]
GEMM_COLLECTOR = ("ai-dynamo/aiconfigurator collector/sglang/collect_gemm.py: bfloat16 rows time "
                  "F.linear(a[m,k], w[n,k]) (cuBLAS), up to 6 weight copies in rotation, device time; its "
                  "earlier versions label the same rows kernel_source 'sglang'")


def ir_linear_shapes() -> list[tuple[int, int]]:
    """The (n, k) of the layers' linears only (qkv, o, gate/up, down) for the built-in models at TP <= 16:
    what FP8 quantizes (the LM head stays 16-bit)."""
    shapes = set()
    for model in MODELS.values():
        for tp in valid_tp(model, 16):
            s = model.shard(tp)
            shapes |= {(s.qkv_dim, model.hidden), (model.hidden, s.q_dim), (2 * s.ffn, model.hidden),
                       (model.hidden, s.ffn)}
    return sorted(shapes)


def ir_gemm_shapes() -> list[tuple[int, int]]:
    """Every (n, k) the IR (sim/schedule/language.py) emits for a built-in model preset (sim/model/presets.py) at
    each valid TP up to 16: qkv [m, hidden] -> [m, qkv_dim/tp]; attn out [m, q_dim/tp] ->
    [m, hidden]; mlp up (w1 and w3 fused) -> [m, 2 ffn/tp]; down [m, ffn/tp] -> [m, hidden];
    LM head replicated -> [m, vocab] and vocab-parallel -> [m, ceil(vocab/tp)]."""
    shapes = set()
    for model in MODELS.values():
        for tp in valid_tp(model, 16):
            s = model.shard(tp)
            shapes |= {(s.qkv_dim, model.hidden), (model.hidden, s.q_dim), (2 * s.ffn, model.hidden),
                       (model.hidden, s.ffn), (model.vocab, model.hidden)}
            if tp > 1:
                shapes.add((-(-model.vocab // tp), model.hidden))
    return sorted(shapes)


class AicGemm:
    """aiconfigurator's own GEMM query (its compiled engine, shipped in the same wheel as the
    tables), driven through the model-less probe spec its sdk builds (engine.py
    build_database_probe_spec_json): SILICON mode, this version's own rows only.

    What that query does (GemmTable::query, aic-core/rust/aiconfigurator-core/src/perf_database/
    gemm.rs in ai-dynamo/aiconfigurator; the wheel ships it compiled) and what we checked here:
    the table is clamped to >= SOL at load; a collected (n, k) site answers from its own m curve:
    the measured row at a collected m (checked: equal to the parquet row at 300 random rows),
    linear in m between collected m (checked), utilization held beyond the largest m (32768:
    checked t(131072) = 2 t(65536)); an (n, k) that was not collected is transferred from <= 4
    neighbour sites within 2 octaves by log2-inverse-distance weighting of utilization (here within
    +-5% of linear interpolation in n or k between the grid neighbours)."""

    def __init__(self, system: str, backend: str, version: str):
        wheel = DATA.parents[2]                 # .../aiconfigurator_core/systems/data -> wheel root
        sys.path.insert(0, str(wheel))
        import aiconfigurator_core as aic   # lazy: optional, derivation only; found via the sys.path entry above
        sys.path.remove(str(wheel))
        systems = str(DATA.parent)
        engine = {"schema_version": 1, "model_name": "__database_probe__", "system_name": system,
                  "systems_path": systems, "backend": backend, "backend_version": version,
                  "kv_block_size": None, "tp_size": 1, "pp_size": 1, "attention_dp_size": None,
                  "moe_tp_size": None, "moe_ep_size": None, "cp_size": None, "weight_dtype": None,
                  "moe_dtype": None, "activation_dtype": None, "kv_cache_dtype": None,
                  "enable_shared_layer": False, "strict_provenance": False, "database_mode": "SILICON",
                  "transfer_policy": None, "tolerate_dirless_version": False, "extra": {}}
        spec = {"schema_version": aic.engine_spec_schema_version(), "engine": engine,
                "context_ops": [], "generation_ops": []}
        self.engine = aic.AicEngine.from_spec(aic.engine_spec_bincode_from_json(json.dumps(spec)), systems)

    def ms(self, m: int, n: int, k: int, quant_mode: str = "bfloat16") -> float:
        op = [{"Gemm": {"name": "g", "scale_factor": 1.0, "n": n, "k": k, "quant_mode": quant_mode,
                        "scale_num_tokens": 1, "low_precision_input": False, "seq_split": 1,
                        "below_grid_sol": False}}]
        # context phase, batch 1, s = m tokens: the GEMM runs with m rows
        (_, ms, _, _), = self.engine.evaluate_ops_json(json.dumps(op), True, 1, m, 0, 1.0, None)
        return float(ms)


def gemm_table(system, rel, kernel):
    """compute.gemm_tables entry: one row per IR (n, k), times at GEMM_M, from aiconfigurator's query.

    Kernel: the bf16 torch-linear rows (kernel_source `kernel`), i.e. F.linear -> cuBLAS, the same
    kernel the reference harness runs: its fp16 nn.Linear matmuls compile to Inductor's extern
    mm (cuBLAS) in both phases (docs/sources.md §10; no max-autotune templates), and eager runs the same
    aten mm. fp16 and bf16 run the same tensor-core rate and bytes on Hopper/Ampere/Ada, so the
    bf16 times stand for fp16 too (not measured in fp16: cuBLAS may pick a different tile)."""
    backend, version = rel.split("/")
    d = pd.read_parquet(DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
    sites = set(zip(d.n.astype(int), d.k.astype(int)))
    ms_grid = set(d.m.astype(int))
    nmax, kmax, mmax = int(d.n.max()), int(d.k.max()), max(ms_grid)
    q = AicGemm(system, backend, version)
    rows = []
    for n, k in ir_gemm_shapes():
        row = {"n": n, "k": k, "time_us": [float(f"{q.ms(m, n, k) * 1e3:.5g}") for m in GEMM_M]}
        if (n, k) not in sites:
            row["nk"] = "extrapolated" if n > nmax or k > kmax else "interpolated"
        rows.append(row)
    measured = sum((n, k) in sites for n, k in ir_gemm_shapes())
    # how far apart two neighbouring measurements lie: the database times m and m + 1 (m >= 17) of
    # every site; over the compute-bound ones (>= 1e10 flops) |t(m+1) / t(m) - 1| (tile effects
    # included): a single row can be off by this much
    t = d.set_index(["m", "n", "k"]).latency
    t = t[~t.index.duplicated()]
    spread = [abs(t[(m + 1, n, k)] / t[(m, n, k)] - 1) for m, n, k in t.index
              if m >= 32 and 2 * m * n * k >= 1e10 and (m + 1, n, k) in t.index]
    med, p90 = np.median(spread), np.quantile(spread, 0.9)
    off_m = [m for m in GEMM_M if m not in ms_grid]
    src = (f"{AIC} database: systems/data/{system}/gemm/{rel}/gemm_perf.parquet, kernel_source {kernel}, "
           f"bf16 ({GEMM_COLLECTOR}). Times (us) at each m of 'm' for every (n, k) the IR emits for the "
           f"built-in models at TP <= 16, as aiconfigurator's own GEMM query returns them (its compiled "
           f"engine, SILICON mode): {measured} of {len(rows)} (n, k) rows are collected sites, whose times "
           f"at a collected m are the measured rows; the other rows ('nk': interpolated / extrapolated "
           f"beyond n <= {nmax}, k <= {kmax}) are aiconfigurator's log2-IDW utilization transfer from "
           f"neighbour sites. m not collected ({', '.join(map(str, off_m))}) is linear in m between "
           f"collected m, beyond m = {mmax} utilization held. Row-to-row spread: the m and m+1 rows of "
           f"{len(spread)} compute-bound sites differ by {med:.1%} (median), {p90:.1%} (p90). "
           f"bf16 rows stand for fp16 (same tensor-core "
           f"rate and bytes); the kernel is the cuBLAS GEMM torch runs for nn.Linear, eager and under "
           f"Inductor (extern mm)")
    return {"source": src, "dtypes": GEMM_DTYPES, "m": GEMM_M, "rows": rows}


# FP8 linears (W8A8 e4m3, per-tensor scales), vLLM's kernel: aiconfigurator's vLLM collector builds a
# RowParallelLinear with Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="static") and times
# gemm.forward(x) on a bf16 x (ai-dynamo/aiconfigurator collector/vllm/collect_gemm.py@00e9bded run_gemm),
# i.e. Fp8LinearMethod.apply: the static per-tensor input quantize kernel (ops.scaled_fp8_quant) + CUTLASS
# scaled-mm writing bf16, 6 copies in rotation, CUDA graph. Its rows are kernel_source
# CutlassFP8ScaledMMLinearKernel, gemm_dtype fp8.
FP8_REL = "vllm/0.24.0"
FP8_KERNEL = "CutlassFP8ScaledMMLinearKernel"
FP8_COLLECTOR = ("ai-dynamo/aiconfigurator collector/vllm/collect_gemm.py@00e9bded: RowParallelLinear with "
                 "Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme='static'), gemm.forward(x) on bf16 "
                 "x: the static per-tensor input quantize kernel + cutlass_scaled_mm (bf16 out), 6 copies in "
                 "rotation, CUDA graph, device time")


def fp8_gemm_table(system, rel=FP8_REL, kernel=FP8_KERNEL):
    """compute.gemm_tables entry of FP8 linears ("quant": "fp8"): one row per layer-linear (n, k) of the
    built-in models, times at GEMM_M, from aiconfigurator's query in quant mode fp8 (the rows of `kernel`)."""
    backend, version = rel.split("/")
    d = pd.read_parquet(DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "fp8")]
    sites = set(zip(d.n.astype(int), d.k.astype(int)))
    nmax, kmax, mmax = int(d.n.max()), int(d.k.max()), int(d.m.max())
    q = AicGemm(system, backend, version)
    rows = []
    for n, k in ir_linear_shapes():
        row = {"n": n, "k": k, "time_us": [float(f"{q.ms(m, n, k, 'fp8') * 1e3:.5g}") for m in GEMM_M]}
        if (n, k) not in sites:
            row["nk"] = "extrapolated" if n > nmax or k > kmax else "interpolated"
        rows.append(row)
    measured = sum((n, k) in sites for n, k in ir_linear_shapes())
    src = (f"{AIC} database: systems/data/{system}/gemm/{rel}/gemm_perf.parquet, kernel_source {kernel}, gemm_dtype "
           f"fp8 ({FP8_COLLECTOR}). Times (us) at each m of 'm' for every layer-linear (n, k) the IR emits for the "
           f"built-in models at TP <= 16, as aiconfigurator's own GEMM query returns them (quant mode fp8, SILICON): "
           f"{measured} of {len(rows)} rows are collected sites; the others ('nk') its log2-IDW transfer from "
           f"neighbour sites, beyond m = {mmax} utilization held. The bf16 and fp16 outputs stand for each other "
           f"(same bytes). A dynamic per-token input scale adds its reduction kernel (sim/price/work.py)")
    return {"source": src, "quant": "fp8", "dtypes": GEMM_DTYPES, "m": GEMM_M, "rows": rows}


def eager_launch(system, rel):
    f = DATA / system / "comm" / "vllm" / rel / "custom_allreduce_perf.parquet"
    d = pd.read_parquet(f)
    d = d.assign(num_gpus=d.num_gpus.astype(int), message_size=d.message_size.astype(int))
    small = d[d.message_size <= 2048]
    e = small[small.kernel_source.str.contains("eager")].set_index(["num_gpus", "message_size"]).latency
    g = small[small.kernel_source.str.contains("graph")].set_index(["num_gpus", "message_size"]).latency
    diff = ((e - g).dropna() * 1e3 / 2)
    v = round(float(diff.median()), 2)
    return v, (f"derived: (eager - graph) / 2 kernels for vLLM's custom all-reduce at <= 2048 elements, "
               f"2/4/8 GPUs, median ({AIC} database: systems/data/{system}/comm/vllm/{rel}/"
               f"custom_allreduce_perf.parquet); eager = copy into the registered buffer + the all-reduce "
               f"kernel, launched from Python, so this is per eager kernel launch including Python dispatch "
               f"(an upper estimate for plain torch ops)")
