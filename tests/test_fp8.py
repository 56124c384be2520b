"""FP8 end to end in the simulator (issue 45): the stack (`--dtype fp8`, `--kv-dtype fp8`), the ops the
builder emits, their work and price (a toy FP8 GEMM table), the memory model (405B on one 8x H100 node),
FP8 checkpoints' config.json accepted and other quantizations refused, and FP8 refused on a GPU without
FP8 tensor cores. Numbers are hand-computed on toy shapes."""
from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.sim.fp8 import check_profile, model_given
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.hardware.schema import Curve, GemmTable
from tpsim.sim.memory import GIB, estimate
from tpsim.sim.model.hf.config import spec_from_hf
from tpsim.sim.model.presets import get_model
from tpsim.sim.price.comm.collective import message_bytes
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import Work, op_work
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.presets import PRESETS
from tpsim.sim.stack.spec import Stack, Step, make_stack

H100 = load_profile("h100-sxm")
FP8 = make_stack({"dtype": "fp8"})
BF16 = make_stack({"dtype": "bf16"})


def _decode(spec, stack, model="llama-3.1-70b", tp=8, batch=1):
    return build(spec, get_model(model), tp, Step.decode(batch, 1024, 512, 1, stack), stack)


def test_dtype_fp8_is_bf16_activations_and_fp8_linears():
    assert (FP8.dtype, FP8.weight_dtype, FP8.fp8_activations, FP8.kv_dtype) == ("bf16", "fp8", "dynamic", "auto")
    assert FP8.precision == "fp8" and BF16.precision == "bf16"
    assert make_stack({"dtype": "fp8", "kv_dtype": "fp8"}).precision == "fp8 + fp8 KV"
    with pytest.raises(ValueError, match="weight_dtype fp8"):
        Stack(dtype="fp8")


def test_the_linears_carry_fp8_the_head_and_the_collectives_stay_16_bit():
    s, b = _decode("standard", FP8), _decode("standard", BF16)
    lin = [op for op in s.ops if op.kind == "gemm" and op.layer is not None]
    assert len(lin) == 4 * 80 and all(op.get("fp8", 0) == 1 and op.get("act_scale", "") == "token" for op in lin)
    assert all(op.dtype == "bf16" for op in lin)            # the output (and the op's activations) stay bf16
    head = next(op for op in s.ops if op.name == "head")
    assert head.get("fp8", 0) == 0
    # the all-reduce moves bf16 rows whatever the linears are: 1 x 8192 x 2 B
    ar = [op for op in s.collectives if op.kind == "all_reduce"]
    assert [message_bytes(op) for op in ar] == [message_bytes(op) for op in b.collectives if op.kind == "all_reduce"]
    assert message_bytes(ar[0]) == 16384
    static = _decode("standard", make_stack({"dtype": "fp8", "fp8_activations": "static"}))
    assert all(op.get("act_scale", "") == "" for op in static.ops if op.kind == "gemm")


def test_fp8_gemm_work_by_hand():
    """m 2, n 4, k 8, bf16 out. Matmul: 2 x 2 x 4 x 8 = 128 FLOPs; bytes: input 16 + weight 32 at 1 B,
    output 8 at 2 B = 64. The quantize kernel reads [2, 8] bf16 (32 B) and writes it e4m3 (16 B) = 48.
    A per-token scale: one more read of the input, 32 B, its own kernel."""
    from tpsim.sim.schedule.ir import Op
    op = Op("L0.mlp.up", "gemm", ("x",), ("y",), (("m", 2), ("n", 4), ("k", 8), ("fp8", 1), ("act_scale", "token")),
            "bf16", 0)
    assert op_work(op) == [Work(128.0, 64, 1, matmul=True), Work(16.0, 48, 1), Work(16.0, 32, 1)]


def _toy_profile():
    """h100-sxm with one FP8 table row for 70B TP8's mlp.up (n 7168, k 8192): 26 us at m 1, 30 us at m 2,
    and a flat memory efficiency 0.5."""
    t = GemmTable("toy fp8 rows", ("bf16",), (1, 2), ((7168, 8192, (26e-6, 30e-6)),), quant="fp8")
    return dataclasses.replace(H100, memory_efficiency=Curve((1.0,), (0.5,)), gemm_tables=(t,) + H100.gemm_tables)


def test_an_fp8_linear_prices_from_the_fp8_table_plus_its_per_token_scale():
    """Eager decode at batch 1 (no compiled kernel tables): the static table row 26 us; with a dynamic
    per-token scale plus its reduction kernel: [1, 8192] bf16 = 16,384 B at 3.35e12 x 0.5 B/s = 9.8 ns,
    below the 2.49 us graph floor: + 2.49 us."""
    prof = _toy_profile()
    eager = {"compile": False}
    for act, extra in (("static", 0.0), ("dynamic", prof.launch_s["graph"])):
        st = make_stack(dict(eager, dtype="fp8", fp8_activations=act))
        op = next(o for o in _decode("standard", st).ops if o.name == "L1.mlp.up")
        assert CostModel(prof, st).compute_s(op, "decode") == pytest.approx(26e-6 + extra)


