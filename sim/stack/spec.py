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

from tpsim.sim.stack.ar_fusion import AR_NORM_FUSIONS
from tpsim.sim.stack.host_lane import HostStep

from tpsim.sim.stack.impls import ATTENTION_IMPLS, FLASH_DECODE_KERNELS  # noqa: F401  (the one registry of implementation names)
from tpsim.sim.stack.impls import knobs_for_model, knobs_of, normalize_knobs
from tpsim.sim.stack.sampler import REFERENCE as REFERENCE_SAMPLER, SAMPLER_NAMES

FALLBACK_KERNELS = tuple(k for k in FLASH_DECODE_KERNELS if k != "fa3")    # what runs off Hopper

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
# FP8 (e4m3) is a precision of the GEMMs and of the KV cache, not of the activations between them:
# an FP8 checkpoint's linears take e4m3 weights and e4m3-quantized inputs and write the model's
# 16-bit dtype (vLLM Fp8LinearMethod: out_dtype = torch.get_default_dtype(); SGLang and TensorRT-LLM
# alike), so norms, adds, the all-reduce and the LM head stay 16-bit (docs/fp8.md). `--dtype fp8` is
# that: bf16 activations, Stack.weight_dtype fp8.
FP8 = "fp8"
FP8_BYTES = 1
DTYPE_CHOICES = (*DTYPE_BYTES, FP8)         # what --dtype takes (make_stack turns fp8 into the two fields)
WEIGHT_DTYPES = ("auto", FP8)               # auto: the linears run in `dtype`
KV_DTYPES = ("auto", FP8)                   # auto: the cache holds `dtype`
# how an FP8 linear scales its input: per token at run time (vLLM's default for FP8-dynamic checkpoints
# and for --quantization fp8 of a 16-bit one: Fp8LinearOp(use_per_token_if_dynamic=cutlass_fp8_supported()))
# or one static per-tensor scale from the checkpoint (its input_scale)
FP8_ACTIVATIONS = ("dynamic", "static")

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
# The Stack numbers whose sources give only an interval, as every stack has them unless a preset or stack
# file sets its own (Stack.ranges; sim/sensitivity.py reruns their ends): the fused all-reduce + RMSNorm
# kernel's epilogue share and TokenWeave's kernel floor (sim/price/comm/fused_allreduce.py derives both)
DEFAULT_RANGES = (("ar_norm_epilogue_share", 0.0, 1.0), ("tokenweave_floor_s", 11.1e-6, 14.0e-6))
RANGEABLE = ("layer_host_s", "ar_norm_epilogue_share", "tokenweave_floor_s", "ubatch_switch_s", "ubatch_start_s",
             "launch_host_s")


