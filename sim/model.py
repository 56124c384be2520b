"""Model shapes (Llama-architecture decoder stacks) and their per-rank TP shards.

Shapes come from docs/sources.md §3 (the models' published configs); the Qwen and
Mistral presets from their Hugging Face config.json (source in each description). Any Llama-family
config.json is read by sim.hf_config wherever a model name is accepted (`get_model`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer: RMSNorm, RoPE, GQA attention, SwiGLU MLP."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied_embeddings: bool = False
    description: str = ""
    # What Llama-family variants add to the same forward (sim.schedule puts them on the ops as
    # attrs, so the cost model prices them and the harness runs them):
    qkv_bias: bool = False          # Qwen2/2.5: bias on the q, k, v projections (not on o)
    qk_norm: bool = False           # Qwen3: RMSNorm over head_dim on every q and k head before RoPE
    rope_theta: float = 500_000.0   # RoPE base: changes the tables, not the work
    norm_eps: float = 1e-5
    sliding_window: int = 0         # Mistral v0.1: attend to the last W positions; 0 = full attention

    def __post_init__(self) -> None:
        for field in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model {self.name!r}: {field} must be positive, got {getattr(self, field)}")
        if self.sliding_window < 0:
            raise ValueError(f"model {self.name!r}: sliding_window must be >= 0, got {self.sliding_window}")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"model {self.name!r}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def truncated(self, layers: int) -> "ModelSpec":
        """The first `layers` layers of this model (harness runs of models too big to fit)."""
        if not 1 <= layers <= self.layers:
            raise ValueError(f"--layers must be in 1..{self.layers} for {self.name}, got {layers}")
        if layers == self.layers:
            return self
        return replace(self, name=f"{self.name}[:{layers}]", layers=layers)

    def shard(self, tp: int) -> "Shard":
        return Shard.of(self, tp)

    def param_count(self) -> int:
        """Total parameters (embedding + head counted once when tied)."""
        per_layer = (self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden
                     + 3 * self.hidden * self.ffn + 2 * self.hidden
                     + (self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0)
                     + (2 * self.head_dim if self.qk_norm else 0))
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.layers * per_layer + self.vocab * self.hidden + head + self.hidden


@dataclass(frozen=True)
class Shard:
    """What one TP rank holds of a model (Megatron column/row split).

    Attention heads and the FFN are split across ranks. KV heads are split when
    kv_heads >= tp; when kv_heads < tp each rank holds one (replicated) KV head,
    which needs tp to be a multiple of kv_heads.
    """

    tp: int
    heads: int       # query heads per rank
    kv_heads: int    # KV heads per rank (1 when replicated)
    head_dim: int
    ffn: int         # FFN width per rank
    hidden: int
    vocab: int

    @staticmethod
    def of(model: ModelSpec, tp: int) -> "Shard":
        problem = _shard_problem(model, tp)
        if problem:
            raise ValueError(f"{problem}; valid TP degrees for {model.name}: "
                             f"{', '.join(map(str, valid_tp(model)))}")
        kv = model.kv_heads // tp if model.kv_heads >= tp else 1
        return Shard(tp=tp, heads=model.heads // tp, kv_heads=kv, head_dim=model.head_dim,
                     ffn=model.ffn // tp, hidden=model.hidden, vocab=model.vocab)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_dim(self) -> int:
        return self.q_dim + 2 * self.kv_dim


def _shard_problem(model: ModelSpec, tp: int) -> str | None:
    """Why `model` cannot be split over `tp` ranks, or None when it can."""
    if tp < 1:
        return f"TP must be >= 1, got {tp}"
    if model.heads % tp:
        return f"TP {tp} does not divide the {model.heads} attention heads of {model.name}"
    if model.ffn % tp:
        return f"TP {tp} does not divide the FFN width {model.ffn} of {model.name}"
    if model.kv_heads >= tp and model.kv_heads % tp:
        return f"TP {tp} does not divide the {model.kv_heads} KV heads of {model.name}"
    if model.kv_heads < tp and tp % model.kv_heads:
        return (f"TP {tp} is not a multiple of the {model.kv_heads} KV heads of {model.name} "
                f"(needed to replicate KV heads)")
    return None


def valid_tp(model: ModelSpec, up_to: int = 128) -> list[int]:
    """TP degrees up to `up_to` that shard `model` cleanly."""
    return [tp for tp in range(1, up_to + 1) if _shard_problem(model, tp) is None]


def _m(name, hidden, layers, heads, kv, head_dim, ffn, vocab, tied=False, desc="", **kw):
    return ModelSpec(name, hidden, layers, heads, kv, head_dim, ffn, vocab, tied, desc, **kw)


# Preset registry: name -> spec. Also feeds the CLI's choices.
MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    _m("llama-3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, True, "Llama 3.2 1B (tied embeddings)"),
    _m("llama-3.2-3b", 3072, 28, 24, 8, 128, 8192, 128256, True, "Llama 3.2 3B (tied embeddings)"),
    _m("llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, desc="Llama 3.1 8B"),
    _m("llama-3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, desc="Llama 3.1 70B"),
    _m("llama-3.1-405b", 16384, 126, 128, 8, 128, 53248, 128256, desc="Llama 3.1 405B"),
    _m("llama-2-7b", 4096, 32, 32, 32, 128, 11008, 32000, desc="Llama 2 7B (MHA)"),
    _m("llama-2-13b", 5120, 40, 40, 40, 128, 13824, 32000, desc="Llama 2 13B (MHA)"),
    _m("llama-2-70b", 8192, 80, 64, 8, 128, 28672, 32000, desc="Llama 2 70B"),
    _m("codellama-34b", 8192, 48, 64, 8, 128, 22016, 32000, desc="CodeLlama 34B"),
    # The Ladder Residual paper's own configurations (docs/sources.md §3).
    _m("ladder-1b", 1536, 40, 24, 24, 64, 4096, 49152, desc="Ladder paper '1B' (MHA)"),
    _m("ladder-3b", 2304, 40, 32, 32, 72, 9216, 49152, desc="Ladder paper '3B' (MHA)"),
    _m("ladder-405b", 16384, 126, 128, 16, 128, 53248, 128256, desc="Ladder paper's 405B (16 KV heads)"),
    _m("bloom-176b-llama", 14336, 70, 112, 112, 128, 50176, 250880,
       desc="BLOOM-176B dims in a Llama block (Ladder paper '176B')"),
    # Widely served Llama-family models, from their Hugging Face config.json (copies in
    # tests/fixtures/hf/, which a test reads back through sim.hf_config to hold these equal).
    _m("qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, qkv_bias=True, rope_theta=1e6, norm_eps=1e-6,
       desc="Qwen2.5 7B (qkv bias; huggingface.co/Qwen/Qwen2.5-7B config.json)"),
    _m("qwen2.5-72b", 8192, 80, 64, 8, 128, 29568, 152064, qkv_bias=True, rope_theta=1e6, norm_eps=1e-5,
       desc="Qwen2.5 72B (qkv bias; huggingface.co/Qwen/Qwen2.5-72B config.json)"),
    _m("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, qk_norm=True, rope_theta=1e6, norm_eps=1e-6,
       desc="Qwen3 8B (q/k norm; huggingface.co/Qwen/Qwen3-8B config.json)"),
    _m("mistral-7b-v0.3", 4096, 32, 32, 8, 128, 14336, 32768, rope_theta=1e6,
       desc="Mistral 7B v0.3 (huggingface.co/mistralai/Mistral-7B-v0.3 config.json)"),
    # Tiny models for tests and CPU runs. toy-* follow docs/sources.md §8: an 8-layer stack whose hidden
    # size moves a 2-rank gloo group from communication-bound (512) to balanced (1024-2048).
    _m("tiny", 64, 2, 4, 2, 16, 128, 256, desc="4-head toy for numerics tests"),
    _m("toy-512", 512, 8, 8, 4, 64, 1536, 1024, desc="8-layer CPU toy, comm-bound on gloo"),
    _m("toy-1024", 1024, 8, 16, 8, 64, 2816, 1024, desc="8-layer CPU toy, balanced on gloo"),
    _m("toy-2048", 2048, 8, 16, 8, 128, 5632, 1024, desc="8-layer CPU toy, compute-heavier on gloo"),
]}


def get_model(name: str) -> ModelSpec:
    """Preset by name, or a Hugging Face config.json (or a folder holding one); `NAME[:K]` takes
    the first K layers (e.g. `llama-3.1-405b[:8]`, `path/to/config.json[:4]`)."""
    base, layers = name, None
    if name.endswith("]") and "[:" in name:
        base, _, rest = name.rpartition("[:")
        try:
            layers = int(rest[:-1])
        except ValueError:
            raise ValueError(f"bad layer count in model name {name!r}; use NAME[:K]") from None
    if base not in MODELS:
        if is_config_path(base):
            from .hf_config import load_hf_config
            spec = load_hf_config(base)
            return spec.truncated(layers) if layers is not None else spec
        raise ValueError(f"unknown model {base!r}; choose from: {', '.join(MODELS)}, "
                         f"or a Hugging Face config.json (or its folder)")
    spec = MODELS[base]
    return spec.truncated(layers) if layers is not None else spec


def is_config_path(name: str) -> bool:
    """Is `name` meant as a file path (a .json, something with a path separator, an existing folder)?"""
    return name.endswith(".json") or os.sep in name or "/" in name or os.path.isdir(name)
