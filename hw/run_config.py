"""The bench/check run configuration (`RunConfig`): what every rank runs, JSON-serializable so the
launcher can hand it to workers, validated before any process starts."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

from tpsim.sim.memory import GIB, DoesNotFit, MemoryEstimate, estimate
from tpsim.fileio.shape import finite

from tpsim.sim.fp8 import model_given
from tpsim.sim.model.presets import ModelSpec, get_model
from tpsim.sim.schedule.language import build
from tpsim.sim.stack.spec import Stack, Step, make_stack

MAX_TIMEOUT_S = 86400.0

# bench's --collective: "auto" = the process group's own all-reduce (NCCL on cuda, gloo on cpu);
# "symm-mem" = PyTorch symmetric memory as vLLM runs it (hw.symm_mem; the simulator's collective of
# that name, sim/stack/impls.py)
HARNESS_COLLECTIVES = ("auto", "symm-mem")


def stack_collective(collective: str, backend: str) -> str:
    """The simulator's Stack.collective for what a run's all-reduces ran: --collective `collective`
    over process-group `backend`. "auto" is the group's own (the backend's tables: nccl, gloo); any
    other is the simulator's implementation of that name (sim/stack/impls.py ENGINE_COLLECTIVES: symm-mem).
    RunConfig.stack and compare (calib.compare_measure.workload_of, from the run's JSON) both ask it."""
    return backend if collective == "auto" else collective


def check_collective(collective: str, backend: str, device: str, compile: bool) -> None:
    """ValueError (one line) for a --collective this run cannot use, before any process starts."""
    if collective not in HARNESS_COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; choose from: {', '.join(HARNESS_COLLECTIVES)}")
    if collective != "symm-mem":
        return
    if device != "cuda" or backend != "nccl":
        raise ValueError("--collective symm-mem needs --device cuda --backend nccl: PyTorch symmetric memory "
                         "(torch.distributed._symmetric_memory) maps peer GPUs' buffers, and gloo on CPU has none "
                         "(use --collective auto)")
    if compile:
        raise ValueError("--collective symm-mem runs eager passes only: a compiled pass's all-reduces are "
                         "functional collectives Inductor lowers itself, and the symm_mem ops are not wrapped "
                         "for it (use --no-compile, or --collective auto)")


def check_backend_device(backend: str, device: str) -> None:
    """The process-group backend and the device must exist and go together (NCCL is GPU-only)."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; choose gloo or nccl")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose cpu or cuda")
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda (use gloo on CPU)")


def check_static_kv(kv: str, compile: bool, decode_graphs: bool) -> None:
    """A compiled pass and a captured decode graph take the start position as a device tensor (one
    graph for every decode step), which filled-KV attention cannot slice the cache by (hw.kernels
    KernelCtx): refused here, before any rank starts, instead of as a Dynamo error inside every rank."""
    if kv == "static":
        return
    for on, option in ((compile, "--compile"), (decode_graphs, "--graphs")):
        if on:
            raise ValueError(f"{option} needs --kv static (one compiled graph serves every decode position), got "
                             f"--kv {kv}: give --kv static, or --no-{option[2:]}")


def check_timeout(v: float, name: str) -> None:
    """A finite, positive number of seconds up to a day (nan/inf would disable the watchdogs)."""
    if not finite(v) or not 0 < v <= MAX_TIMEOUT_S:
        raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], got {v}")


def default_timeout_s(flops_per_pass: float, device: str) -> float:
    """A collective timeout proportionate to the work: 30 s for start-up (importing torch on a busy
    box) plus 20x the longest forward pass at a pessimistic rate (1 GFLOP/s per CPU rank, 1 TFLOP/s
    per GPU). A tiny model hangs for ~30 s instead of 5 minutes; a 70B prefill on CPU still gets
    hours. Capped at MAX_TIMEOUT_S."""
    rate = 1e12 if device == "cuda" else 1e9
    return min(MAX_TIMEOUT_S, 30.0 + 20.0 * flops_per_pass / rate)


@dataclass(frozen=True)
class RunConfig:
    """Everything a rank needs to run `bench` or `check`; JSON-serializable (sent to workers)."""

    model: str = "tiny"
    layers: int | None = None          # run the first K layers only
    tp: int = 2
    batch: int = 1
    prompt_len: int = 1024
    gen_len: int = 512
    schedules: tuple[str, ...] = ("standard",)
    backend: str = "gloo"
    device: str = "cpu"
    dtype: str = "fp32"
    head: str = "replicated"
    embed: str = "replicated"          # input embedding replicated, or vocab-parallel (masked lookup + all-reduce)
    attention: str = "math"
    kv: str = "static"
    prefill_logits: str = "all"
    expand_gqa: bool = True
    decode_graphs: bool = False        # CUDA graphs for decode (cuda only)
    compile: bool = False              # torch.compile each whole pass (hw.bench.compile_passes)
    mm_decompose_m1: bool = True       # compiled: coordinate_descent_tuning on, as the stack sets it
                                       # (Stack.mm_decompose_m1; hw.inductor_flags.harness_inductor_flags)
    repeats: int = 5
    warmup: int = 1
    seed: int = 0
    timeout_s: float = 300.0
    gpu_mem_gib: float | None = None
    out: str | None = None             # rank 0 writes the result JSON here (atomically)
    print_result: bool = False         # rank 0 prints the result (torchrun mode)
    json: bool = False
    fault: str | None = None           # test hook, see FAULT_ENV
    emulate_tp: int | None = None      # one process runs rank 0 of a TP-`emulate_tp` job (its shard
                                       # shapes); collectives go over the 1-process group
    checkpoint: str | None = None      # a Hugging Face snapshot folder: its weights instead of drawn ones
    collective: str = "auto"           # how all-reduces run: HARNESS_COLLECTIVES (bench --collective)
    weight_dtype: str = "auto"         # fp8: the layer linears in e4m3, upcast for compute (hw/fp8.py); an FP8
                                       # checkpoint is fp8 whatever this says (sim/fp8.py model_given)
    kv_dtype: str = "auto"             # fp8: an e4m3 KV cache
    ar_norm_fusion: str = "none"       # the fused all-reduce + add + RMSNorm's boundaries (run unfused: its dataflow)

    def __post_init__(self) -> None:
        for f in ("tp", "batch", "prompt_len", "gen_len", "repeats"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        check_timeout(self.timeout_s, "--timeout-s")
        if self.layers is not None and self.layers < 1:
            raise ValueError(f"--layers must be >= 1, got {self.layers}")
        check_backend_device(self.backend, self.device)
        if self.decode_graphs and self.device != "cuda":
            raise ValueError("CUDA graphs need --device cuda")
        check_static_kv(self.kv, self.compile, self.decode_graphs)
        if self.emulate_tp is not None and (self.emulate_tp < 1 or self.tp != 1):
            raise ValueError(f"--emulate-tp {self.emulate_tp} runs one process (--tp 1) as rank 0 of a TP "
                             f"job of that degree; got --tp {self.tp}")
        check_collective(self.collective, self.backend, self.device, self.compile)
        st = self.stack()
        if (st.fp8 or st.kv_dtype == "fp8") and self.compile:
            raise ValueError("FP8 runs eager in the harness (e4m3 weights and caches upcast per op, hw/fp8.py): "
                             "give --no-compile")

    def model_spec(self) -> ModelSpec:
        m = get_model(self.model)
        return m.truncated(self.layers) if self.layers else m

    def stack(self) -> Stack:
        given = dict(dtype=self.dtype, head=self.head, embed=self.embed, attention=self.attention, kv=self.kv,
                     prefill_logits=self.prefill_logits, expand_gqa=self.expand_gqa,
                     decode_graphs=self.decode_graphs,
                     collective=stack_collective(self.collective, self.backend),
                     compile=self.compile,
                     mm_decompose_m1=self.mm_decompose_m1, kv_dtype=self.kv_dtype,
                     ar_norm_fusion=self.ar_norm_fusion,
                     weight_dtype=None if self.weight_dtype == "auto" else self.weight_dtype)
        return make_stack(model_given(self.model_spec(), given))

    def ran(self, graphs: bool = True) -> dict:
        """The stack choices as this run ran them, a result's "stack" (bench's and check's alike);
        `graphs=False` leaves out decode_graphs for a command that runs none (check)."""
        keys = ("head", "embed", "attention", "kv", "prefill_logits", "expand_gqa",
                *(("decode_graphs",) if graphs else ()), "compile", "mm_decompose_m1", "collective")
        out = {k: getattr(self, k) for k in keys}
        st = self.stack()
        if st.fp8 or st.kv_dtype == "fp8":       # what FP8 ran (absent in a 16-bit run: its JSON as before)
            out |= {"weight_dtype": st.weight_dtype, "fp8_activations": st.fp8_activations, "kv_dtype": st.kv_dtype}
        return out

    def precision(self) -> str:
        """The run's dtype as a result names it: 'fp32', or 'fp8 (fp32 compute)' where the linears (or the
        KV cache: '+ fp8 KV') are e4m3, upcast for compute in the run's dtype."""
        st = self.stack()
        if not (st.fp8 or st.kv_dtype == "fp8"):
            return self.dtype
        return f"{st.precision.replace(st.dtype, 'bf16') if not st.fp8 else st.precision} ({self.dtype} compute)"

    def steps(self) -> tuple[Step, Step | None]:
        """The prefill step and the decode step every decode pass reuses (None when gen_len == 1)."""
        st = self.stack()
        pre = Step.prefill(self.batch, self.prompt_len, self.gen_len, st)
        dec = Step.decode(self.batch, self.prompt_len, self.gen_len, 1, st) if self.gen_len > 1 else None
        return pre, dec

    @property
    def bench_marks(self) -> int:
        """The progress marks rank 0 of `tpsim bench` makes (hw/bench.py): one per compiled schedule
        (compile_passes), then per generation of each schedule (warm-up and measured) one for its
        prefill and one per decode step: what the launcher's progress bar counts to."""
        specs = len(dict.fromkeys(("standard", *self.schedules)))
        return specs * (int(self.compile) + (self.warmup + self.repeats) * self.gen_len)

    @property
    def model_tp(self) -> int:
        """The TP degree whose shards and schedules run (the emulated one, if any)."""
        return self.emulate_tp or self.tp

    def validate(self) -> None:
        """Raise ValueError for anything the user got wrong, before processes start."""
        m = self.model_spec()
        m.shard(self.model_tp)
        m.rope.check_positions(self.prompt_len + self.gen_len)
        pre, dec = self.steps()
        for s in self.schedules:
            for step in (pre, dec) if dec else (pre,):
                sched = build(s, m, self.model_tp, step, self.stack())
                if self.compile and any(op.kind == "shift" for op in sched.ops):
                    raise ValueError(f"{s}'s ring steps (point-to-point sends) run eager in the harness: no "
                                     f"functional collective traces them; give --no-compile")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["schedules"] = list(self.schedules)
        return d

    @staticmethod
    def from_dict(d: dict) -> "RunConfig":
        known = {f.name for f in fields(RunConfig)}
        kw = {k: v for k, v in d.items() if k in known}
        if "schedules" in kw:
            kw["schedules"] = tuple(kw["schedules"])
        return RunConfig(**kw)


