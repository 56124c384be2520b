"""The all-reduce implementations hw.runner.Runner issues an IR all_reduce op through: the process
group's own (`GroupAllReduce`: dist.all_reduce, NCCL on GPUs, gloo on CPUs) and PyTorch symmetric
memory as vLLM's SymmMemCommunicator runs it (`SymmMemAllReduce`, `tpsim bench --collective symm-mem`,
the simulator's collective of the same name: sim/stack/impls.py).

SymmMemAllReduce, as vllm/distributed/device_communicators/symm_mem.py does it:
  setup   one symmetric buffer per group, allocated once (torch.distributed._symmetric_memory.empty)
          and rendezvoused (`rendezvous(buf, group)`: every rank maps its peers' buffers and the
          multicast object; a collective); sized to the run's largest all-reduce that goes through it
          (sim.price.comm.custom_allreduce.symm_mem_buffer_bytes), none when no message would.
  a call  copy the input into buf[:numel] -> the symm_mem op in place on that view -> copy the sum back
          into the input (in place, as dist.all_reduce), all on the caller's stream (the runner's comm
          stream); `StreamWork.wait()` makes the current stream wait on an event after the copy-out.
  kernel  sim.price.comm.custom_allreduce.symm_mem_pick, the simulator's rule (one definition): multimem at 4/6/8
          ranks (torch.ops.symm_mem.multimem_all_reduce_), two-shot otherwise (two_shot_all_reduce_),
          NCCL above the max size, at world sizes vLLM has no size for, or without NVLS multicast on SM90
          (vLLM disables its communicator then). torch's own limits come first (`dispatch`): its kernels
          dispatch bf16 and fp32 only (CUDASymmetricMemoryOps.cu AT_DISPATCH_FLOAT_AND_BFLOAT16; vLLM's
          communicator is bf16 only), sizes a multiple of 4 bytes (get_and_verify_alignment), and the
          buffer allocated at setup. What each call ran is kept per message size (`ran`), each reason for
          NCCL once (`notes`).
  graphs  the buffer and the signal pads are fixed, so a captured decode step replays the copies and the
          kernel (vLLM captures them the same way); the event wait is a fork/join inside the capture.
  compile not offered: a compiled pass's all-reduces are functional collectives that Inductor reorders
          and lowers itself (hw.runner.functional_pass); these in-place ops on a rendezvoused buffer would
          need a custom-op wrapper (vLLM registers one), unverified here: hw.run_config refuses the pair.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from tpsim.sim.price.comm.collective import message_bytes
from tpsim.sim.price.comm.custom_allreduce import (SYMM_MEM_DTYPES as TORCH_DTYPES, Pick,
                                                   symm_mem_buffer_bytes, symm_mem_dtype_refusal,
                                                   symm_mem_pick)
from tpsim.hw.model import torch_dtype

# the kernel symm_mem_pick names -> the torch.ops.symm_mem op that runs it in place:
# (Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!) (torch 2.13 schemas)
KERNEL_OPS = {"multimem": "multimem_all_reduce_", "symm-twoshot": "two_shot_all_reduce_"}
ALIGN_BYTES = 4                        # get_and_verify_alignment: size a multiple of max(4, element size)


def dispatch(nbytes: int, n: int, *, multicast: bool, single_node: bool, dtype: str,
             capacity_bytes: int) -> Pick:
    """The kernel one all-reduce of `nbytes` over `n` ranks runs, or "nccl" with why: torch's limits
    (dtype, alignment, the buffer allocated at setup), then the simulator's rule (symm_mem_pick)."""
    why = symm_mem_dtype_refusal(dtype)
    if why:
        return Pick("nccl", f"{why} (use --dtype bf16)")
    if nbytes % ALIGN_BYTES:
        return Pick("nccl", f"a {nbytes}-byte message is not a multiple of {ALIGN_BYTES} bytes "
                            f"(torch's symm_mem alignment check): NCCL")
    p = symm_mem_pick(nbytes, n, multicast, single_node)
    if p.kernel != "nccl" and nbytes > capacity_bytes:
        return Pick("nccl", f"a {nbytes}-byte message is above the {capacity_bytes}-byte symmetric buffer "
                            f"allocated at setup: NCCL")
    return p


class StreamWork:
    """A work handle for a collective already enqueued on a stream: wait() makes the current
    stream wait for it (GPU side, the CPU never blocks), as an NCCL work's wait does."""

    def __init__(self, event: torch.cuda.Event):
        self.event = event

    def wait(self) -> bool:
        torch.cuda.current_stream().wait_event(self.event)
        return True


class GroupAllReduce:
    """The process group's own all-reduce (NCCL or gloo), async, in place."""

    def __init__(self, group):
        self.group = group
        self.name = _backend_name(group)
        self.notes: list[str] = []
        self.ran: dict[int, str] = {}

    def issue(self, buf: torch.Tensor) -> tuple[object, str]:
        """Start the sum of `buf` over the group in place; (work handle, kernel name)."""
        self.ran[buf.numel() * buf.element_size()] = self.name
        return dist.all_reduce(buf, group=self.group, async_op=True), self.name


