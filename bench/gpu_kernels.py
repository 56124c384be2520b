"""Kernel-level GPU checks (bench/gpu_checks.sh step K), each beside tpsim's own price (h200-sxm).

    python bench/gpu_kernels.py linear  --out DIR [--smoke]     # ~50 s on an H200 (estimate)
    python bench/gpu_kernels.py cosched --out DIR [--smoke]     # ~45 s
    python bench/gpu_kernels.py decode  --out DIR [--smoke] [--models M:TP ...] [--batches B ...]   # ~3 min a model

linear  -> DIR/linear.json: fp16 F.linear at the per-rank decode shapes of llama-3.1-70b TP8,
  llama-3.1-8b TP1 and TP8 (qkv, wo, w13 = the reference's fused w1 [2 ffn, hidden], w2, LM head) at m
  1/4/16/64: per-call µs of N back-to-back calls replayed in one CUDA graph over one weight (L2-warm),
  over the GEMM table's own rotation (`graph_aic_us`: aiconfigurator's collector times min(6, ...)
  copies of (a, w) in turn, validate_gemm_tables.py check 4: warm where they fit in L2 together), over
  rotating weight copies (> 2.5 x L2: cold, as each layer's own weight is), and N eager calls; the kernels cuBLAS ran (name, grid, block: torch.profiler); tpsim's price
  (the GEMM table; at m 1 also the compiled step's generated GEMV) and the ratio.
decode  -> DIR/decode.json + DIR/decode-code-*.py: the reference decode step (hw/derive/reference_model.py,
  comm-free: no all-reduce, no process group), random fp16 weights, static KV cache 1536 (prompt
  1024 + gen 512, step at position 1024), torch.compile(mode="reduce-overhead", fullgraph=True)
  under the reference's Inductor flags, at `--layers` layers and at 0 layers (embedding, norm, head,
  argmax only): per-layer µs = (kernel sum at L layers - at 0) / L. Per kernel of the step: its
  median CUDA µs (torch.profiler over graph replays), matched by base name to sim/compiled_kernels_gpu.json;
  beside it tpsim's per-layer kernels (bench/breakdown.py --json, upper-bound). Inductor's output code
  and the coordinate-descent configs it kept (*.best_config) are saved per case.
cosched -> DIR/cosched.json: a Triton probe kernel (C CTAs, each spinning for a set time and writing
  its start %globaltimer, end, %smid) on a second stream beside back-to-back decode-shaped work
  (70B TP8 w13 / w2 F.linear at m 4 and 64; Inductor's generated m = 1 reduction of w13), launched
  (a) when a compute kernel ends (an event gate: the collective's case) at default and high priority,
  (b) from the host mid-sequence, (c) on an idle GPU. Per trial: the probe's start delay from the
  moment it was ready (CUPTI timestamps), each CTA's start spread and SM, per 4-CTA cluster its SMs
  (num_ctas=4: NCCL's cgaClusterSize on sm90), and the durations of the compute kernels that ran
  beside it against the same work alone (the slowdown).
Every JSON has a "provenance" (GPU, driver, CUDA, torch, Triton, NCCL, clocks, date, command) and is
rewritten after each measured item, an item's failure recorded as its "error". --smoke runs what needs
no CUDA on CPU (shapes, prices, JSON; linear as CPU eager F.linear, decode as a 1-layer toy compiled by
the C++ backend, cosched only compiles the probe for sm_90 offline) and says what it skipped.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A fresh Inductor cache per process, set before torch is imported (torch's cache_dir() fixes the variable at
# its first call): every compile, and every coordinate-descent tuning, runs afresh and lands where decode copies
# the output code and *.best_config from (on CPU only the vector-ISA probe goes to the default cache: part_decode)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpsim-gpu-kernels-")

import gpu_cosched  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "derive_profiles"))
import aic_collector  # noqa: E402  (how the GEMM table's rows were timed: one definition)
from gpu_record import (MODELS, PROFILE, Doc, guarded, init_profiler_for_graphs, kernel_row, linear_shapes, sync,
                        time_calls, trace_events, windows)

import torch
import torch.fx.traceback as _fx_tb
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.profiler import ProfilerActivity, profile, record_function

if not hasattr(_fx_tb, "annotate"):         # an older torch: the IR-name annotations are only labels here
    _fx_tb.annotate = contextlib.contextmanager(lambda d: (yield))

from tpsim.hw.derive import reference_model as R  # noqa: E402
from tpsim.hw.inductor_flags import (REFERENCE_INDUCTOR_FLAGS, apply_inductor_flags,  # noqa: E402
                                     probe_vec_isa_in_default_cache)
from tpsim.sim.price.cost import CostModel  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402
from tpsim.sim.schedule.language import Op  # noqa: E402
from tpsim.sim.stack.spec import make_stack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMOKE_MODELS = ("toy-512:1",)
# linear's shapes: the decode models, then 8B TP8, whose qkv and wo (6.3 / 4.2 MB) the GEMM table timed
# warm in L2 (validate_gemm_tables.py check 4): last, so a timeout cuts it first
LINEAR_MODELS = (*MODELS, "llama-3.1-8b:8")
MS = (1, 4, 16, 64)                                      # decode tokens per step = batch
SEQ, POS = 1536, 1024                                    # static cache: prompt 1024 + gen 512


# --- linear: fp16 F.linear at the decode shapes

def sim_gemm_us(m: int, n: int, k: int) -> dict:
    """tpsim's price of an fp16 [m, k] x [k, n] GEMM in a graph-replayed decode step on PROFILE:
    `cublas` the extern GEMM (the profile's table, as F.linear runs it), `compiled` the reference
    stack's (at m 1 Inductor's generated GEMV: CostModel.generated_gemv)."""
    if not _COSTS:
        prof = load_profile(PROFILE)
        _COSTS.update({name: CostModel(prof, make_stack(dict(prof.stack_defaults) | extra))
                       for name, extra in (("cublas", {"mm_decompose_m1": False}), ("compiled", {}))})
    op = Op("g", "gemm", ("x",), ("y",), (("m", m), ("n", n), ("k", k)), "fp16")
    return {f"sim_{name}_us": cost.compute_s(op, "decode") * 1e6 for name, cost in _COSTS.items()}


_COSTS: dict = {}           # "cublas" / "compiled" -> CostModel on PROFILE, built once


def linear_case(m: int, n: int, k: int, calls: int) -> dict:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(m, k, device=dev, dtype=torch.float16)
    w = torch.randn(n, k, device=dev, dtype=torch.float16) * 0.02
    out = {"m": m, "n": n, "k": k, "weight_mb": n * k * 2 / 1e6} | sim_gemm_us(m, n, k)
    out["eager_us"] = time_calls(lambda i: F.linear(x, w), calls, graph=False)
    if dev == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 60 << 20
        ws = [w] + [torch.randn_like(w) for _ in range(min(15, math.ceil(2.5 * l2 / (n * k * 2))) - 1)]
        out["graph_us"] = time_calls(lambda i: F.linear(x, w), calls, graph=True)          # one weight: L2-warm
        out["graph_cold_us"] = time_calls(lambda i: F.linear(x, ws[i % len(ws)]), calls, graph=True)
        out["cold_copies"] = len(ws)
        # the GEMM table's own protocol: aiconfigurator's collector rotates min(6, ...) copies of (a, w)
        # (bench/validate_gemm_tables.py check 4), warm where they fit in L2 together
        c = aic_collector.copies(m, n, k, torch.cuda.get_device_properties(0).total_memory / 2**30)
        wa = ws[:c] + [torch.randn_like(w) for _ in range(c - len(ws[:c]))]
        xa = [x] + [torch.randn_like(x) for _ in range(c - 1)]
        out["graph_aic_us"] = time_calls(lambda i: F.linear(xa[i % c], wa[i % c]), calls, graph=True)
        out["aic_copies"] = c
        out["ratio_graph_to_sim"] = out["graph_us"] / out["sim_cublas_us"]
        out["ratio_cold_to_sim"] = out["graph_cold_us"] / out["sim_cublas_us"]
        out["ratio_aic_to_sim"] = out["graph_aic_us"] / out["sim_cublas_us"]
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])) as p:
        with record_function("tpsim:one"):
            F.linear(x, w)
            sync()
    out["kernels"] = [kernel_row(e) for e in windows(trace_events(p), "tpsim:").get("one", [])]
    return out


def part_linear(a, doc: Doc) -> None:
    if not torch.cuda.is_available():
        doc.skip("linear: no CUDA: CPU eager F.linear stands in at tiny m; no graph timing, no cuBLAS kernels")
    if a.smoke:             # the real shapes' table and prices, untimed
        for spec in MODELS:
            model, tp = spec.split(":")
            for name, (n, k) in linear_shapes(model, int(tp)).items():
                doc.put(f"{model}:tp{tp}:{name}:m{MS[0]}", {"m": MS[0], "n": n, "k": k, "timed": False} |
                        sim_gemm_us(MS[0], n, k))
    for spec in a.models:
        model, tp = spec.split(":")
        for name, (n, k) in linear_shapes(model, int(tp)).items():
            for m in a.ms:
                guarded(doc, f"{model}:tp{tp}:{name}:m{m}", linear_case, m, n, k, a.calls)


# --- decode: the generated decode module

def decode_params(s: R.Shapes, dev: str) -> dict:
    """R.params with values: fp16 weights ~ N(0, 0.02), unit norms, zero caches, a causal mask,
    unit-modulus rotations; each marked static so CUDA graphs never copy it."""
    p = R.params(s, device=dev)
    for name, t in p.items():
        if name == "causal_mask":
            t.copy_(torch.tril(torch.ones(s.seq, s.seq, dtype=torch.bool, device=dev)))
        elif name == "freqs_cis":
            ang = torch.rand(s.seq, s.head_dim // 2, device=dev) * 6.283
            t.copy_(torch.stack([ang.cos(), ang.sin()], -1))
        elif "cache" in name:
            t.zero_()
        elif "norm" in name:
            t.fill_(1.0)
        else:
            t.normal_(0.0, 0.02)
        torch._dynamo.mark_static_address(t)
    return p


def compiled_step(s: R.Shapes, dev: str, code_dir: Path, tag: str, graphs: bool = True) -> dict:
    """Compile and run one decode step of `s` (under CUDA graphs on cuda unless not `graphs`); per
    kernel its median µs over profiled steps."""
    torch._dynamo.reset()
    p = decode_params(s, dev)
    idx = torch.randint(0, s.vocab, (s.batch, 1), device=dev)
    pos = torch.tensor([POS if s.seq > POS else s.seq - 8], device=dev, dtype=torch.int32)
    step = torch.compile(lambda i, q: R.forward(p, s, i, q, None, comm=False), fullgraph=True, dynamic=False,
                         mode="reduce-overhead" if dev == "cuda" and graphs else None)

    def call():
        torch.compiler.cudagraph_mark_step_begin()
        return step(idx, pos)

    skips0 = dict(counters["inductor"]).get("cudagraph_skips", 0)
    t0 = time.time()
    call()
    sync()
    out: dict = {"compile_s": time.time() - t0, "layers": s.layers, "cuda_graphs": dev == "cuda" and graphs}
    for _ in range(3):
        call()
    times = []
    for _ in range(20):
        t1 = time.perf_counter()
        call()
        sync()
        times.append((time.perf_counter() - t1) * 1e6)
    out["step_wall_us"] = statistics.median(times)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])) as pr:
        for j in range(5):
            with record_function(f"tpsim:{j}"):
                call()
                sync()
    ev = trace_events(pr)
    # reduce-overhead replays one CUDA graph a step unless Inductor skipped cudagraphs (it logs why)
    out["graph_launches_per_step"] = sum(e["name"] == "cudaGraphLaunch" for e in ev) / 5
    out["cudagraph_skips"] = dict(counters["inductor"]).get("cudagraph_skips", 0) - skips0
    steps = list(windows(ev, "tpsim:").values())
    n = min(len(x) for x in steps) if steps else 0
    out["kernels"] = [{"name": steps[0][i]["name"], "base": re.sub(r"^graph_\d+_|_\d+$", "", steps[0][i]["name"]),
                       "us": statistics.median(x[i]["dur"] for x in steps)} for i in range(n)]
    out["kernel_sum_us"] = sum(k["us"] for k in out["kernels"])
    out["output_code"], out["best_configs"] = inductor_files(t0, code_dir, tag)
    del p, step
    return out


def inductor_files(t0: float, code_dir: Path, tag: str) -> tuple[list[str], dict]:
    """What Inductor wrote since t0 in this process's cache: the output code (copied into code_dir as
    decode-code-TAG.py, one per graph) and, per Triton kernel, the coordinate-descent config it kept
    (the *.best_config beside the kernel's source, as written)."""
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    fresh = [f for f in cache.rglob("*.py") if f.stat().st_mtime >= t0]
    code = sorted((f for f in fresh if "def call(" in f.read_text(errors="replace")), key=lambda f: f.stat().st_mtime)
    names = []
    for i, f in enumerate(code):
        names.append(f"decode-code-{tag}{'' if i == 0 else f'-{i}'}.py")
        shutil.copy(f, code_dir / names[-1])
    best = {}
    for f in cache.rglob("*.best_config"):
        if f.stat().st_mtime >= t0:
            src = f.with_suffix(".py")
            m = re.search(r"def (triton_\w+)\(", src.read_text(errors="replace")) if src.is_file() else None
            best[m.group(1) if m else f.stem] = f.read_text(errors="replace")
    return names, best


def sim_decode(model: str, tp: int, batches: list[int]) -> dict[int, dict]:
    """bench/breakdown.py --json, upper-bound on PROFILE: batch -> tpsim's per-layer µs and kernels."""
    cmd = [sys.executable, str(ROOT / "bench" / "breakdown.py"), "--json", "--profile", PROFILE, "--model", model,
           "--tp", str(tp), "--schedule", "upper-bound", *[x for b in batches for x in ("--batch", str(b))]]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout)
    return {c["batch"]: {"sim_layer_us": c["layer_us"], "sim_kernels": [
        {"op": r["name"], "name": k["name"], "us": k["us"]} for r in c["layer_ops"] for k in r["kernels"]]}
        for c in doc["cases"] if c["phase"] == "decode"}


