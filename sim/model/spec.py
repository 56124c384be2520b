"""A model's shape (ModelSpec: a Llama-architecture decoder stack) and what one TP rank holds of
it (Shard). Its own module so that sim.model.hf.config, which builds a ModelSpec from a config.json, and
sim.model.presets, which reads config.json files through sim.model.hf.config, import it without importing each
other.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# What each RoPE type needs from the config (transformers' modeling_rope_utils, the
# `_validate_<type>_rope_parameters` required/optional keys, 5.x): required, then optional.
ROPE_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "max_position_embeddings"), ()),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")),
}


@dataclass(frozen=True)
class RopeSpec:
    """A model's rotary embedding as its config says: the base theta, the type (one of ROPE_TYPES)
    and that type's parameters as sorted (key, value) pairs. Only the frequency table depends on it
    (hw.model.rope_inv_freq computes it); the work per token does not."""

    theta: float = 500_000.0
    type: str = "default"
    params: tuple[tuple[str, float | bool], ...] = ()

    def __post_init__(self) -> None:
        if self.type not in ROPE_TYPES:
            raise ValueError(f"rope type {self.type!r} is not one tpsim computes; supported: {', '.join(ROPE_TYPES)}")
        if not (isinstance(self.theta, (int, float)) and self.theta > 1):
            raise ValueError(f"rope theta must be a number > 1, got {self.theta!r}")
        required, optional = ROPE_TYPES[self.type]
        keys = {k for k, _ in self.params}
        missing = [k for k in required if k not in keys]
        extra = sorted(keys - set(required) - set(optional))
        if missing:
            raise ValueError(f"rope type {self.type!r} needs {', '.join(missing)}")
        if extra:
            raise ValueError(f"rope type {self.type!r} does not take {', '.join(extra)}")

    def get(self, key: str, default=None):
        return dict(self.params).get(key, default)

    def check_positions(self, max_seq: int) -> None:
        """ValueError when positions up to `max_seq` need tables that change with the sequence length
        (dynamic NTK beyond max_position_embeddings: transformers recomputes the frequencies per pass,
        so keys cached by an earlier pass used other ones; a static table cannot reproduce that)."""
        if self.type == "dynamic" and max_seq > self.get("max_position_embeddings"):
            raise ValueError(f"rope type 'dynamic' past max_position_embeddings "
                             f"({self.get('max_position_embeddings')}) rescales with each pass's length; "
                             f"tpsim runs it only up to there (prompt + gen = {max_seq})")

    def describe(self) -> str:
        """'1e+06 default', '500000 llama3 (factor 8, ...)'."""
        extra = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.params)
        return f"theta {self.theta:g}, {self.type}" + (f" ({extra})" if extra else "")


def rope(theta: float = 500_000.0, type: str = "default", **params) -> RopeSpec:
    """RopeSpec with keyword parameters: rope(5e5, "llama3", factor=8.0, ...)."""
    return RopeSpec(float(theta), type, tuple(sorted(params.items())))


# ModelSpec.quant: what a checkpoint's linears hold (sim/model/hf/quant.py reads it off config.json)
QUANTS = ("", "fp8-dynamic", "fp8-static")


class HeadDims:
    """The projection widths of anything with `heads` query heads and `kv_heads` K/V heads of
    `head_dim` each: a whole model (ModelSpec) or one TP rank's part of it (Shard)."""

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class ModelSpec(HeadDims):
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
    # What Llama-family variants add to the same forward (sim.schedule.language puts them on the ops as
    # attrs, so the cost model prices them and the harness runs them):
    qkv_bias: bool = False          # Qwen2/2.5: bias on the q, k, v projections (not on o)
    qk_norm: bool = False           # Qwen3: RMSNorm over head_dim on every q and k head before RoPE
    rope: RopeSpec = field(default_factory=RopeSpec)   # RoPE as the config says: the tables, not the work
    norm_eps: float = 1e-5
    sliding_window: int = 0         # Mistral v0.1: attend to the last W positions; 0 = full attention
    # the Hugging Face class of the checkpoint (config.json architectures[0]): what an engine dispatches
    # on, e.g. SGLang's attention auto-select (Stack.attention_archs); the Llama-block presets say Llama's
    architecture: str = "LlamaForCausalLM"
    # the longest sequence (prompt + output) the model serves: config.json max_position_embeddings, what
    # vLLM's max_model_len defaults to (sim/serve refuses a request longer); 0 = not stated
    max_context: int = 0
    # the checkpoint's quantization (config.json quantization_config, sim.model.hf.quant): "" (16-bit
    # weights), or FP8 e4m3 linears with "dynamic" per-token or "static" per-tensor input scales
    quant: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.rope, dict):          # read back from JSON (hw.bench's "model_spec")
            r = self.rope
            object.__setattr__(self, "rope", RopeSpec(float(r["theta"]), r.get("type", "default"),
                                                      tuple((k, v) for k, v in r.get("params", ()))))
        for field in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model {self.name!r}: {field} must be positive, got {getattr(self, field)}")
        if self.quant not in QUANTS:
            raise ValueError(f"model {self.name!r}: quant must be one of {QUANTS}, got {self.quant!r}")
        if self.sliding_window < 0:
            raise ValueError(f"model {self.name!r}: sliding_window must be >= 0, got {self.sliding_window}")
        if self.max_context < 0:
            raise ValueError(f"model {self.name!r}: max_context must be >= 0, got {self.max_context}")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"model {self.name!r}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def rope_theta(self) -> float:
        return self.rope.theta

    def truncated(self, layers: int) -> "ModelSpec":
        """The first `layers` layers of this model (harness runs of models too big to fit)."""
        if not 1 <= layers <= self.layers:
            raise ValueError(f"the layers to keep of {self.name} (--layers, or K in NAME[:K]) must be in "
                             f"1..{self.layers}, got {layers}")
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
class Shard(HeadDims):
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
