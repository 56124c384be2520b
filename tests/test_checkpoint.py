"""Real checkpoints in the harness (hw/checkpoint.py), held against transformers itself: tiny
Llama (Llama 3.1 rope scaling), Qwen2 and Qwen3 models built and saved by transformers
(tests/hf_models.py) in both config layouts, loaded through --checkpoint, their logits compared
with the HF model's in fp32 (reference, TP 1 runner, 2 gloo ranks of every exact schedule), and
greedy decode token for token. Plus the refusals: one line, exit 2, before any process starts."""
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import hf_models  # noqa: E402
from tpsim.hw.check import Reference  # noqa: E402
from tpsim.hw.checkpoint import CheckpointError, full_weights, open_checkpoint, rank_weights  # noqa: E402
from tpsim.commands.bench import bench_cmd, check_cmd  # noqa: E402
from tpsim.hw.model import build_rank_model  # noqa: E402
from tpsim.hw.runner import Runner  # noqa: E402
from tpsim.sim.memory import Placement  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build, plan_of  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402

pytestmark = pytest.mark.hw
EXACT = ("standard", "token-split", "seq-parallel")     # same maths as the HF forward
PROMPT, GEN, BATCH = hf_models.PROMPT, hf_models.GEN, hf_models.BATCH
TOL = 1e-5                                              # fp32, relative to max(1, max|logit|)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """name/layout -> (folder, the HF model); qwen2 v5 sharded (index + several files)."""
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for name in hf_models.CONFIGS:
        for layout in ("v5", "hub"):
            d = root / f"{name}-{layout}"
            out[f"{name}-{layout}"] = (d, hf_models.save(name, d, layout, sharded=(name == "qwen2" and layout == "v5")))
    return out


_tokens = hf_models.tokens


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model(tokens).logits.reshape(-1, 256).float()          # [B*S, vocab]


def _err(got, want):
    return ((got.float()[:, :want.shape[-1]] - want).abs().max() / want.abs().max().clamp(min=1.0)).item()


_run = hf_models.run_passes


def test_both_layouts_read_to_the_same_model(ckpts):
    for name in hf_models.CONFIGS:
        a, b = (open_checkpoint(ckpts[f"{name}-{lay}"][0]).model for lay in ("v5", "hub"))
        assert (a.rope, a.hidden, a.qkv_bias, a.qk_norm, a.tied_embeddings) == \
               (b.rope, b.hidden, b.qkv_bias, b.qk_norm, b.tied_embeddings)
    assert open_checkpoint(ckpts["llama-hub"][0]).model.rope.type == "llama3"


@pytest.mark.parametrize("key", ["llama-v5", "llama-hub", "qwen2-v5", "qwen2-hub", "qwen3-v5", "qwen3-hub"])
def test_reference_and_tp1_match_transformers(ckpts, key):
    path, hf = ckpts[key]
    ck = open_checkpoint(path)
    m = ck.model
    tokens = _tokens()
    want = _hf_logits(hf, tokens)
    ref = Reference(m, full_weights(ck), plan_of("standard", m.layers), 1, BATCH, PROMPT + GEN)
    got = torch.cat([ref.forward(tokens[:, :PROMPT], 0).view(BATCH, PROMPT, -1)]
                    + [ref.forward(tokens[:, p:p + 1], p).view(BATCH, 1, -1) for p in range(PROMPT, PROMPT + GEN - 1)],
                    dim=1).reshape(-1, m.vocab)
    assert _err(got, want) < TOL
    rm = build_rank_model(m, 1, 0, batch=BATCH, max_seq=PROMPT + GEN, checkpoint=str(path))
    # TP 1: upper-bound is the whole model with no collectives (the standard forward on one rank)
    assert _err(_run(Runner(rm), m, "upper-bound", tokens), want) < TOL
    # the drawn weights are another model: the comparison has teeth
    drawn = build_rank_model(m, 1, 0, batch=BATCH, max_seq=PROMPT + GEN)
    assert _err(_run(Runner(drawn), m, "upper-bound", tokens), want) > 1e-2