def table_roles(batch: int) -> dict[str, str]:
    """Base kernel name -> role in sim/compiled_kernels_gpu.json (upper-bound; decode-m1 at batch 1)."""
    tab = json.loads((ROOT / "sim" / "price" / "compiled_kernels_gpu.json").read_text())["layers"]["upper-bound"]
    return {re.sub(r"_\d+$", "", k["kernel"]): k["role"] for k in tab["decode-m1" if batch == 1 else "decode"]}


def decode_case(model: str, tp: int, batch: int, layers: int, smoke: bool, code_dir: Path, sim: dict) -> dict:
    sh = get_model(model).shard(tp)
    seq = 48 if smoke else SEQ
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    mk = lambda L: R.Shapes(batch, seq, sh.heads, sh.kv_heads, sh.head_dim, sh.hidden, sh.ffn, sh.vocab, L)  # noqa: E731
    tag = f"{model}-tp{tp}-b{batch}"
    try:
        full = compiled_step(mk(layers), dev, code_dir, tag)
        base = compiled_step(mk(0), dev, code_dir, tag + "-0layers")
        fallback = None
    except Exception as e:  # noqa: BLE001 - CUDA graphs refused: the kernels are worth timing without them
        fallback = f"{type(e).__name__}: {str(e)[:600]}"
        print(f"{tag}: under CUDA graphs: {fallback[:200]}; again without them", flush=True)
        full = compiled_step(mk(layers), dev, code_dir, tag, graphs=False)
        base = compiled_step(mk(0), dev, code_dir, tag + "-0layers", graphs=False)
    roles = table_roles(batch)
    for k in full["kernels"]:
        k["table_role"] = roles.get(k["base"])
    out = {"model": model, "tp": tp, "batch": batch, "seq": seq, "pos": POS if seq > POS else seq - 8,
           "layer_us": (full["kernel_sum_us"] - base["kernel_sum_us"]) / layers,
           "layer_wall_us": (full["step_wall_us"] - base["step_wall_us"]) / layers,
           "graphs_error": fallback} | sim.get(batch, {})
    if "sim_layer_us" in out and dev == "cuda":
        out["ratio_layer_to_sim"] = out["layer_us"] / out["sim_layer_us"]
    return out | {"step": full, "step_0layers": base}