def capacity_bytes(cfg: RunConfig) -> tuple[int, str]:
    """Memory one rank may use, and where the number came from: --gpu-mem-gib, the GPU's total
    memory, or the host's RAM shared by the --tp processes started on it."""
    if cfg.gpu_mem_gib:
        return int(cfg.gpu_mem_gib * GIB), f"a {cfg.gpu_mem_gib:g} GiB device (--gpu-mem-gib)"
    if cfg.device == "cuda":
        import torch                   # lazy: only the GPU path needs it; this module imports no torch
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(props.total_memory), props.name
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return ram // cfg.tp, f"host RAM shared by {cfg.tp} ranks"


def memory_gate(cfg: RunConfig, reference: bool = False) -> MemoryEstimate:
    """The one memory check of the harness: DoesNotFit (a ValueError, one line with the numbers)
    when a rank of `cfg` cannot hold its weight shard, KV cache and activations (sim.memory's
    estimate, the shapes hw.model allocates). The launcher calls it before starting any process,
    each rank again before it allocates (under torchrun there is no launcher); a checkpoint's
    weights take the drawn weights' room (its tensors are memory-mapped, only slices are copied).
    `reference` (check): each rank also holds the whole model in fp32 and its fp32 KV cache for
    hw.check.Reference. Returns the estimate when it fits."""
    m = cfg.model_spec()
    est = estimate(m, cfg.model_tp, cfg.batch, cfg.prompt_len, cfg.gen_len, cfg.stack(), cfg.device)
    ref = (4 * (m.param_count() + 2 * m.layers * cfg.batch * (cfg.prompt_len + cfg.gen_len) * m.kv_dim)
           if reference else 0)
    cap, where = capacity_bytes(cfg)
    if est.total_bytes + ref <= cap:
        return est
    g = lambda b: f"{b / GIB:.2f}"  # noqa: E731
    raise DoesNotFit(f"{est.model} at TP {est.tp} needs {g(est.total_bytes + ref)} GiB per rank but {where} has "
                     f"{g(cap)} GiB (layer weights {g(est.layer_weights_bytes)} + embed/head "
                     f"{g(est.embed_head_bytes)} + KV cache {g(est.kv_cache_bytes)} + activations "
                     f"{g(est.activations_bytes)} + workspace {g(est.workspace_bytes)}"
                     + (f" + check's fp32 reference {g(ref)}" if ref else "") + "); use a higher TP "
                     f"degree, a smaller batch/prompt, or only the first K layers (--layers K)")