def test_greedy_decode_is_transformers(ckpts):
    path, hf = ckpts["llama-hub"]
    m = open_checkpoint(path).model
    prompt = _tokens(3)[:, :PROMPT]
    want = hf.generate(prompt, max_new_tokens=GEN, do_sample=False, attention_mask=torch.ones_like(prompt))[:, PROMPT:]
    runner = Runner(build_rank_model(m, 1, 0, batch=BATCH, max_seq=PROMPT + GEN, checkpoint=str(path)))
    st = Stack(dtype="fp32")
    pre = build("upper-bound", m, 1, Step.prefill(BATCH, PROMPT, GEN, st), st)
    dec = build("upper-bound", m, 1, Step.decode(BATCH, PROMPT, GEN, 1, st), st)
    nxt, got = runner.forward(pre, prompt, 0).next_tokens, []
    got.append(nxt)
    for j in range(1, GEN):
        nxt = runner.forward(dec, nxt.view(BATCH, 1), PROMPT + j - 1).next_tokens
        got.append(nxt)
    assert torch.equal(torch.stack(got, 1), want)


def test_each_rank_reads_only_its_slices(ckpts):
    """The TP 2 shards are the rows/columns of the full tensors the drawn layout takes (no rank holds more)."""
    ck = open_checkpoint(ckpts["qwen2-v5"][0])
    full = full_weights(ck)
    w0, w1 = (rank_weights(ck, Placement(ck.model, 2, r)) for r in (0, 1))
    q, kv = ck.model.q_dim // 2, ck.model.kv_dim // 2
    assert torch.equal(w1["L1.wqkv"][:q], full["L1.wq"][q:]) and torch.equal(w0["L1.wqkv"][q:q + kv], full["L1.wk"][:kv])
    assert torch.equal(torch.cat([w0["L0.wo"], w1["L0.wo"]], 1), full["L0.wo"])
    assert torch.equal(torch.cat([w0["L0.w2"], w1["L0.w2"]], 1), full["L0.w2"])
    assert torch.equal(w1["L0.wqkv.bias"][-kv:], full["L0.bv"][kv:])


# ---------------------------------------------------------------- two gloo ranks

def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


GLOO_KEYS = ("llama-hub", "qwen2-v5")


@pytest.fixture(scope="module")
def gloo_logits(ckpts, tmp_path_factory) -> dict:
    """One spawn of 2 gloo ranks for both checkpoints of GLOO_KEYS (a spawn starts two processes that
    import torch): key -> {schedule/head/embed: logits}."""
    out = tmp_path_factory.mktemp("gloo") / "logits.pt"
    paths = tuple(str(ckpts[k][0]) for k in GLOO_KEYS)
    # spawn, not fork: gloo in a forked child of a process with torch's threads running can hang
    torch.multiprocessing.start_processes(hf_models.gloo_rank, args=(_port(), paths, str(out), EXACT),
                                          nprocs=2, start_method="spawn")
    res = torch.load(out)
    return {k: res[p] for k, p in zip(GLOO_KEYS, paths)}


@pytest.mark.slow
@pytest.mark.parametrize("key", GLOO_KEYS)
def test_two_gloo_ranks_match_transformers(ckpts, gloo_logits, key):
    _, hf = ckpts[key]
    want = _hf_logits(hf, _tokens())
    got_all = gloo_logits[key]
    # every exact schedule with the replicated head, and standard with each vocab-parallel layout
    assert set(got_all) == {f"{s}/replicated/replicated" for s in EXACT} | {
        "standard/vocab-parallel/replicated", "standard/vocab-parallel/vocab-parallel"}
    for spec, got in got_all.items():
        assert _err(got, want) < TOL, spec


