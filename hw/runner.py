"""Run a sim.Schedule on one TP rank: compute ops -> torch kernels, collectives -> torch.distributed.

The runner keeps a dict value-name -> tensor. Ops run in the schedule's issue order. A
collective is issued with `async_op=True` when the order reaches it and its work handle is
waited exactly when the first op that reads its output runs: "blocking" (standard) and
"overlapped" (ladder) differ only in where the IR puts the reader, never in runner code.
Each value is freed after its last reader, so live activations stay a few layers' worth.

Streams. On CPU/gloo the collective runs on gloo's background threads, so it overlaps CPU
compute for real (sharing cores). On CUDA the collective is issued from a dedicated comm
stream that first waits on an event recorded on the compute stream after the producer; the
consumer makes the compute stream wait on the work (GPU-side; the CPU never blocks), and the
end of each pass joins the comm stream back (needed for CUDA-graph capture).

Positions. One decode schedule serves every decode step: start_pos (an int, or a 0-d device
tensor under CUDA graphs) is an argument of `forward`, not read from the ops' attrs; with
kv="filled" the attended length is start_pos + q_len, as the IR's kv_len says.

Token-split and seq-parallel need nothing special: a micro-batch's attention reads its own
sequences of the KV cache (attr b0) at its own positions; slice/concat/pad/shard move rows; a
reduce-scatter is torch.distributed's (hw/collective_api.py; gloo has it in torch 2.13, async).

The kernels (one per IR compute kind) are hw/kernels.py. Stand-ins and waits (sim.schedule.transform) run too: a `standin` computes a collective's output locally
(its input, or tiled to the gathered width), spinning for its cost_ns on CPU when it has one; a
`wait` only marks where a collective is awaited. So calibration runs its patterns (no
communication, blocking, overlapped) as schedules through this same loop.

Timing (`timing=True`) emits one sim.engine.record.Record per op, times in seconds from the pass start:
  CPU   compute: perf_counter around the kernel call.
        comm:    start = issue; end = when the collective completed (a future callback on
                 gloo's thread; the wait's return when no callback fired first).
        wait:    named after the collective, the time the reader spent blocked in work.wait()
                 -- the *exposed* communication.
  CUDA  CUDA events: compute on the compute stream, comm from its launch on the comm stream to
        its completion, wait = time the compute stream was blocked on the work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from tpsim.sim.schedule.language import TOKENS, Op, Schedule
from tpsim.sim.engine.record import Record
from tpsim.hw import collective_api
from tpsim.hw.kernels import COMPILABLE_KINDS, COMPILED_KERNELS, KERNELS, KernelCtx
from tpsim.hw.model import RankModel
from tpsim.hw.torch_compat import annotate
from tpsim.hw.symm_mem import GroupAllReduce


@dataclass(frozen=True)
class Plan:
    """Per-schedule bookkeeping computed once: when values die and which collectives copy."""

    last_use: dict[str, int]          # value -> index of the last op that reads it
    clone_input: frozenset[str]       # collective op names whose input is read again after issue
    keep: frozenset[str]              # values returned from forward (never freed)


def make_plan(sched: Schedule) -> Plan:
    last: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, op in enumerate(sched.ops):
        for v in op.inputs:
            last[v] = i
            readers.setdefault(v, []).append(i)
    clone = set()
    for i, op in enumerate(sched.ops):
        if op.is_comm and any(j > i for j in readers.get(op.inputs[0], []) if j != i):
            clone.add(op.name)
    sample = [op for op in sched.ops if op.kind == "sample"]
    keep = {"next_tokens"} | ({sample[-1].inputs[0]} if sample else set())
    return Plan(last, frozenset(clone), frozenset(keep))


@dataclass
class _Pending:
    """A collective in flight: its work handle and how to turn the buffer into the value."""

    op: Op
    work: object
    buf: torch.Tensor
    finish: Callable[[torch.Tensor], torch.Tensor]
    src: torch.Tensor | None = None                  # the input, kept alive until the wait
    issue_s: float = 0.0
    done_s: list = field(default_factory=list)      # filled by the completion callback (CPU)
    events: tuple = ()                               # (start, end) CUDA events


@dataclass
class PassResult:
    logits: torch.Tensor        # the sample op's input [rows, vocab(+pad)]
    next_tokens: torch.Tensor   # [batch]
    records: list[Record]
    wait_s: float               # CPU time blocked in work.wait() this pass (exposed comm on CPU)
    waits_s: tuple[float, ...] = ()     # each wait's share of wait_s, in order
    first_sync_s: float | None = None   # pass start -> first collective or stand-in (CPU clock)


class Runner:
    """Executes schedules on one rank. `group` None means a single process (no collectives allowed)."""

    def __init__(self, rm: RankModel, group=None, *, rank: int = 0, timing: bool = False,
                 compile: bool = False, all_reduce=None):
        self.rm = rm
        self.group = group
        # how an IR all_reduce op runs (hw.symm_mem): the group's own (NCCL / gloo) unless given, e.g.
        # SymmMemAllReduce (--collective symm-mem); comm_kernels: op name -> the kernel its last call ran
        self.all_reduce = all_reduce or (GroupAllReduce(group) if group is not None else None)
        self.comm_kernels: dict[str, str] = {}
        self.rank = rank
        self.timing = timing
        self.cuda = rm.device.type == "cuda"
        self.comm_stream = torch.cuda.Stream(device=rm.device) if self.cuda else None
        self._plans: dict[int, tuple[Schedule, Plan]] = {}
        self._arange = torch.arange(rm.max_seq, device=rm.device)
        self.kernels: dict[str, Callable] = dict(KERNELS)
        if compile:
            # Compile the per-op kernels only: the dispatch loop and torch.distributed stay eager.
            self.kernels = {k: (torch.compile(f, dynamic=False) if k in COMPILABLE_KINDS else f)
                            for k, f in KERNELS.items()}

    def plan(self, sched: Schedule) -> Plan:
        hit = self._plans.get(id(sched))
        if hit is None or hit[0] is not sched:          # holding sched keeps its id from being reused
            hit = self._plans[id(sched)] = (sched, make_plan(sched))
        return hit[1]

    # ------------------------------------------------------------------ one pass

    def forward(self, sched: Schedule, tokens: torch.Tensor, start_pos: int | torch.Tensor) -> PassResult:
        """Run one forward pass; tokens [batch, q_len] (int64), returns logits and next tokens."""
        st = sched.step
        if tuple(tokens.shape) != (st.batch, st.q_len):
            raise ValueError(f"tokens shape {tuple(tokens.shape)} != schedule step [{st.batch}, {st.q_len}]")
        if sched.collectives and self.group is None and sched.tp > 1:
            raise ValueError(f"schedule {sched.name} has collectives but the runner has no process group")
        plan = self.plan(sched)
        ctx = KernelCtx(self, sched, start_pos)
        vals: dict[str, torch.Tensor] = {TOKENS: tokens}
        pending: dict[str, _Pending] = {}
        records: list[Record] = []
        t0 = time.perf_counter()
        base_ev = self._event() if (self.timing and self.cuda) else None
        cuda_recs: list[tuple] = []
        waits: list[float] = []
        first_sync = None
        comm_used = False                                # did this pass fork the comm stream?
        for i, op in enumerate(sched.ops):
            if first_sync is None and (op.is_comm or op.kind == "standin"):
                first_sync = time.perf_counter() - t0
            for v in op.inputs:                          # wait exactly when a reader needs it
                if v in pending:
                    waits.append(self._wait(pending.pop(v), vals, v, sched, t0, records, cuda_recs))
            if op.is_comm:
                x = vals[op.inputs[0]]
                if op.name in plan.clone_input:
                    x = x.clone()
                pending[op.outputs[0]] = self._issue(op, x, t0)
                comm_used = True
            else:
                args = [vals[v] for v in op.inputs]
                if self.timing:
                    if self.cuda:
                        e0 = self._event()
                        out = self.kernels[op.kind](ctx, op, *args)
                        cuda_recs.append((op.name, "compute", op.kind, e0, self._event()))
                    else:
                        s = time.perf_counter()
                        out = self.kernels[op.kind](ctx, op, *args)
                        records.append(Record(op.name, self.rank, "compute", s - t0,
                                              time.perf_counter() - t0, st.phase, op.kind))
                else:
                    out = self.kernels[op.kind](ctx, op, *args)
                vals[op.outputs[0]] = out
            for v in op.inputs:                          # free values after their last reader
                if plan.last_use.get(v) == i and v not in plan.keep and v != TOKENS:
                    vals.pop(v, None)
        for v in list(pending):                          # nothing should be left; be safe
            waits.append(self._wait(pending.pop(v), vals, v, sched, t0, records, cuda_recs))
        if self.cuda and comm_used:
            # join for graph capture -- only a stream this pass forked: under capture, waiting on
            # an idle (non-captured) stream's event is illegal (a schedule with no collectives)
            torch.cuda.current_stream().wait_stream(self.comm_stream)
        if cuda_recs:
            torch.cuda.synchronize()
            for name, stream, kind, e0, e1 in cuda_recs:
                records.append(Record(name, self.rank, stream, base_ev.elapsed_time(e0) / 1e3,
                                      base_ev.elapsed_time(e1) / 1e3, st.phase, kind))
        logits_name = [op for op in sched.ops if op.kind == "sample"][-1].inputs[0]
        return PassResult(vals[logits_name], vals["next_tokens"], records, sum(waits), tuple(waits), first_sync)

    # ------------------------------------------------------------------ one pass as one graph

    def functional_pass(self, sched: Schedule, tokens: torch.Tensor,
                        start_pos: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass as one traceable function, for torch.compile(fullgraph=True) as the
        reference harness compiles its whole forward (docs/sources.md §10): compute ops run
        COMPILED_KERNELS, collectives are functional (`_c10d_functional.all_reduce` /
        `all_gather_into_tensor` / `reduce_scatter_tensor` + `wait_tensor`), so Inductor fuses
        across op boundaries and sinks each wait to the first reader -- the IR's dataflow, not
        this loop, decides the overlap. Every op's nodes carry its IR name
        (node.meta["custom"]["tpsim_op"]) for hw.derive.inductor_kernels. Returns
        (logits [rows, vocab(+pad)], next tokens [batch])."""
        ctx = KernelCtx(self, sched, start_pos)
        vals: dict[str, torch.Tensor] = {TOKENS: tokens}
        for op in sched.ops:
            with annotate({"tpsim_op": op.name}):
                x = [vals[v] for v in op.inputs]
                if op.kind == "all_reduce":
                    out = funcol.all_reduce(x[0], "sum", self.group) if self.group is not None else x[0]
                elif op.kind == "all_gather":
                    rows, width = x[0].shape
                    n = 1 if self.group is None else dist_world(self.group)
                    g = (x[0] if self.group is None
                         else collective_api.funcol_all_gather(x[0].contiguous(), 0, self.group))
                    out = gathered(op, g, n, rows, width)                          # [n*rows, w] -> layout
                elif op.kind == "reduce_scatter":
                    n = 1 if self.group is None else dist_world(self.group)
                    if n == op.attr("group"):
                        out = collective_api.funcol_reduce_scatter(x[0].contiguous(), "sum", 0, self.group)
                    else:                  # an emulated rank: sum over its group, keep its block
                        s = funcol.all_reduce(x[0], "sum", self.group) if self.group is not None else x[0]
                        out = scattered_block(op, s, self.rank)
                else:
                    out = COMPILED_KERNELS[op.kind](ctx, op, *x)
            vals[op.outputs[0]] = out
        logits = vals[[op for op in sched.ops if op.kind == "sample"][-1].inputs[0]]
        return logits, vals["next_tokens"]

    # ------------------------------------------------------------------ collectives

    def _event(self, stream=None):
        e = torch.cuda.Event(enable_timing=True)
        e.record(stream or torch.cuda.current_stream())
        return e

    def _issue(self, op: Op, x: torch.Tensor, t0: float) -> _Pending:
        if op.kind == "all_reduce":
            def call(b):
                work, self.comm_kernels[op.name] = self.all_reduce.issue(b)
                return work
            buf, finish = x, _identity
        elif op.kind == "all_gather":
            # [rows, w] from each rank -> gathered [tp*rows, w] -> [rows, tp*w] (concat on last dim),
            # or kept as [tp*rows, w] with dim=0 (seq-parallel: the token rows of every rank)
            rows, width = x.shape
            n = dist.get_world_size(self.group)
            if op.attr("group") % n:
                raise ValueError(f"op {op.name}: all-gather over {op.attr('group')} ranks on a group of {n}")
            buf = torch.empty(n * rows, width, dtype=x.dtype, device=x.device)
            call = (lambda b: collective_api.all_gather(b, x.contiguous(), group=self.group, async_op=True))
            finish = (lambda b: gathered(op, b, n, rows, width))
        elif op.kind == "reduce_scatter":
            # [tp*rs, w] partial sums -> this rank's block [rs, w] of their sum. torch 2.13's gloo has
            # reduce_scatter_tensor (async), as NCCL does. An emulated rank (group smaller than tp)
            # sums over its group and keeps its block: the real job's shapes, not its traffic.
            rows, width = x.shape
            tp, n = op.attr("group"), dist.get_world_size(self.group)
            rs = rows // tp
            if n == tp:
                buf = torch.empty(rs, width, dtype=x.dtype, device=x.device)
                src = x.contiguous()
                call = (lambda b: collective_api.reduce_scatter(b, src, group=self.group, async_op=True))
                finish = _identity
            else:
                buf = x
                call = (lambda b: dist.all_reduce(b, group=self.group, async_op=True))
                finish = (lambda b: scattered_block(op, b, self.rank))
        elif op.kind == "shift":
            # async TP's ring step: send [rs, w] to rank (r - offset) % n, receive rank (r + offset)'s; an
            # emulated rank (a group smaller than the op's) keeps its own block (the real job's shapes)
            n, off = dist.get_world_size(self.group), op.attr("offset")
            buf, finish = torch.empty_like(x), _identity
            if n != op.attr("group"):
                buf = x
                call = (lambda b: dist.all_reduce(torch.zeros(1, device=b.device), group=self.group, async_op=True))
            else:
                me, src = x.contiguous(), (self.rank + off) % n
                dst = (self.rank - off) % n
                call = (lambda b: _Works(dist.batch_isend_irecv([dist.P2POp(dist.isend, me, dst, self.group),
                                                                  dist.P2POp(dist.irecv, b, src, self.group)])))
        else:
            raise ValueError(f"op {op.name}: no collective for kind {op.kind}")
        if self.cuda:
            # The comm stream waits for the compute stream (i.e. the producer) via an internal
            # event; plain events keep this legal inside CUDA-graph capture.
            self.comm_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.comm_stream):
                e0 = self._event(self.comm_stream) if self.timing else None
                work = call(buf)
                e1 = None
                if self.timing:                                    # completion marker on the comm stream
                    work.wait()
                    e1 = self._event(self.comm_stream)
            # x stays referenced until the consumer's wait, so the allocator cannot hand its memory
            # to a compute-stream op while the collective may still read it.
            return _Pending(op, work, buf, finish, src=x, events=(e0, e1))
        p = _Pending(op, None, buf, finish, src=x, issue_s=time.perf_counter() - t0)
        p.work = call(buf)
        if self.timing:
            done = p.done_s
            try:
                p.work.get_future().then(lambda _f: done.append(time.perf_counter() - t0))
            except (RuntimeError, AttributeError):    # backends without futures: use the wait's return
                pass
        return p

    def _wait(self, p: _Pending, vals, v, sched, t0, records, cuda_recs) -> float:
        phase = sched.step.phase
        if self.cuda:
            w0 = self._event() if self.timing else None
            p.work.wait()                       # compute stream waits on the collective (GPU side)
            if self.timing:
                cuda_recs.append((p.op.name, "comm", p.op.kind, *p.events))
                cuda_recs.append((p.op.name, "wait", p.op.kind, w0, self._event()))
            vals[v] = p.finish(p.buf)
            return 0.0
        s = time.perf_counter()
        p.work.wait()
        e = time.perf_counter()
        if self.timing:
            done = p.done_s[0] if p.done_s else e - t0
            records.append(Record(p.op.name, self.rank, "comm", p.issue_s, min(done, e - t0), phase, p.op.kind))
            records.append(Record(p.op.name, self.rank, "wait", s - t0, e - t0, phase, p.op.kind))
        vals[v] = p.finish(p.buf)
        return e - s


