"""The compiled stack: stack flags, Inductor's kernel table (sim/price/compiled_kernels.json) and its pricing."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tpsim.sim.price import fusion
from tpsim.sim.price.cost import CostModel
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step

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
    for kind in ("standard", "upper-bound", "parallel", "spd", "ladder", "token-split:2", "token-split:4",
                 "seq-parallel"):
        for variant in ("prefill", "decode", "decode-m1", "decode-cpu"):
            assert (kind, variant) in t, (kind, variant)
    assert fusion.meta()["command"] == "python -m tpsim.hw.derive.inductor_kernels"


def test_fused_ops_cost_nothing_and_the_add_rides_on_the_next_norm():
    """Standard decode: the residual add after the attention all-reduce is fused into the MLP's
    rmsnorm kernel (Inductor); the add costs 0 and the norm kernel reads what the add read."""
    st = Stack()
    s = _sched(st)
    cm = CostModel(H100, st)
    assert cm.compute_s(_op(s, "L1.attn.add"), "decode", s) == 0.0
    assert cm.compute_s(_op(s, "L1.mlp.add"), "decode", s) == 0.0
    # the norm's kernel, then a split norm's two (they launch only where Inductor splits the norm's
    # reduction: hidden > 8192, fusion.norm_splits_at; not at 4096)
    norm, *split = fusion.table()[("standard", "decode")]["mlp.norm"]
    assert "attn.add" in norm.fuses
    assert [k.when for k in split] == ["norm_splits"] * 2 and not any(k.runs(fusion.symbols(s)) for k in split)
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


def _mem_s(nbytes: float) -> float:
    """A generated kernel on H100 under CUDA graphs: bytes at the memory roofline, at least a launch."""
    return max(nbytes / (H100.mem_bytes_per_s * H100.memory_efficiency(nbytes)), H100.launch_s["graph"])


def test_seq_parallel_is_priced_from_its_table():
    """70B TP8 decode at batch 12: 12 token rows, 2 per rank's shard, padded to 16. By hand (fp16,
    hidden 8192): the attention norm's kernel reads the shard's residual, the two reduce-scattered
    sums Inductor recomputes it from and the weight, writes norm(x) [2, 8192]; the pad before the
    reduce-scatter reads the 12 rows and writes 16. The analytic fused model would read and write
    only [2, 8192] for the norm."""
    st = Stack()
    s = _sched(st, batch=12, spec="seq-parallel", model="llama-3.1-70b", tp=8)
    cm = CostModel(H100, st)
    norm, pad = _op(s, "L1.attn.norm"), _op(s, "L1.attn.reducescatter.pad")
    assert fusion.lookup(s, norm, "cuda") == ("seq-parallel", "decode", "attn.norm")
    assert cm.compute_s(norm, "decode", s) == pytest.approx(_mem_s(2 * (4 * 2 * 8192 + 8192)))
    assert cm.compute_s(pad, "decode", s) == pytest.approx(_mem_s(2 * (12 + 16) * 8192))
    assert cm.compute_s(_op(s, "L1.attn.add"), "decode", s) == 0.0             # fused into mlp.norm
    # the run's boundary (shard in, gather out) is not in the kept layer: the analytic model prices it
    assert fusion.lookup(s, _op(s, "L79.sp.gather.unpad"), "cuda") is None
    assert fusion.lookup(s, _op(s, "L0.sp.shard"), "cuda") is None


def test_token_split_is_priced_per_micro_batch_from_its_table():
    """70B TP8 decode at batch 16 split 8 + 8. Inductor fuses both micro-batches' attention norms
    (with the residual adds before them) into one kernel, charged to the later (mb1): by hand it
    reads micro-batch 1's residual [8, 8192], four partial sums [8, 8192] and the weight, and
    writes both norms; micro-batch 0's norm costs nothing."""
    st = Stack()
    s = _sched(st, batch=16, spec="token-split", model="llama-3.1-70b", tp=8)
    cm = CostModel(H100, st)
    n0, n1 = _op(s, "L1.mb0.attn.norm"), _op(s, "L1.mb1.attn.norm")
    assert fusion.lookup(s, n1, "cuda") == ("token-split:2", "decode", "mb1.attn.norm")
    assert fusion.symbols(s, n1)["b"] == 8
    assert cm.compute_s(n0, "decode", s) == 0.0
    assert cm.compute_s(n1, "decode", s) == pytest.approx(_mem_s(2 * 8192 * (8 + 4 * 8 + 1 + 2 * 8)))
    # batch 2: micro-batches of one sequence take Inductor's M == 1 path; batch 1 cannot split and
    # its (standard) layers are priced as standard's
    s2 = _sched(st, batch=2, spec="token-split", model="llama-3.1-70b", tp=8)
    assert fusion.lookup(s2, _op(s2, "L1.mb1.mlp.up"), "cuda") == ("token-split:2", "decode-m1", "mb1.mlp.up")
    s1 = _sched(st, batch=1, spec="token-split", model="llama-3.1-70b", tp=8)
    assert fusion.lookup(s1, _op(s1, "L1.mlp.norm"), "cuda") == ("standard", "decode-m1", "mlp.norm")


