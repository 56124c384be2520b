"""The software stack a prediction describes, and the shapes of one forward pass.

Defaults follow the Ladder Residual paper's gpt-fast-style harness (docs/design.md, "Benchmark
protocol"; docs/sources.md §10): both phases torch.compile'd, decode under CUDA graphs (reduce-overhead),
prefill without. Compilation and graphs are separate fields: compilation decides which kernels run
(Inductor's fused ones, docs/compiled-stack.md), graphs what each launch costs. Every choice is a
field so users can describe their own serving stack instead (eager: compile_* = False), or name a
serving engine's preset (`--stack vllm`, sim/stack/presets/): its choices plus its host lane (sim.stack.host_lane).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from tpsim.sim.stack.host_lane import HostStep

from tpsim.sim.stack.impls import ATTENTION_IMPLS, FLASH_DECODE_KERNELS  # noqa: F401  (the one registry of implementation names)
from tpsim.sim.stack.sampler import REFERENCE as REFERENCE_SAMPLER, SAMPLER_NAMES

FALLBACK_KERNELS = tuple(k for k in FLASH_DECODE_KERNELS if k != "fa3")    # what runs off Hopper

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

HEADS = ("replicated", "vocab-parallel")
EMBEDS = ("replicated", "vocab-parallel")
# What a captured decode/prefill CUDA graph covers: the whole step (through sampling, the reference
# harness: hw.runner.DecodeGraph captures every op), the model forward and its logits (the sampler
# runs eagerly after the replay), or the model forward only (LM head, logits all-gather and sampler
# eager). The ops each leaves outside the graph, by the names sim.schedule.builder.Builder.head gives them:
GRAPH_OUTSIDE = {"step": (), "logits": ("sample",), "forward": ("head", "head.allgather", "sample")}
GRAPH_SCOPES = tuple(GRAPH_OUTSIDE)
DECODE_KV = ("static", "filled")
PREFILL_LOGITS = ("all", "last")


@dataclass(frozen=True)
class Stack:
    """How the serving stack runs the model (all but `dtype` change which ops run or their cost)."""

    dtype: str = "fp16"
    head: str = "replicated"          # LM head replicated on every rank, or split over vocab + all-gather
    embed: str = "replicated"         # input embedding replicated, or split over vocab: masked lookup + all-reduce
    attention: str = "math"           # math SDPA (materialized scores) or a fused flash kernel (sim/stack/impls.py)
    # the decode kernel that runs where `attention` cannot: fa3 on a GPU that is not Hopper
    # (sim/flash_decode.kernel_on); vLLM takes FA2 there, SGLang FlashInfer (sim/stack/presets/)
    attention_fallback: str = "fa2"
    # the model architectures (ModelSpec.architecture) the engine's auto-select gives `attention`; any other
    # runs `attention_fallback` (SGLang: FA3 for its is_fa3_default_architecture list only, FlashInfer for
    # the rest, e.g. Mistral); () = every architecture (sim.schedule.builder.Builder.attention_impl)
    attention_archs: tuple[str, ...] = ()
    # kernels an engine's attention layer launches around the attention kernel to rotate q, k and write
    # the new K/V into the cache (vLLM: rotary_embedding + reshape_and_cache_flash = 2); 0: PyTorch ops
    # as the reference harness runs them (eager RoPE 8 kernels or 1 compiled, then 2 cache copies)
    attention_prep_kernels: int = 0
    # eager phases run the engine's own fused CUDA ops, not PyTorch's elementwise kernels: one kernel
    # per RMSNorm with the residual add before it inside (fused_add_rmsnorm), one per SwiGLU
    # (silu_and_mul) (sim/price/work.py op_work; sources in sim/stack/presets/)
    engine_kernels: bool = False
    kv: str = "static"                # attend over the whole static cache (masked) or only the filled part
    prefill_logits: str = "all"       # logits for every prompt position, or only the last
    expand_gqa: bool = True           # repeat K/V heads to the query head count before attention
    compile_prefill: bool = True      # prefill torch.compile'd (Inductor fuses pointwise work across ops)
    compile_decode: bool = True       # decode torch.compile'd
    prefill_graphs: bool = False      # prefill under CUDA graphs
    decode_graphs: bool = True        # decode under CUDA graphs (torch.compile reduce-overhead)
    graph_scope: str = "step"         # what a captured graph covers (GRAPH_OUTSIDE): the rest launches eagerly
    collective: str = "auto"          # a profile table's impl or an engine all-reduce (sim/stack/impls.py); auto: profile default
    # Inductor rewrites a one-row matmul (mm with M == 1: every decode linear at batch 1; bmm with one
    # row per batch: the q-len-1 attention bmm's) into a generated
    # mul + sum reduction: torch/_inductor/decomposition.py `mm` / `bmm`, only with
    # config.coordinate_descent_tuning on, a GPU device and the one row statically known (static shapes).
    # False: the compiled step keeps them extern cuBLAS (the profile's GEMM table prices them). Each
    # preset sources it from its engine's code (sim/stack/presets/); only a compiled phase on a GPU reads it.
    mm_decompose_m1: bool = True
    # what samples each step's next tokens from the logits [batch, vocab]: "argmax" (the reference harness,
    # one kernel) or an engine's sampler on its latency benchmark's path (sim/stack/sampler.py: its kernels)
    sampler: str = REFERENCE_SAMPLER
    host: HostStep = field(default_factory=HostStep)   # the engine's CPU work per step (sim.stack.host_lane)
    preset: str = "reference"         # the --stack preset (or stack file) these values started from

    def __post_init__(self) -> None:
        for f in fields(self):            # each field of its declared type: "no" was read as true, 5 as a list
            want, v = _TYPES.get(f.type), getattr(self, f.name)
            if want and (not isinstance(v, want[0]) or (want[0] is int and isinstance(v, bool))):
                raise ValueError(f"{f.name} must be {want[1]}, got {v!r:.60}")
        if not isinstance(self.attention_archs, (list, tuple)) or not all(isinstance(a, str) for a in self.attention_archs):
            raise ValueError(f"attention_archs must be a list of architecture names, got {self.attention_archs!r}")
        object.__setattr__(self, "attention_archs", tuple(self.attention_archs))   # a stack file's JSON list
        _check("dtype", self.dtype, tuple(DTYPE_BYTES))
        _check("head", self.head, HEADS)
        _check("embed", self.embed, EMBEDS)
        _check("graph_scope", self.graph_scope, GRAPH_SCOPES)
        _check("attention", self.attention, ATTENTION_IMPLS)
        _check("attention_fallback", self.attention_fallback, FALLBACK_KERNELS)
        _check("kv", self.kv, DECODE_KV)
        _check("prefill_logits", self.prefill_logits, PREFILL_LOGITS)
        _check("sampler", self.sampler, SAMPLER_NAMES)
        if isinstance(self.attention_prep_kernels, bool) or not isinstance(self.attention_prep_kernels, int) \
                or not 0 <= self.attention_prep_kernels <= 16:
            raise ValueError(f"attention_prep_kernels must be an integer 0..16, got {self.attention_prep_kernels!r}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def graphs(self, phase: str, op: str | None = None) -> bool:
        """Kernels replayed from a CUDA graph (launch cost: the graph floor, not a Python launch).
        With an op's name: whether that op is inside the phase's graph (graph_scope leaves the head's
        ops named in GRAPH_OUTSIDE to eager launches after the replay)."""
        g = self.prefill_graphs if phase == "prefill" else self.decode_graphs
        return g and (op is None or op not in GRAPH_OUTSIDE[self.graph_scope])

    def compiled(self, phase: str) -> bool:
        """The phase runs Inductor's kernels (sim/price/fusion.py), not one eager kernel per torch op."""
        return self.compile_prefill if phase == "prefill" else self.compile_decode

    def describe(self) -> str:
        """One line naming the priced stack, e.g. 'prefill compiled, decode compiled + CUDA graphs'."""
        def one(phase: str) -> str:
            how = "compiled" if self.compiled(phase) else "eager"
            scope = {"step": "", "logits": " to the logits", "forward": " of the forward"}[self.graph_scope]
            return f"{phase} {how}" + (f" + CUDA graphs{scope}" if self.graphs(phase) else "")
        out = f"{one('prefill')}, {one('decode')}, {self.attention} attention, {self.kv} KV"
        if self.embed != "replicated":
            out += f", {self.embed} embedding"
        if not self.mm_decompose_m1 and (self.compile_prefill or self.compile_decode):
            out += ", M=1 mm cuBLAS"          # a compiled step that keeps one-row matmuls extern
        if self.preset != "reference":
            out = f"{self.preset}: {out}, {self.collective} all-reduce"
        if self.sampler != REFERENCE_SAMPLER:
            out += f", {self.sampler} sampler"       # an engine's kernels (sim/stack/sampler.py), not one argmax
        if self.host.active:
            out += ", host lane " + ("overlapped" if self.host.overlap else "in series")
        return out


