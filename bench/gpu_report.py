"""What a GPU run of bench/gpu_kernels.py says about tpsim's open points (docs/compiled-stack-reference.md, "What
only a GPU can settle"), read from its JSON on any machine, after the device is given back:

    python bench/gpu_report.py DIR        # DIR: gpu_kernels.py's --out (linear.json, decode.json)

linear: per decode linear and m, tpsim's price beside the timings: one weight (L2-warm), the GEMM
  table's own rotation (`graph_aic_us`: how aiconfigurator timed the row), and cold (every layer's own
  weight, as a decode step reads it). aic / priced says whether the table reproduces on this GPU;
  cold / aic is the warm bias of the rows timed in L2 (bench/validate_gemm_tables.py check 4 names them).
decode: per case the layer's kernel time against tpsim's; per kernel (matched by base name, summed over
  its launches in a layer) measured against priced, largest gap first; and the layer's smallest
  kernels, what a tiny generated kernel costs in the graph (tpsim floors each at the profile's
  launch_us.graph).
A part that is absent or untimed (a --smoke run on a CPU) is said so, never filled in.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.hardware.profile import load_profile  # noqa: E402

SMALLEST = 5                    # the layer's smallest kernels shown (the tiny-kernel floor)
EXTERN = "extern (cuBLAS and other library kernels)"   # one row: the library names its kernels its own way
GENERATED = ("triton_", "cpp_")                          # Inductor's generated kernels keep their names


def base(name: str) -> str:
    """A kernel's name without the graph prefix and Inductor's numeric suffix (as gpu_kernels.py's `base`)."""
    return re.sub(r"^graph_\d+_|_\d+$", "", name)


def _measured_key(b: str) -> str:
    return b if b.startswith(GENERATED) else EXTERN


def _priced_key(name: str) -> str:
    return EXTERN if name.startswith("extern_kernels.") else base(name)


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def linear_rows(doc: dict) -> list[tuple]:
    """(item, weight MB, priced us, one-weight us, table-rotation us, cold us) of the timed items."""
    out = []
    for key, it in doc["items"].items():
        if "graph_us" in it:
            out.append((key, it["weight_mb"], it["sim_cublas_us"], it["graph_us"], it.get("graph_aic_us"),
                        it["graph_cold_us"]))
    return out


def per_layer_kernels(case: dict) -> dict[str, float]:
    """Base name (library kernels: one EXTERN row) -> measured us a layer: (its time in the L-layer
    step - in the 0-layer step) / L."""
    layers = case["step"]["layers"]
    full: dict[str, float] = {}
    for k in case["step"]["kernels"]:
        full[_measured_key(k["base"])] = full.get(_measured_key(k["base"]), 0.0) + k["us"]
    for k in case["step_0layers"]["kernels"]:
        full[_measured_key(k["base"])] = full.get(_measured_key(k["base"]), 0.0) - k["us"]
    return {b: us / layers for b, us in full.items() if us / layers > 0.0}


def priced_kernels(case: dict) -> dict[str, float]:
    """Base name (extern matmuls: one EXTERN row) -> tpsim's us a layer (bench/breakdown.py's kernels
    of one layer, summed per base)."""
    out: dict[str, float] = {}
    for k in case.get("sim_kernels", []):
        out[_priced_key(k["name"])] = out.get(_priced_key(k["name"]), 0.0) + k["us"]
    return out


def kernel_rows(case: dict) -> list[tuple]:
    """(base, measured us a layer or None, priced us or None), largest |measured - priced| first."""
    got, priced = per_layer_kernels(case), priced_kernels(case)
    rows = [(b, got.get(b), priced.get(b)) for b in sorted(set(got) | set(priced))]
    return sorted(rows, key=lambda r: -abs((r[1] or 0.0) - (r[2] or 0.0)))


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def report_linear(doc: dict | None) -> None:
    if doc is None:
        print("linear: no linear.json")
        return
    rows = linear_rows(doc)
    if not rows:
        print(f"linear: untimed ({'--smoke run' if doc.get('smoke') else 'no graph timings'}): "
              f"{len(doc['items'])} items priced only")
        return
    print("linear: fp16 F.linear, graph-replayed; us per call")
    print(f"  {'item':34s} {'W MB':>7s} {'priced':>7s} {'warm':>7s} {'table':>7s} {'cold':>7s} "
          f"{'table/priced':>12s} {'cold/table':>10s}")
    for key, mb, priced, warm, aic, cold in rows:
        print(f"  {key:34s} {mb:7.1f} {priced:7.2f} {warm:7.2f} {_us(aic):>7s} {cold:7.2f} "
              f"{_ratio(aic, priced):>12s} {_ratio(cold, aic):>10s}")


def report_decode(doc: dict | None) -> None:
    if doc is None:
        print("decode: no decode.json")
        return
    floor_us = load_profile(doc["profile"]).launch_s["graph"] * 1e6
    for key, case in doc["items"].items():
        if "error" in case:
            print(f"decode {key}: error: {case['error'][:200]}")
            continue
        print(f"decode {key}: layer {case['layer_us']:.1f} us measured, {_us(case.get('sim_layer_us'))} priced "
              f"({_ratio(case['layer_us'], case.get('sim_layer_us'))}x); "
              f"{'CUDA graphs' if case['step']['cuda_graphs'] else 'no CUDA graphs'}"
              + (" (smoke: a toy on the C++ backend)" if doc.get("smoke") else ""))
        print(f"  {'kernel (base name)':64s} {'measured':>9s} {'priced':>7s} {'ratio':>6s}")
        for b, got, priced in kernel_rows(case):
            print(f"  {b[:64]:64s} {_us(got):>9s} {_us(priced):>7s} {_ratio(got, priced):>6s}")
        small = sorted(us for b, us in per_layer_kernels(case).items() if b != EXTERN)[:SMALLEST]
        if small:
            print(f"  smallest {len(small)} kernels a layer: {', '.join(f'{x:.2f}' for x in small)} us "
                  f"(median {statistics.median(small):.2f}; tpsim's floor {floor_us:.2f} us a kernel)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="gpu_kernels.py's --out (e.g. bench/results/gpu/<date>-<gpu>/kernels)")
    a = ap.parse_args(argv)
    if not a.dir.is_dir():
        ap.error(f"{a.dir}: not a directory")
    report_linear(_read(a.dir / "linear.json"))
    report_decode(_read(a.dir / "decode.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
