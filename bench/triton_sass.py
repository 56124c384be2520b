"""Registers and instructions of the reference's generated decode kernels, per launch config, offline.

    python bench/triton_sass.py --at llama-3.1-70b:8:64 --kernel bmm [--kernel softmax] [--clock-ghz 1.98]

Lowers the reference's comm-free decode step at the per-rank shapes of --at (hw.derive.inductor_gpu.compile_decode
on the installed torch: run it with the torch 2.5.1 venv of docs/compiled-stack.md for the reference's own
kernels) and, for each generated Triton kernel whose name contains a --kernel string, builds it the way
Inductor's autotuner does (the kernel's own decorator: its starting configs; CachingAutotuner.
_precompile_config: the same compile options, Triton's compiler and bundled ptxas for sm_90; no GPU),
disassembles each config with Triton's bundled nvdisasm and prints:

  config      XBLOCK x RBLOCK (reductions), warps
  regs/spill  registers per thread, local-memory bytes (cuobjdump -res-usage)
  instr/warp  SASS instructions one warp executes: the straight-line code plus each loop's body times
              its further trips (the trip count read off the loop counter's step against the kernel's
              reduction size; a fully unrolled loop is straight-line code)
  programs    the grid, ceil(xnumel / XBLOCK)
  issue us    programs x warps x instr/warp / (SMs x 4 x clock): an H100 SM issues at most one warp
              instruction per cycle from each of its 4 schedulers (NVIDIA H100 Tensor Core GPU
              Architecture whitepaper: 4 SM sub-partitions, one warp scheduler each). A floor on the
              kernel's time, not a price: memory stalls, occupancy and the tail wave come on top.
  row bytes   the contiguous bytes one program reads of each KV-cache row per loop step, for the loads
              that reach the cache with passes G (a load under 32 B reads part of a 32 B L2 sector)

Which config coordinate descent keeps on a GPU is not derivable here (it times them on the device).
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

_here = Path.cwd() if (Path.cwd() / "sim" / "price" / "cost.py").is_file() else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_here))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load(str(_here))

import triton  # noqa: E402
import torch._inductor.config as icfg  # noqa: E402
from torch._inductor.runtime import triton_helpers  # noqa: E402

from tpsim.hw.derive import inductor_gpu as G  # noqa: E402
from tpsim.hw.derive.fake_cuda import H100, fake_h100  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
_INS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", re.M)


def autotuner(src: str, name: str, tmp: str):
    """The kernel's CachingAutotuner, built by its own decorator from the output code's source."""
    path = os.path.join(tmp, f"{name}.py")
    Path(path).write_text(src.replace("triton_helpers.set_driver_to_gpu()", ""))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def build(at, cfg):
    """The compiled binary of one config, through Inductor's own compile path (no device load; the
    fake H100's Triton driver stays the active one: newer Inductor re-selects the real driver first)."""
    # the plain Triton binary, not newer Inductor's static launcher wrapped around its cubin
    static = {k: False for k in ("use_static_cuda_launcher",) if hasattr(icfg, k)}
    with mock.patch.object(triton_helpers, "set_driver_to_gpu", lambda: None, create=True), icfg.patch(static):
        if "warm_cache_only" in inspect.signature(at._precompile_config).parameters:      # torch 2.5
            return at._precompile_config(cfg, True)[0]
        res = at._precompile_config(cfg)
    return getattr(res, "kernel", None) or res.binary


def sass_stats(binary, tmp: str) -> tuple[str, int, int]:
    cubin = os.path.join(tmp, "k.cubin")
    Path(cubin).write_bytes(binary.asm["cubin"])
    sass = subprocess.run([str(BIN / "nvdisasm"), "-c", cubin], capture_output=True, text=True, check=True).stdout
    res = subprocess.run([str(BIN / "cuobjdump"), "-res-usage", cubin], capture_output=True, text=True).stdout
    regs = int(re.search(r"REG:(\d+)", res).group(1)) if "REG:" in res else -1
    local = int(re.search(r"LOCAL:(\d+)", res).group(1)) if "LOCAL:" in res else -1
    return sass, regs, local