def test_token_split_counts_without_a_table_take_the_nearest():
    """token-split:3 prices with the 4-way table: first, middle and last micro-batches keep their place;
    token-split:4 at batch 2 splits in 2 and takes the 2-way table."""
    st = Stack()
    s = _sched(st, batch=16, spec="token-split:3", model="llama-3.1-70b", tp=8)
    got = [fusion.lookup(s, _op(s, f"L1.mb{j}.mlp.up"), "cuda") for j in range(3)]
    assert got == [("token-split:4", "decode", f"mb{j}.mlp.up") for j in (0, 1, 3)]
    s = _sched(st, batch=2, spec="token-split:4", model="llama-3.1-70b", tp=8)
    assert fusion.lookup(s, _op(s, "L1.mb1.mlp.up"), "cuda") == ("token-split:2", "decode-m1", "mb1.mlp.up")


def test_token_split_prefill_attention_upcasts_to_fp32():
    """Each prefill chunk runs math SDPA's fp32 bmm's over the whole static cache (its expanded K/V
    in fp32): the reason the analytic model, which knows no upcast, underpriced it."""
    for j in (0, 1):
        ks = fusion.table()[("token-split:2", "prefill")][f"mb{j}.attn.sdpa"]
        bmms = [k for k in ks if k.kind == "matmul"]
        assert len(bmms) == 2 and all(k.matmul_dtype() == "fp32" for k in bmms)
    st = Stack()
    s = _sched(st, batch=4, phase="prefill", spec="token-split", model="llama-3.1-70b", tp=8)
    op = _op(s, "L1.mb1.attn.sdpa")
    assert dict(op.attrs)["q_len"] == 512
    cm = CostModel(H100, st)
    assert cm.compute_s(op, "prefill", s) > cm._compute_s(op, True, False)      # table vs analytic fused


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
    from tpsim import cli
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
@pytest.mark.parametrize("kind,variant", [("standard", "decode"), ("standard", "prefill"),
                                          ("token-split:2", "prefill"), ("seq-parallel", "decode")])
def test_shipped_table_is_what_inductor_emits_here(kind, variant):
    """Recompile one layer on this machine's torch and compare kernel for kernel with the shipped
    table: a torch whose fusion differs fails here (regenerate: python -m tpsim.hw.derive.inductor_kernels)."""
    from tpsim.hw.derive.inductor_kernels import compile_kernels

    def canon(ks):
        return sorted((k["role"], k["kind"], tuple(sorted((b["mode"], b["dtype"], b["numel"]) for b in k["buffers"])))
                      for k in ks)

    with open(fusion.TABLE_PATH) as f:
        shipped = json.load(f)
    got = compile_kernels(kind, variant)
    assert canon(got) == canon(shipped["layers"][kind][variant]), (
        f"Inductor (torch {__import__('torch').__version__}) now emits other kernels for {kind}:{variant} "
        f"than sim/price/compiled_kernels.json (derived with torch {shipped['torch']}): regenerate it with "
        f"`python -m tpsim.hw.derive.inductor_kernels` and review the prediction changes")


@pytest.mark.hw
def test_functional_pass_computes_what_the_runner_computes():
    """The compiled harness's pass (functional collectives, math SDPA op) run eagerly on one rank
    gives the eager runner's logits: same ops, same numbers."""
    import torch
    from tpsim.hw.derive.inductor_kernels import one_rank_group
    from tpsim.hw.model import build_rank_model
    from tpsim.hw.runner import Runner
    m, st = get_model("tiny"), Stack(dtype="fp32")
    rm = build_rank_model(m, 1, 0, batch=2, max_seq=11, dtype="fp32")
    r = Runner(rm, one_rank_group())
    tok = torch.randint(0, m.vocab, (2, 8), generator=torch.Generator().manual_seed(0))
    for spec in ("standard", "ladder", "parallel", "token-split", "seq-parallel"):
        pre = build(spec, m, 1, Step.prefill(2, 8, 3, st), st)
        dec = build(spec, m, 1, Step.decode(2, 8, 3, 1, st), st)
        rm.reset_cache()
        a = [r.forward(pre, tok, 0).logits, r.forward(dec, tok[:, :1], 8).logits]
        rm.reset_cache()
        b = [r.functional_pass(pre, tok, torch.tensor(0))[0], r.functional_pass(dec, tok[:, :1], torch.tensor(8))[0]]
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.hw
@pytest.mark.slow           # compiles 2 schedules x 2 passes on 2 gloo ranks: about a minute
def test_compiled_token_split_and_seq_parallel_match_the_reference():
    """The compiled harness (whole forward through Inductor, functional all-gather and
    reduce-scatter, micro-batch attention on its own cache rows) computes what the reference does:
    uneven micro-batches (3 = 2 + 1) and 3 decode rows padded to 4 on TP2."""
    from tpsim.commands.bench import check_cmd
    res = CliRunner().invoke(check_cmd, ["--model", "tiny", "--tp", "2", "--batch", "3", "--prompt", "8", "--gen", "3",
                                         "--device", "cpu", "--backend", "gloo", "--compile", "--json",
                                         "--schedule", "token-split", "--schedule", "seq-parallel"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["ok"] and all(r["ok"] and r["prefill_err"] < 1e-4 and r["decode_err"] < 1e-4
                             for r in out["schedules"])
    # the reference's Inductor flags, read back from a rank's torch._inductor.config after compiling
    assert out["inductor_flags"] == {"coordinate_descent_tuning": True, "triton.unique_kernel_names": True,
                                     "fx_graph_cache": True,
                                     "reorder_for_compute_comm_overlap": True}
