"""bench/gpu_report.py reads a GPU run of bench/gpu_kernels.py: hand-built toy documents in its JSON
shape, every number hand-computed (the smoke run's real documents: tests/test_gpu_kernels_smoke.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("gpu_report", ROOT / "bench" / "gpu_report.py")
R = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(R)        # torch-free: the script's functions, its main() not run


def test_linear_puts_the_tables_rotation_between_the_price_and_the_cold_weight(capsys):
    """A toy 8B-TP8-like qkv at m 4: priced 6.5 us, one warm weight 5.0, the table's rotation 6.0, cold
    7.5 -> table / priced 6.0 / 6.5 = 0.92 (the table reproduces), cold / table 7.5 / 6.0 = 1.25 (the
    warm bias). An untimed item (a smoke run) is left out of the rows."""
    doc = {"smoke": False, "items": {
        "llama-3.1-8b:tp8:qkv:m4": {"weight_mb": 6.3, "sim_cublas_us": 6.5, "graph_us": 5.0,
                                    "graph_aic_us": 6.0, "graph_cold_us": 7.5},
        "llama-3.1-8b:tp8:wo:m4": {"weight_mb": 4.2, "sim_cublas_us": 3.5, "timed": False}}}
    assert R.linear_rows(doc) == [("llama-3.1-8b:tp8:qkv:m4", 6.3, 6.5, 5.0, 6.0, 7.5)]
    R.report_linear(doc)
    out = capsys.readouterr().out
    assert " 0.92 " in out and out.rstrip().endswith("1.25")
    R.report_linear({"smoke": True, "items": {"a": {}}})
    assert "untimed (--smoke run): 1 items priced only" in capsys.readouterr().out


def test_decode_compares_each_kernel_per_layer_and_groups_library_kernels():
    """A toy 2-layer step: a Triton kernel launched once a layer (3 us), a cuBLAS GEMM (10 us) and the
    embedding (1 us, also in the 0-layer step). Per layer: triton_red_fused_bmm 3.0 us against its
    2.5 us price, the library kernels 10.0 us against the extern matmul's 9.0 us; the largest gap
    first. Names lose their graph prefix and numeric suffix."""
    case = {"step": {"layers": 2, "cuda_graphs": True, "kernels": [
                {"base": "embedding", "us": 1.0},
                {"base": "triton_red_fused_bmm", "us": 3.0}, {"base": "sm90_xmma_gemm_f16", "us": 10.0},
                {"base": "triton_red_fused_bmm", "us": 3.0}, {"base": "sm90_xmma_gemm_f16", "us": 10.0}]},
            "step_0layers": {"layers": 0, "kernels": [{"base": "embedding", "us": 1.0}]},
            "sim_kernels": [{"op": "attn.sdpa", "name": "triton_red_fused_bmm_3", "us": 2.5},
                            {"op": "attn.qkv", "name": "extern_kernels.mm", "us": 9.0}]}
    assert R.base("graph_0_triton_red_fused_bmm_3") == "triton_red_fused_bmm"
    assert R.kernel_rows(case) == [(R.EXTERN, pytest.approx(10.0), 9.0), ("triton_red_fused_bmm", 3.0, 2.5)]
