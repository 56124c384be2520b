"""A serving engine's host lane: the CPU work of one engine step around the GPU's forward pass.

One engine step (a prefill, or one decode step of the whole batch) on TP ranks 0..N-1:

    scheduler   schedule_s + schedule_per_seq_s * batch          (the engine's scheduler process)
    hand-off    handoff_s, only when N > 1 (N worker processes)  (vLLM: SchedulerOutput through the
                shared-memory MessageQueue, vllm/distributed/device_communicators/shm_broadcast.py)
                rank r reads it r * handoff_per_rank_s after rank 0 (polling/wake-up order): the
                ranks reach the pass, and so its first collective, at different times
    worker      prepare_s + prepare_per_seq_s * batch + launch_s  (each rank, in parallel: build
                the input tensors, then launch the kernels or replay the CUDA graph; the kernels'
                own launch floor stays in sim.cost)
    GPU         the pass (sim.engine); rank r starts it at lead_s + offsets_s[r]
    output      output_s + output_per_seq_s * batch              (sample / update the requests)

In series (`overlap` False: vLLM's default scheduler) a step lasts
    lead_s + gpu_s + post_s,
gpu_s being the pass with the ranks' staggered starts (a late rank delays everyone at the first
collective). Overlapped (vLLM V1 async scheduling, SGLang's overlap scheduler, TensorRT-LLM's overlap
scheduler) the host prepares step j+1 while the GPU runs step j, so inputs are ready before the GPU is
free and the stagger is hidden unless the host is the bottleneck:
    max(gpu_s_without_stagger, lead_s + max(offsets_s) + post_s).

The engine sim knows nothing of this: the offsets reach it as per-rank start delays (sim.engine's
`rank_delay_s`, sim.engine_ranks' `start_s`; NCCL's graph host-node chain starts from them too), and
`step_s` composes the lane with the pass's time. Every constant comes from a stack preset
(sim/stacks/*) with its source, or from `tpsim profiles import-engine-bench`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class HostStep:
    """The host work of one engine step (seconds); all zero = no host lane (the reference harness:
    one Python process per rank, whose launches sim.cost already prices)."""

    schedule_s: float = 0.0           # scheduler, per step
    schedule_per_seq_s: float = 0.0   # scheduler, per running sequence
    handoff_s: float = 0.0            # step inputs to the N worker processes (N > 1 only)
    handoff_per_rank_s: float = 0.0   # rank r receives them r * this after rank 0
    prepare_s: float = 0.0            # each worker builds its input tensors, per step
    prepare_per_seq_s: float = 0.0    # ... per sequence
    launch_s: float = 0.0             # each worker's launch call / graph replay, beyond the kernels' floor
    output_s: float = 0.0             # sampling + request update after the pass, per step
    output_per_seq_s: float = 0.0     # ... per sequence
    overlap: bool = False             # the host prepares the next step while the GPU runs this one

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "overlap" and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0):
                raise ValueError(f"host.{f.name} must be a number of seconds >= 0, got {v!r}")
        if not isinstance(self.overlap, bool):
            raise ValueError(f"host.overlap must be true or false, got {self.overlap!r}")

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name != "overlap")


@dataclass(frozen=True)
class Lane:
    """One step's host lane on N ranks: when each rank can start the pass, and the work after it."""

    lead_s: float                     # step start -> rank 0 starts the pass
    offsets_s: tuple[float, ...]      # per rank: its start after rank 0's (rank 0: 0)
    post_s: float                     # after the pass's end

    @property
    def stagger_s(self) -> float:
        return max(self.offsets_s)

    @property
    def host_s(self) -> float:
        """The lane's own length per step (what bounds an overlapped step)."""
        return self.lead_s + self.stagger_s + self.post_s


def lane(h: HostStep, tp: int, batch: int) -> Lane:
    """The lane of one step of `batch` sequences on `tp` ranks (one process, no hand-off, at tp 1)."""
    handoff = h.handoff_s if tp > 1 else 0.0
    lead = (h.schedule_s + h.schedule_per_seq_s * batch + handoff
            + h.prepare_s + h.prepare_per_seq_s * batch + h.launch_s)
    offsets = tuple(r * h.handoff_per_rank_s for r in range(tp)) if tp > 1 else (0.0,)
    return Lane(lead, offsets, h.output_s + h.output_per_seq_s * batch)


def step_s(h: HostStep, ln: Lane, gpu_s: float, gpu_staggered_s: float | None = None) -> float:
    """One engine step's time. gpu_s: the pass with every rank starting together; gpu_staggered_s:
    the pass with the lane's per-rank offsets (None: gpu_s + the stagger, which is exact for
    symmetric ranks: after the first collective, which waits for the last rank, they run in step)."""
    staggered = gpu_s + ln.stagger_s if gpu_staggered_s is None else gpu_staggered_s
    if not h.overlap:
        return ln.lead_s + staggered + ln.post_s
    return max(gpu_s, ln.host_s)