# a Stack field's declared type -> (the Python type its value must have, how an error names it)
_TYPES = {"bool": (bool, "true or false"), "str": (str, "a string"), "int": (int, "an integer")}


def _check(field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {field} {value!r}; choose from: {', '.join(choices)}")


def make_stack(given: dict, profile_defaults: dict | None = None, base: Stack = Stack(),
               preset: dict | None = None) -> Stack:
    """The one place a Stack is assembled from user, preset, profile and harness inputs.

    Precedence: a value in `given` that is not None wins; then `preset` (a --stack preset's or stack
    file's values, sim.stack.presets.Preset.values: the engine the user named); then `profile_defaults` (a
    profile's stack_defaults: what its cluster runs); then `base`. "host" may be a dict of HostStep
    fields (over base's host; a later layer's fields over an earlier one's). `given` may hold "compile" (both phases;
    compile_prefill / compile_decode override it) and collective "auto" (= not given, so the
    profile's default applies). An `attention` in `given` clears the preset's attention_archs (the user's
    kernel runs for every architecture, as an engine's --attention-backend does). Decode CUDA graphs follow compile_decode unless set: torch.compile's
    reduce-overhead mode brings them. Unknown keys are a user error (ValueError), not a TypeError."""
    given = {k: v for k, v in given.items() if v is not None}
    both = given.pop("compile", None)
    if both is not None:
        given.setdefault("compile_prefill", both)
        given.setdefault("compile_decode", both)
    if given.get("collective") == "auto":
        del given["collective"]
    layers = [dict(profile_defaults or {}), dict(preset or {}), given]
    host = {}
    for layer in layers:
        h = layer.pop("host", None)
        if isinstance(h, HostStep):
            h = {f.name: getattr(h, f.name) for f in fields(HostStep)}
        if h is not None:
            if not isinstance(h, dict):
                raise ValueError(f"host must be an object of host-lane fields, got {h!r}")
            host |= h
    if "attention" in given and "attention_archs" not in given:
        given["attention_archs"] = ()       # an attention the user names runs for every model (--attention-backend)
    chosen = layers[0] | layers[1] | layers[2]
    if host:
        known = {f.name for f in fields(HostStep)}
        bad = sorted(set(host) - known)
        if bad:
            raise ValueError(f"unknown host field(s) {', '.join(bad)}; choose from: {', '.join(sorted(known))}")
        chosen["host"] = replace(base.host, **host)
    names = {f.name for f in fields(Stack)}
    unknown = sorted(set(chosen) - names)
    if unknown:
        raise ValueError(f"unknown stack field(s) {', '.join(unknown)}; choose from: {', '.join(sorted(names))}")
    if "decode_graphs" not in chosen and "compile_decode" in chosen:
        chosen["decode_graphs"] = chosen["compile_decode"]
    return replace(base, **chosen)


@dataclass(frozen=True)
class Step:
    """Shapes of one forward pass over a batch.

    prefill: q_len = prompt, start_pos = 0.  decode step j (j = 1..gen-1): q_len = 1,
    start_pos = prompt + j - 1. kv_len is what attention reads: the whole static cache
    (prompt + gen) or only the filled part (start_pos + q_len).
    """

    phase: str          # "prefill" | "decode"
    batch: int
    q_len: int
    start_pos: int
    kv_len: int
    logits_len: int     # positions per sequence whose logits the head computes

    def __post_init__(self) -> None:
        if self.phase not in ("prefill", "decode"):
            raise ValueError(f"phase must be prefill or decode, got {self.phase!r}")
        if min(self.batch, self.q_len, self.kv_len, self.logits_len) < 1 or self.start_pos < 0:
            raise ValueError(f"bad step shape {self}")
        if self.kv_len < self.start_pos + self.q_len:
            raise ValueError(f"kv_len {self.kv_len} < start_pos + q_len ({self.start_pos + self.q_len})")

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len

    @staticmethod
    def prefill(batch: int, prompt_len: int, gen_len: int, stack: Stack) -> "Step":
        kv = prompt_len + gen_len if stack.kv == "static" else prompt_len
        logits = prompt_len if stack.prefill_logits == "all" else 1
        return Step("prefill", batch, prompt_len, 0, kv, logits)

    @staticmethod
    def decode(batch: int, prompt_len: int, gen_len: int, j: int, stack: Stack) -> "Step":
        """Decode step j in 1..gen_len-1 (it consumes generated token j, at position prompt+j-1)."""
        if not 1 <= j <= gen_len - 1:
            raise ValueError(f"decode step {j} outside 1..{gen_len - 1}")
        start = prompt_len + j - 1
        kv = prompt_len + gen_len if stack.kv == "static" else start + 1
        return Step("decode", batch, 1, start, kv, 1)
