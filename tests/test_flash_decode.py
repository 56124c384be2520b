"""Flash / paged decode attention (sim/price/flash_decode.py): the achieved-bandwidth curve and its hook."""
import math

import pytest

from tpsim.sim.price import flash_decode as fd
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import op_work, roofline_s
from tpsim.sim.schedule.ir import Op
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.stack.spec import Stack

H100_BW = 3.35e12


def test_curve_reproduces_its_points_and_interpolates_in_log_bytes():
    # FlashInfer batch 1, 4 KV heads x 128, bf16 on H100 (vllm-project/flash-attention#63):
    # kv_len 1024 -> 2 x 1024 x 4 x 128 x 2 = 2097152 B in 12.3 us; kv_len 2048 -> 4194304 B in 14.2 us
    assert fd.kernel_s("flashinfer", 2097152, H100_BW) == pytest.approx(12.3e-6)
    assert fd.kernel_s("flashinfer", 4194304, H100_BW) == pytest.approx(14.2e-6)
    # halfway in log(bytes) (the geometric mean, 2965820 B): the mean of the two fractions,
    # f = bytes / time / 3.35 TB/s
    f0, f1 = 2097152 / 12.3e-6 / H100_BW, 4194304 / 14.2e-6 / H100_BW
    mid = math.sqrt(2097152 * 4194304)
    assert fd.fraction("flashinfer", mid) == pytest.approx((f0 + f1) / 2)
    assert fd.kernel_s("flashinfer", mid, H100_BW) == pytest.approx(mid / ((f0 + f1) / 2 * H100_BW))
    # below the smallest point: its time (the latency floor); above the largest: its fraction
    assert fd.kernel_s("flashinfer", 1000, H100_BW) == pytest.approx(12.3e-6)
    # FA3's largest point: batch 16, kv_len 4000, 32 KV heads x 128, fp16 on H100 = 1048576000 B in 567.2 us
    assert fd.kernel_s("fa3", 2 * 1048576000, H100_BW) == pytest.approx(2 * 567.2e-6)


def test_held_apart_points_stay_out_of_the_curve():
    used = {b for b, _ in fd.curve("fa2")}
    apart = {b for b, _ in fd.curve("fa2", held_apart=True)}
    assert apart and len(fd.curve("fa2")) == 11      # the head_dim 64 table only
    assert len(fd.curve("flashinfer", held_apart=True)) == 2 and used


def _attn(impl, q_len=1, kv_len=2100, batch=8):
    attrs = dict(batch=batch, q_len=q_len, kv_len=kv_len, start_pos=kv_len - q_len, heads=16, kv_heads=2,
                 head_dim=128, expand_gqa=False, impl=impl)
    return Op("l0.attn.sdpa", "attention", (), (), tuple(sorted(attrs.items())), "fp16")


def test_decode_attention_hook_prices_the_kernel_from_the_curve():
    """Decode (q_len 1) under a flash stack: RoPE + cache write at their roofline, the attention kernel
    from the curve over the filled KV (2 x 8 x 2100 x 2 x 128 x 2 B = 17203200 B); prefill and math
    SDPA keep the roofline."""
    prof = load_profile("h100-sxm")
    cm = CostModel(prof, Stack(attention="fa3"))
    op = _attn("fa3")
    others = [w for w in op_work(op, True) if not w.matmul]
    want = roofline_s(prof, others, "fp16") + fd.kernel_s("fa3", 17203200, prof.mem_bytes_per_s)
    assert cm.compute_s(op, "decode") == pytest.approx(want)
    assert fd.attention_kernel(_attn("fa3", q_len=32, kv_len=32), cm.profile.mem_bytes_per_s) is None
    assert fd.attention_kernel(_attn("math"), cm.profile.mem_bytes_per_s) is None
    # plain "flash" is PyTorch SDPA's FlashAttention-2 backend
    assert CostModel(prof, Stack(attention="flash")).compute_s(_attn("flash"), "decode") == pytest.approx(
        roofline_s(prof, others, "fp16") + fd.kernel_s("fa2", 17203200, prof.mem_bytes_per_s))


