"""The compiled stack: stack flags, Inductor's kernel table (sim/compiled_kernels.json) and its pricing."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sim import fusion
from sim.cost import CostModel
from sim.model import get_model
from sim.profile import load_profile
from sim.schedule import build
from sim.stack import Stack, Step

H100 = load_profile("h100-sxm")


def _sched(stack: Stack, batch: int = 4, phase: str = "decode", spec: str = "standard", model="llama-3.1-8b", tp=2):
    m = get_model(model)
    step = Step.prefill(batch, 1024, 512, stack) if phase == "prefill" else Step.decode(batch, 1024, 512, 1, stack)
    return build(spec, m, tp, step, stack)


def _op(sched, name):
    return next(op for op in sched.ops if op.name == name)


def test_stack_defaults_are_the_reference_harness():
    st = Stack()
    assert (st.compiled("prefill"), st.compiled("decode"), st.graphs("prefill"), st.graphs("decode")) == \
        (True, True, False, True)
    assert st.describe() == "prefill compiled, decode compiled + CUDA graphs, math attention, static KV"


def test_table_covers_every_schedule_kind_and_variant():
    t = fusion.table()
    for kind in ("standard", "upper-bound", "parallel", "spd", "ladder"):
        for variant in ("prefill", "decode", "decode-m1", "decode-cpu"):
            assert (kind, variant) in t, (kind, variant)
    assert fusion.meta()["command"] == "python -m hw.inductor_kernels"


def test_fused_ops_cost_nothing_and_the_add_rides_on_the_next_norm():
    """Standard decode: the residual add after the attention all-reduce is fused into the MLP's
    rmsnorm kernel (Inductor); the add costs 0 and the norm kernel reads what the add read."""
    st = Stack()
    s = _sched(st)
    cm = CostModel(H100, st)
    assert cm.compute_s(_op(s, "L1.attn.add"), "decode", s) == 0.0
    assert cm.compute_s(_op(s, "L1.mlp.add"), "decode", s) == 0.0
    (norm,) = fusion.table()[("standard", "decode")]["mlp.norm"]
    assert "attn.add" in norm.fuses
    # by hand: b=4, hidden=4096, fp16. Reads: residual x, both partial sums of the previous layer, this
    # layer's attention sum (Inductor recomputes the unrealized residual chain), the weight; writes
    # h and norm(h).
    el = 4 * 4096
    want = 2 * (4 * el + 4096 + 2 * el)
    assert norm.bytes(fusion.symbols(s), 2) == want
    t = cm.compute_s(_op(s, "L1.mlp.norm"), "decode", s)
    gpu = want / (H100.mem_bytes_per_s * H100.memory_efficiency(want))
    assert t == pytest.approx(max(gpu, H100.launch_s["graph"]))


def test_decode_attention_reads_the_cache_once_not_expanded():
    """GPU decode: q@k^T with one query row is a generated reduction reading the fp16 cache as is
    (no materialized GQA expand), the scores are fp32 [b, H, 1, L]."""
    st = Stack()
    s = _sched(st, batch=64, model="llama-3.1-70b", tp=8)
    ks = fusion.table()[("standard", "decode")]["attn.sdpa"]
    reads = [b for k in ks for b in k.buffers if b.mode == "read"]
    cache = [b for b in reads if "L" in b.numel.split("*") and b.dtype == "float16"]
    sym = fusion.symbols(s)
    kv_bytes = 2 * 64 * 1536 * 1 * 128            # one of K, V: [b, L, kvh, d] fp16
    assert sorted(fusion.numel(b.numel, sym) * 2 for b in cache) == [kv_bytes, kv_bytes]
    assert all("G" not in b.numel.split("*") for b in cache)


def test_prefill_attention_upcasts_to_fp32_and_materializes_scores():
    """Prefill (q > 1): extern bmm's on fp32 operands (math SDPA upcasts fp16), scores written."""
    ks = fusion.table()[("standard", "prefill")]["attn.sdpa"]
    bmms = [k for k in ks if k.kind == "matmul"]
    assert len(bmms) == 2 and all(k.matmul_dtype() == "fp32" for k in bmms)
    scores = {b.numel for k in ks for b in k.buffers if b.mode == "write" and b.dtype == "float32"}
    assert "b*q*L*kvh*G" in scores


