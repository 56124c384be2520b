"""Stack.mm_decompose_m1: whether the stack's Inductor turns a one-row matmul into a generated
reduction (torch/_inductor/decomposition.py `mm`: coordinate_descent_tuning on, a GPU, M == 1
statically known). The reference (gpt-fast flags) does; vLLM (no coordinate descent on its
symbolic-size graph, M symbolic), TensorRT-LLM and eager do not, so their M == 1 linears are cuBLAS
F.linear, priced from the profile's GEMM table. Toy profile: h100-sxm's 3.35e12 B/s with a flat
memory efficiency 0.5 (1.675e12 B/s for every kernel) and a toy GEMM table, so the two prices of one
op cannot be confused.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.price import fusion
from tpsim.sim.price.cost import CostModel
from tpsim.sim.model.presets import get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.schema import Curve, GemmTable
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step, make_stack
from tpsim.sim.stack.presets import PRESETS, load_stack

H100 = load_profile("h100-sxm")
# 70B TP8 per rank: hidden 8192, ffn 3584 (mlp.up fuses w1 and w3: n = 7168), vocab 128256
TOY_GEMMS = GemmTable("toy cuBLAS rows", ("fp16",), (1, 2), (
    (7168, 8192, (100e-6, 120e-6)),          # mlp.up: m = 1 100 us, m = 2 120 us
    (8192, 3584, (50e-6, 60e-6)),            # mlp.down
    (128256, 8192, (900e-6, 950e-6)),        # the replicated LM head
))
TOY = dataclasses.replace(H100, memory_efficiency=Curve((1.0,), (0.5,)), compute_points=(), gemm_tables=(TOY_GEMMS,))
DECOMPOSES, EXTERN = Stack(), Stack(mm_decompose_m1=False)


def _op(stack, batch=1, name="L1.mlp.up", kind="upper-bound"):
    s = build(kind, get_model("llama-3.1-70b"), 8, Step.decode(batch, 1024, 512, 1, stack), stack)
    return s, next(op for op in s.ops if op.name == name)


def test_presets_source_the_flag_from_their_engine():
    """True where the engine's Inductor decomposes (the reference; SGLang's --enable-torch-compile
    config), False for vLLM, TensorRT-LLM and eager; each value names its source."""
    want = {"reference": True, "sglang": True, "vllm": False, "trtllm": False, "eager": False}
    for name, flag in want.items():
        p = PRESETS[name]
        assert p.values["mm_decompose_m1"] is flag, name
        assert "coordinate_descent_tuning" in p.sources["mm_decompose_m1"], name
        assert make_stack({}, None, preset=p.values).mm_decompose_m1 is flag
    assert Stack().mm_decompose_m1 is True            # the reference harness's default


def test_the_same_batch_1_linear_by_bytes_or_by_the_table_row():
    """mlp.up at batch 1. Decomposing: one generated reduction reading the normed input and its
    residual (2 x 16,384 B), the rsqrt (4 B), the weight [7168, 8192] fp16 (117,440,512 B) and
    writing fp32 sums [7168] (28,672 B): 117,501,956 B / 1.675e12 B/s = 70.151 us. Extern: the
    EXTERN_DECODE variant's extern mm, the toy table's m = 1 row, 100 us (above the 2.49 us graph
    launch floor)."""
    s, op = _op(DECOMPOSES)
    assert fusion.lookup(s, op, "cuda") == ("upper-bound", "decode-m1", "mlp.up")
    assert CostModel(TOY, DECOMPOSES).compute_s(op, "decode", s) == pytest.approx(117_501_956 / 1.675e12)
    s, op = _op(EXTERN)
    assert fusion.lookup(s, op, "cuda") == ("upper-bound", fusion.EXTERN_DECODE, "mlp.up")
    (k,) = fusion.kernels(fusion.lookup(s, op, "cuda"))
    assert k.kind == "matmul"
    assert CostModel(TOY, EXTERN).compute_s(op, "decode", s) == pytest.approx(100e-6)


def test_the_layers_other_kernels_follow_the_extern_mm():
    """Without the decomposition every linear is an extern mm (a fusion barrier), so the layer keeps
    the pointwise kernels the batch > 1 step has: the mlp RMSNorm writes the normed rows
    (decode-m1 folds the scale into the up GEMV instead), the SiLU-mul is its own kernel (decode-m1
    fuses it into the down reduction), and wo is an extern mm, not the reference's generated
    expanded-weight reduction. By hand at batch 1: mlp.norm reads x, its two residuals, the attn
    output and the weight (5 x 16,384 B) and writes the new residual and the normed rows (2 x 16,384 B):
    114,688 B; mlp.act reads [2 x 3584] and writes [3584] fp16: 21,504 B; both sit on the 2.49 us
    graph launch floor. mlp.down: the toy m = 1 row, 50 us. (The standard layer: its norm also adds
    the residuals.)"""
    s, _ = _op(EXTERN, kind="standard")
    cm = CostModel(TOY, EXTERN)

    def kernels(role):
        return fusion.kernels(fusion.lookup(s, next(o for o in s.ops if o.name == f"L1.{role}"), "cuda"))
    assert [k.kind for r in ("attn.qkv", "attn.out", "mlp.up", "mlp.down") for k in kernels(r)] == ["matmul"] * 4
    sym = fusion.symbols(s, next(o for o in s.ops if o.name == "L1.mlp.norm"))
    (norm,) = kernels("mlp.norm")
    (act,) = kernels("mlp.act")
    assert norm.bytes(sym, 2) == 7 * 16_384 == 114_688
    assert act.bytes(sym, 2) == 3 * 3584 * 2 == 21_504
    for role in ("mlp.norm", "mlp.act"):
        op = next(o for o in s.ops if o.name == f"L1.{role}")
        assert cm.compute_s(op, "decode", s) == pytest.approx(H100.launch_s["graph"])
    down = next(o for o in s.ops if o.name == "L1.mlp.down")
    assert cm.compute_s(down, "decode", s) == pytest.approx(50e-6)
    # the decomposing stack's batch-1 layer has no SiLU-mul kernel of its own
    s1, _ = _op(DECOMPOSES, kind="standard")
    act1 = next(o for o in s1.ops if o.name == "L1.mlp.act")
    assert fusion.kernels(fusion.lookup(s1, act1, "cuda")) == []


def test_the_batch_1_lm_head_by_bytes_or_by_the_table_row():
    """The replicated head [128256, 8192] inside the compiled step: decomposing, a generated GEMV
    reading x (16,384 B) and the weight (2,101,346,304 B), writing [128256] (256,512 B):
    2,101,619,200 B / 1.675e12 B/s = 1254.70 us; extern, the toy m = 1 row, 900 us."""
    for stack, want in ((DECOMPOSES, 2_101_619_200 / 1.675e12), (EXTERN, 900e-6)):
        s, head = _op(stack, name="head")
        cm = CostModel(TOY, stack)
        assert cm.generated_gemv(head, True) is stack.mm_decompose_m1
        assert cm.compute_s(head, "decode", s) == pytest.approx(want)


def test_batch_2_linears_and_the_cpu_backend():
    """M = 2: mlp.up stays extern either way (the toy m = 2 row, 120 us), and so does wo (torch.compile
    folds its [b, 1, H*D] input into one mm: hw/derive/fake_views.py). A CPU device prices its C++ backend's
    table (decode-cpu) either way."""
    for stack, wo_kind in ((DECOMPOSES, "matmul"), (EXTERN, "matmul")):
        s, op = _op(stack, batch=2)
        assert CostModel(TOY, stack).compute_s(op, "decode", s) == pytest.approx(120e-6)
        s, wo = _op(stack, batch=2, name="L1.attn.out")
        assert [k.kind for k in fusion.kernels(fusion.lookup(s, wo, "cuda"))] == [wo_kind]
        s1, op1 = _op(stack)
        assert fusion.variant(s1, "cpu", op1) == "decode-cpu"


def test_extern_math_attention_leaves_the_decomposed_bmm_table():
    """The tables' GPU decode attention was derived with the q-len-1 bmm's decomposed (the same
    coordinate-descent rule): a math-attention stack without it prices attention analytically."""
    s, op = _op(DECOMPOSES, name="L1.attn.sdpa")
    assert fusion.lookup(s, op, "cuda") is not None
    s, op = _op(EXTERN, name="L1.attn.sdpa")
    assert fusion.lookup(s, op, "cuda") is None


def test_a_stack_file_sets_it_and_predict_reports_it(tmp_path):
    """A stack file over the reference turns it off: --json carries the field (and its source), the
    stack line says the M == 1 matmuls stay cuBLAS, the batch-1 step changes; a non-boolean value is
    a one-line error."""
    f = tmp_path / "no-cd.json"
    f.write_text(json.dumps({"format": "tpsim-stack", "extends": "reference", "stack": {"mm_decompose_m1": False},
                             "sources": {"mm_decompose_m1": "my harness leaves coordinate_descent_tuning off"}}))
    assert load_stack(str(f)).values["mm_decompose_m1"] is False
    args = ["--model", "llama-3.1-8b", "--tp", "1", "--batch", "1", "--prompt", "32", "--gen", "8",
            "--profile", "h100-sxm", "--schedule", "standard"]

    def run(*extra):
        r = CliRunner().invoke(main, ["predict", *extra, *args])
        assert r.exit_code == 0, r.output
        return r.output
    doc = json.loads(run("--stack", str(f), "--json"))
    assert doc["stack"]["mm_decompose_m1"] is False
    assert doc["stack"]["preset_info"]["sources"]["mm_decompose_m1"] == "my harness leaves coordinate_descent_tuning off"
    ref = json.loads(run("--json"))
    assert ref["stack"]["mm_decompose_m1"] is True
    assert doc["schedules"][0]["decode_s"] != pytest.approx(ref["schedules"][0]["decode_s"], rel=1e-6)
    assert "M=1 mm cuBLAS" in run("--stack", str(f)) and "M=1 mm cuBLAS" not in run()
    assert "M=1 mm cuBLAS" not in run("--stack", "trtllm")          # nothing compiled: nothing to say
    f.write_text(json.dumps({"format": "tpsim-stack", "stack": {"mm_decompose_m1": "no"}}))
    r = CliRunner().invoke(main, ["predict", "--stack", str(f), *args])
    assert r.exit_code == 2 and "mm_decompose_m1 must be true or false" in r.output and "Traceback" not in r.output
