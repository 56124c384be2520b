"""Decode attention's grid (sim/price/decode_grid.py): each kernel's split rule on toy numbers written out by
hand, the price's two limits, and per engine preset how its decode step grows with the context."""
import dataclasses
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.price import decode_grid as dg
from tpsim.sim.price import decode_price as dp
from tpsim.sim.price.cost import CostModel
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.presets import PRESETS, load_stack
from tpsim.sim.stack.spec import Stack, Step, make_stack

# Llama-3.1-70B at TP4: 16 query / 2 KV heads of 128 per rank, bf16 (2 x 128 x 2 = 512 B per KV token and head)
TP4 = dict(heads=16, kv_heads=2, head_dim=128, dtype_bytes=2)


def shape(batch=1, kv_len=7000, **kw):
    return dg.Shape(batch=batch, kv_len=kv_len, **(TP4 | kw))


def knobs(kernel, **kw):
    return Stack(attention_knobs={kernel: kw}).knobs(kernel)


# -- the split heuristics, on their own numbers

def test_fa2_heuristic_takes_the_fewest_splits_within_85_percent_of_the_best_wave():
    """The example in flash_api.cpp's comment: batch x heads = 48 on 108 SMs, 2 splits (0.89 of a wave)
    beat 3 (0.67); 9 splits fill 4 waves exactly (1.0), and 0.89 >= 0.85 x 1.0 picks 2. Enough CTAs
    (>= 0.8 x SMs) never split."""
    assert dg.fa2_heuristic(48, 108, 64) == 2
    assert dg.fa2_heuristic(87, 108, 64) == 1            # 87 >= 0.8 x 108
    # vLLM V0 under graphs: 2 KV heads x 1 m-block, 2 x 132 "SMs", the 8192-token table = 64 blocks:
    # efficiency 2s / 264 grows to s = 64 (0.48), the first s within 85% of it is 64 (55 would be 0.42)
    assert dg.fa2_heuristic(2, 264, 64) == 64


def test_fa3_heuristic_never_splits_four_blocks_and_has_no_eligibility_filter():
    assert dg.fa3_heuristic(2, 132, 4) == 1             # 512 tokens at head_dim 128: 'we never split'
    # 55 blocks, 2 m-blocks on 132 SMs: efficiency 2s / 132 peaks at s = 55 (0.833); 0.85 x 0.833 = 0.708
    # needs s >= 46.75
    assert dg.fa3_heuristic(2, 132, 55) == 47
    assert dg.fa3_heuristic(106, 132, 55) == 1          # 106 >= 0.8 x 132


def test_fa3_dynamic_split_under_the_bound_vllm_passes_and_the_one_sglang_derives():
    """vLLM 0.11 full graphs pass num_splits 32: at 7000 tokens (55 blocks) blocks_per_sm = ceil(55 x 1.1 x 2 /
    132) = 1, so 55 splits capped at 32, 2 blocks each: 28 splits hold KV, 56 CTAs of 256 tokens. SGLang's graph
    page table spans 131072 tokens: static = heuristic over 1024 blocks = 57 (2s/132 >= 0.85), dynamic 55:
    110 CTAs of 128. Eager FA3 at 500 tokens (4 blocks): one CTA per KV head, no combine."""
    g = dg.fa3(shape(), 132, knobs("fa3", graph_num_splits=32, block_m=64), graphs=True)
    assert (g.splits_launched, g.splits, g.active, g.ctas, g.tokens, g.combine) == (32, 28, 56, 64, 256, "kernel")
    assert dg.fa3(shape(), 132, knobs("fa3", graph_num_splits=32), graphs=False).splits_launched == 47  # heuristic
    s = dg.fa3(shape(), 132, knobs("fa3", graph_table_kv_len=131072, prepare_per_call=True), graphs=True)
    assert (s.splits, s.active, s.tokens, s.extra_kernels) == (55, 110, 128, 2)       # combine + prepare
    e = dg.fa3(shape(kv_len=500), 132, knobs("fa3"), graphs=False)
    assert (e.splits, e.active, e.tokens, e.combine, e.extra_kernels) == (1, 2, 500, "", 0)