def test_eager_stack_keeps_the_unfused_kernels():
    st = Stack(compile_prefill=False, compile_decode=False, decode_graphs=False)
    s = _sched(st)
    cm = CostModel(H100, st)
    assert cm.compute_s(_op(s, "L1.attn.add"), "decode", s) > 0          # its own eager kernel
    compiled = Stack()
    sc = _sched(compiled)
    assert (CostModel(H100, compiled).compute_s(_op(sc, "L1.attn.sdpa"), "decode", sc)
            < cm.compute_s(_op(s, "L1.attn.sdpa"), "decode", s))


def test_predict_states_the_priced_stack():
    import cli
    r = CliRunner().invoke(cli.main, ["predict", "--model", "llama-3.2-1b", "--tp", "2", "--gen", "8",
                                      "--schedule", "standard"])
    assert r.exit_code == 0, r.output
    assert "stack: prefill compiled, decode compiled + CUDA graphs" in r.output
    r = CliRunner().invoke(cli.main, ["predict", "--model", "llama-3.2-1b", "--tp", "2", "--gen", "8",
                                      "--schedule", "standard", "--no-compile", "--json"])
    d = json.loads(r.output)
    assert (d["stack"]["compile_prefill"], d["stack"]["compile_decode"], d["stack"]["decode_graphs"]) == \
        (False, False, False)
    r = CliRunner().invoke(cli.main, ["predict", "--model", "llama-3.2-1b", "--tp", "2", "--gen", "8",
                                      "--schedule", "standard", "--no-compile-prefill", "--json"])
    d = json.loads(r.output)
    assert (d["stack"]["compile_prefill"], d["stack"]["compile_decode"]) == (False, True)


@pytest.mark.hw
@pytest.mark.slow
@pytest.mark.parametrize("kind,variant", [("standard", "decode"), ("standard", "prefill")])
def test_shipped_table_is_what_inductor_emits_here(kind, variant):
    """Recompile one layer on this machine's torch and compare kernel for kernel with the shipped
    table: a torch whose fusion differs fails here (regenerate: python -m hw.inductor_kernels)."""
    from hw.inductor_kernels import compile_kernels

    def canon(ks):
        return sorted((k["role"], k["kind"], tuple(sorted((b["mode"], b["dtype"], b["numel"]) for b in k["buffers"])))
                      for k in ks)

    with open(fusion.TABLE_PATH) as f:
        shipped = json.load(f)
    got = compile_kernels(kind, variant)
    assert canon(got) == canon(shipped["layers"][kind][variant]), (
        f"Inductor (torch {__import__('torch').__version__}) now emits other kernels for {kind}:{variant} "
        f"than sim/compiled_kernels.json (derived with torch {shipped['torch']}): regenerate it with "
        f"`python -m hw.inductor_kernels` and review the prediction changes")


@pytest.mark.hw
def test_functional_pass_computes_what_the_runner_computes():
    """The compiled harness's pass (functional collectives, math SDPA op) run eagerly on one rank
    gives the eager runner's logits: same ops, same numbers."""
    import torch
    from hw.inductor_kernels import _one_rank_group
    from hw.model import build_rank_model
    from hw.runner import Runner
    m, st = get_model("tiny"), Stack(dtype="fp32")
    rm = build_rank_model(m, 1, 0, batch=2, max_seq=11, dtype="fp32")
    r = Runner(rm, _one_rank_group())
    tok = torch.randint(0, m.vocab, (2, 8), generator=torch.Generator().manual_seed(0))
    for spec in ("standard", "ladder", "parallel"):
        pre = build(spec, m, 1, Step.prefill(2, 8, 3, st), st)
        dec = build(spec, m, 1, Step.decode(2, 8, 3, 1, st), st)
        rm.reset_cache()
        a = [r.forward(pre, tok, 0).logits, r.forward(dec, tok[:, :1], 8).logits]
        rm.reset_cache()
        b = [r.functional_pass(pre, tok, torch.tensor(0))[0], r.functional_pass(dec, tok[:, :1], torch.tensor(8))[0]]
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
