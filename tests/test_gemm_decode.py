"""Decode linears on the reference GPU stack (issue 25 item 3): which kernel prices them.

At batch 1 every linear of a compiled decode step has M == 1, and Inductor (coordinate descent
tuning on, a GPU device: torch/_inductor/decomposition.py `mm`) rewrites it into a generated
mul + sum reduction; tpsim prices that kernel by its DRAM bytes at the profile's memory curve
(sim/cost.py kernel_terms), never from the cuBLAS table. At batch >= 2 the mm stays extern
cuBLAS: the table's row prices it. Toy curves below so the two paths cannot be confused.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tpsim.sim import fusion
from tpsim.sim.cost import CostModel
from tpsim.sim.model import get_model
from tpsim.sim.profile import load_profile
from tpsim.sim.profile_schema import Curve
from tpsim.sim.schedule import build
from tpsim.sim.stack import Stack, Step

H100 = load_profile("h100-sxm")


def _op(batch, name="L1.mlp.up", model="llama-3.1-70b", tp=8):
    st = Stack()
    s = build("upper-bound", get_model(model), tp, Step.decode(batch, 1024, 512, 1, st), st)
    return s, next(op for op in s.ops if op.name == name), st


def _flat(eff: float):
    """h100-sxm with a flat toy memory curve (every kernel size gets `eff`)."""
    return dataclasses.replace(H100, memory_efficiency=Curve((1.0,), (eff,)))


def test_batch_1_mlp_up_is_the_generated_gemv_at_the_memory_curve():
    """70B TP8, batch 1: mlp.up (w1 and w3 fused, n = 2 x 3584 = 7168, k = 8192) is one generated
    reduction (decode-m1) that fuses the mlp RMSNorm's scale: it reads the normed input and its
    residual [8192] fp16 (2 x 16,384 B), the rsqrt (1 fp32, 4 B) and the weight [7168, 8192]
    fp16 (117,440,512 B), and writes its fp32 sums [7168] (28,672 B; the SiLU-mul reads them):
    117,501,956 B. At the datasheet 3.35e12 B/s and a toy flat efficiency of 0.5 that is
    70.151 us; at 0.25, twice."""
    s, op, st = _op(1)
    (k,) = fusion.kernels(fusion.lookup(s, op, "cuda"))
    assert k.kind == "generated"
    half = CostModel(_flat(0.5), st)
    (term,) = half.kernel_terms(op, [k], s, True)
    assert term["dram_bytes"] == 2 * 16_384 + 4 + 117_440_512 + 28_672 == 117_501_956
    assert half.compute_s(op, "decode", s) == pytest.approx(117_501_956 / (3.35e12 * 0.5))
    assert CostModel(_flat(0.25), st).compute_s(op, "decode", s) == pytest.approx(
        2 * half.compute_s(op, "decode", s))
    # the cuBLAS table's m = 1 row (44.015 us) is not what prices it
    assert half._measured(op, True) == pytest.approx(44.015e-6)
    assert half.compute_s(op, "decode", s) != pytest.approx(44.015e-6, rel=0.05)


@pytest.mark.parametrize("name", ["L1.attn.qkv", "L1.attn.out", "L1.mlp.up", "L1.mlp.down"])
def test_at_batch_1_no_decode_linear_reads_the_cublas_table(name):
    """Every linear of the batch-1 step is generated (decode-m1): the kernel that reads the weight
    is priced by the memory curve alone (halving the efficiency doubles it; mlp.down's small
    SiLU-mul kernel beside it sits on the launch floor)."""
    s, op, st = _op(1, name)
    ks = fusion.kernels(fusion.lookup(s, op, "cuda"))
    assert ks and all(k.kind == "generated" for k in ks)

    def weight_kernel_s(eff):
        terms = CostModel(_flat(eff), st).kernel_terms(op, ks, s, True)
        return max(terms, key=lambda t: t["dram_bytes"])["s"]
    assert weight_kernel_s(0.4) == pytest.approx(2 * weight_kernel_s(0.8))


def test_batch_2_mlp_up_is_the_extern_cublas_row():
    """Batch 2: M = 2, the mm stays extern (decode variant): the table's m = 2 row for
    (n 7168, k 8192), 44.465 us, whatever the memory curve says."""
    s, op, st = _op(2)
    (k,) = fusion.kernels(fusion.lookup(s, op, "cuda"))
    assert k.kind == "matmul"
    for eff in (0.8, 0.2):
        assert CostModel(_flat(eff), st).compute_s(op, "decode", s) == pytest.approx(44.465e-6)


def test_8b_tp1_batch_1_linears_are_generated_too():
    """8B TP1 (qkv n 6144, k 4096; w13 n 28672): the same decode-m1 kernels, priced by bytes."""
    s, op, st = _op(1, "L1.mlp.up", model="llama-3.1-8b", tp=1)
    (k,) = fusion.kernels(fusion.lookup(s, op, "cuda"))
    (term,) = CostModel(_flat(0.5), st).kernel_terms(op, [k], s, True)
    # reads the two [4096] fp16 rows (2 x 8,192 B), the rsqrt (4 B), the weight [28672, 4096]
    # fp16 (234,881,024 B); writes [28672] fp32 (114,688 B)
    assert term["dram_bytes"] == 2 * 8_192 + 4 + 234_881_024 + 114_688
    assert term["s"] == pytest.approx(term["dram_bytes"] / (3.35e12 * 0.5))


def test_the_lm_head_at_batch_1_is_the_generated_gemv_too():
    """The reference compiles decode_one_token whole (model.output included), so the replicated LM
    head of the batch-1 step is an mm with M == 1 as well: a generated reduction reading the
    weight [128256, 8192] fp16 once. By hand: reads x [8192] (16,384 B) and the weight
    (2,101,346,304 B), writes [128256] (256,512 B): 2,101,619,200 B, at 3.35e12 B/s x 0.5 =
    1254.7 us. vLLM's graph_scope "forward" runs the head eagerly outside the compiled model
    (cuBLAS): the table's m = 1 row; batch 2 is the table's m = 2 row on the reference."""
    s, head, st = _op(1, "head")
    assert dict(head.attrs) == {"m": 1, "n": 128256, "k": 8192}
    half = CostModel(_flat(0.5), st)
    assert half.generated_gemv(head, True) and not half.generated_gemv(head, False)
    assert half.compute_s(head, "decode", s) == pytest.approx(2_101_619_200 / (3.35e12 * 0.5))
    eager_head = CostModel(_flat(0.5), dataclasses.replace(st, graph_scope="forward"))
    assert not eager_head.generated_gemv(head, True)
    assert eager_head.compute_s(head, "decode", s) == pytest.approx(eager_head._measured(head, True))
    s2, head2, _ = _op(2, "head")
    assert not half.generated_gemv(head2, True)
    assert half.compute_s(head2, "decode", s2) == pytest.approx(half._measured(head2, True))
    # a CPU device keeps its table / roofline (the decomposition is Inductor's GPU path only)
    cpu = dataclasses.replace(_flat(0.5), device="cpu")
    assert not CostModel(cpu, st).generated_gemv(head, True)


def test_validate_gemm_tables_prints_the_three_checks():
    """bench/validate_gemm_tables.py (validation only) runs torch-free and converts the published
    TFLOPS to time: Humming's m = 1 row, 2.30 TFLOPS at n = k = 8192, is 2 x 8192^2 / 2.30e12 =
    58.36 us."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "bench" / "validate_gemm_tables.py"), "--aic", "/nonexistent"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "58.36" in out and "2. skipped" in out
    assert out.count("ratio public / priced") == 2