def part_decode(a, doc: Doc) -> None:
    apply_inductor_flags(REFERENCE_INDUCTOR_FLAGS)
    doc.d["inductor_flags"] = REFERENCE_INDUCTOR_FLAGS
    if a.smoke:
        torch._inductor.config.cpp.enable_kernel_profile = True       # the C++ kernels show in the profiler
    if not torch.cuda.is_available():
        doc.skip("decode: no CUDA: the C++ backend compiles the toy on CPU (no CUDA graphs, no Triton kernels)")
        # the C++ backend's ISA probe builds its test programs in the default cache, where they stay between
        # runs, not in this process's fresh one: the step's own kernels and output code still land there
        probe_vec_isa_in_default_cache()
    for spec in a.models:
        model, tp = spec.split(":")
        try:
            sim = sim_decode(model, int(tp), a.batches)
        except (subprocess.SubprocessError, ValueError, KeyError) as e:
            doc.skip(f"decode: tpsim's prediction for {spec}: {type(e).__name__}: {e}")
            sim = {}
        for b in a.batches:
            guarded(doc, f"{model}:tp{tp}:b{b}", decode_case, model, int(tp), b, a.layers, a.smoke, a.out, sim)


PARTS = {"linear": part_linear, "decode": part_decode, "cosched": gpu_cosched.part_cosched}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=PARTS)
    ap.add_argument("--out", type=Path, required=True, help="directory for PART.json (and decode's code files)")
    ap.add_argument("--smoke", action="store_true", help="CPU wiring check: toy shapes, says what it skips")
    ap.add_argument("--models", nargs="+", help=f"MODEL:TP (default {' '.join(MODELS)})")
    ap.add_argument("--ms", type=int, nargs="+", help="linear's m (default 1 4 16 64)")
    ap.add_argument("--batches", type=int, nargs="+", help="decode's batches (default 1 4 64 16)")
    ap.add_argument("--layers", type=int, default=2, help="decode's layers (default 2; smoke 1)")
    ap.add_argument("--calls", type=int, default=20, help="linear: back-to-back calls per timing")
    ap.add_argument("--reps", type=int, default=3, help="cosched: repeats of every trial")
    a = ap.parse_args(argv)
    for m in a.models or []:
        if not re.fullmatch(r"[\w.\-]+:\d+", m):
            ap.error(f"--models {m!r}: use MODEL:TP")
        try:
            get_model(m.split(":")[0]).shard(int(m.split(":")[1]))
        except (KeyError, ValueError) as e:
            ap.error(f"--models {m!r}: {e}")
    a.models = a.models or list(SMOKE_MODELS if a.smoke else LINEAR_MODELS if a.part == "linear" else MODELS)
    a.ms = a.ms or ([1, 4] if a.smoke else list(MS))
    a.batches = a.batches or ([2] if a.smoke else [1, 4, 64, 16])
    a.layers = 1 if a.smoke else a.layers
    a.out.mkdir(parents=True, exist_ok=True)
    doc = Doc(a.out / f"{a.part}.json", a.part, [str(Path(__file__)), *argv], a.smoke)
    init_profiler_for_graphs()
    PARTS[a.part](a, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
