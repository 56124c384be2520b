"""A workload: the model, its TP degree, the profile it runs on, the batch and lengths of the benchmark
protocol (docs/design.md), the software stack, and the checks that it can run at all (sim/predict.py
predicts it)."""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim import fp8
from tpsim.sim.hardware.profile import Profile
from tpsim.sim.memory import GIB, check_fits, estimate
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.price import flash_prefill
from tpsim.sim.schedule.language import Schedule, build
from tpsim.sim.stack.spec import Stack, Step


@dataclass(frozen=True)
class Workload:
    model: ModelSpec
    tp: int
    profile: Profile
    batch: int = 1
    prompt_len: int = 1024
    gen_len: int = 512
    stack: Stack = Stack()
    gpus_per_node: int | None = None      # None: the profile's
    comm_bw_scale: float = 1.0            # what-if: interconnect bandwidth x this
    comm_lat_scale: float = 1.0           # what-if: collective latency x this
    memory_check: bool = True             # refuse a workload whose rank does not fit the profile's memory
    comm_group: int | None = None         # ranks the collectives really span (1: one rank of a TP job
                                          # emulated on one GPU, as `tpsim bench --emulate-tp`); None: tp

    def __post_init__(self) -> None:
        # a decode kernel's graph length that follows the model's context (an engine's capture or page-table
        # width: Stack.for_model) is set here, once, for every path that prices this workload
        object.__setattr__(self, "stack", self.stack.for_model(self.model.max_context))
        if not (self.comm_bw_scale > 0 and self.comm_lat_scale > 0):
            raise ValueError("bandwidth and latency scales must be positive")
        for name, flag in (("batch", "--batch"), ("prompt_len", "--prompt"), ("gen_len", "--gen")):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({flag}) must be >= 1, got {getattr(self, name)}")
        fp8.check_profile(self.profile, self.stack)     # FP8 linears on a GPU without FP8 tensor cores
        if self.stack.dtype not in self.profile.peak_flops:
            raise ValueError(f"profile {self.profile.name} has no matrix peak for {self.stack.dtype} "
                             f"(compute.matmul_tflops has: {', '.join(self.profile.peak_flops)}); choose --dtype "
                             f"from those or add it to the profile")
        if (self.gpus_per_node is not None and self.profile.topology is not None
                and self.gpus_per_node > self.profile.gpus_per_node):
            raise ValueError(f"profile {self.profile.name} describes nodes of {self.profile.gpus_per_node} GPUs; "
                             f"--gpus-per-node {self.gpus_per_node} needs a profile of such nodes")
        if self.comm_group is not None and not (1 <= self.comm_group <= self.tp and self.tp % self.comm_group == 0):
            raise ValueError(f"comm_group (--comm-group) must divide the TP degree {self.tp} (1: one rank emulated, "
                             f"as `tpsim bench --emulate-tp` measures it; {self.tp}: every rank), got {self.comm_group}")
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node (--gpus-per-node) must be >= 1, got {self.gpus_per_node}")
        per = self.gpus_per_node or self.profile.gpus_per_node
        if self.tp > per and self.tp % per:
            # the collective models (topology, NCCL's node split) take equal nodes: a 3/3/2 split is no such job
            raise ValueError(f"TP {self.tp} does not fill nodes of {per} ranks evenly"
                             f"{'' if self.gpus_per_node else f' (profile {self.profile.name})'}; give a "
                             f"--gpus-per-node that divides {self.tp}")
        self.model.shard(self.tp)         # raises a ValueError naming valid TP degrees
        if self.memory_check:             # a prediction for a run that cannot start is no answer
            est = estimate(self.model, self.tp, self.batch, self.prompt_len, self.gen_len, self.stack,
                           self.profile.device)
            check_fits(est, int(self.profile.memory_gib * GIB), f"one {self.profile.name} GPU")

    def context_note(self) -> str | None:
        """A note when prompt + gen runs past the model's context (ModelSpec.max_context; a model that states
        none never gets one): engines refuse such a request, tpsim prices it as asked."""
        ctx, total = self.model.max_context, self.prompt_len + self.gen_len
        if not ctx or total <= ctx:
            return None
        return (f"prompt + gen = {total} tokens is longer than {self.model.name}'s context ({ctx}, its "
                f"max_position_embeddings): a serving engine refuses such a request; priced as asked")

    @property
    def nodes(self) -> int:
        per = self.gpus_per_node or self.profile.gpus_per_node
        return -(-self.tp // per)

    @property
    def causal_prefill(self) -> bool:
        """Whether the stack's prefill attention for this model computes only the key tiles up to the
        causal diagonal (a flash kernel, sim/price/flash_prefill.py) rather than every score (math SDPA):
        how a prefill chunk's attention work grows with its length (sim/serve/steptime.py)."""
        return flash_prefill.skips_masked_tiles(self.stack.attention_for(self.model.architecture))

    def schedule(self, spec: str, step: Step) -> Schedule:
        return build(spec, self.model, self.tp, step, self.stack)

    def prefill_step(self) -> Step:
        return Step.prefill(self.batch, self.prompt_len, self.gen_len, self.stack)

    def decode_step(self, j: int) -> Step:
        return Step.decode(self.batch, self.prompt_len, self.gen_len, j, self.stack)