def test_fp8_beats_bf16_on_70b_tp8_decode_but_not_by_the_byte_ratio():
    """What the measured tables say on the built-in h100-sxm: 70B TP8 decode at batch 1 is faster in FP8,
    but far from 2x (small-n linears barely gain; the all-reduce is unchanged)."""
    r = CliRunner()
    out = {}
    for d in ("bf16", "fp8"):
        res = r.invoke(main, ["predict", "--model", "llama-3.1-70b", "--tp", "8", "--dtype", d, "--schedule",
                              "standard", "--json"])
        assert res.exit_code == 0, res.output
        out[d] = json.loads(res.output)["schedules"][0]["decode_s"]
    assert 1.02 < out["bf16"] / out["fp8"] < 1.6


def test_405b_fits_one_8x_h100_node_in_fp8_only():
    m = get_model("llama-3.1-405b")
    vp = {"head": "vocab-parallel", "embed": "vocab-parallel"}
    bf, f8 = (estimate(m, 8, 1, 1024, 512, make_stack(dict(vp, dtype=d))) for d in ("bf16", "fp8"))
    assert bf.total_bytes > 80 * GIB > f8.total_bytes
    # e4m3 linears: half the bf16 bytes, plus one fp32 scale per output row
    assert f8.layer_weights_bytes < 0.51 * bf.layer_weights_bytes
    assert f8.embed_head_bytes == bf.embed_head_bytes                  # the head and embedding stay bf16
    kv8 = estimate(m, 8, 1, 1024, 512, make_stack(dict(vp, dtype="fp8", kv_dtype="fp8")))
    assert kv8.kv_cache_bytes * 2 == f8.kv_cache_bytes
    r = CliRunner().invoke(main, ["predict", "--model", "llama-3.1-405b", "--tp", "8", "--dtype", "fp8", "--stack",
                                  "vllm", "--schedule", "standard"])
    assert r.exit_code == 0, r.output


def test_fp8_kv_halves_what_decode_attention_reads():
    """The vLLM stack's fa3 decode kernel is priced from its measured curve at the bytes it reads: 70B TP8 at
    batch 64 (large enough that the curve is near its plateau) reads half the bytes in FP8, and takes
    between half and the whole of the 16-bit time."""
    t = {}
    for kv in ("auto", "fp8"):
        st = make_stack({"kv_dtype": kv}, preset=PRESETS["vllm"].values)
        op = next(o for o in _decode("standard", st, batch=64).ops if o.name == "L1.attn.sdpa")
        assert (op.get("kv_dtype", "") == "fp8") == (kv == "fp8")
        t[kv] = CostModel(H100, st).compute_s(op, "decode")
    assert 0.5 * t["auto"] < t["fp8"] < t["auto"]


def _cfg(quant):
    base = json.load(open("tests/fixtures/hf/llama-3.1-8b/config.json"))
    return dict(base, quantization_config=quant)


CT_DYNAMIC = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "config_groups": {"group_0": {"targets": ["Linear"],
                                            "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                        "dynamic": False, "symmetric": True},
                                            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                                  "dynamic": True, "symmetric": True}}},
              "ignore": ["lm_head"]}


@pytest.mark.parametrize("quant,want", [
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8-dynamic"),
    ({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}, "fp8-static"),
    (CT_DYNAMIC, "fp8-dynamic"),
])
def test_fp8_checkpoints_are_accepted(quant, want):
    m = spec_from_hf(_cfg(quant), "fp8-model")
    assert m.quant == want
    st = make_stack(model_given(m, {"dtype": None}))
    assert st.fp8 and st.fp8_activations == want.split("-")[1]


@pytest.mark.parametrize("quant,match", [
    ({"quant_method": "gptq", "bits": 4}, "a quantized checkpoint \\(gptq\\)"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "block-scaled"),
    ({**CT_DYNAMIC, "config_groups": {"g": {**CT_DYNAMIC["config_groups"]["group_0"], "input_activations": None}}},
     "weight-only FP8"),
    ({**CT_DYNAMIC, "format": "int-quantized"}, "float-quantized"),
])
def test_other_quantizations_are_refused_in_one_line(quant, match):
    with pytest.raises(ValueError, match=match) as e:
        spec_from_hf(_cfg(quant), "q-model")
    assert "\n" not in str(e.value)


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_one_line_and_exit_2():
    r = CliRunner().invoke(main, ["predict", "--model", "llama-3.1-70b", "--tp", "8", "--dtype", "fp8",
                                  "--profile", "a100-sxm"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("Error: FP8 linears need FP8 tensor cores")
    assert "Marlin" in r.output
    check_profile(load_profile("a100-sxm"), BF16)          # 16-bit runs there, of course
    check_profile(load_profile("l40s-pcie"), FP8)          # Ada (8.9) has FP8 tensor cores


def test_default_stack_ops_keep_their_signatures():
    """A 16-bit stack's ops carry no FP8 attr (their signatures, and so every price, are what they were)."""
    s = _decode("standard", Stack())
    assert not any(op.get("fp8", 0) or op.get("kv_dtype", "") for op in s.ops)
