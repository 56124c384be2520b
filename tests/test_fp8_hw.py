"""FP8 in the harness (issue 45): e4m3 weights stored as such and upcast for compute, inputs quantized per
token (hw/fp8.py); an FP8 checkpoint (e4m3 safetensors with per-tensor or per-channel weight_scale and a
static input_scale) read as each rank's slices with their scales; `check` holds FP8 runs to the reference
of the same weights unquantized within FP8's tolerance. The FP8 checkpoints are built here with torch and
safetensors from the tiny Llama fixture's drawn weights."""
import json
import os
import shutil

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tpsim.commands.bench import check_cmd  # noqa: E402
from tpsim.hw import fp8, model as hm  # noqa: E402
from tpsim.hw.check import FP8_TOLERANCE  # noqa: E402
from tpsim.hw.checkpoint import NAMES, CheckpointError, full_weights, open_checkpoint, rank_weights  # noqa: E402
from tpsim.sim.memory import Placement  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402

pytestmark = pytest.mark.hw
TINY = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "tiny-llama3-v5")
LINEARS = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")


def test_e4m3_round_trip_by_hand():
    """1.0 and 448 are e4m3 numbers; 500 saturates to 448; 1.06 rounds to 1.0 (3 mantissa bits: 1.125 is
    the next). A row [2, -4, 1] quantized per channel: scale 4/448, every value exact."""
    x = torch.tensor([1.0, 448.0, 500.0, 1.06])
    assert fp8.to_e4m3(x).float().tolist() == [1.0, 448.0, 448.0, 1.0]
    q, s = fp8.quantize_rows(torch.tensor([[2.0, -4.0, 1.0]]))
    assert s.tolist() == pytest.approx([4 / 448])
    assert fp8.dequantize(q, s, torch.float32)[0].tolist() == pytest.approx([2.0, -4.0, 1.0])
    # per token: the row's absmax is exact, the rest rounds to e4m3's grid relative to it
    got = fp8.qdq_input(torch.tensor([[448.0, 1.06]]), None)
    assert got.tolist() == [[448.0, 1.0]]


def _fp8_checkpoint(dst, per_channel: bool, static: bool, seed: int = 0):
    """The tiny Llama fixture's drawn full weights as an FP8 checkpoint: e4m3 linears with weight_scale
    (per tensor [] or per channel [out, 1]; q, k and v each their own) and, static, an input_scale; the
    rest bf16. Returns the dequantized full weights (what every rank's shards must upcast to)."""
    from safetensors.torch import save_file
    m = get_model(TINY)
    full = hm.full_weights(m, seed=seed)
    tensors, deq = {}, {}
    for k, t in full.items():
        layer, _, key = k.partition(".") if k.startswith("L") else (None, None, k)
        name = NAMES[key].format(i=layer[1:] if layer else None)
        if key in LINEARS:
            s = (t.abs().amax(dim=1, keepdim=True) if per_channel else t.abs().max()) / 448.0
            q = fp8.to_e4m3(t / s).contiguous()
            tensors[name] = q
            tensors[name.replace(".weight", ".weight_scale")] = s.float().contiguous()
            if static:
                tensors[name.replace(".weight", ".input_scale")] = torch.tensor(0.05)
            deq[k] = q.float() * s
        else:
            tensors[name] = t.to(torch.bfloat16).contiguous()
            deq[k] = tensors[name].float()
    os.makedirs(dst)
    cfg = json.load(open(os.path.join(TINY, "config.json")))
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "static" if static else "dynamic"}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    save_file(tensors, os.path.join(dst, "model.safetensors"))
    return deq


