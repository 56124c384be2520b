"""Tiny Hugging Face checkpoints built with transformers (random weights), for the checkpoint and
parity tests: Llama with Llama 3.1's rope scaling, Qwen2 (qkv bias), Qwen3 (q/k norm, head_dim !=
hidden / heads, tied embeddings). `save(name, dir, layout)` writes a real snapshot through
save_pretrained: layout "v5" is what transformers 5.x writes (rope_theta inside rope_parameters),
"hub" the same config rewritten by hand in the older layout most Hub checkpoints carry (top-level
rope_theta + rope_scaling); `sharded` splits the safetensors into several files with an index.
Callers importorskip transformers first."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=256, rms_norm_eps=1e-6, max_position_embeddings=131072)
# name -> (transformers config class, model class, config keywords); the classes by name: transformers
# is imported only to build a model, never by the gloo ranks spawned to run gloo_rank (3 s each)
CONFIGS = {
    # max_position_embeddings 131072 and a 16-dim head: 3 of 8 frequencies are rescaled by llama3
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(_COMMON, head_dim=16, rope_parameters=LLAMA3_ROPE, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(_COMMON, rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(_COMMON, head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                   tie_word_embeddings=True)),
}


def classes(name: str):
    """(config class, model class, config keywords) of CONFIGS[name]."""
    import transformers  # lazy: the spawned gloo ranks import this module for gloo_rank, and need no transformers
    cfg_name, model_name, kw = CONFIGS[name]
    return getattr(transformers, cfg_name), getattr(transformers, model_name), kw


def build(name: str, seed: int = 0):
    """The model in fp32 eval mode, weights O(1)-scaled: N(0, 1/fan_in) projections, N(0, 1)
    embeddings, norms 1 + N(0, 0.1^2), biases N(0, 0.1^2) (transformers' 0.02 init would give
    near-uniform logits that hide errors)."""
    cfg_cls, model_cls, kw = classes(name)
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**kw, dtype="float32")).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed_tokens" in n:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))
    return model


def to_hub_layout(config_path: Path) -> None:
    """Rewrite a transformers 5.x config.json in the older hub layout: rope_theta at the top, the
    rest of rope_parameters as rope_scaling (null when the type is default)."""
    cfg = json.loads(config_path.read_text())
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    cfg["rope_scaling"] = None if rp.get("rope_type") == "default" else rp
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    config_path.write_text(json.dumps(cfg, indent=2))


def save(name: str, out: Path, layout: str = "v5", sharded: bool = False, seed: int = 0):
    """Build `name`, save_pretrained it to `out` in `layout`; returns the model (to compare logits)."""
    model = build(name, seed)
    model.save_pretrained(out, max_shard_size="60KB" if sharded else "1GB")
    if layout == "hub":
        to_hub_layout(Path(out) / "config.json")
    return model


# ---------------------------------------------------------------- the harness on a checkpoint

PROMPT, GEN, BATCH = 12, 5, 2


def tokens(seed: int = 1) -> torch.Tensor:
    """[BATCH, PROMPT + GEN - 1]: a prompt, then the tokens teacher-forced into each decode step."""
    return torch.randint(0, 256, (BATCH, PROMPT + GEN - 1), generator=torch.Generator().manual_seed(seed))


def run_passes(runner, model, spec: str, toks: torch.Tensor, tp: int = 1, stack_kw: dict | None = None):
    """Prefill + teacher-forced decode of schedule `spec` -> every position's logits [B*S, vocab(+pad)],
    as the HF model computes them in one call."""
    from tpsim.sim.schedule.language import build
    from tpsim.sim.stack.spec import Stack, Step
    st = Stack(dtype="fp32", **(stack_kw or {}))
    pre = build(spec, model, tp, Step.prefill(BATCH, PROMPT, GEN, st), st)
    dec = build(spec, model, tp, Step.decode(BATCH, PROMPT, GEN, 1, st), st)
    runner.rm.reset_cache()
    outs = [runner.forward(pre, toks[:, :PROMPT], 0).logits.view(BATCH, PROMPT, -1)]
    for j in range(1, GEN):
        pos = PROMPT + j - 1
        outs.append(runner.forward(dec, toks[:, pos:pos + 1], pos).logits.view(BATCH, 1, -1))
    return torch.cat(outs, dim=1).reshape(BATCH * (PROMPT + GEN - 1), -1)


def gloo_rank(rank: int, port: int, paths: tuple[str, ...], out: str, schedules: tuple[str, ...]) -> None:
    """One of 2 gloo ranks running each schedule on each checkpoint of `paths` (+ standard with a
    vocab-parallel head, and with a vocab-parallel head and embedding: each rank loads its shards),
    one process group for them all (a spawn starts two processes that import torch); rank 0 saves
    {path: {schedule/head/embed: logits}} to `out`."""
    import torch.distributed as dist
    from tpsim.hw.model import build_rank_model
    from tpsim.hw.runner import Runner
    from tpsim.sim.model.presets import get_model
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    res: dict[str, dict] = {}
    for path in paths:
        m = get_model(path)
        res[path] = {}
        for head, embed in (("replicated", "replicated"), ("vocab-parallel", "replicated"),
                            ("vocab-parallel", "vocab-parallel")):
            rm = build_rank_model(m, 2, rank, batch=BATCH, max_seq=PROMPT + GEN, checkpoint=path, head=head,
                                  embed=embed)
            assert rm.weights["embed"].shape[0] == (m.vocab if embed == "replicated" else -(-m.vocab // 2))
            runner = Runner(rm, dist.group.WORLD, rank=rank)
            for s in (schedules if head == "replicated" else ("standard",)):
                res[path][f"{s}/{head}/{embed}"] = run_passes(runner, m, s, tokens(), tp=2,
                                                              stack_kw={"head": head, "embed": embed})
    if rank == 0:
        torch.save(res, out)
    dist.destroy_process_group()