@pytest.mark.slow
@pytest.mark.parametrize("key", ["llama-v5", "qwen3-hub"])
def test_check_cli_on_a_checkpoint(ckpts, key):
    r = CliRunner().invoke(check_cmd, ["--checkpoint", str(ckpts[key][0]), "--nproc", "2", "--prompt", "12",
                                       "--gen", "4", "--schedule", "standard", "--schedule", "token-split",
                                       "--schedule", "seq-parallel", "--schedule", "ladder", "--schedule", "spd:0.5",
                                       "--schedule", "parallel", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["ok"] and all(row["prefill_err"] < TOL and row["decode_err"] < TOL for row in res["schedules"])


@pytest.mark.slow
def test_check_on_nan_weights_says_the_weights_are_not_finite(ckpts, tmp_path):
    """Issue 48 item 6: `check` on a checkpoint holding NaN said FAIL without saying why."""
    from safetensors.torch import load_file, save_file
    d = tmp_path / "nan"
    shutil.copytree(ckpts["llama-v5"][0], d)
    t = load_file(d / "model.safetensors")
    t["model.layers.1.mlp.down_proj.weight"][0, 0] = float("nan")
    save_file(t, d / "model.safetensors")
    r = CliRunner().invoke(check_cmd, ["--checkpoint", str(d), "--nproc", "2", "--prompt", "8", "--gen", "2",
                                       "--schedule", "ladder"])
    assert r.exit_code == 1 and "numerics check FAILED" in r.output, r.output
    assert ("ladder: its output holds NaN or Inf: the weights are not finite (model.layers.1.mlp.down_proj.weight "
            "holds NaN or Inf)") in " ".join(r.output.split()), r.output        # the note wraps at 80 columns


# ---------------------------------------------------------------- refusals

def _broken(src: Path, dst: Path, how: str) -> Path:
    shutil.copytree(src, dst)
    from safetensors.torch import load_file, save_file
    if how == "missing shard":
        os.unlink(sorted(dst.glob("model-0000*.safetensors"))[1])
        return dst
    index = dst / "model.safetensors.index.json"
    if how == "torn index":                             # cut short, as an interrupted download leaves it
        text = json.dumps(json.loads(index.read_text()))     # on one line: the error's line number is 1
        index.write_text(text[:len(text) // 2])
        return dst
    if how == "index outside":                          # a shard path that climbs out of the snapshot
        doc = json.loads(index.read_text())
        doc["weight_map"]["model.norm.weight"] = "../../../../etc/passwd"
        index.write_text(json.dumps(doc))
        return dst
    cfg = json.loads((dst / "config.json").read_text())
    if how == "moe":
        t = load_file(dst / "model.safetensors")
        t["model.layers.0.mlp.experts.0.gate_proj.weight"] = torch.zeros(4, 4)
        save_file(t, dst / "model.safetensors")
    elif how == "shape":
        cfg["intermediate_size"] = 96
    elif how == "dtype":
        cfg["dtype"] = "bfloat16"
    elif how == "missing tensor":
        t = load_file(dst / "model.safetensors")
        del t["model.layers.1.self_attn.o_proj.weight"]
        save_file(t, dst / "model.safetensors")
    elif how == "moe config":
        cfg["num_local_experts"] = 8
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("how, src, why", [
    ("missing shard", "qwen2-v5", "listed in model.safetensors.index.json is missing"),
    # before: "not a safetensors index (no weight_map)"
    ("torn index", "qwen2-v5", "model.safetensors.index.json line 1: not valid JSON ("),
    # before: the launcher opened /etc/passwd ("cannot read passwd as safetensors")
    ("index outside", "qwen2-v5", "model.safetensors.index.json: weight_map entry 'model.norm.weight' names "
                                  "'../../../../etc/passwd', not a file in the snapshot folder"),
    ("moe", "llama-v5", "a mixture-of-experts checkpoint (model.layers.0.mlp.experts.0.gate_proj.weight)"),
    ("moe config", "llama-v5", "is a mixture-of-experts model"),
    ("shape", "llama-v5", "model.layers.0.mlp.gate_proj.weight has shape [128, 64], the config says [96, 64]"),
    ("dtype", "qwen3-v5", "config.json says bfloat16 but the tensors are F32"),
    ("missing tensor", "llama-v5", "tensor model.layers.1.self_attn.o_proj.weight is missing"),
])
def test_refusals_are_one_line_exit_2(ckpts, tmp_path, how, src, why):
    d = _broken(ckpts[src][0], tmp_path / "c", how)
    with pytest.raises(CheckpointError):
        open_checkpoint(d)
    r = CliRunner().invoke(check_cmd, ["--checkpoint", str(d), "--nproc", "2"])
    assert r.exit_code == 2 and why in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("cmd", [bench_cmd, check_cmd], ids=["bench", "check"])
def test_a_checkpoint_that_is_no_snapshot_folder_says_so(tmp_path, cmd):
    """--checkpoint names a folder: a missing one, or one without config.json, is said as such (it was
    'model config not found ... give a preset name', which --checkpoint does not take)."""
    for path, what in ((tmp_path / "nope", "is no folder"), (tmp_path, "has no config.json")):
        r = CliRunner().invoke(cmd, ["--checkpoint", str(path), "--device", "cpu"])
        assert r.exit_code == 2 and r.output.strip().splitlines() == [
            f"Error: --checkpoint {path} {what}: give a Hugging Face snapshot folder (config.json + *.safetensors)"]


def test_too_big_for_the_ranks_is_refused_before_any_process(ckpts):
    r = CliRunner().invoke(bench_cmd, ["--checkpoint", str(ckpts["llama-v5"][0]), "--nproc", "2", "--gpu-mem-gib",
                                       "0.1", "--device", "cpu"])
    assert r.exit_code == 2 and "needs" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = CliRunner().invoke(check_cmd, ["--checkpoint", str(ckpts["llama-v5"][0]), "--model", "tiny"])
    assert r.exit_code == 2 and "runs its own config" in r.output


def test_compare_takes_a_checkpoint_and_checks_it_first(ckpts, tmp_path):
    from tpsim.cli import main
    d = _broken(ckpts["qwen2-v5"][0], tmp_path / "c", "missing shard")
    r = CliRunner().invoke(main, ["compare", "--checkpoint", str(d), "--profile", "h100-sxm", "--out-dir",
                                  str(tmp_path / "o")])
    assert r.exit_code == 2 and "is missing" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = CliRunner().invoke(main, ["compare", "--checkpoint", str(d), "--model", "tiny"])
    assert r.exit_code == 2 and "runs its own config" in r.output


@pytest.mark.slow
def test_bench_runs_a_checkpoint(ckpts):
    r = CliRunner().invoke(bench_cmd, ["--checkpoint", str(ckpts["qwen3-hub"][0]), "--nproc", "2", "--prompt", "8",
                                       "--gen", "3", "--repeats", "1", "--warmup", "0", "--schedule", "standard",
                                       "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["model"] == "qwen3-hub" and res["schedules"][0]["tokens_per_s"] > 0


@pytest.mark.parametrize("fixture", ["tiny-qwen2", "tiny-qwen3"])
def test_a_checkpoint_of_the_drawn_weights_loads_as_the_drawn_shards(tmp_path, fixture):
    """The drawn full weights written under their HF names load back, on every rank of TP 1, 2 and 4
    (KV heads replicated at 4) with either head and either embedding, as exactly the shards
    build_weights draws: the checkpoint layout is the drawn one."""
    from safetensors.torch import save_file
    from tpsim.hw import model as hm
    from tpsim.hw.checkpoint import NAMES
    src = os.path.join(os.path.dirname(__file__), "fixtures", "hf", fixture)
    m = get_model(src)
    full = hm.full_weights(m)
    tensors = {}
    for k, t in full.items():
        layer, _, key = k.partition(".") if k.startswith("L") else (None, None, k)
        if key == "head" and m.tied_embeddings:
            continue
        tensors[NAMES[key].format(i=layer[1:] if layer else None)] = t.contiguous()
    d = tmp_path / fixture
    d.mkdir()
    shutil.copy(os.path.join(src, "config.json"), d / "config.json")
    save_file(tensors, d / "model.safetensors")
    ck = open_checkpoint(d)
    for tp in (1, 2, 4):
        for head in ("replicated", "vocab-parallel"):
            for embed in ("replicated", "vocab-parallel"):
                for r in range(tp):
                    p = Placement(m, tp, r, head, embed)
                    got, want = rank_weights(ck, p), hm.build_weights(p)
                    assert got.keys() == want.keys()
                    for k in want:
                        assert torch.equal(got[k], want[k]), (tp, head, embed, r, k)


def test_a_vocab_parallel_embedding_reads_only_its_shard(ckpts):
    """--embed vocab-parallel: each rank's embedding is its rows of embed_tokens (vocab 256 -> 128 rows at
    TP 2), read as a slice; Qwen3's tied head with a vocab-parallel head too is that same tensor."""
    ck = open_checkpoint(ckpts["qwen3-hub"][0])
    full = full_weights(ck)["embed"]                                    # [256, 64]
    for r in range(2):
        w = rank_weights(ck, Placement(ck.model, 2, r, "vocab-parallel", "vocab-parallel"))
        assert w["embed"].shape == (128, 64) and torch.equal(w["embed"], full[128 * r:128 * (r + 1)])
        assert w["head"] is w["embed"]
        w = rank_weights(ck, Placement(ck.model, 2, r, "replicated", "vocab-parallel"))
        assert w["embed"].shape == (128, 64) and torch.equal(w["head"], full)