@dataclass(frozen=True)
class Stack:
    """How the serving stack runs the model (all but `dtype` change which ops run or their cost)."""

    dtype: str = "fp16"
    # e4m3 weights and e4m3 inputs for the layers' linears (W8A8; outputs and everything else stay in
    # `dtype`); the LM head and the embedding stay 16-bit (vLLM's Fp8Config quantizes LinearBase
    # layers only, ParallelLMHead is not one; compressed-tensors FP8 checkpoints ignore lm_head)
    weight_dtype: str = "auto"
    fp8_activations: str = "dynamic"  # FP8_ACTIVATIONS: the input scale of an FP8 linear
    kv_dtype: str = "auto"            # KV_DTYPES: fp8 = an e4m3 KV cache (vLLM --kv-cache-dtype fp8)
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
    # how the engine calls its decode attention kernel: ("kernel.knob", value) pairs over the defaults of
    # sim/stack/impls.py ATTENTION_KNOBS (a split bound under CUDA graphs, the width the split rule reads,
    # a mode); a preset or stack file gives them as {kernel: {knob: value}} (sim/price/decode_grid.py)
    attention_knobs: tuple[tuple[str, object], ...] = ()
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
    # the engines' fused all-reduce + residual add + RMSNorm kernel (FlashInfer's trtllm_allreduce_fusion) at
    # the sublayer boundaries of standard TP, inside the engine's size window (sim/stack/ar_fusion.py)
    ar_norm_fusion: str = "none"
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
    # seconds of Python per transformer layer of an eager phase beyond its kernels' launches (nn.Module
    # calls, views and slices that launch nothing, custom-op dispatch): on the rank's launch chain, once per
    # layer (sim/price/cost.py issue_s). 0: the reference harness, whose layer Python the profile's eager
    # launch cost holds; an engine preset's value is counted from its code (bench/eager_layer_python.py)
    layer_host_s: float = 0.0
    # CPU seconds to launch one kernel of an eager phase when the engine launches from C++ (TensorRT's enqueue:
    # the driver's launch call, no Python dispatch); 0: through PyTorch, at the profile's launch_us.eager
    # (sim/price/cost.py issue_s). A preset sets it from a driver-launch microbenchmark, with its range
    launch_host_s: float = 0.0
    # how much of the fused all-reduce + add + RMSNorm kernel's epilogue bytes (residual read, residual and
    # norm written) is not hidden under its own loads: not measured, 1 (none hidden), range [0, 1]
    # (sim/price/comm/fused_allreduce.py: TokenWeave's fused-minus-plain kernel sits inside it)
    ar_norm_epilogue_share: float = 1.0
    # TokenWeave's multimem all-reduce + add + RMSNorm kernel: seconds at no bytes, from its CTA sweep
    # (microsoft/tokenweave artifact/csvs/figure_10.csv: 11.1-14.0 us over the CTA counts, median 13.25;
    # sim/price/comm/fused_allreduce.py)
    tokenweave_floor_s: float = 13.25e-6
    # CPU seconds of a schedule whose micro-batches run on two threads (dbo: vLLM's UBatchContext), on the
    # launch chain of an eager phase: each hand-off from one thread to the other (ubatch_switch_s, at every
    # micro-batch all-reduce), and the step's thread start, barrier and joins (ubatch_start_s). 0: one
    # thread issues every micro-batch (the reference harness, hw/runner.py); vLLM's from
    # bench/dbo_thread_handoff.py (sim/stack/presets/vllm.py). A CUDA-graph replay runs none of it.
    ubatch_switch_s: float = 0.0
    ubatch_start_s: float = 0.0
    host: HostStep = field(default_factory=HostStep)   # the engine's CPU work per step (sim.stack.host_lane)
    preset: str = "reference"         # the --stack preset (or stack file) these values started from
    # (field, lo, hi) per host number whose evidence gives an interval (a preset's (value, source, (lo, hi))):
    # the prediction keeps host's value, sim/sensitivity.py reruns at the ends
    host_ranges: tuple[tuple[str, float, float], ...] = ()
    # (field, lo, hi) per Stack number whose evidence gives an interval (a preset's STACK entry
    # (value, source, (lo, hi)), a stack file's {"value", "range"}, DEFAULT_RANGES): the same, for the
    # stack's own numbers (RANGEABLE)
    ranges: tuple[tuple[str, float, float], ...] = DEFAULT_RANGES

    def __post_init__(self) -> None:
        for f in fields(self):            # each field of its declared type: "no" was read as true, 5 as a list
            want, v = _TYPES.get(f.type), getattr(self, f.name)
            if want and (not isinstance(v, want[0]) or (want[0] is int and isinstance(v, bool))):
                raise ValueError(f"{f.name} must be {want[1]}, got {v!r:.60}")
        if not isinstance(self.attention_archs, (list, tuple)) or not all(isinstance(a, str) for a in self.attention_archs):
            raise ValueError(f"attention_archs must be a list of architecture names, got {self.attention_archs!r}")
        object.__setattr__(self, "attention_archs", tuple(self.attention_archs))   # a stack file's JSON list
        object.__setattr__(self, "attention_knobs", normalize_knobs(self.attention_knobs))
        if self.dtype == FP8:
            raise ValueError("dtype fp8 is the linears' precision: give weight_dtype fp8 (the activations stay "
                             "bf16), or --dtype fp8 on the command line")
        _check("dtype", self.dtype, tuple(DTYPE_BYTES))
        _check("weight_dtype", self.weight_dtype, WEIGHT_DTYPES)
        _check("fp8_activations", self.fp8_activations, FP8_ACTIVATIONS)
        _check("kv_dtype", self.kv_dtype, KV_DTYPES)
        _check("ar_norm_fusion", self.ar_norm_fusion, AR_NORM_FUSIONS)
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
        if isinstance(self.layer_host_s, bool) or not isinstance(self.layer_host_s, (int, float)) \
                or not 0 <= self.layer_host_s < 1:
            raise ValueError(f"layer_host_s must be seconds in [0, 1), got {self.layer_host_s!r}")
        for name in ("tokenweave_floor_s", "ubatch_switch_s", "ubatch_start_s", "launch_host_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"{name} must be seconds in [0, 1), got {v!r}")
        share = self.ar_norm_epilogue_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"ar_norm_epilogue_share must be a fraction in [0, 1], got {share!r}")
        for flag in ("engine_kernels", "mm_decompose_m1"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        ranges = ([(k, *v) for k, v in self.host_ranges.items()] if isinstance(self.host_ranges, dict)
                  else self.host_ranges)
        ranges = tuple(sorted((str(k), float(lo), float(hi)) for k, lo, hi in ranges))
        for k, lo, hi in ranges:
            if not hasattr(self.host, k) or not 0 <= lo < hi:
                raise ValueError(f"host_ranges: host.{k} [{lo:g}, {hi:g}] must name a host number with 0 <= lo < hi")
        # a host number replaced by one outside its range (dataclasses.replace(stack, host=...)) has lost it
        object.__setattr__(self, "host_ranges", tuple(r for r in ranges if r[1] <= getattr(self.host, r[0]) <= r[2]))
        own = [(k, *v) for k, v in self.ranges.items()] if isinstance(self.ranges, dict) else self.ranges
        own = tuple(sorted((str(k), float(lo), float(hi)) for k, lo, hi in own))
        for k, lo, hi in own:
            if k not in RANGEABLE or not 0 <= lo < hi:
                raise ValueError(f"ranges: {k} [{lo:g}, {hi:g}] must name one of the stack's numbers "
                                 f"({', '.join(RANGEABLE)}) with 0 <= lo < hi")
        # ... and so has a stack number set outside its range (a flag, a preset's value over the default's)
        object.__setattr__(self, "ranges", tuple(r for r in own if r[1] <= getattr(self, r[0]) <= r[2]))

    def attention_for(self, architecture: str) -> str:
        """The attention kernel the stack runs for a model of this architecture: `attention`, or
        `attention_fallback` for one outside a non-empty `attention_archs`."""
        if not self.attention_archs or architecture in self.attention_archs:
            return self.attention
        return self.attention_fallback

    def knobs(self, kernel: str) -> dict:
        """The knobs this stack calls decode `kernel` with (its defaults where the stack sets none)."""
        return knobs_of(self.attention_knobs, kernel)

    def for_model(self, max_context: int) -> Stack:
        """This stack for a model whose context is `max_context` tokens (ModelSpec.max_context): the attention
        knobs whose graph length follows the model's (graph_len_model) set from it; itself if none changes."""
        pairs = knobs_for_model(self.attention_knobs, max_context)
        return self if pairs == self.attention_knobs else replace(self, attention_knobs=pairs)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def fp8(self) -> bool:
        """The layers' linears run in FP8 (W8A8 e4m3)."""
        return self.weight_dtype == FP8

    @property
    def kv_bytes(self) -> int:
        """Bytes of one KV cache element."""
        return FP8_BYTES if self.kv_dtype == FP8 else DTYPE_BYTES[self.dtype]

    @property
    def precision(self) -> str:
        """What the run computes in, for titles: 'bf16', 'fp8' (e4m3 linears), '+ fp8 KV' when the
        cache is FP8."""
        out = FP8 if self.fp8 else self.dtype
        return out + (" + fp8 KV" if self.kv_dtype == FP8 else "")

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
        if self.fp8:                          # the all-reduce and the activations stay 16-bit
            out += f", fp8 linears ({self.fp8_activations} input scales, {self.dtype} out)"
        if self.kv_dtype == FP8:
            out += ", fp8 KV"
        if self.ar_norm_fusion != "none":
            out += f", fused all-reduce + RMSNorm ({self.ar_norm_fusion})"
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


def _spans(given) -> dict:
    """Ranges as {field: (lo, hi)}: given so (a preset's, a stack file's) or as Stack holds them, (field, lo,
    hi) triples (a Stack written with dataclasses.asdict and read back: a calibration case's descriptor)."""
    if not given:
        return {}
    if isinstance(given, dict):
        return dict(given)
    return {k: (lo, hi) for k, lo, hi in given}


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
    for layer in layers:                    # dtype fp8 (--dtype fp8, a stack file): bf16 activations, FP8 linears
        if layer.get("dtype") == FP8:
            layer["dtype"] = "bf16"
            layer.setdefault("weight_dtype", FP8)
    host, ranges = {}, {}
    own = {k: (lo, hi) for k, lo, hi in base.ranges}       # the stack's own numbers' ranges, layer by layer
    for layer in layers:
        own = {k: v for k, v in own.items() if k not in layer} | _spans(layer.pop("ranges", None))
        h = layer.pop("host", None)
        spans = _spans(layer.pop("host_ranges", None))
        if isinstance(h, HostStep):
            h = {f.name: getattr(h, f.name) for f in fields(HostStep)}
        if h is not None:
            if not isinstance(h, dict):
                raise ValueError(f"host must be an object of host-lane fields, got {h!r}")
            host |= h
            # a layer that sets a host number replaces the range an earlier layer gave it
            ranges = {k: v for k, v in ranges.items() if k not in h}
        ranges |= dict(spans)
    if "attention" in given and "attention_archs" not in given:
        given["attention_archs"] = ()       # an attention the user names runs for every model (--attention-backend)
    chosen = layers[0] | layers[1] | layers[2]
    if host:
        known = {f.name for f in fields(HostStep)}
        bad = sorted(set(host) - known)
        if bad:
            raise ValueError(f"unknown host field(s) {', '.join(bad)}; choose from: {', '.join(sorted(known))}")
        chosen["host"] = replace(base.host, **host)
    if ranges:
        chosen["host_ranges"] = tuple((k, *v) for k, v in ranges.items())
    chosen["ranges"] = tuple((k, *v) for k, v in own.items())
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

    A serving engine's iteration holds a mixed batch (`mix`, built by Step.mixed): sequences at their
    own query and KV lengths, packed into one token dimension as vLLM's model runner packs them
    (input_ids [num_tokens]; decodes first). Every op but attention sees the packed tokens: a
    decode-only mix is `batch` sequences of one token, any prefill chunk makes it one row of
    `q_len` = all the tokens; attention does each group's own work (sim.schedule.builder).
    """

    phase: str          # "prefill" | "decode"
    batch: int
    q_len: int
    start_pos: int
    kv_len: int
    logits_len: int     # positions per sequence whose logits the head computes
    # a mixed batch: (sequences, q_len, kv_len) groups, decodes (q_len 1) first; () = the uniform batch above
    mix: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.phase not in ("prefill", "decode"):
            raise ValueError(f"phase must be prefill or decode, got {self.phase!r}")
        if min(self.batch, self.q_len, self.kv_len, self.logits_len) < 1 or self.start_pos < 0:
            raise ValueError(f"bad step shape {self}")
        if self.kv_len < self.start_pos + self.q_len:
            raise ValueError(f"kv_len {self.kv_len} < start_pos + q_len ({self.start_pos + self.q_len})")
        if self.mix:
            for g in self.mix:
                if len(g) != 3 or not all(isinstance(v, int) for v in g) or g[0] < 1 or g[1] < 1 or g[2] < g[1]:
                    raise ValueError(f"a mixed step's group must be (sequences >= 1, q_len >= 1, kv_len >= q_len), "
                                     f"got {g!r}")
            if sum(c * q for c, q, _ in self.mix) != self.tokens or \
                    (self.phase == "decode") != all(q == 1 for _, q, _ in self.mix):
                raise ValueError(f"mixed step {self.mix} does not match its packed shape {self}")

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len

    @property
    def seqs(self) -> int:
        """Sequences in the step (the sampler's batch, the host lane's per-sequence work)."""
        return sum(c for c, _, _ in self.mix) if self.mix else self.batch

    @staticmethod
    def mixed(groups, stack: Stack) -> "Step":
        """One serving iteration: `groups` of (sequences, q_len, kv_len) -- decodes (q_len 1, kv_len
        = context + 1) and prefill chunks (q_len tokens written at kv_len - q_len.., attending to
        kv_len keys: the chunk and everything before it). Only decodes: a decode step of `batch`
        sequences. With a chunk: a prefill-phase step of one packed row of every token, its logits
        at each sequence's last token (prefill_logits last) or at every token (all)."""
        mix = tuple(sorted(((int(c), int(q), int(kv)) for c, q, kv in groups), key=lambda g: g[1] > 1))
        if not mix:
            raise ValueError("a mixed step needs at least one group")
        seqs = sum(c for c, _, _ in mix)
        tokens = sum(c * q for c, q, _ in mix)
        kv_max = max(kv for _, _, kv in mix)
        if all(q == 1 for _, q, _ in mix):
            return Step("decode", seqs, 1, kv_max - 1, kv_max, 1, mix)
        logits = seqs if stack.prefill_logits == "last" else tokens
        return Step("prefill", 1, tokens, 0, max(kv_max, tokens), logits, mix)

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
