"""Decode linears on the reference GPU stack (issue 25 item 3): which kernel prices them.

At batch 1 every linear of a compiled decode step has M == 1, and Inductor (coordinate descent
tuning on, a GPU device: torch/_inductor/decomposition.py `mm`) rewrites it into a generated
mul + sum reduction; tpsim prices that kernel by its DRAM bytes at the profile's memory curve
(sim/price/cost.py kernel_terms), never from the cuBLAS table. At batch >= 2 the mm stays extern
cuBLAS: the table's row prices it. Toy curves below so the two paths cannot be confused.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpsim.sim.price import fusion, l2_traffic
from tpsim.sim.price.cost import CostModel
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.schema import Curve
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step

_SPEC = importlib.util.spec_from_file_location(
    "validate_gemm_tables", Path(__file__).resolve().parent.parent / "bench" / "validate_gemm_tables.py")
V = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(V)        # torch-free: the bench script's functions, its main() not run

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


def test_validate_gemm_tables_prints_its_four_checks():
    """bench/validate_gemm_tables.py (validation only) runs torch-free and converts the published
    TFLOPS to time: Humming's m = 1 row, 2.30 TFLOPS at n = k = 8192, is 2 x 8192^2 / 2.30e12 =
    58.36 us."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "bench" / "validate_gemm_tables.py"), "--aic", "/nonexistent"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "58.36" in out and "2. skipped" in out
    assert out.count("ratio public / priced") == 2
    # check 4: 8B TP8's qkv (768 x 4096) rotated 6 times at m 4 is 6 x 2 (4 x 4096 + 4 x 768 + 768 x 4096)
    # = 37,982,208 B, inside gpu-l2-cache's L2 plateau (to 40,448 kB): timed all warm
    assert re.search(r"llama-3.1-8b TP8 +qkv +768x4096 +6\.3 +6 +38\.0 +1\.00 ", out)


def test_the_gemm_tables_collector_rotates_at_most_six_copies_within_its_memory_budget():
    """aiconfigurator collect_gemm.py: min(6, 0.45 x memory // persistent bytes), 1 when one copy is
    over the budget. Toy 1 GiB device: budget 483,183,820 B; a 100,000,000 B weight (m 0 rows aside)
    fits 4 times; 600,000,000 B once; a small one 6 times."""
    assert V.aic_collector.copies(1, 50_000, 1_000, 1.0) == 4      # 2 (1000 + 50000 + 5e7) = 100,102,000 B
    assert V.aic_collector.copies(1, 300_000, 1_000, 1.0) == 1
    assert V.aic_collector.copies(4, 768, 4096, 80.0) == 6
    rows = {(r[0], r[1]): r for r in V.warm_rows(load_profile("h100-sxm"), CostModel(load_profile("h100-sxm"), Stack()))}
    assert rows[("llama-3.1-8b TP8", "qkv")][6] == 1.0                 # 38 MB rotation: in L2
    assert rows[("llama-3.1-8b TP1", "qkv")][6] == 0.0                 # 302 MB: beyond it


def test_the_cold_line_of_a_grid_goes_through_its_cold_rows():
    """Two toy rows of one cuBLAS grid (n 640: ceil(640 / 64) = 10 CTAs at m 4), both rotating far
    beyond L2 (6 copies of 84 / 168 MB): W 83,886,080 B in 30 us and 167,772,160 B in 50 us -> the
    line t = 10 us + W x 20 us / 83,886,080 B, no residual. A warm toy row (n 640, k 1024: 6 x 1.3 MB)
    joins no line."""
    import types
    h100 = load_profile("h100-sxm")
    rows = [(640, 65536, (30e-6,)), (640, 131072, (50e-6,)), (640, 1024, (2e-6,))]
    toy = types.SimpleNamespace(gemm_tables=[types.SimpleNamespace(m=(4,), rows=rows)],
                                memory_gib=80.0, l2=h100.l2)
    a, slope, rms = V.cold_lines(toy, 4)[10]
    assert a == pytest.approx(10e-6) and slope == pytest.approx(20e-6 / 83_886_080) and rms == pytest.approx(0, abs=1e-12)
    assert V.rotation_hit(toy, 4, 640, 1024)[2] == 1.0