def test_fa2_reads_the_block_table_width_under_vllm_v0_graphs():
    """At 7000 tokens the 8192-token table gives 64 splits of 128 tokens; 55 of them hold KV (110 CTAs).
    Eager (the sequence's own 55 blocks): 85% of the best needs s >= 46.75, but 47..54 splits all give
    2 blocks per split as 28 do (not eligible): 55 splits of one block. FA3 has no such filter (47)."""
    g = dg.fa2(shape(), 132, knobs("fa2", graph_table_kv_len=8192), graphs=True)
    assert (g.splits_launched, g.splits, g.active, g.tokens) == (64, 55, 110, 128)
    e = dg.fa2(shape(), 132, knobs("fa2", graph_table_kv_len=8192), graphs=False)
    assert (e.splits_launched, e.splits, e.tokens) == (55, 55, 128)
    # the static cache of the reference stack, GQA expanded: 16 heads each its own CTA, no swap
    x = dg.fa2(shape(kv_heads=16), 132, knobs("fa2"), graphs=True)
    assert x.ctas == 16 * x.splits_launched


def test_xqa_ctas_per_kv_head_from_the_past_length():
    """computeMultiBlockCount at batch 1, 2 KV heads, 132 SMs: 6999 // 128 = 54, capped at round(sqrt(432)) =
    21; 8191 -> 63, sqrt(504) -> 22; 131071 -> 1023, sqrt(8184) -> 90. The older runners: 6999 // 512 = 13,
    at most 8. 64 KV heads x 8 sequences: 8 waves of 132 SMs allow 2 per head."""
    assert dg.xqa_ctas_per_head(1, 2, 6999, 132) == 21
    assert dg.xqa_ctas_per_head(1, 2, 8191, 132) == 22
    assert dg.xqa_ctas_per_head(1, 2, 131071, 132) == 90
    assert dg.xqa_ctas_per_head(1, 2, 6999, 132, "cap8") == 8
    assert dg.xqa_ctas_per_head(8, 64, 131071, 132) == 2        # 8 x 64 x 90 / 132 = 349 waves: 90 / 43.6
    # the graph fixes M at capture: 90 CTAs per head, of which cdiv(7000, 256) = 28 have a tile
    g = dg.xqa(shape(), 132, knobs("xqa", graph_capture_kv_len=131071), graphs=True)
    assert (g.splits_launched, g.splits, g.active, g.tokens, g.combine) == (90, 28, 56, 256, "in-kernel")
    # multi-block off with 20 sequences x 2 KV heads = 40 CTAs (40 x 4 >= 132: the dispatcher keeps XQA)
    off = dg.xqa(shape(batch=20), 132, knobs("xqa", multi_block=False), graphs=True)
    assert (off.kernel, off.ctas, off.active, off.tokens, off.combine, off.extra_kernels) == ("xqa", 40, 40, 7000, "", 0)


def test_the_xqa_dispatcher_falls_back_to_masked_mha_where_it_sees_no_gain():
    """mayHavePerfGain, 132 SMs: XQA only when KV heads x batch x M, times 4, reaches 132. Multi-block off:
    M = 1, so 2 KV heads x 1 sequence = 2 (8 < 132) -> masked MHA; 17 sequences: 34 x 4 = 136 -> XQA. On
    (1.x, 128-token blocks, at least 1): past 6999 -> 54 x 2 = 108 -> XQA; past 199 -> 1 x 2 -> MHA. The
    'cap8' runners count 512-token blocks with no floor: past 511 -> 0 CTAs -> MHA."""
    assert dg.xqa_has_gain(1, 2, 6999, 132, knobs("xqa", multi_block=False)) == (False, 2)
    assert dg.xqa_has_gain(17, 2, 6999, 132, knobs("xqa", multi_block=False)) == (True, 34)
    assert dg.xqa_has_gain(1, 2, 6999, 132, knobs("xqa")) == (True, 108)
    assert dg.xqa_has_gain(1, 2, 199, 132, knobs("xqa")) == (False, 2)
    assert dg.xqa_has_gain(1, 2, 511, 132, knobs("xqa", heuristic="cap8")) == (False, 0)
    # masked MHA, multi-block off, 16 query heads x 1 sequence: the launch grows the CTA to
    # min(256 x min(cdiv(132 x 4, 16) = 33, 4), 1024) = 1024 threads; each of the 16 CTAs streams all 7000 tokens
    g = dg.xqa(shape(), 132, knobs("xqa", multi_block=False), graphs=False)
    assert (g.kernel, g.ctas, g.active, g.splits, g.tokens, g.combine, g.extra_kernels) == \
        ("mmha", 16, 16, 1, 7000, "", 0)
    assert "1024 threads per CTA" in g.rule and "mayHavePerfGain false" in g.rule
    assert "per (sequence, query head)" in g.describe()
    # 200 CTAs: 256 x cdiv(528, 200) = 768 -> 512; 400: 256 x 2 = 512; 600: 256 x 1 = 256
    assert [dg.mmha_block_size(n, 132) for n in (16, 200, 400, 600)] == [1024, 512, 512, 256]
    # multi-block on, past 1999 (MHA: 30 x 4 < 132): 1024 threads, one resident per SM, cdiv(132, 16) = 9
    # blocks balanced, at most cdiv(2000, cdiv(1024, 16) x 8 = 512) = 4: 4 tiles of 500 tokens, merged in-kernel
    m = dg.xqa(shape(kv_len=2000), 132, knobs("xqa"), graphs=False)
    assert (m.kernel, m.ctas, m.splits, m.tokens, m.combine, m.extra_kernels) == ("mmha", 64, 4, 500, "in-kernel", 1)
    # under a graph the dispatcher decides at capture: 1.x's 131071-token capture always takes XQA
    assert dg.xqa(shape(kv_len=200), 132, knobs("xqa", graph_capture_kv_len=131071), graphs=True).kernel == "xqa"