def dist_world(group) -> int:
    return dist.get_world_size(group)


def gathered(op: Op, g: torch.Tensor, n: int, rows: int, width: int) -> torch.Tensor:
    """An all-gather's output in the IR's layout, from the [n * rows, width] that n ranks gathered
    (eager and compiled passes alike). The IR gathers over op.attr("group") = tp ranks; an emulated
    rank (--emulate-tp: a group of n < tp) stands its own shard in for the tp - n it lacks, so the
    shapes downstream are the real job's. dim 0 (seq-parallel): the token rows of every rank
    [tp * rows, width]; else concatenated along the last dim [rows, tp * width]."""
    tp = op.attr("group")
    if tp % n:
        raise ValueError(f"op {op.name}: all-gather over {tp} ranks on a group of {n}")
    if op.get("dim", -1) == 0:
        return g if n == tp else g.repeat(tp // n, 1)
    return g.view(n, rows, width).permute(1, 0, 2).repeat(1, tp // n, 1).reshape(rows, tp * width)


def scattered_block(op: Op, summed: torch.Tensor, rank: int) -> torch.Tensor:
    """An emulated rank's reduce-scatter output: its block [rs, w] of the [tp * rs, w] sum over its group."""
    tp = op.attr("group")
    rs, r = summed.shape[0] // tp, rank % tp
    return summed[r * rs:(r + 1) * rs]


def _identity(b: torch.Tensor) -> torch.Tensor:
    return b


class _Works:
    """The work handles of one batch of point-to-point sends and receives, waited together."""

    def __init__(self, works: list):
        self.works = works

    def wait(self) -> bool:
        for w in self.works:
            w.wait()
        return True


# ---------------------------------------------------------------------- CUDA graphs

class DecodeGraph:
    """One decode step of one schedule captured as a CUDA graph; replay with new token/position.

    All ranks must capture together (the collectives inside are captured too); one collective
    is run before capture so NCCL's lazy communicator init happens outside it. Needs kv='static'
    (the attended length must not change between replays).
    """

    def __init__(self, runner: Runner, sched: Schedule, warmup: int = 2, pool=None):
        if not runner.cuda:
            raise ValueError("CUDA graphs need --device cuda")
        if sched.stack.kv != "static":
            raise ValueError("decode CUDA graphs need --kv static (the attended length must be fixed)")
        self.runner, self.sched = runner, sched
        dev = runner.rm.device
        st = sched.step
        self.tokens = torch.zeros(st.batch, 1, dtype=torch.long, device=dev)
        self.pos = torch.tensor(st.start_pos, dtype=torch.long, device=dev)
        timing, runner.timing = runner.timing, False
        try:
            if runner.group is not None:
                dist.all_reduce(torch.zeros(1, device=dev), group=runner.group)
            side = torch.cuda.Stream(device=dev)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):                 # warm-up allocations outside capture
                for _ in range(warmup):
                    runner.forward(sched, self.tokens, self.pos)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool):
                self.out = runner.forward(sched, self.tokens, self.pos)
        finally:
            runner.timing = timing

    def replay(self, tokens: torch.Tensor, start_pos: int) -> PassResult:
        self.tokens.copy_(tokens)
        self.pos.fill_(start_pos)
        self.graph.replay()
        return self.out