class SymmMemAllReduce:
    """PyTorch symmetric-memory all-reduce (module doc) over `group` on `device` (cuda) for a run of
    `dtype`; `messages`: the byte sizes of every all-reduce the run will issue (the plans' all_reduce
    ops), which size the buffer. Construct it on every rank together (the rendezvous is a collective)."""

    def __init__(self, group, device: torch.device | str, dtype: str, messages: tuple[int, ...] = ()):
        self.group, self.device, self.dtype = group, torch.device(device), dtype
        self.n = dist.get_world_size(group)
        self.fallback = GroupAllReduce(group)
        self.buf: torch.Tensor | None = None
        self.capacity_bytes = 0
        self.notes: list[str] = []
        self.ran: dict[int, str] = {}                 # message bytes -> the kernel its last call ran
        self.multicast, self.single_node = hardware(group, self.device)
        need = (symm_mem_buffer_bytes(messages, self.n)
                if self.multicast and self.single_node and dtype in TORCH_DTYPES else 0)
        if need:
            self.allocate(need)
        else:                   # one note for the whole run (issue adds none without a buffer)
            why = dispatch(max(messages), self.n, multicast=self.multicast, single_node=self.single_node,
                           dtype=dtype, capacity_bytes=0).note if messages else "the run has no all-reduce"
            self.notes.append(f"symm-mem: {why}; every all-reduce runs {self.fallback.name}")

    def allocate(self, nbytes: int) -> None:
        """The symmetric buffer of `nbytes` (a collective: every rank calls it with the same size);
        without a multicast object after the rendezvous, the multicast kernel is off (vLLM: the
        handle's multicast_ptr is 0 -> communicator disabled)."""
        import torch.distributed._symmetric_memory as symm   # lazy: torch >= 2.5 only ([hw] takes 2.3)
        dt = torch_dtype(self.dtype)
        self.buf = symm.empty(-(-nbytes // dt.itemsize), dtype=dt, device=self.device)
        handle = symm.rendezvous(self.buf, self.group)
        self.capacity_bytes = self.buf.numel() * dt.itemsize
        if self.multicast and not handle.multicast_ptr:
            self.multicast = False
            self.notes.append("symm-mem: the rendezvoused buffer has no multicast object (multicast_ptr 0); "
                              "vLLM disables symmetric memory then: NCCL")

    def pick(self, nbytes: int) -> Pick:
        return dispatch(nbytes, self.n, multicast=self.multicast, single_node=self.single_node,
                        dtype=self.dtype, capacity_bytes=self.capacity_bytes)

    def issue(self, buf: torch.Tensor) -> tuple[object, str]:
        """Sum `buf` (contiguous) over the group in place on the current stream; (work, kernel)."""
        nbytes = buf.numel() * buf.element_size()
        p = self.pick(nbytes)
        self.ran[nbytes] = p.kernel
        if p.kernel == "nccl":
            if p.note and self.buf is not None and f"symm-mem: {p.note}" not in self.notes:
                self.notes.append(f"symm-mem: {p.note}")
            return self.fallback.issue(buf)[0], self.fallback.name
        return self.run(p.kernel, buf), p.kernel

    def run(self, kernel: str, x: torch.Tensor) -> StreamWork:
        """copy in -> torch.ops.symm_mem.<kernel's op> in place on buf[:numel] -> copy out into x."""
        if not x.is_contiguous():
            raise ValueError("symm-mem all-reduce: the input must be contiguous (as for dist.all_reduce)")
        view = self.buf[:x.numel()]                         # [numel] of the symmetric buffer, offset 0
        view.copy_(x.view(-1))
        getattr(torch.ops.symm_mem, KERNEL_OPS[kernel])(view, "sum", self.group.group_name)
        x.view(-1).copy_(view)
        ev = torch.cuda.Event()
        ev.record()
        return StreamWork(ev)


def _backend_name(group) -> str:
    """The group's backend ("nccl", "gloo"): the kernel name its all-reduce records carry."""
    try:
        return str(dist.get_backend(group))
    except (ValueError, RuntimeError):       # a group torch does not know (a test's stand-in): a label only
        return "process-group"


def hardware(group, device: torch.device) -> tuple[bool, bool]:
    """(multicast, single_node) as symm_mem_pick reads them, known before any rendezvous: SM90 (the
    only capability the simulator's max sizes cover, vLLM's "9.0") with the device's multicast
    support (torch's _SymmetricMemory.has_multicast_support: CUDA >= 12.3, driver, device attribute),
    and every rank of the group on this node (torchrun's LOCAL_WORLD_SIZE; the launcher's is the
    whole group). Every rank of a homogeneous node answers the same, so all take the same path."""
    from torch._C._autograd import DeviceType                  # lazy: as SymmMemAllReduce.allocate's import
    from torch._C._distributed_c10d import _SymmetricMemory    # lazy: torch >= 2.5 only ([hw] takes 2.3)
    sm90 = torch.cuda.get_device_capability(device) == (9, 0)
    multicast = sm90 and bool(_SymmetricMemory.has_multicast_support(DeviceType.CUDA, device.index or 0))
    world = dist.get_world_size(group)
    single_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world))) >= world
    return multicast, single_node


def all_reduce_messages(schedules) -> tuple[int, ...]:
    """The byte sizes of the all_reduce ops of these schedules (None entries skipped), sorted."""
    return tuple(sorted({message_bytes(op) for s in schedules if s is not None for op in s.ops
                         if op.kind == "all_reduce"}))


def make_all_reduce(collective: str, group, device: str, dtype: str, schedules) -> GroupAllReduce | SymmMemAllReduce:
    """The implementation a run's --collective names ("auto": the group's own), for the all-reduces of
    `schedules` (every pass the run will issue: they size a symmetric buffer)."""
    if collective == "symm-mem":
        return SymmMemAllReduce(group, torch.device(device), dtype, all_reduce_messages(schedules))
    return GroupAllReduce(group)
