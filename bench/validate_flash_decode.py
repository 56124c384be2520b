"""The flash decode curve (sim/price/flash_decode.py) against the public points held apart from it.

Each held-apart point is priced with the curve built from the other points of its kernel, at the
point's own GPU's HBM peak: printed with the error, and the median |error| per kernel. (FlashAttention-3
has no point to spare: its two sources cover different byte ranges.)

    python bench/validate_flash_decode.py
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _checkout  # noqa: E402  (this checkout as the package tpsim, whatever is installed)
_checkout.load()

from tpsim.sim.price import flash_decode as fd  # noqa: E402


def main() -> None:
    errs: dict[str, list[float]] = {}
    for kernel, pts in fd.POINTS.items():
        for p in pts:
            if not p.held_apart:
                continue
            t = fd.kernel_s(kernel, p.kv_bytes, p.hbm_gbps * 1e9) * 1e6
            e = 100.0 * (t - p.time_us) / p.time_us
            errs.setdefault(kernel, []).append(abs(e))
            print(f"{kernel:10s} batch {p.batch:3d} kv_len {p.kv_len:6d} kv_heads {p.kv_heads:2d} x {p.head_dim:3d} "
                  f"{p.kv_bytes / 1e6:9.2f} MB  measured {p.time_us:9.2f} us  priced {t:9.2f} us  {e:+6.1f}%  "
                  f"({p.source.split(' ')[0]})")
    for kernel, es in errs.items():
        print(f"{kernel}: {len(es)} held-apart points, median |error| {statistics.median(es):.1f}%")


if __name__ == "__main__":
    main()
