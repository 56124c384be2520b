"""The GPU decode table (sim/compiled_kernels_gpu.json, Inductor's Triton path on a fake H100), how
GPU profiles use it (sim/price/fusion.py gpu_overlay) and its L2 re-read pricing (sim/price/l2_traffic.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tpsim.sim.price import fusion, l2_traffic
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import Work, roofline_s
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step

H100 = load_profile("h100-sxm")


def _sched(spec="upper-bound", batch=64, model="llama-3.1-70b", tp=8):
    st = Stack()
    return build(spec, get_model(model), tp, Step.decode(batch, 1024, 512, 1, st), st), st


def _op(sched, name):
    return next(op for op in sched.ops if op.name == name)


def test_sector_waste_and_l2_time_on_a_toy():
    """A toy kernel: K [b=2, kvh=1, L=1000, dh=64 (head_dim 128)] fp16 read once from DRAM
    (2*1000*128*2 = 512,000 B) and once per query head through L2 (G = 8: 4,096,000 B), plus a
    write of 2*8*1000 fp32 scores (64,000 B, passes 1). At a toy L2 rate of 1.08e12 B/s the L2
    time is (4,096,000 + 64,000) / 1.08e12 = 3.85185 us, longer than a 1 us DRAM time."""
    sym = {"b": 2, "kvh": 1, "L": 1000, "dh": 64, "G": 8}
    k = fusion.Kernel("attn.sdpa", "generated", "toy", (), (
        fusion.Buffer("read", "float16", "2*b*L*kvh*dh", passes="G"),
        fusion.Buffer("write", "float32", "b*L*kvh*G")))
    assert k.bytes(sym, 2) == 512_000 + 64_000
    assert k.l2_bytes(sym, 2) == 4_096_000 + 64_000
    assert l2_traffic.kernel_s(1e-6, k.l2_bytes(sym, 2), 1.08e12) == pytest.approx(4_160_000 / 1.08e12)
    assert l2_traffic.kernel_s(5e-6, k.l2_bytes(sym, 2), 1.08e12) == 5e-6       # DRAM-bound: unchanged
    assert l2_traffic.kernel_s(1e-6, k.l2_bytes(sym, 2), None) == 1e-6          # no sourced L2 rate
    # a program reading 8 fp16 (16 B) of each row pays whole 32 B sectors: 2x; 4 B: 8x; >= 32 B: 1x
    assert [l2_traffic.sector_waste(r) for r in (16, 4, 32, 256, None)] == [2.0, 8.0, 1.0, 1.0, 1.0]
    sliver = fusion.Kernel("attn.sdpa", "generated", "toy", (), (
        fusion.Buffer("read", "float16", "2*b*L*kvh*dh", passes="G", run_bytes=16),))
    assert sliver.l2_bytes(sym, 2) == 2 * 4_096_000
    plain = fusion.Kernel("attn.norm", "generated", "toy", (), (fusion.Buffer("read", "float16", "b*dh"),))
    assert plain.l2_bytes(sym, 2) == 0.0                      # nothing re-read: the DRAM term prices it


def test_l2_rates_are_the_sourced_ones():
    """The profiles' compute.l2 (tools/derive_profiles/l2.py): gpu-benches gpu-l2-cache h200.txt
    10.03 TB/s for h100-sxm and h200-sxm, a100_80.txt 5.33 TB/s, l40.txt 5.21 TB/s for the L40S (the
    L40's AD102 configuration); twins inherit through `extends`."""
    rate = {n: (load_profile(n).l2.bytes_per_s if load_profile(n).l2 else None)
            for n in ("h100-sxm", "h100-sxm-p2p-off", "h100-sxm-coschedule", "h200-sxm", "a100-sxm",
                      "a100-sxm-p2p-off", "l40s-pcie")}
    assert rate == {"h100-sxm": 10.03e12, "h100-sxm-p2p-off": 10.03e12, "h100-sxm-coschedule": 10.03e12,
                    "h200-sxm": 10.03e12, "a100-sxm": 5.33e12, "a100-sxm-p2p-off": 5.33e12, "l40s-pcie": 5.21e12}


def test_gpu_profiles_price_every_kind_with_the_triton_paths_attention_and_wo():
    """A GPU profile's decode: every kind's attention is the GPU table's (standard layer) and then the
    combine of a split p@v (it runs where the shapes split p@v: the next test), its wo at batch > 1 an
    extern mm as on the CPU path; a CPU profile keeps the C++ backend's table."""
    s, _ = _sched("standard", batch=4)
    assert fusion.lookup(s, _op(s, "L1.attn.norm"), "cuda") == ("standard", "decode", "attn.norm")
    assert fusion.lookup(s, _op(s, "L1.attn.norm"), "cpu") == ("standard", "decode-cpu", "attn.norm")
    t = fusion.table()
    gpu_attn = [k.name for k in t[("standard", "gpu:decode-m1")]["attn.sdpa"]]
    for kind in ("standard", "upper-bound", "ladder", "parallel", "spd", "seq-parallel"):
        for variant in ("decode", "decode-m1"):
            *names, combine = [k.name for k in t[(kind, variant)]["attn.sdpa"]]
            assert names == [k.name for k in t[("standard", "gpu:" + variant)]["attn.sdpa"]], (kind, variant)
            assert combine.startswith("p@v split: combine"), (kind, variant)
        (wo,) = t[(kind, "decode")].get("attn.out", []) or [None]
        assert wo is None or wo.kind == "matmul", kind
    assert gpu_attn and all(n.startswith("triton_") for n in gpu_attn)
    # the C++ backend's own decode table is untouched: no re-reads, wo extern
    assert all(b.passes == "1" for ks in t[("standard", "decode-cpu")].values() for k in ks for b in k.buffers)
    assert fusion.meta(str(fusion.GPU_TABLE_PATH))["command"] == "python -m tpsim.hw.derive.inductor_gpu"


def test_the_triton_table_rereads_kv_per_query_head_and_keeps_wo_extern():
    """What Inductor's CUDA path emits for the reference decode graph, traced as
    torch.compile sees it (eager view strides, hw.derive.fake_views): q@k^T and p@v are
    generated reductions whose cache reads repeat per query head (passes G); at batch > 1 every
    linear is extern cuBLAS, wo included (F.linear folds [b, 1, H*D] into one mm), so p@v's last
    kernel casts its output to fp16 for it; at batch 1 every linear is a generated reduction (mm with
    M == 1)."""
    t = fusion.table()
    dec, m1 = t[("upper-bound", "gpu:decode")], t[("upper-bound", "gpu:decode-m1")]
    rereads = [b for k in dec["attn.sdpa"] for b in k.buffers if b.passes == "G"]
    assert sorted(b.numel for b in rereads) == ["2*b*L*kvh*dh", "2*b*L*kvh*dh"]   # K in q@k^T, V in p@v
    assert [k.kind for r in ("attn.qkv", "attn.out", "mlp.up", "mlp.down") for k in dec[r]] == ["matmul"] * 4
    assert [(b.dtype, b.numel) for b in dec["attn.sdpa"][-1].buffers if b.mode == "write"] == \
        [("float16", "2*b*kvh*G*dh")]                          # y [b, H*D] fp16: wo's mm input
    assert all(k.kind == "generated" for r in ("attn.qkv", "mlp.up", "mlp.down") for k in m1[r])
    (wo1,) = m1["attn.add"]                                  # wo fused with the residual add after it
    assert wo1.kind == "generated" and "attn.out" in wo1.fuses
    assert fusion.meta(str(fusion.GPU_TABLE_PATH))["view_strides"].startswith("eager")


def test_the_table_is_the_references_torch_and_its_attention_kernels():
    """Derived with the torch the reference ran (2.5.1), the decode attention at batch > 1 is five
    Triton kernels, as the reference's GPU code runs it: K and V rows written by one scatter (the rows
    only, b*kvh*D each, not the [b, kvh, S, D] caches: hw.derive.inductor_kernels.kernel_buffer_bytes); q's RoPE
    and scale its own pointwise kernel writing fp32 q; q@k^T reading fp32 q and each K row once per
    query head; a softmax that reads the fp32 scores and writes the normalised fp32 probabilities; p@v
    reading them and each V row once per query head. (torch 2.13 inlines q's RoPE into q@k^T and
    recomputes an online softmax inside p@v: another table.)"""
    meta = fusion.meta(str(fusion.GPU_TABLE_PATH))
    assert meta["torch"].startswith("2.5.1") and meta["triton"] == "3.1.0"
    attn = fusion.table()[("standard", "gpu:decode")]["attn.sdpa"]

    def bufs(k, mode):
        return sorted((b.dtype, b.numel, b.passes) for b in k.buffers if b.mode == mode and b.numel != "1")

    scatter, rope, qk, softmax, pv = attn
    assert bufs(scatter, "write") == [("float16", "2*b*kvh*dh", "1")] * 2
    assert bufs(rope, "write") == [("float32", "2*b*kvh*G*dh", "1")]
    assert bufs(qk, "read") == [("float16", "2*b*L*kvh*dh", "G"), ("float32", "2*b*kvh*G*dh", "1")]
    assert bufs(softmax, "read")[-1] == ("float32", "b*L*kvh*G", "1")
    assert bufs(softmax, "write") == [("float32", "b*L*kvh*G", "1")]
    assert bufs(pv, "read") == [("float16", "2*b*L*kvh*dh", "G"), ("float32", "b*L*kvh*G", "1")]
    assert bufs(pv, "write") == [("float16", "2*b*kvh*G*dh", "1")]


def test_the_references_wo_at_batch_64_is_the_gemm_tables_mm():
    """The reference stack, 70B TP8 upper-bound decode, batch 64: wo is
    an extern mm [64, 1024] x [1024, 8192], priced from the profile's GEMM table like qkv and the
    MLP, with no L2 term."""
    s, st = _sched()
    cm = CostModel(H100, st)
    op = _op(s, "L1.attn.out")
    (k,) = fusion.kernels(fusion.lookup(s, op, "cuda"))
    assert k.kind == "matmul"
    (term,) = cm.kernel_terms(op, [k], s, True)
    assert term["l2_bytes"] == 0.0
    assert cm.compute_s(op, "decode", s) == term["s"] == cm._compute_s(op, True, True)   # the GEMM's own price
    assert term["s"] < 20e-6             # 16.8 MB of weight read once, not 64 sweeps (~116 us, below)


def test_a_weight_read_once_per_batch_row_is_priced_by_its_l2_sweeps():
    """A generated reduction that reads a weight once per batch row (passes b; what a plain make_fx
    trace made of the reference's wo, hw/derive/fake_views.py), priced at 70B TP8 upper-bound decode, batch
    64, by hand (fp16; hidden 8192, H*D = 1024): the residual x [64, 8192] 1,048,576 B + the attention
    output [64, 1024] 131,072 B + the weight [8192, 1024] 16,777,216 B once per batch row
    (x 64 = 1,073,741,824 B) + its write 1,048,576 B = 1,075,970,048 B through L2. The grid is
    batch-major, so the weight's 64 reads are 64 sweeps one after another: the first with the
    kernel's DRAM bytes (19,005,440 B at 3.35 TB/s x the curve's 0.5982 = 9.483 us), then
    63 x 16,777,216 B = 1,056,964,608 B from L2 (16.8 MB fits: hit fraction 1) at 10.03 TB/s =
    105.38 us. mark_rereads gives the weight passes b from the buffers' counts alone."""
    s, st = _sched()
    cm = CostModel(H100, st)
    op = _op(s, "L1.attn.out")
    bufs = [{"mode": "read", "dtype": "float16", "numel": "b*hidden"},
            {"mode": "read", "dtype": "float16", "numel": "2*b*kvh*G*dh"},
            {"mode": "read", "dtype": "float16", "numel": "2*kvh*G*hidden*dh"},
            {"mode": "write", "dtype": "float16", "numel": "b*hidden"}]
    marked = l2_traffic.mark_rereads({"role": "attn.out", "kind": "generated", "kernel": "toy", "fuses": [],
                                      "buffers": bufs})
    assert [b.get("passes", "1") for b in marked["buffers"]] == ["1", "1", "b", "1"]
    k = fusion.Kernel("attn.out", "generated", "toy", (), tuple(
        fusion.Buffer(b["mode"], b["dtype"], b["numel"], b.get("passes", "1")) for b in marked["buffers"]))
    (term,) = cm.kernel_terms(op, [k], s, True)
    assert term["l2_bytes"] == 1_075_970_048
    assert term["dram_bytes"] == 1_048_576 + 131_072 + 16_777_216 + 1_048_576 == 19_005_440
    assert k.sweeps(fusion.symbols(s, op), 2) == [(16_777_216, 63.0)]
    dram_s = 19_005_440 / (3.35e12 * H100.memory_efficiency(19_005_440))
    assert dram_s == pytest.approx(9.483e-6, rel=1e-3)
    assert term["s"] == pytest.approx(dram_s + 1_056_964_608 / 10.03e12)


def test_a_split_pv_launches_its_combine_where_the_table_derived_a_split():
    """Inductor splits p@v's reduction over the cache where few outputs meet a long reduction (the GPU
    table's `splits`, derived at the real shapes: hw.derive.inductor_splits). 70B TP8 (8 query heads,
    1 KV head, D 128 per rank), cache 1536: at batch 4 p@v runs in 12 parts, so the attention launches a
    sixth kernel, the combine: it reads 12 fp32 partials of each of the 4*8*128 = 4,096 outputs
    (4096 * 12 * 4 = 196,608 B) and writes them in fp16 (4096 * 2 = 8,192 B): 204,800 B at the
    profile's memory curve, at least the launch floor. At batch 16 (16,384 outputs) one kernel: five,
    no combine.
    A shape the table did not derive (batch 3) keeps the probe's one kernel."""
    assert fusion.pv_splits_at(4, 8, 1, 128) == 12 and fusion.pv_splits_at(16, 8, 1, 128) == 1
    assert fusion.pv_splits_at(3, 8, 1, 128) == 1
    cost = CostModel(H100, Stack())
    for batch, n, combine in ((4, 6, True), (16, 5, False)):
        sched, _ = _sched(batch=batch)
        op = _op(sched, "L0.attn.sdpa")
        hit = fusion.lookup(sched, op, "cuda")
        terms = cost.kernel_terms(op, fusion.kernels(hit), sched, True)
        assert len(terms) == n and cost._kernel_count(op, True, hit, sched) == n
        last = terms[-1]
        assert last["name"].startswith("p@v split: combine") == combine
        if combine:
            assert last["dram_bytes"] == 204_800 and last["l2_bytes"] == 0.0
            assert last["s"] == pytest.approx(cost._floor(roofline_s(H100, [Work(0.0, 204_800, 1)], "fp16"), 1, True))
            assert last["s"] >= H100.launch_s["graph"]
            assert cost.compute_s(op, "decode", sched) == pytest.approx(sum(t["s"] for t in terms))


def test_what_the_real_shapes_launch_beyond_the_probe():
    """The shipped `splits` rows (Inductor at every real decode shape of the built-in models, a 3-layer
    step) against the probe's launches, each difference a priced mechanism: with GQA and a hidden
    size of at most 8192 the real step launches exactly the probe's kernels plus one p@v combine a
    layer (other_launches 0). With one query head per KV head (MHA) q's RoPE fuses into the cache
    write: 3 fewer (priced: fusion._one_head_fuses_rope). Above 8192 columns (405B, the 176B-class
    model) each RMSNorm's reduction splits in 2 (norm_splits), with a combine and an apply: 12 more at
    batch > 1 (six norms in the step), 11 at batch 1 (priced per layer: two a norm). p@v's count
    depends on the attention shape only, a norm's on its hidden size only."""
    with open(fusion.GPU_TABLE_PATH) as f:
        rows = json.load(f)["splits"]["shapes"]
    assert len(rows) > 200
    for r in rows:
        mha = -3 if r["heads"] == r["kv_heads"] else 0
        big = r["hidden"] > 8192
        norms = 0 if not big else (11 if r["b"] == 1 else 12)
        assert r["other_launches"] == mha + norms and r["norm_splits"] == (2 if big else 1), r
    pv: dict = {}
    for r in rows:
        pv.setdefault((r["b"], r["heads"], r["kv_heads"], r["head_dim"]), set()).add(r["pv_splits"])
    assert all(len(v) == 1 for v in pv.values())


def test_a_split_norm_launches_its_combine_and_apply():
    """405B at TP16, batch 64: hidden 16384 per rank, 64 rows, so each norm runs in 2 parts. The
    attn.norm op is charged the table's norm kernel (the first stage) and then the split's combine
    (reads 2 x 64 fp32 partials, writes 64 fp32: 768 B) and apply (reads the 64 x 16384 fp16 input
    again and the 16384 fp16 weight, 2,097,152 + 32,768 B, and the 64 fp32 statistics, 256 B:
    2,130,176 B). 70B TP8 (hidden 8192): no split. At 264 rows (2 x 132 SMs) Inductor stops splitting;
    a hidden size not derived does not split either."""
    assert fusion.norm_splits_at(64, 16384) == 2 and fusion.norm_splits_at(64, 8192) == 1
    assert fusion.norm_splits_at(263, 16384) == 2 and fusion.norm_splits_at(264, 16384) == 1
    assert fusion.norm_splits_at(64, 12345) == 1
    cost = CostModel(H100, Stack())
    sched, _ = _sched(batch=64, model="llama-3.1-405b", tp=16)
    for name in ("L3.attn.norm", "L3.mlp.norm"):
        op = _op(sched, name)
        terms = cost.kernel_terms(op, fusion.kernels(fusion.lookup(sched, op, "cuda")), sched, True)
        assert [t["name"].split(":")[0] for t in terms[-2:]] == ["norm split"] * 2, name
        assert [t["dram_bytes"] for t in terms[-2:]] == [768, 2_130_176]
    sched, _ = _sched(batch=64)
    op = _op(sched, "L3.attn.norm")
    assert not any(t["name"].startswith("norm split")
                   for t in cost.kernel_terms(op, fusion.kernels(fusion.lookup(sched, op, "cuda")), sched, True))
    # every kind prices its norms alike: a ladder layer's two norms, fused with the residual adds
    sched, _ = _sched("ladder", batch=64, model="llama-3.1-405b", tp=16)
    split = [t for name in ("L3.attn.norm", "L3.mlp.norm") for t in
             cost.kernel_terms(_op(sched, name), fusion.kernels(fusion.lookup(sched, _op(sched, name), "cuda")),
                               sched, True) if t["name"].startswith("norm split")]
    assert len(split) == 4


def test_the_final_norm_adds_its_split_outside_the_layers():
    """The final norm (outside the layers, priced by the analytic fused model as one kernel) at 405B
    TP16 batch 64 splits as the layers' norms do: it adds the same combine (768 B) and apply
    (2,130,176 B), two launches, to its time and its launch count. 70B TP8 (hidden 8192), a CPU
    profile and prefill add nothing."""
    sched, st = _sched(batch=64, model="llama-3.1-405b", tp=16)
    cost = CostModel(H100, st)
    op = _op(sched, "final.norm")
    split = fusion.outside_norm_split(sched, op, "cuda")
    terms = cost.kernel_terms(op, split, sched, True)
    assert [t["dram_bytes"] for t in terms] == [768, 2_130_176]
    assert cost.compute_s(op, "decode", sched) == pytest.approx(
        cost._compute_s(op, True, True) + sum(t["s"] for t in terms))
    assert cost._kernel_count(op, True, None, sched) == 1 + 2
    assert fusion.outside_norm_split(sched, _op(sched, "L3.attn.norm"), "cuda") == []      # a layer's: the overlay's
    assert fusion.outside_norm_split(sched, op, "cpu") == []
    small, _ = _sched(batch=64)
    assert not any(k.runs(fusion.symbols(small, _op(small, "final.norm")))
                   for k in fusion.outside_norm_split(small, _op(small, "final.norm"), "cuda"))
    pre = build("upper-bound", get_model("llama-3.1-405b"), 16, Step.prefill(1, 1024, 512, st), st)
    assert fusion.outside_norm_split(pre, _op(pre, "final.norm"), "cuda") == []


def test_an_mha_attention_launches_no_separate_q_rope():
    """llama-2-7b at TP4 (8 query heads, 8 KV heads: G = 1): the attention launches four kernels, the
    GQA ones less q's RoPE (fused into the cache write on the GPU path); llama-3.1-8b at TP4 (G = 4)
    five. Batch 16: no p@v split in either."""
    cost = CostModel(H100, Stack())
    for model, n in (("llama-2-7b", 4), ("llama-3.1-8b", 5)):
        sched, _ = _sched(batch=16, model=model, tp=4)
        op = _op(sched, "L0.attn.sdpa")
        hit = fusion.lookup(sched, op, "cuda")
        assert len(cost.kernel_terms(op, fusion.kernels(hit), sched, True)) == n, model


def test_a_kernel_with_when_runs_only_where_its_symbol_exceeds_one():
    """`when` names a symbol; the kernel launches where it is > 1 (a split's combine), and always when
    no symbol is named."""
    k = fusion.Kernel("attn.sdpa", "generated", "combine", (), (), when="pv_splits")
    assert k.runs({"pv_splits": 12}) and not k.runs({"pv_splits": 1}) and not k.runs({})
    assert fusion.Kernel("attn.sdpa", "generated", "pv", (), ()).runs({"pv_splits": 1})


def _triton_missing() -> bool:
    return importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None


_DERIVE = ("import json; from tpsim.hw.derive.inductor_gpu import derive; "
           "print(json.dumps(derive(progress=lambda s: None)))")


def _derive_in(python: str) -> dict:
    """The GPU table's layers as `python -m tpsim.hw.derive.inductor_gpu` derives them in interpreter `python`
    (a fresh one: the fake device patches Inductor's device queries, and an earlier test's compiled
    state in this process -- Inductor caches whether Triton works -- must not decide it)."""
    out = subprocess.run([python, "-c", _DERIVE], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def _reference_python() -> str | None:
    """An interpreter whose torch is the one the shipped GPU table was derived with (the reference
    harness's, 2.5.1): $TPSIM_REFERENCE_TORCH_PYTHON (docs/compiled-stack.md says how to make one), or
    this one when its torch is that version."""
    want = fusion.meta(str(fusion.GPU_TABLE_PATH))["torch"]
    env = os.environ.get("TPSIM_REFERENCE_TORCH_PYTHON")
    if env:
        return env
    import torch                                  # lazy: _triton_missing() has checked it is there
    return sys.executable if torch.__version__ == want else None


@pytest.mark.hw
@pytest.mark.slow
@pytest.mark.skipif(_triton_missing(), reason="needs torch and triton (pip install triton) to generate Triton code")
def test_shipped_gpu_table_is_what_inductor_emits_on_the_references_torch():
    """The committed GPU table is what `python -m tpsim.hw.derive.inductor_gpu` derives with the torch / triton
    it records (the reference harness's 2.5.1 / 3.1.0; about 20 s): a derivation change, or a table
    edited by hand, fails here. Runs where such an interpreter is at hand."""
    python = _reference_python()
    if python is None:
        pytest.skip(f"the GPU table was derived with torch {fusion.meta(str(fusion.GPU_TABLE_PATH))['torch']}; "
                    "set TPSIM_REFERENCE_TORCH_PYTHON to a python with it (docs/compiled-stack.md)")
    with open(fusion.GPU_TABLE_PATH) as f:
        shipped = json.load(f)["layers"]
    assert _derive_in(python) == shipped, \
        "Inductor's Triton path no longer emits the committed table: rerun `python -m tpsim.hw.derive.inductor_gpu`"


@pytest.mark.hw
@pytest.mark.slow
@pytest.mark.skipif(_triton_missing(), reason="needs torch and triton (pip install triton) to generate Triton code")
def test_the_derivation_runs_on_the_installed_torch_and_marks_the_rereads():
    """The same derivation on the installed torch (2.13 here: another fusion of the attention, q's RoPE
    inlined into q@k^T, an online softmax) runs through and gives what sim prices alike: one GQA
    re-read of K and one of V per layer (passes G), every linear extern at batch > 1, generated at 1."""
    layers = _derive_in(sys.executable)
    for kind in ("standard", "upper-bound"):
        dec, m1 = layers[kind]["decode"], layers[kind]["decode-m1"]
        rereads = sorted(b["numel"] for k in dec if k["role"] == "attn.sdpa" for b in k["buffers"]
                         if b.get("passes") == "G")
        assert rereads == ["2*b*L*kvh*dh", "2*b*L*kvh*dh"], kind
        assert {k["kind"] for k in dec if k["role"] in ("attn.qkv", "mlp.up", "mlp.down")} == {"matmul"}
        assert {k["kind"] for k in m1 if k["role"] in ("attn.qkv", "mlp.up", "mlp.down")} == {"generated"}


@pytest.mark.hw
@pytest.mark.slow
@pytest.mark.skipif(_triton_missing(), reason="needs torch and triton (pip install triton) to generate Triton code")
def test_the_derivation_folds_wo_and_a_plain_make_fx_would_not():
    """Inductor itself on a toy decode step (hw.derive.inductor_gpu, batch 4, 8 heads of 128 over 1 KV head,
    hidden 512, 3 layers): traced as torch.compile sees views (hw.derive.fake_views.eager_view_strides, the
    derivation's own) wo is `extern_kernels.mm`; a plain make_fx trace on this torch makes it a bmm over
    the expanded weight, decomposed into a generated reduction (`bmm` and `expand_t_transpose` in its
    name) with no extern call for it. Each trace in a fresh interpreter (the fake device's patches)."""
    code = ("import sys, json, contextlib; from tpsim.hw import inductor_gpu as IG, reference_model as R\n"
            "if sys.argv[1] == 'plain': IG.eager_view_strides = contextlib.nullcontext\n"
            "c = IG.compile_decode(R.Shapes(4, 64, 8, 1, 128, 512, 256, 512, 3), False).code\n"
            "print(json.dumps(IG.launch_order(c)))")
    calls = {}
    for trace in ("derivation", "plain"):
        out = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        calls[trace] = json.loads(out.stdout.splitlines()[-1])
    n_mm = {v: cs.count("extern_kernels.mm") for v, cs in calls.items()}
    # wo's reduction reads the weight through t() of the expanded bmm operand ("expand_t_transpose";
    # attention's decomposed bmm's are "bmm_clone_expand"), in layer 2 with the residual add fused
    bmm = {v: [c for c in cs if c.startswith("triton_") and "bmm" in c and "expand_t_transpose" in c]
           for v, cs in calls.items()}
    assert n_mm == {"derivation": 3 * 4 + 1, "plain": 3 * 3 + 1}, calls    # qkv, wo, w13, w2 x 3 + the head
    assert bmm["derivation"] == [] and len(bmm["plain"]) == 3, bmm


def test_pv_splits_reads_a_split_and_its_combine_from_the_launches():
    """hw.derive.inductor_gpu.pv_splits on launch lists written by hand (kernel, numel arguments): layer 1's
    p@v is the launch after its softmax (the second one). 4,096 outputs: p@v over 4096 is one kernel;
    over 49,152 = 4096 x 12 then a combine over (4096, 12) is a split in 12; anything else is an error,
    not a guess."""
    pytest.importorskip("torch")
    from tpsim.hw.derive.inductor_splits import launch_numels, pv_splits
    layer = [("triton_red_fused_bmm_3", (49152, 128)), ("triton_red_fused__safe_softmax_4", (32, 1536))]
    one = layer + [("triton_red_fused_bmm_5", (4096, 1536)), ("triton_poi_x", (512,))]
    split = layer + [("triton_red_fused_bmm_5", (49152, 128)), ("triton_per_fused__to_copy_bmm_6", (4096, 12))]
    assert pv_splits(one + one, 4096) == 1
    assert pv_splits(split + split, 4096) == 12
    with pytest.raises(RuntimeError, match="neither one kernel"):
        pv_splits(one + layer + [("triton_red_fused_bmm_5", (8192, 128)), ("triton_poi_x", (512,))], 4096)
    code = ("def call(args):\n"
            "        triton_red_fused_bmm_5.run(buf30, arg22_1, buf31, 49152, 128, grid=grid(49152), stream=stream0)\n"
            "        triton_per_fused__to_copy_bmm_6.run(buf31, buf33, 4096, 12, grid=grid(4096), stream=stream0)\n")
    assert launch_numels(code) == [("triton_red_fused_bmm_5", (49152, 128)),
                                   ("triton_per_fused__to_copy_bmm_6", (4096, 12))]


_SPLITS_AT = ("import json, dataclasses; from tpsim.hw import inductor_splits as g; "
              "grid = {k: v for k, v in g.split_grid().items() if v in "
              "{('llama-3.1-70b', 8, 4), ('llama-3.1-70b', 8, 16), ('llama-3.1-8b', 1, 1)}}; "
              "print(json.dumps(g.derive_splits(progress=lambda s: None, grid=grid)))")


@pytest.mark.hw
@pytest.mark.slow
@pytest.mark.skipif(_triton_missing(), reason="needs torch and triton (pip install triton) to generate Triton code")
def test_shipped_splits_are_what_inductor_emits_on_the_references_torch():
    """Three rows of the shipped `splits` (70B TP8 batch 4 and 16, 8B TP1 batch 1: 12, 1 and 12 parts)
    re-derived with the torch the table records (about 15 s; the whole grid is
    `python -m tpsim.hw.derive.inductor_splits`, about 15 min), and the combine kernel as shipped."""
    python = _reference_python()
    if python is None:
        pytest.skip("set TPSIM_REFERENCE_TORCH_PYTHON to a python with the table's torch (docs/compiled-stack.md)")
    out = subprocess.run([python, "-c", _SPLITS_AT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    derived = json.loads(out.stdout.splitlines()[-1])
    with open(fusion.GPU_TABLE_PATH) as f:
        shipped = json.load(f)["splits"]
    assert derived["combine"] == shipped["combine"] and derived["cache"] == shipped["cache"]
    assert derived["probe_launches"] == shipped["probe_launches"] and derived["norm"] == shipped["norm"]
    rows = {(r["b"], r["heads"], r["kv_heads"], r["head_dim"], r["hidden"]): r for r in shipped["shapes"]}
    assert [r["pv_splits"] for r in derived["shapes"]] == [12, 12, 1]
    for r in derived["shapes"]:
        assert rows[(r["b"], r["heads"], r["kv_heads"], r["head_dim"], r["hidden"])] == r