def test_flashinfer_and_paged_attention_grids():
    """FlashInfer: chunks of at least 128 tokens (page 1) within 2 x 132 CTAs: 55 chunks x 2 heads = 110 CTAs.
    vLLM paged attention: v1 (one CTA per query head over the whole context) up to one 512-token partition,
    v2 beyond: 16 heads x 14 partitions + a reduce kernel."""
    f = dg.flashinfer(shape(), 132, knobs("flashinfer"), graphs=True)
    assert (f.splits, f.active, f.tokens, f.combine) == (55, 110, 128, "kernel")
    assert dg.flashinfer(shape(batch=200), 132, knobs("flashinfer"), graphs=False).splits == 1     # 400 >= 264
    v1 = dg.vllm_paged(shape(kv_len=500), 132, knobs("vllm-paged"), graphs=False)
    assert (v1.ctas, v1.tokens, v1.combine) == (16, 500, "")
    v2 = dg.vllm_paged(shape(), 132, knobs("vllm-paged"), graphs=False)
    assert (v2.ctas, v2.tokens, v2.combine) == (16 * 14, 512, "kernel")


# -- the price: no split grows with the context at one CTA's rate, a split one is bandwidth-bound

TOY = dg.Shape(batch=2, heads=1, kv_heads=1, kv_len=1, head_dim=64, dtype_bytes=2)     # 256 B per token
RATE = 256e6          # B/s: one token per microsecond


@pytest.mark.parametrize("kernel", sorted(dg.RULES))
def test_each_rule_unsplit_grows_with_the_context_split_is_bandwidth_bound(kernel):
    """Toy: 2 sequences of 1 query / 1 KV head, 256 B per token, one CTA streams 1 token/us, the
    bandwidth-bound time a flat 1000 us (a curve's floor) and the combine 5 us. On 1 SM the two sequences
    already fill the GPU and no rule splits (XQA: multi-block off): each CTA streams its whole context,
    2000 tokens in 2000 us, 4000 in 4000 us. On 132 SMs each rule splits 4000 tokens into CTAs of at most
    512 (FA2 32 x 128, FA3 28 splits -> 16 of 256, FlashInfer 32 x 128, XQA 16 x 256, paged v2 8 x 512)
    and the price is the bandwidth bound."""
    def priced(kv_len, sms, **kw):
        s = dataclasses.replace(TOY, kv_len=kv_len)
        g = dg.RULES[kernel](s, sms, knobs(kernel, **kw), False)
        return g, dp.price(g, s, 1000e-6, RATE, 5e-6 if g.combine else 0.0, curve_holds_combine=True)
    unsplit = {"multi_block": False} if kernel == "xqa" else {}
    for kv, want in ((2000, 2000e-6), (4000, 4000e-6)):
        g, t = priced(kv, 1, **unsplit)
        if kernel == "vllm-paged":                   # v1 only within one partition: beyond, v2 splits anyway
            assert (g.splits, g.tokens, g.active) == (cdiv(kv, 512), 512, 2 * cdiv(kv, 512))
            continue
        assert (g.active, g.tokens, t.bound) == (2, kv, "CTAs") and t.s == pytest.approx(want)
    g, t = priced(4000, 132)
    assert g.splits > 1 and g.tokens <= 512 and t.stream_s + t.combine_s < 1000e-6
    assert t.bound == "bandwidth" and t.s == pytest.approx(1000e-6)