def test_fa3_runs_as_fa2_off_hopper_as_vllm_picks_it():
    """FlashAttention-3 is Hopper-only; vLLM's get_flash_attn_version takes FA2 on any other GPU. A
    profile stating compute capability 8.0 (A100) prices an fa3 stack's decode attention with FA2's
    curve and says so once; 9.0 (H100) and an unstated capability keep FA3; other kernels never move."""
    assert fd.kernel_on("fa3", 9.0) == ("fa3", "")
    assert fd.kernel_on("fa3", None) == ("fa3", "")
    kernel, note = fd.kernel_on("fa3", 8.0)
    assert kernel == "fa2" and "FlashAttention-3 runs on Hopper" in note and "(8.0)" in note
    assert fd.kernel_on("flashinfer", 8.9) == ("flashinfer", "") and fd.kernel_on("math", 8.0) == (None, "")
    a100 = load_profile("a100-sxm")
    assert a100.compute_capability == 8.0 and load_profile("h100-sxm").compute_capability == 9.0
    op = _attn("fa3")
    fa3_stack, fa2_stack = CostModel(a100, Stack(attention="fa3")), CostModel(a100, Stack(attention="fa2"))
    others = roofline_s(a100, [w for w in op_work(op, True) if not w.matmul], "fp16")
    got = fa3_stack.compute_s(op, "decode")           # 2 x 8 x 2100 x 2 x 128 x 2 B = 17203200 B of KV
    assert got == pytest.approx(others + fd.kernel_s("fa2", 17203200, a100.mem_bytes_per_s))
    assert got != pytest.approx(others + fd.kernel_s("fa3", 17203200, a100.mem_bytes_per_s))
    assert got == pytest.approx(fa2_stack.compute_s(_attn("fa2"), "decode"))
    # the fallback is said once, for the fa3 stack only (a100-sxm has no compute.decode_attention: both say
    # that too, sim/price/decode_grid.py)
    grid_note = [n for n in fa2_stack.notes if "compute.decode_attention" in n]
    assert fa3_stack.notes == (*grid_note, note) and fa2_stack.notes == tuple(grid_note) and len(grid_note) == 1


def test_an_engines_prep_kernels_replace_pytorchs_rope_and_cache_copies():
    """Stack.attention_prep_kernels (attr "prep"): the engine's own RoPE / cache-write kernels. 0 keeps
    PyTorch's ops (eager RoPE 8 kernels, compiled 1; 2 cache copies); 1 (TensorRT-LLM) one kernel
    doing both; 3 (SGLang) RoPE in one, the cache write in two. Same bytes in every case:
    RoPE 2 x 2 B x 8 x (16 + 2) x 128 = 73728 B read and written, cache 4 x 2 B x 8 x 2 x 128 = 16384 B."""
    from tpsim.sim.price.work import Work

    def prep(n):
        op = _attn("fa3")
        attrs = dict(op.attrs) | ({"prep": n} if n else {})
        return Op(op.name, op.kind, (), (), tuple(sorted(attrs.items())), "fp16")
    rope_flops = 6.0 * 8 * (16 + 2) * 128
    assert op_work(prep(0), False)[:2] == [Work(rope_flops, 73728, 8), Work(0.0, 16384, 2)]
    assert op_work(prep(0), True)[:2] == [Work(rope_flops, 73728, 1), Work(0.0, 16384, 2)]
    for fused in (False, True):
        assert op_work(prep(1), fused)[:1] == [Work(rope_flops, 73728 + 16384, 1)]
        assert op_work(prep(3), fused)[:2] == [Work(rope_flops, 73728, 1), Work(0.0, 16384, 2)]
    # eager decode under CUDA graphs (SGLang): the op's floor is its kernels x launch.graph, 11 with
    # PyTorch's ops, 4 with SGLang's, each + FA3's combine kernel (its heuristic splits 17 blocks of 128
    # over 2 KV heads: sim/price/decode_grid.py); the curve's FA3 time is above the 5-kernel floor
    prof = load_profile("h100-sxm")
    eager = CostModel(prof, Stack(attention="fa3", compile_decode=False))
    floor = prof.launch_s["graph"]
    assert eager.compute_s(prep(0), "decode") == pytest.approx((11 + 1) * floor)
    want = roofline_s(prof, [w for w in op_work(prep(3), False) if not w.matmul], "fp16") \
        + fd.kernel_s("fa3", 17203200, prof.mem_bytes_per_s)
    assert eager.compute_s(prep(3), "decode") == pytest.approx(want) and want > 5 * floor


def test_prep_kernels_are_an_attr_only_when_a_stack_sets_them():
    from tpsim.sim.model.presets import get_model
    from tpsim.sim.schedule.language import build
    from tpsim.sim.stack.spec import Step
    m = get_model("llama-3.1-8b")
    for n, has in ((0, False), (2, True)):
        st = Stack(attention="fa3", kv="filled", attention_prep_kernels=n)
        sdpa = next(op for op in build("standard", m, 2, Step.decode(2, 16, 4, 1, st), st).ops
                    if op.kind == "attention")
        assert ("prep" in dict(sdpa.attrs)) is has and dict(sdpa.attrs).get("prep", 0) == n
    with pytest.raises(ValueError, match="attention_prep_kernels must be an integer"):
        Stack(attention_prep_kernels=-1)
    with pytest.raises(ValueError, match="unknown attention_fallback"):
        Stack(attention_fallback="fa3")