@pytest.mark.parametrize("per_channel,static", [(False, False), (True, True)])
def test_each_rank_reads_its_fp8_slices_with_their_scales(tmp_path, per_channel, static):
    """Every rank's e4m3 shard times its per-row scales is exactly its rows (wqkv, w13) or columns (wo, w2)
    of the dequantized full weights, at TP 1, 2 and 4; check's reference (full_weights) is those."""
    d = tmp_path / "fp8"
    deq = _fp8_checkpoint(d, per_channel, static)
    ck = open_checkpoint(d)
    m = ck.model
    assert m.quant == ("fp8-static" if static else "fp8-dynamic")
    ref = full_weights(ck)
    for k in deq:
        assert torch.equal(ref[k], deq[k].to(ref[k].dtype)), k
    for tp in (1, 2, 4):
        for r in range(tp):
            p = Placement(m, tp, r)
            w = rank_weights(ck, p)
            hd = m.head_dim
            q0, q1 = p.heads.start * hd, p.heads.stop * hd
            k0, k1 = p.kv_heads.start * hd, p.kv_heads.stop * hd
            f0, f1 = p.ffn.start, p.ffn.stop
            want = {"wqkv": torch.cat([deq["L0.wq"][q0:q1], deq["L0.wk"][k0:k1], deq["L0.wv"][k0:k1]]),
                    "wo": deq["L0.wo"][:, q0:q1], "w13": torch.cat([deq["L0.w1"][f0:f1], deq["L0.w3"][f0:f1]]),
                    "w2": deq["L0.w2"][:, f0:f1]}
            for n, t in want.items():
                assert w[f"L0.{n}"].dtype == fp8.E4M3
                assert torch.equal(fp8.dequantize(w[f"L0.{n}"], w[f"L0.{n}.scale"], torch.float32), t), (tp, r, n)
                assert (f"L0.{n}.input_scale" in w) == static


def _check(args):
    r = CliRunner().invoke(check_cmd, ["--nproc", "2", "--prompt", "12", "--gen", "4", "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.slow
def test_check_holds_fp8_runs_to_the_unquantized_reference(tmp_path):
    """Random tiny weights quantized at load (--dtype fp8), an e4m3 KV cache too, and an FP8 checkpoint with
    static input scales: every schedule within FP8's tolerance of its reference -- and measurably off it
    (the e4m3 rounding really happens: more than 1e-3, where fp32 runs agree to 1e-6)."""
    sched = ["--schedule", "standard", "--schedule", "ladder", "--schedule", "token-split", "--batch", "2"]
    for args in (["--dtype", "fp8"], ["--dtype", "fp8", "--kv-dtype", "fp8"]):
        res = _check(["--model", "tiny", *args, *sched])
        assert res["ok"] and res["precision"].startswith("fp8"), res
        for row in res["schedules"]:
            assert 1e-3 < max(row["prefill_err"], row["decode_err"]) < FP8_TOLERANCE, row
    d = tmp_path / "ck"
    _fp8_checkpoint(d, per_channel=True, static=True)
    res = _check(["--checkpoint", str(d), *sched])
    assert res["ok"] and res["stack"]["fp8_activations"] == "static"
    assert all(1e-3 < row["prefill_err"] < FP8_TOLERANCE for row in res["schedules"])


def test_an_fp8_checkpoint_broken_is_one_line(tmp_path):
    d = tmp_path / "ck"
    _fp8_checkpoint(d, per_channel=False, static=True)
    from safetensors.torch import load_file, save_file
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    t = load_file(bad / "model.safetensors")
    del t["model.layers.1.mlp.down_proj.input_scale"]
    save_file(t, bad / "model.safetensors")
    with pytest.raises(CheckpointError, match="down_proj.input_scale is missing"):
        open_checkpoint(bad)
    plain = tmp_path / "plain"                       # e4m3 tensors under a config without quantization_config
    shutil.copytree(d, plain)
    cfg = json.loads((plain / "config.json").read_text())
    del cfg["quantization_config"]
    (plain / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(check_cmd, ["--checkpoint", str(plain), "--nproc", "2"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "declares no FP8" in r.output or "input_scale" in r.output