def test_sequential_sweeps_add_after_the_first_and_miss_beyond_l2():
    """A toy wo-like kernel: weight W = 1,000,000 B read once per batch row (passes b, b = 4) and a
    write of 8,000 B. Its DRAM time is a toy 1 us; the 3 further sweeps take 3 x 1e6 B at a toy
    L2 rate 1e12 B/s = 3 us when all hit (4 us in total, where the GQA-style max would say 4e6 /
    1e12 = 4.008 us vs 1 us -> 4.008 us); with half of them missing at a toy DRAM 0.5e12 B/s,
    3e6 x (0.5 / 1e12 + 0.5 / 0.5e12) = 4.5 us more."""
    sym = {"b": 4, "hidden": 1000}
    k = fusion.Kernel("attn.out", "generated", "toy", (), (
        fusion.Buffer("read", "float16", "hidden*hidden*2", passes="b"),
        fusion.Buffer("write", "float16", "b*hidden")))
    assert k.bytes(sym, 2) == 4_000_000 + 8_000
    assert k.l2_bytes(sym, 2) == 16_008_000
    assert k.sweeps(sym, 2) == [(4_000_000, 3.0)]
    assert l2_traffic.resweep_s(1e6, 3, 1.0, 1e12, 0.5e12) == pytest.approx(3e-6)
    assert l2_traffic.resweep_s(1e6, 3, 0.5, 1e12, 0.5e12) == pytest.approx(4.5e-6)
    assert k.sweeps({"b": 1, "hidden": 1000}, 2) == []                 # one row: one sweep, no re-read
    gqa = fusion.Kernel("attn.sdpa", "generated", "toy", (), (fusion.Buffer("read", "float16", "hidden", passes="G"),))
    assert gqa.sweeps({"hidden": 1000, "G": 8}, 2) == []                 # interleaved re-reads: not sweeps


def test_the_l2_hit_fraction_follows_the_sourced_sweep_curve():
    """te42kyfo gpu-l2-cache h200.txt (stands for h100-sxm): the sweep holds in L2 to 40,448 kB,
    is DRAM-bound from 91,648 kB; at 63,488 kB it ran 4,463.9 GB/s against the 10.03 TB/s L2 and
    3,887.9 GB/s DRAM plateaus: f = (1/4463.9 - 1/3887.9) / (1/10030 - 1/3887.9) = 0.2107. A100's
    smaller L2 (its own file) misses earlier, the L40S's 96 MB (the L40's l40.txt) later; a profile
    without compute.l2 has no curve. The curve is the profile's (compute.l2.sweep), so the twins have
    it through `extends`."""
    hit = lambda name, nbytes: l2_traffic.l2_hit_fraction(load_profile(name).l2, nbytes)  # noqa: E731
    assert hit("h100-sxm", 16_777_216) == 1.0          # 70B TP8 wo weight
    assert hit("h100-sxm", 63_488 * 1024) == pytest.approx((1 / 4463.9 - 1 / 3887.9) / (1 / 10030 - 1 / 3887.9))
    assert hit("h100-sxm", 63_488 * 1024) == pytest.approx(0.2107, abs=1e-4)
    assert hit("h100-sxm", 134_217_728) == 0.0         # 70B TP1 wo weight
    assert hit("h100-sxm-p2p-off", 16_777_216) == 1.0
    assert hit("a100-sxm", 33_554_432) < hit("h100-sxm", 33_554_432)
    assert hit("l40s-pcie", 67_108_864) == 1.0 and hit("h100-sxm", 67_108_864) < 0.2
    assert hit("l40s-pcie", 134_217_728) == 0.0
    # an L2 rate without a sweep curve: no hit fraction (the further sweeps are priced all from L2)
    assert l2_traffic.l2_hit_fraction(l2_traffic.L2Spec(10.03e12), 1e6) is None


def test_70b_tp2_batch_4_weight_sweeps_come_from_dram():
    """A weight read once per batch row (passes b: what a plain make_fx trace made of the reference's
    wo, hw/derive/fake_views.py), at 70B TP2 batch 4: the wo-shaped weight [8192, 4096] fp16 is 67,108,864 B,
    past the sweep curve's L2 range (hit fraction 0.182), so its 3 further sweeps are mostly DRAM
    traffic: such a kernel costs about 4x the batch-1 GEMV, where the reference's extern mm (the GEMM
    table) costs about 1x."""
    s4, op4, st = _op(4, "L1.attn.out", tp=2)
    s1, op1, _ = _op(1, "L1.attn.out", tp=2)
    cm = CostModel(H100, st)
    k = fusion.Kernel("attn.out", "generated", "toy", (), (
        fusion.Buffer("read", "float16", "2*b*kvh*G*dh"),
        fusion.Buffer("read", "float16", "2*kvh*G*hidden*dh", "b"),
        fusion.Buffer("write", "float16", "b*hidden")))
    assert k.sweeps(fusion.symbols(s4, op4), 2) == [(67_108_864, 3.0)]
    hit = l2_traffic.l2_hit_fraction(H100.l2, 67_108_864)
    dram = 3.35e12 * H100.memory_efficiency(67_108_864)
    extra = 3 * 67_108_864 * (hit / 10.03e12 + (1 - hit) / dram)
    (term,) = cm.kernel_terms(op4, [k], s4, True)
    assert term["s"] == pytest.approx(
        term["dram_bytes"] / (3.35e12 * H100.memory_efficiency(term["dram_bytes"])) + extra)
    gemv = cm.compute_s(op1, "decode", s1)
    assert 3.0 < term["s"] / gemv < 4.5
    assert [k.kind for k in fusion.kernels(fusion.lookup(s4, op4, "cuda"))] == ["matmul"]
    assert 0.8 < cm.compute_s(op4, "decode", s4) / gemv < 1.3