def executed(sass: str, rnumel: int | None) -> int:
    """Instructions one warp executes (module doc): NOPs left out; a loop (a backward branch) runs
    ceil(rnumel / step) times, step the immediate its counter (the register its ISETP compares)
    is advanced by; without rnumel or a readable step it counts once."""
    offsets, labels, pending = [], {}, []
    for line in sass.splitlines():
        m = re.match(r"\s*\.L_x_(\d+):", line)
        if m:
            pending.append(int(m.group(1)))
            continue
        m = _INS.match(line)
        if m:
            off = int(m.group(1), 16)
            labels.update({p: off for p in pending})
            pending = []
            if not m.group(2).startswith("NOP"):
                offsets.append((off, m.group(2)))
    total = len(offsets)
    for off, ins in offsets:
        m = re.search(r"BRA\s+`?\(?\.L_x_(\d+)", ins)
        start = labels.get(int(m.group(1))) if m else None
        if start is None or start > off or rnumel is None:
            continue
        body = [t for o, t in offsets if start <= o <= off]
        steps = []
        for k, t in enumerate(body):
            m = re.match(r"ISETP\.\S+ P\d+, PT, (R\d+), ", t)
            if not m:
                continue
            # the counter's last write before the compare: IADD3 Rc, Rprev, step, RZ
            for w in reversed(body[:k]):
                if re.match(rf"\S+ {m.group(1)}\b", w):
                    mm = re.match(rf"IADD3 {m.group(1)}, R\d+, (0x[0-9a-f]+|\d+), RZ", w)
                    if mm:
                        steps.append(int(mm.group(1), 0))
                    break
        if steps:
            total += len(body) * (math.ceil(rnumel / steps[-1]) - 1)
    return total


def kv_row_bytes(src: str, cfg: dict) -> list[int]:
    """Contiguous bytes per KV row one program reads per loop step, for each load that reaches the
    unexpanded cache by `bh // G` (the GQA re-reads): one indexed by the reduction index with unit
    stride reads RBLOCK fp16 of a row (q@k^T reduces along D); one indexed by x0 reads XBLOCK
    consecutive D columns (p@v)."""
    out = []
    for line in src.splitlines():
        if "tl.load(" not in line or not re.search(r"x\d+ // \d+\)", line):
            continue
        index = line.split("tl.load(", 1)[1].split(", ")[0]
        if re.search(r"(?<![\w*])r0?_?\d+(?![\w*])", index):
            fixed = re.search(r"R0?_?BLOCK: tl\.constexpr = (\d+)", src)      # a persistent reduction's
            block = cfg.get("R0_BLOCK", cfg.get("RBLOCK")) or (fixed and fixed.group(1))
        elif re.search(r"(?<![\w*])x0(?![\w*])", index):
            block = cfg.get("XBLOCK")
        else:
            continue
        if block:
            out.append(2 * int(block))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--at", required=True, metavar="MODEL:TP:BATCH")
    ap.add_argument("--kernel", action="append", required=True, help="substring of the kernel name (repeatable)")
    ap.add_argument("--clock-ghz", type=float, default=1.98, help="SM clock (H100 SXM max boost, datasheet)")
    a = ap.parse_args(argv)
    model, tp, batch = a.at.split(":")
    code = G.compile_decode(G.real_shapes(model, int(tp), int(batch)), False).code
    import torch                                      # lazy: for the version line only
    print(f"{a.at}: torch {torch.__version__}, triton {triton.__version__}, sm_90, {H100.multi_processor_count} SMs, "
          f"{a.clock_ghz} GHz; issue us = programs x warps x instr/warp / (SMs x 4 x clock)")
    seen = set()
    with tempfile.TemporaryDirectory(prefix="tpsim-sass-") as tmp, fake_h100():
        for name, _, src in G._KERNEL_DEF.findall(code):
            if name in seen or not any(k in name for k in a.kernel):
                continue
            seen.add(name)
            xnumel = int(re.search(r"xnumel = (\d+)", src).group(1))
            r = re.search(r"r0?_?numel = (\d+)", src)
            at = autotuner(src, name, tmp)
            print(f"\n{name}  xnumel {xnumel}  rnumel {r.group(1) if r else '-'}  ({len(at.configs)} starting configs)")
            print(f"  {'config':>16} {'regs':>5} {'spill':>5} {'instr/warp':>10} {'programs':>9} {'issue us':>9}  row bytes")
            for cfg in at.configs:
                kw = cfg.kwargs
                sass, regs, local = sass_stats(build(at, cfg), tmp)
                per = executed(sass, int(r.group(1)) if r else None)
                progs = math.ceil(xnumel / kw.get("XBLOCK", 1))
                issue_us = progs * cfg.num_warps * per / (H100.multi_processor_count * 4 * a.clock_ghz * 1e9) * 1e6
                label = "x".join(str(kw[k]) for k in ("XBLOCK", "R0_BLOCK", "RBLOCK") if k in kw) + f" w{cfg.num_warps}"
                print(f"  {label:>16} {regs:5d} {local:5d} {per:10d} {progs:9d} {issue_us:9.1f}  "
                      f"{', '.join(map(str, kv_row_bytes(src, kw))) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
