"""The built-in profiles' memory curve (tools/derive_profiles/curves.py): per half-decade of bytes,
the median over the GEMM rows that stream as a generated kernel of a decode step does (the cuBLAS
grid fills the GPU, the collector's rotation ran cold), where a bin has MIN_ROWS of them; every row
elsewhere. Toy rows, hand-counted."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "derive_profiles"))      # the derivation's parts, beside its script

import curves  # noqa: E402

from tpsim.sim.hardware.profile import load_profile  # noqa: E402


def test_a_bin_takes_its_preferred_rows_only_when_it_has_five():
    """11 rows in the bin [1e6, 3.16e6) B: six at 0.2 of the HBM rate, five at 0.6. All of them: median
    0.2; the five 0.6 rows preferred: 0.6; only four preferred: too few, every row again: 0.2. The bin's
    centre is sqrt(1e6 x 10**6.5) = 1.78e6. A bin of 4 rows is left out."""
    x = np.array([1.5e6] * 11 + [5e7] * 4)
    y = np.array([0.2] * 6 + [0.6] * 5 + [0.9] * 4)
    five = np.array([False] * 6 + [True] * 5 + [False] * 4)
    four = np.array([False] * 7 + [True] * 4 + [False] * 4)
    assert curves.binned(x, y, 6, 8) == ([1.78e6], [0.2])
    assert curves.binned(x, y, 6, 8, prefer=five) == ([1.78e6], [0.6])
    assert curves.binned(x, y, 6, 8, prefer=four) == ([1.78e6], [0.2])


def test_the_rows_that_stream_like_a_generated_kernel_fill_the_gpu_and_ran_cold():
    """At m 4 on h100-sxm (132 SMs, cublas-sm90: ceil(n / 64) CTAs; its gpu-l2-cache sweep):
    n 8448 = 132 x 64 fills the GPU, and k 8192 rotates 6 x 2 (4 x 8192 + 4 x 8448 + 8448 x 8192) =
    831,270,912 B (cold): yes. n 8384 is 131 CTAs: no. k 64 rotates 6 x 2 (256 + 33,792 + 540,672) =
    6,896,640 B, inside L2 (warm): no. Without a sourced grid (A100, L40S) no row is preferred."""
    l2 = load_profile("h100-sxm").l2
    m, n, k = np.array([4, 4, 4]), np.array([8448, 8384, 8448]), np.array([8192, 8192, 64])
    assert curves.streams_like_generated(m, n, k, 132, "cublas-sm90", l2, 80.0).tolist() == [True, False, False]
    assert curves.streams_like_generated(m, n, k, 132, None, l2, 80.0).tolist() == [False] * 3
    assert curves.streams_like_generated(m, n, k, 132, "cublas-sm90", None, 80.0).tolist() == [False] * 3


def test_the_h100_memory_curve_says_which_rows_it_took():
    """The committed curve carries the rule in its source, and its >= 10 MB bins are the faster
    streaming ones (17.8 MB: 0.5896 of the HBM rate, against 0.5206 over every row)."""
    curve = load_profile("h100-sxm").raw["compute"]["memory_efficiency"]
    assert "fills the GPU" in curve["source"] and "ran cold" in curve["source"]
    assert curve["efficiency"][curve["bytes"].index(1.78e7)] == 0.5896
    a100 = load_profile("a100-sxm").raw["compute"]["memory_efficiency"]["source"]
    assert "every shape (no sourced cuBLAS grid" in a100
