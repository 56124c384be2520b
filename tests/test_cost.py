"""Cost model: measured points win and interpolate, the roofline fills in, collectives interpolate
in log-log and follow the profile's implementation."""
import dataclasses
import math

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import op_work, roofline_s
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import CollectiveTable, ComputePoint, load_profile
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step

H100 = load_profile("h100-sxm")
M = get_model("llama-3.1-8b")


def op_named(name, step, stack=Stack()):
    return next(o for o in build("standard", M, 2, step, stack).ops if o.name == name)


def with_points(*pts):
    """H100 with these measured points and no others (its GEMM tables dropped too)."""
    return dataclasses.replace(H100, compute_points=tuple(pts), gemm_tables=())


def test_roofline_gemm_is_bandwidth_bound_at_batch_1():
    op = op_named("L0.mlp.up", Step.decode(1, 1024, 512, 1, Stack()))
    (w,) = op_work(op, fused=True)
    assert w.flops == 2 * 1 * 14336 * 4096 and w.bytes == 2 * (4096 + 4096 * 14336 + 14336)
    t = roofline_s(H100, [w], "fp16")
    assert t == pytest.approx(w.bytes / (H100.mem_bytes_per_s * H100.memory_efficiency(w.bytes)))


def test_measured_point_wins_and_interpolates_log_log():
    st = Stack()
    op = op_named("L0.mlp.up", Step.prefill(1, 64, 8, st))          # m = 64
    attrs = dict(op.attrs)
    pts = [ComputePoint("gemm", tuple(sorted({**attrs, "m": m}.items())), "fp16", t)
           for m, t in ((32, 10e-6), (128, 40e-6))]
    cm = CostModel(with_points(*pts), st)
    # halfway in log(m) between (32, 10us) and (128, 40us): 20us exactly
    assert cm.compute_s(op, "prefill") == pytest.approx(20e-6)
    exact = ComputePoint("gemm", tuple(sorted(attrs.items())), "fp16", 33e-6)
    assert CostModel(with_points(exact, *pts), st).compute_s(op, "prefill") == pytest.approx(33e-6)


def test_eager_measured_fusable_op_does_not_price_a_compiled_step():
    st = Stack(compile_prefill=False)
    op = op_named("L0.attn.norm", Step.decode(1, 1024, 512, 1, st))
    pt = ComputePoint("rmsnorm", tuple(sorted(dict(op.attrs).items())), "fp16", 99e-6, "eager")
    cm = CostModel(with_points(pt), st)
    assert cm.compute_s(op, "prefill") == pytest.approx(99e-6)       # prefill runs eager here
    assert cm.compute_s(op, "decode") < 20e-6                         # decode compiled: fused roofline


def test_collective_table_log_log_and_impl():
    cm = CostModel(H100, Stack())
    t = next(t for t in H100.collective_tables if (t.collective, t.group, t.mode, t.impl) ==
             ("all_reduce", 8, "graph", "nccl"))
    b0, b1, y0, y1 = t.bytes[3], t.bytes[4], t.time_s[3], t.time_s[4]
    mid = math.sqrt(b0 * b1)
    # on top of the bare kernel: NCCL's graph-mixing record node (1.31 us); no copy for the compiled
    # functional collective (graph_extra 0: Inductor writes the GEMM's output in place)
    g = H100.graph_extra_s + H100.graph_nccl_node_s
    assert (H100.graph_extra_s, g) == (0.0, pytest.approx(1.31e-6))
    assert cm.collective_s("all_reduce", mid, 8, "graph") == pytest.approx(math.sqrt(y0 * y1) + g)
    assert cm.collective_s("all_reduce", b0, 8, "graph") == pytest.approx(y0 + g)
    custom = CostModel(H100, Stack(collective="custom")).collective_s("all_reduce", 16384, 8, "graph")
    assert custom < cm.collective_s("all_reduce", 16384, 8, "graph")   # one-shot custom AR beats NCCL small
    gloo = CollectiveTable("all_reduce", 2, "node", "eager", "gloo", (1024.0, 65536.0), (1e-3, 2e-3), "test")
    prof = dataclasses.replace(H100, collective_tables=(gloo,), default_impl="gloo")
    assert CostModel(prof, Stack()).collective_s("all_reduce", 1024, 2, "eager") == pytest.approx(1e-3)


def test_group_of_one_costs_nothing_without_a_table():
    assert CostModel(H100, Stack()).collective_s("all_reduce", 1 << 20, 1, "graph") == 0.0


