"""The overlap techniques engines ship without retraining (issue 45): the fused all-reduce + add + RMSNorm
(a stack option), async-tp, dbo and tokenweave (schedules). Their dataflow op by op, their timelines on toy
integer costs, their kernels' prices by hand, and the bad input they refuse.

Toy costs (tests/test_no_retraining.py's): per full-batch GEMM qkv 2, out 2, up 4, down 2, scaled by the
op's rows (compute-bound); norms 1 here unless fused into an all-reduce (0); other compute 0; collectives
and ring steps fixed."""
import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import ModelSpec, get_model
from tpsim.sim.price.comm import async_tp, custom_allreduce as car, fused_allreduce as far
from tpsim.sim.price.cost import CostModel
from tpsim.sim.schedule.language import build, model_change
from tpsim.sim.stack.ar_fusion import fused_kernel
from tpsim.sim.stack.spec import Stack, Step

ST = Stack()
ONE = ModelSpec("toy-1l", 64, 1, 4, 2, 16, 128, 256)
FULL = {"attn.qkv": 2, "attn.out": 2, "mlp.up": 4, "mlp.down": 2}
H100 = load_profile("h100-sxm")


def op(s, name):
    return next(o for o in s.ops if o.name == name)


def toy(comm: dict, full_rows: int, norm: float = 0.0):
    """Op times: layer GEMMs by FULL x rows / full_rows (the role after the layer / micro-batch / block tag),
    norms `norm` unless fused, collectives by kind."""
    def t(o):
        if o.is_comm:
            return comm[o.kind]
        if o.kind == "rmsnorm":
            return 0.0 if o.get("fused", 0) else norm
        if o.kind != "gemm" or o.layer is None:
            return 0.0
        parts = o.name.split(".")
        role = ".".join(p for p in parts[1:] if not (p.startswith("mb") or p[0] == "r" and p[1:].isdigit()))
        return FULL[role] * o.attr("m") / full_rows
    return t


# ---------------------------------------------------------------- fused all-reduce + add + RMSNorm

def test_fused_all_reduce_marks_its_add_and_norm_and_the_window_decides():
    st = Stack(ar_norm_fusion="vllm")
    s = build("standard", ONE, 2, Step.decode(2, 8, 4, 1, st), st)
    ar = dict(op(s, "L0.attn.allreduce").attrs)
    assert (ar["fuse"], ar["kernel"]) == ("add_norm", "oneshot")
    assert op(s, "L0.attn.add").get("fused", 0) == 1 and op(s, "L0.mlp.norm").get("fused", 0) == 1
    assert op(s, "L0.mlp.add").get("fused", 0) == 1 and op(s, "final.norm").get("fused", 0) == 1
    assert op(s, "L0.attn.norm").get("fused", 0) == 0            # the embedding's output: nothing fused before it
    # vLLM's SM90 window (v0.11): TP8 fused up to 1 MiB, one-shot throughout; TP4 2 MiB; TP2 64 MiB, one-shot to 32
    assert fused_kernel("vllm", 64, 8192, 8) == "oneshot" and fused_kernel("vllm", 65, 8192, 8) is None
    assert fused_kernel("vllm", 1024, 8192, 2) == "oneshot" and fused_kernel("vllm", 3000, 8192, 2) == "twoshot"
    assert fused_kernel("vllm", 64, 8192, 16) is None and fused_kernel("vllm", 1, 8192, 1) is None
    # SGLang: up to 2048 tokens, one-shot to 128
    assert [fused_kernel("sglang", t, 8192, 8) for t in (128, 129, 2048, 2049)] == ["oneshot", "twoshot", "twoshot", None]
    big = build("standard", get_model("llama-3.1-70b"), 8, Step.prefill(1, 1024, 8, st), st)
    assert not op(big, "L0.attn.allreduce").get("fuse", "") and any("outside its window" in n for n in big.notes)


def test_fused_norms_leave_the_timeline_one_layer():
    """Decode at batch 2, one layer, TP 2; norms 1, all-reduce 2 (unfused) or the fused kernel 2.5.
    Standard: norm 1 + attn 4 + AR 2 + norm 1 + mlp 6 + AR 2 + final norm 1 = 17.
    Fused: norm 1 + attn 4 + fused 2.5 + mlp 6 + fused 2.5 (the mlp and final norms inside) = 16."""
    step = Step.decode(2, 8, 4, 1, ST)
    assert simulate(build("standard", ONE, 2, step, ST), toy({"all_reduce": 2}, 2, norm=1)).duration_s == 17
    st = Stack(ar_norm_fusion="vllm")
    fused = build("standard", ONE, 2, Step.decode(2, 8, 4, 1, st), st)
    assert simulate(fused, toy({"all_reduce": 2.5}, 2, norm=1)).duration_s == 16