def cdiv(a, b):
    return -(-a // b)


def test_a_roofline_kernel_adds_its_combine_to_the_bandwidth_bound_a_curve_holds_it():
    g = dg.xqa(shape(), 132, knobs("xqa", graph_capture_kv_len=131071), graphs=True)
    s = shape()
    assert dp.price(g, s, 10e-6, 48e9, 3e-6, curve_holds_combine=False).bandwidth_s == pytest.approx(13e-6)
    t = dp.price(g, s, 10e-6, 48e9, 3e-6, curve_holds_combine=True)
    # one CTA's 256 tokens x 512 B = 131072 B at 48 GB/s = 2.73 us, + 3 us of combine < 10 us
    assert (t.bandwidth_s, t.stream_s, t.s) == (pytest.approx(10e-6), pytest.approx(131072 / 48e9), pytest.approx(10e-6))


# -- the knobs a stack names

def test_knobs_are_validated_and_the_later_of_two_wins():
    with pytest.raises(ValueError, match="xqa has no knob 'splits'"):
        Stack(attention_knobs={"xqa": {"splits": 2}})
    with pytest.raises(ValueError, match="xqa.multi_block must be true or false"):
        Stack(attention_knobs={"xqa": {"multi_block": 1}})
    with pytest.raises(ValueError, match="xqa.heuristic must be one of sqrt, cap8"):
        Stack(attention_knobs={"xqa": {"heuristic": "old"}})
    with pytest.raises(ValueError, match="unknown kernel 'fa4'"):
        Stack(attention_knobs={"fa4.num_splits": 1})
    st = Stack(attention_knobs={"fa3": {"graph_num_splits": 32}})
    assert st.knobs("fa3")["graph_num_splits"] == 32 and st.knobs("fa3")["block_m"] == 128     # the default
    again = dataclasses.replace(st, attention_knobs=st.attention_knobs + (("fa3.graph_num_splits", 1),))
    assert again.knobs("fa3")["graph_num_splits"] == 1


def test_the_rate_is_a_sensitivity_setting_only_where_a_grid_is_priced():
    assert dp.reads("compute.decode_attention.cta_gbps", Stack(attention="fa3"))
    assert not dp.reads("compute.decode_attention.cta_gbps", Stack(attention="math"))
    assert dp.reads("overlap.comm_slowdown", Stack(attention="math"))


# -- on a profile: the hook, show, and each preset's decode step against the context

def _attn_op(stack, kv_len, model="llama-3.1-70b", tp=4, batch=1):
    step = Step("decode", batch, 1, kv_len - 1, kv_len, 1)
    return next(op for op in build("upper-bound", get_model(model), tp, step, stack).ops if op.kind == "attention")


XQA_STACK = Stack(dtype="bf16", attention="xqa", kv="filled", expand_gqa=False, compile_decode=False,
                  decode_graphs=False, attention_prep_kernels=1)       # TRT-LLM's one RoPE + cache-write kernel


def test_the_cost_model_prices_the_larger_limit_and_counts_the_extra_kernels():
    """h100-sxm (132 SMs, 48 GB/s per CTA), eager: XQA with multi-block off streams 7000 tokens of one KV
    head in one CTA: 7000 x 512 B / 48 GB/s = 74.7 us, far above its roofline; with multi-block (21 CTAs
    per head at past length 6999) the same op is bandwidth-bound and launches one memset more."""
    prof = load_profile("h100-sxm")
    off = dataclasses.replace(XQA_STACK, attention_knobs=XQA_STACK.attention_knobs + (("xqa.multi_block", False),))
    on_cost, off_cost = CostModel(prof, XQA_STACK), CostModel(prof, off)
    op = _attn_op(XQA_STACK, 7000)
    g_off, t_off = off_cost.decode_attention(op, False)
    assert t_off.stream_s == pytest.approx(7000 * 512 / 48e9) and t_off.bound == "CTAs" and g_off.extra_kernels == 0
    g_on, t_on = on_cost.decode_attention(op, False)
    assert t_on.bound == "bandwidth" and (g_on.splits, g_on.extra_kernels) == (21, 1)
    others = on_cost.compute_s(op, "decode") - t_on.s
    assert off_cost.compute_s(op, "decode") == pytest.approx(others + t_off.s)
    # eager: the op's launches count the memset (sim/price/cost.py issue_s)
    assert on_cost.issue_s(op, "decode") == pytest.approx(off_cost.issue_s(op, "decode") + prof.launch_s["eager"])
    # a profile without the section prices the bytes alone and says so once
    a100 = CostModel(load_profile("a100-sxm"), XQA_STACK)
    assert a100.decode_attention(op, False) is None and any("compute.decode_attention" in n for n in a100.notes)


def test_a_stack_file_overrides_a_presets_knobs_knob_by_knob(tmp_path):
    f = tmp_path / "old-trt.json"
    f.write_text(json.dumps({"format": "tpsim-stack", "extends": "trtllm",
                             "stack": {"attention_knobs": {"xqa": {"multi_block": False}}}}))
    st = make_stack({}, preset=load_stack(str(f)).values)
    assert st.knobs("xqa") == {"multi_block": False, "heuristic": "sqrt", "graph_capture_kv_len": 131071,
                               "graph_len_model": True}
    # the preset's value compares equal to the stack's (predict --json lists its source)
    assert make_stack({}, preset=PRESETS["vllm"].values).attention_knobs == PRESETS["vllm"].values["attention_knobs"]


def _decode_70b_tp4(prof, stack, prompt: int) -> tuple:
    """70B TP4 batch 1, upper-bound (no collectives): (the first decode step's seconds, its layer-1 attention
    op's compute seconds, the op's (Grid, Terms) or None)."""
    w = Workload(get_model("llama-3.1-70b"), 4, prof, 1, prompt, 2, stack, memory_check=False)
    sim = Simulator(w, record=False)
    step = w.decode_step(1)
    sched = w.schedule("upper-bound", step)
    op = next(op for op in sched.ops if op.kind == "attention")
    return (sim.step_time("upper-bound", step)[0], sim.cost.compute_s(op, "decode", sched),
            sim.cost.decode_attention(op, stack.graphs("decode", op.name)))


def test_a_graph_length_that_follows_the_model_takes_its_context():
    """graph_len_model (Stack.for_model, set once by Workload): SGLang's page table spans the model's context,
    TensorRT-LLM 1.x captures at context - 1, vLLM V0's table is min(8192, the context). Llama 3 (8192):
    8192 / 8191 / 8192; Llama 2 (4096): 4096 / 4095 / 4096; a model stating no context (ladder-405b, 0) keeps
    the preset's number; a stack file that turns graph_len_model off keeps its own."""
    def knob(name, model, kernel, key):
        st = make_stack({}, preset=PRESETS[name].values)
        return st.for_model(get_model(model).max_context).knobs(kernel)[key]
    for model, want in (("llama-3-8b", (8192, 8191, 8192)), ("llama-2-7b", (4096, 4095, 4096)),
                        ("llama-3.1-8b", (131072, 131071, 8192)), ("ladder-405b", (131072, 131071, 8192))):
        assert (knob("sglang", model, "fa3", "graph_table_kv_len"), knob("trtllm", model, "xqa", "graph_capture_kv_len"),
                knob("vllm@0.6", model, "fa2", "graph_table_kv_len")) == want, model
    own = dataclasses.replace(make_stack({}, preset=PRESETS["trtllm"].values), attention_knobs=(
        ("xqa.graph_capture_kv_len", 32767), ("xqa.graph_len_model", False)))
    assert own.for_model(8192) is own
    # Workload sets it: Llama 3 70B at TP4 batch 1 under trtllm's graphs, M = computeMultiBlockCount at 8191 = 22
    prof = load_profile("h100-sxm")
    w = Workload(get_model("llama-3-70b"), 4, prof, 1, 7000, 2, make_stack({}, prof.stack_defaults,
                 preset=PRESETS["trtllm"].values), memory_check=False)
    assert w.stack.knobs("xqa")["graph_capture_kv_len"] == 8191
    op = next(op for op in w.schedule("upper-bound", w.decode_step(1)).ops if op.kind == "attention")
    grid, _ = Simulator(w, record=False).cost.decode_attention(op, True)
    assert (grid.splits_launched, grid.tokens) == (22, 512)           # 28 tiles of 256 over 22 CTAs: 2 for some
    res = CliRunner().invoke(main, ["show", "--stack", "trtllm", "--model", "llama-3-70b", "--tp", "4",
                                    "--prompt", "7000", "--gen", "100"])
    assert "computeMultiBlockCount(sqrt) at capture past length 8191" in " ".join(res.output.split())


@pytest.mark.parametrize("name", ["vllm", "vllm@0.6", "sglang", "trtllm", "reference", "eager"])
def test_each_presets_decode_step_grows_with_the_context_as_its_kernel_dictates(name):
    """70B TP4 batch 1 on h100-sxm, upper-bound (no collectives): a decode step at a 2000- and a 32000-token
    context differs by the model's 80 layers x the attention op's own difference, nothing else; the op is
    the grid's price: the engines' split kernels bandwidth-bound, the same stack with one CTA per KV head
    (FA3 with num_splits 1, XQA multi-block off) CTA-bound and growing at one CTA's rate, 30000 x 512 B /
    48 GB/s per layer; vLLM V0's FA2 splits at both lengths (no knob takes it to one split). Math SDPA
    (reference, eager) has no grid (eager's step: its launch chain hides part)."""
    prof = load_profile("h100-sxm")
    stack = make_stack({}, prof.stack_defaults, preset=PRESETS[name].values)
    (s0, a0, g0), (s1, a1, g1) = (_decode_70b_tp4(prof, stack, prompt) for prompt in (2000, 32000))
    if stack.decode_graphs:
        assert s1 - s0 == pytest.approx(80 * (a1 - a0), rel=1e-6) and a1 > a0
    else:       # eager: the CPU's launch chain runs ahead of short kernels, and hides part of the growth
        assert 0 < s1 - s0 <= 80 * (a1 - a0)
    if stack.attention == "math":
        assert g0 is None and g1 is None
        return
    assert g0[1].bound == g1[1].bound == "bandwidth"
    kernel = dg.kernel_of(stack.attention, prof.compute_capability, stack.attention_fallback)[0]
    if kernel == "fa2":         # vLLM V0: no knob takes FA2 to one split (its heuristic alone decides)
        assert g0[0].splits > 1 and g1[0].splits > 1
        return
    one = {"xqa": ("xqa.multi_block", False), "fa3": ("fa3.graph_num_splits", 1)}[kernel]
    single = dataclasses.replace(stack, attention_knobs=stack.attention_knobs + (one,))
    cost = CostModel(prof, single)
    t = [cost.decode_attention(_attn_op(single, kv), True)[1] for kv in (2001, 32001)]
    assert t[0].bound == t[1].bound == "CTAs"
    assert t[1].s - t[0].s == pytest.approx(30000 * 512 / 48e9)


def test_the_tensorrt_engine_line_streams_each_query_heads_context_in_one_cta():
    """trtllm@0.11 (multi-block off, no CUDA graphs), 70B TP4 batch 1 on h100-sxm, upper-bound: the XQA
    dispatcher sees 2 KV heads x 1 sequence (8 < 132) and runs masked MHA, 16 CTAs of 1024 threads, each
    streaming its query head's whole context: from 2001 to 32001 tokens one CTA reads 30000 x 512 B more, at
    48 GB/s 320 us per layer, CTA-bound at both ends. The step grows by at most 80 layers of it (eager: the
    launch chain runs ahead of short kernels). The 1.x line (trtllm: XQA multi-block under its graphs) grows
    far less: bandwidth-bound, 2 x 30000 x 512 B over the HBM roofline per layer."""
    prof = load_profile("h100-sxm")
    got = {}
    for name in ("trtllm@0.11", "trtllm"):
        stack = make_stack({}, prof.stack_defaults, preset=PRESETS[name].values)
        for prompt in (2000, 32000):
            step_s, attn_s, (grid, t) = _decode_70b_tp4(prof, stack, prompt)
            got[name, prompt] = (step_s, attn_s, grid, t)
    (s0, a0, g0, t0), (s1, a1, g1, t1) = got["trtllm@0.11", 2000], got["trtllm@0.11", 32000]
    assert (g0.kernel, g0.ctas, g0.tokens, g1.tokens) == ("mmha", 16, 2001, 32001)
    assert t0.bound == t1.bound == "CTAs" and t1.s - t0.s == pytest.approx(30000 * 512 / 48e9)
    assert a1 - a0 == pytest.approx(t1.s - t0.s)
    assert 0.9 * 80 * (a1 - a0) < s1 - s0 <= 80 * (a1 - a0) * (1 + 1e-9)
    (n0, _, h0, u0), (n1, _, h1, u1) = got["trtllm", 2000], got["trtllm", 32000]
    assert h0.kernel == h1.kernel == "xqa" and u0.bound == u1.bound == "bandwidth"
    assert (n1 - n0) < (s1 - s0) / 4


def test_show_prints_the_grid_and_split_of_the_decode_attention():
    res = CliRunner().invoke(main, ["show", "--stack", "vllm", "--model", "llama-3.1-70b", "--tp", "4",
                                    "--prompt", "7000", "--gen", "100"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())          # the lines wrap at 80 columns (issue 48)
    assert ("decode attention: L1.attn.sdpa, kv_len 7001, 16/2 heads per rank: fa3: 56 of 64 CTAs stream KV, 28 "
            "splits per (sequence, KV head) (32 launched), <= 256 tokens per CTA" in flat)
    assert "bandwidth-bound on 132 SMs (CUDA graph)" in flat
    res = CliRunner().invoke(main, ["show", "--stack", "trtllm@0.11", "--model", "llama-3.1-70b", "--tp", "4",
                                    "--prompt", "7000", "--gen", "100"])
    flat = " ".join(res.output.split())
    assert ("mmha: 16 of 16 CTAs stream KV, 1 split per (sequence, query head), <= 7001 tokens per CTA; XQA "
            "dispatcher: 2 CTAs x 4 < 132 SMs (mayHavePerfGain false)" in flat)
    assert "one CTA's 3500 KiB at 48 GB/s 74.7 us + combine 0.0 us): CTAs-bound on 132 SMs" in flat
    res = CliRunner().invoke(main, ["show", "--model", "llama-3.1-70b", "--tp", "4"])
    assert "math SDPA, bmm + softmax + bmm over the cache (no split-KV kernel" in " ".join(res.output.split())


def test_the_rate_is_rerun_only_where_a_decode_op_turns_cta_bound_at_its_low_end():
    """sim/sensitivity.py grid_rate_moves: vLLM's FA3 at 70B TP4 batch 1 and 2000 tokens splits into CTAs of
    128 tokens (64 KiB: 1.4 us at 48 GB/s, 2.3 at the range's 28, + its combine) far under the curve's 14.8
    us: the rate cannot move it, no rerun. With num_splits 1 (2 CTAs of 2000+ tokens, 1 MiB each: 21 us at
    48 GB/s) it binds. Math SDPA reads no grid; every other ranged number is rerun as before."""
    from tpsim.sim.sensitivity import grid_rate_moves, ranged_values
    prof = load_profile("h100-sxm")
    rate, comm = (next(r for r in ranged_values(prof) if r.path == p)
                  for p in ("compute.decode_attention.cta_gbps", "overlap.comm_slowdown"))

    def w(stack):
        return Workload(get_model("llama-3.1-70b"), 4, prof, 1, 2000, 64, stack, memory_check=False)
    vllm = make_stack({}, preset=PRESETS["vllm"].values)
    one = dataclasses.replace(vllm, attention_knobs=vllm.attention_knobs + (("fa3.graph_num_splits", 1),))
    ref = make_stack({}, prof.stack_defaults)
    assert not grid_rate_moves(rate, w(vllm), ["ladder"]) and grid_rate_moves(rate, w(one), ["ladder"])
    assert not grid_rate_moves(rate, w(ref), ["ladder"]) and grid_rate_moves(comm, w(ref), ["ladder"])