def test_an_engines_own_eager_kernels_price_a_decode_layer_as_it_launches():
    """Stack.engine_kernels: in an eager phase an engine runs fused_add_rmsnorm (one kernel, the residual
    add inside it) and silu_and_mul (one), not PyTorch's six fp32 norm passes, two SwiGLU kernels and a
    separate add. 8B TP2 decode at batch 8: a norm reads and writes [8, 4096] fp16 = 2 x 2 x 32768 B."""
    from tpsim.sim.price.work import Work
    step = Step.decode(8, 64, 8, 1, Stack())
    norm, act, add = (op_named(n, step) for n in ("L0.mlp.norm", "L0.mlp.act", "L0.attn.add"))
    el = 8 * 4096
    assert op_work(norm) == [Work(4.0 * el, 7 * 4 * el, 6)]
    assert op_work(norm, engine=True) == [Work(4.0 * el, 2 * 2 * el + 2 * 4096, 1)]     # + its weight
    assert op_work(act)[0].kernels == 2 and op_work(act, engine=True)[0].kernels == 1
    assert op_work(add)[0].kernels == 1 and op_work(add, engine=True)[0].kernels == 0
    assert op_work(add, fused=True, engine=True)[0].kernels == 1      # compiled: Inductor's kernels, not the engine's
    # eager decode under CUDA graphs: the floor is launch.graph per kernel; the engine's norm is one
    # kernel at the memory roofline, PyTorch's six floors; the engine's add launches nothing
    floor = H100.launch_s["graph"]
    torch_eager = CostModel(H100, Stack(compile_decode=False))
    engine = CostModel(H100, Stack(compile_decode=False, engine_kernels=True))
    assert torch_eager.compute_s(norm, "decode") == pytest.approx(6 * floor)
    assert engine.compute_s(norm, "decode") == pytest.approx(max(roofline_s(H100, op_work(norm, engine=True), "fp16"),
                                                                 floor))
    assert engine.compute_s(add, "decode") == pytest.approx(2 * 2 * el / H100.mem_bytes_per_s)
    assert engine.compute_s(add, "decode") < 0.05 * torch_eager.compute_s(add, "decode")     # 39 ns vs 3.3 us


def test_an_engines_fused_add_rms_norm_moves_four_passes_and_its_weight():
    """vLLM fused_add_rms_norm (csrc/layernorm_kernels.cu) / FlashInfer FusedAddRMSNorm: read input and
    residual, write residual and the output: 4 passes over [rows, width], plus the weight [width] once.
    Toy: 3 rows x 8 wide fp16 (48 B a pass): norm 2 passes + 16 B of weight, the add 2 passes = 208 B,
    not the 5 passes (240 B) of a norm plus a separate add."""
    from tpsim.sim.schedule.ir import Op
    norm = Op("n", "rmsnorm", ("x",), ("y",), (("rows", 3), ("width", 8)), "fp16")
    add = Op("a", "add", ("x", "r"), ("s",), (("rows", 3), ("width", 8)), "fp16")
    (wn,), (wa,) = op_work(norm, engine=True), op_work(add, engine=True)
    assert (wn.bytes, wn.kernels) == (2 * 48 + 16, 1)
    assert (wa.bytes, wa.kernels) == (2 * 48, 0)
    assert wn.bytes + wa.bytes == 4 * 48 + 16
    assert op_work(add)[0].bytes == 3 * 48          # PyTorch's own add kernel: read two, write one


def test_an_engines_qk_norm_is_one_kernel_per_tensor():
    """Qwen3's q/k RMSNorm: 12 PyTorch eager kernels, fused into RoPE when compiled (no kernel of its
    own), and an engine's RMSNorm kernel on q and on k (2) in an eager phase. q [8, 1, 16, 128] and
    k [8, 1, 8, 128] per rank at TP2 hold 8 x (16 + 8) x 128 = 24576 elements."""
    from tpsim.sim.price.work import Work, separable_work
    from tpsim.sim.schedule.ir import Op
    attrs = dict(batch=8, q_len=1, kv_len=64, start_pos=63, heads=16, kv_heads=8, head_dim=128, expand_gqa=0,
                 impl="fa3", qk_norm=1)
    op = Op("L0.attn.sdpa", "attention", (), (), tuple(sorted(attrs.items())), "bf16")
    el = 24576
    assert separable_work(op, False) == [Work(4.0 * el, 7 * 4 * el, 12)]
    assert separable_work(op, True) == [Work(4.0 * el, 2 * 2 * el, 0)]
    assert separable_work(op, False, engine=True) == [Work(4.0 * el, 2 * 2 * el, 2)]
    assert op_work(op, engine=True)[-1] == Work(4.0 * el, 2 * 2 * el, 2)