def test_the_fused_kernel_price_by_hand():
    """70B TP8 decode at batch 1 (16,384 B): the TRT-LLM one-shot constants of h100-sxm (floor 3.169 us,
    265.0 GB/s over 7 x 16,384 remote bytes) plus the epilogue, 3 x 16,384 B at the HBM roofline; the
    fused add and norm cost nothing of their own."""
    st = Stack(ar_norm_fusion="vllm", compile_decode=False, decode_graphs=True)
    s = build("standard", get_model("llama-3.1-70b"), 8, Step.decode(1, 1024, 512, 1, st), st)
    cm = CostModel(H100, st)
    c = car.family_consts(H100, "trtllm", 8)
    assert (c.floor_s, c.oneshot_bps) == (pytest.approx(3.169e-6), pytest.approx(265.0e9))
    moved = 3 * 16384
    want = 3.169e-6 + 7 * 16384 / 265.0e9 + moved / (H100.mem_bytes_per_s * H100.memory_efficiency(moved))
    assert cm.comm_s(op(s, "L0.attn.allreduce"), "decode") == pytest.approx(want)
    assert cm.compute_s(op(s, "L0.mlp.norm"), "decode", s) == 0.0 and cm.issue_s(op(s, "L0.attn.add"), "decode") == 0
    with pytest.raises(ValueError, match="Hopper-class GPU"):
        CostModel(load_profile("a100-sxm"), st).comm_s(op(s, "L0.attn.allreduce"), "decode")


# ---------------------------------------------------------------- async-tp

def test_async_tp_dataflow_one_layer_tp2():
    """Decode at batch 2 on TP 2 (a row per rank): the ring step is issued before the local block's GEMM;
    GEMM + reduce-scatter computes the other rank's block, sends it, then its own, then sums."""
    s = build("async-tp", ONE, 2, Step.decode(2, 8, 4, 1, ST), ST)
    layer = [o.name for o in s.ops if o.layer == 0]
    assert layer == [
        "L0.sp.shard", "L0.attn.norm", "L0.attn.qkv.shift1", "L0.attn.qkv.r0", "L0.attn.qkv.r1", "L0.attn.qkv.cat",
        "L0.attn.sdpa", "L0.attn.out.blk1", "L0.attn.out.r1", "L0.attn.out.shift1", "L0.attn.out.blk0",
        "L0.attn.out.r0", "L0.attn.out.sum", "L0.attn.add",
        "L0.mlp.norm", "L0.mlp.up.shift1", "L0.mlp.up.r0", "L0.mlp.up.r1", "L0.mlp.up.cat", "L0.mlp.act",
        "L0.mlp.down.blk1", "L0.mlp.down.r1", "L0.mlp.down.shift1", "L0.mlp.down.blk0", "L0.mlp.down.r0",
        "L0.mlp.down.sum", "L0.mlp.add", "L0.sp.gather"]
    assert dict(op(s, "L0.attn.qkv.shift1").attrs) == {"rows": 1, "width": 64, "group": 2, "offset": 1, "barrier": 2}
    assert dict(op(s, "L0.attn.out.blk1").attrs)["offset"] == 1           # rank (r - 1) % 2's rows
    assert dict(op(s, "L0.attn.qkv.cat").attrs)["axis"] == "ring"
    assert op(s, "L0.attn.out.sum").inputs == ("L0.attn.out.r0_out", "L0.attn.out.shift1_out")
    assert dict(op(s, "L0.attn.qkv.r1").attrs)["m"] == 1 and model_change("async-tp") == "none"


def test_async_tp_timeline_hides_the_ring_steps():
    """The toy layer of test_async_tp_dataflow: blocks cost qkv 1, out 1, up 2, down 1 (half the rows);
    ring steps 1, the final all-gather 1. attn: shift [0,1] beside qkv r0 [0,1], r1 [1,2]; out r1 [2,3],
    its shift [3,4] beside r0 [3,4]; mlp: shift [4,5] beside up r0 [4,6], r1 [6,8]; down r1 [8,9], shift
    [9,10] beside r0 [9,10]; the gather [10,11]: 11, the gather exposed. Seq-parallel: 15 (test_no_retraining)."""
    step = Step.decode(2, 8, 4, 1, ST)
    res = simulate(build("async-tp", ONE, 2, step, ST), toy({"shift": 1, "all_gather": 1}, 2))
    assert (res.duration_s, res.exposed_comm_s) == (11, 1)
    comm = {r.op: (r.start_s, r.end_s) for r in res.records if r.stream == "comm"}
    assert comm["L0.attn.qkv.shift1"] == (0, 1) and comm["L0.mlp.down.shift1"] == (9, 10)


def test_async_tp_ring_step_price_by_hand():
    """70B TP8 prefill at batch 1: a step moves 128 rows x 8192 x 2 B = 2 MiB at 375 GB/s after 2.8 us; the
    first step also opens the barrier (vLLM's fitted one-shot floor at 8 ranks, 4.608 us)."""
    st = Stack(compile_prefill=False)
    s = build("async-tp", get_model("llama-3.1-70b"), 8, Step.prefill(1, 1024, 8, st), st)
    cm = CostModel(H100, st)
    nbytes = 128 * 8192 * 2
    plain = async_tp.P2P_LAT_US * 1e-6 + nbytes / 375e9 + H100.eager_extra_s
    assert cm.comm_s(op(s, "L0.attn.qkv.shift2"), "prefill") == pytest.approx(plain)
    assert cm.comm_s(op(s, "L0.attn.qkv.shift1"), "prefill") == pytest.approx(plain + 4.608e-6)
    # 8 GEMMs of 128 rows read the weight 8 times: at decode batch 1 that is what makes async TP lose
    dec = build("async-tp", get_model("llama-3.1-70b"), 8, Step.decode(1, 1024, 512, 1, st), st)
    assert sum(1 for o in dec.ops if o.layer == 0 and o.kind == "gemm") == 4 * 8


# ---------------------------------------------------------------- dbo

def test_dbo_splits_sequences_above_vllms_thresholds():
    pre = build("dbo", ONE, 2, Step.prefill(4, 256, 8, ST), ST)                      # 1024 tokens >= 512
    a = dict(op(pre, "L0.mb1.attn.sdpa").attrs)
    assert (a["batch"], a["b0"], a["q_len"]) == (2, 2, 256)                          # sequences, not tokens
    small = build("dbo", ONE, 2, Step.decode(16, 8, 4, 1, ST), ST)                  # 16 tokens < 32
    assert not any(".mb" in o.name for o in small.ops) and "under vLLM's DBO threshold" in small.notes[0]
    with pytest.raises(ValueError, match="batch 1 has one sequence"):
        build("dbo", ONE, 2, Step.decode(1, 8, 4, 1, ST), ST)


def test_dbo_timeline_is_token_splits_over_sequences():
    """Decode at batch 32 (16 sequences a micro-batch), AR 2: the token-split timeline, 12 with 2 exposed,
    against standard's 14."""
    step = Step.decode(32, 8, 4, 1, ST)
    res = simulate(build("dbo", ONE, 2, step, ST), toy({"all_reduce": 2}, 32))
    assert (res.duration_s, res.exposed_comm_s) == (12, 2)


# ---------------------------------------------------------------- tokenweave

def test_tokenweave_halves_fused_kernels_and_fuse_only_below_1024():
    s = build("tokenweave", ONE, 2, Step.prefill(1, 1024, 8, ST), ST)
    h0, h1 = dict(op(s, "L0.mb0.attn.sdpa").attrs), dict(op(s, "L0.mb1.attn.sdpa").attrs)
    assert (h0["q_len"], h1["q_len"], h1["start_pos"]) == (512, 512, 512)
    ar = dict(op(s, "L0.mb1.mlp.allreduce").attrs)
    assert (ar["kernel"], ar["ctas"]) == ("multimem", 4)            # llama_config_8.json at 1024 tokens
    assert op(s, "L0.mb0.mlp.norm").get("fused", 0) == 1
    s8k = build("tokenweave", ONE, 2, Step.prefill(1, 8192, 8, ST), ST)
    assert dict(op(s8k, "L0.mb0.attn.sdpa").attrs)["q_len"] == 4096 + 256          # SPLIT_OFFSET 256
    assert (dict(op(s8k, "L0.mb0.attn.allreduce").attrs)["ctas"], dict(op(s8k, "L0.mb0.mlp.allreduce").attrs)["ctas"]) \
        == (8, 4)
    dec = build("tokenweave", ONE, 2, Step.decode(8, 1024, 8, 1, ST), ST)
    assert dict(op(dec, "L0.attn.allreduce").attrs)["ctas"] == 4                    # min(16, 8 tokens / 2 ranks)
    assert any("fuse-only" in n for n in dec.notes)


def test_tokenweave_timeline_saves_the_fused_norms():
    """Prefill batch 1 of 1024 tokens in halves, one layer; norms 1 unless fused, AR 2. Token-split: each half
    norm 1 + attn 2, AR; norm 1 + mlp 3, AR; then the final norm: 17 with 2 exposed. TokenWeave fuses the
    MLP norms into the attention all-reduces: 15 with 2 exposed."""
    step = Step.prefill(1, 1024, 8, ST)
    t = toy({"all_reduce": 2}, 1024, norm=1)
    ts = simulate(build("token-split", ONE, 2, step, ST), t)
    tw = simulate(build("tokenweave", ONE, 2, step, ST), t)
    assert (ts.duration_s, ts.exposed_comm_s) == (17, 2)
    assert (tw.duration_s, tw.exposed_comm_s) == (15, 2)


def test_tokenweave_kernel_against_its_own_cta_sweep():
    """The fitted price against figure_10.csv's points it was not read from (1024 and 4096 tokens; hidden
    8192, 8 ranks): within 7% (8 CTAs at 1024 tokens: 81.0 us for 86.6, the worst)."""
    measured = {(1024, 4): 128.0, (1024, 8): 86.6, (1024, 16): 75.4, (4096, 4): 465.9, (4096, 16): 258.2}
    for (tokens, ctas), us in measured.items():
        got = far.multimem_s(H100, tokens * 8192 * 2, 8, ctas, Stack().tokenweave_floor_s) * 1e6
        assert got == pytest.approx(us, rel=0.07), (tokens, ctas, got)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("args,why", [
    (["--schedule", "dbo"], "Error: dbo splits a step's sequences into two micro-batches; batch 1 has one sequence"),
    (["--schedule", "token-split:4", "--prompt", "3"], "Error: token-split:4 splits a prompt's tokens into 4"),
    (["--dtype", "fp8", "--profile", "a100-sxm"], "Error: FP8 linears need FP8 tensor cores"),
    (["--schedule", "tokenweave", "--profile", "a100-sxm"], "Error: TokenWeave's multimem all-reduce + RMSNorm needs"),
])
def test_bad_input_is_one_line_exit_2(args, why):
    r = CliRunner().invoke(main, ["predict", "--model", "llama-3.1-8b", "--tp", "2", *args])
    assert r.exit_code == 2 and r.output.startswith(why) and r.output.count("\n") == 1, r.output


# ---------------------------------------------------------------- both engines

@pytest.mark.parametrize("spec,step", [
    ("async-tp", Step.decode(2, 8, 4, 1, ST)), ("dbo", Step.decode(32, 8, 4, 1, ST)),
    ("tokenweave", Step.prefill(1, 1024, 8, ST)), ("tokenweave", Step.decode(8, 1024, 8, 1, ST))])
@pytest.mark.parametrize("slow", [1.0, 1.5])
def test_the_heap_engine_runs_them_as_simpy_does(spec, step, slow):
    """The rank engine of the sampled mode (sim/engine/heap_engine.py) gives SimPy's duration and exposed
    communication for every new schedule, with and without the overlap slowdown, on 1 and 3 ranks."""
    from tpsim.sim.engine.heap_engine import compile_schedule, simulate_ranks
    from tpsim.sim.engine.step import Interference
    inter = Interference(slow, slow)
    s = build(spec, ONE, 2, step, ST)
    t = toy({"shift": 1, "all_gather": 1, "all_reduce": 2}, step.tokens, norm=1)
    for ranks in (1, 3):
        a = simulate(s, t, ranks=ranks, interference=inter, record=False)
        d, e = simulate_ranks(compile_schedule(s, t, inter), ranks, inter)
        assert (d, e) == (pytest.approx(a.duration_s, rel=1e-12), pytest.approx(a.exposed_comm_s, rel=1e-12, abs=1e-12))
