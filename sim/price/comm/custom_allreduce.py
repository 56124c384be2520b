"""Serving engines' own all-reduce kernels -> seconds: which kernel the engine runs for a message
(or that it refuses and falls back to NCCL), and what that kernel costs by its mechanism.

Mechanism (one kernel, every rank; S = message bytes, n = ranks):
- one-shot (vLLM cross_device_reduce_1stage, TensorRT-LLM ONESHOT, symm_mem one_shot): a flag
  barrier (each rank writes its flag into every peer's signal pad and spins on its own), then each
  rank loads the whole buffer of every peer and reduces it locally: (n-1) S bytes over the links
  per rank; then the closing barrier.
- two-shot (vLLM _2stage, TensorRT-LLM TWOSHOT, symm_mem two_shot): reduce-scatter of each rank's
  1/n slice ((n-1) S / n over the links), a barrier, all-gather of the slices ((n-1) S / n):
  2 (n-1) S / n per rank, plus the middle barrier's fixed cost (twoshot_extra_us).
- multimem (symm_mem multimem_all_reduce_, NVLS): each rank multimem.ld_reduce's its S/n slice
  (the NVSwitch reduces) and multimem.st's it to every GPU; priced at the NVLS bus bandwidth NCCL
  achieves on the same switch (topology nvls_busbw_gbps), busbw = algbw * 2(n-1)/n. vLLM copies
  each message into the symmetric buffer and back (two copy kernels); a model file whose tensor
  already lives there calls the kernel in place (impl symm-mem-multimem: MULTIMEM_INPLACE).
time = floor(n) + remote bytes / achieved rate. floor(n): the kernel at the smallest sizes (launch
from a graph + its barriers), rates: the achieved per-rank rate of that kernel's loads. Both are
profile constants (collectives.custom_allreduce.<family>.groups.<n>), fitted by
tools/derive_profiles/collectives.py on half of the sizes of aiconfigurator's measured engine
tables (the other half is held apart, bench/validate_custom_allreduce.py). A group between two
fitted ones interpolates linearly in n.

Barriers: floor(n) holds the kernel's flag barriers with the ranks in lockstep (the collector replays
back-to-back calls in one graph). In a model, a rank that reaches the start barrier late makes its
peers spin. That wait is not in the tables: it is arrival skew, added from the profile's
jitter.arrival (the fast path its expected value, --exact its draws) and the stack's host-lane offsets. Checked at decode sizes, vLLM
kernel, graph mode, 16-512 KiB at 8 ranks against the held-apart tables: -2.7..+6.4% on h100-sxm and
-2.4..+5.9% on h200-sxm (bench/validate_custom_allreduce.py; the searches for an in-model skew number
are listed in tests/fixtures/engine_bench/public/README.md).

Eager (no CUDA graph): the engine copies the input into its registered IPC buffer first (vLLM /
SGLang custom_all_reduce: registered=False outside capture), and the Python call is host-bound:
max(eager floor, graph time + copy-in of S bytes at HBM rate); a family without an eager table
pays the profile's eager_extra over its graph time, as an NCCL table measured only in graph does.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.stack.impls import CollectiveImpl
from tpsim.sim.price.comm.trtllm_allreduce import WORKSPACE_BYTES, auto_strategy

MiB = 1 << 20
KiB = 1 << 10

# vLLM custom_all_reduce.py: CustomAllreduce(max_size=8192 * 1024), _SUPPORTED_WORLD_SIZES;
# all_reduce_utils.py CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"] (applies when symmetric memory is on, as it is
# by default on SM90 since vllm#24111) and SYMM_MEM_ALL_REDUCE_MAX_SIZES["9.0"]
VLLM_MAX_BYTES = 8192 * 1024
VLLM_WORLD_SIZES = (2, 4, 6, 8)
VLLM_SM90_CA_MAX = {2: 64 * MiB, 4: 32 * MiB, 6: MiB // 2, 8: MiB // 4}
SYMM_MEM_SM90_MAX = {2: 64 * MiB, 4: 32 * MiB, 6: 64 * MiB, 8: 64 * MiB}
SYMM_MEM_MULTIMEM_SM90 = (4, 6, 8)                # symm_mem.py _WORLD_SIZES_MULTIMEM["9.0"]
# the dtypes torch's symm_mem all-reduce kernels take (AT_DISPATCH_FLOAT_AND_BFLOAT16 in
# CUDASymmetricMemoryOps.cu); vLLM's SymmMemCommunicator takes bf16 only (self.dtype = torch.bfloat16,
# should_use_symm_mem: inp.dtype != self.dtype -> False)
SYMM_MEM_DTYPES = ("bf16", "fp32")
VLLM_SYMM_MEM_DTYPE = "bf16"
SGLANG_MAX_BYTES = 8192 * 1024                    # sglang custom_all_reduce.py _MAX_CAR_SIZE (CUDA)


@dataclass(frozen=True)
class Hardware:
    """What the engines' enable checks look at, read off the profile's topology."""

    full_nvlink: bool       # every GPU pair on NVLink (NVSwitch): vLLM/SGLang is_full_nvlink
    p2p: bool               # CUDA P2P between the GPUs (vLLM _can_p2p)
    multicast: bool         # NVLS multicast objects (SM90 + NVSwitch): symm_mem needs multicast_ptr
    single_node: bool       # the group sits in one node (every engine kernel is intra-node only)


@dataclass(frozen=True)
class Pick:
    kernel: str             # "oneshot" | "twoshot" (the engine's own) | "multimem" | "symm-twoshot" | "nccl",
                            # or MULTIMEM_INPLACE (a direct caller's multimem, no copies)
    note: str = ""          # why NCCL, when the engine refused its own kernel


def hardware(profile, group: int, gpus_per_node: int) -> Hardware:
    """Hardware from the profile: multicast needs NVSwitch with an NVLS rate and, where the profile
    states it, a Hopper GPU (compute capability 9.x: the only one whose max sizes are here, vLLM's "9.0")."""
    t = profile.topology
    if t is None:
        return Hardware(False, False, False, group <= gpus_per_node)
    hopper = profile.compute_capability is None or int(profile.compute_capability) == 9
    return Hardware(t.intra == "nvswitch", bool(t.p2p), t.intra == "nvswitch" and t.nvls_busbw_gbps > 0 and hopper,
                    group <= gpus_per_node)


def _vllm_stage(nbytes: float, n: int, hw: Hardware) -> str:
    """custom_all_reduce.cuh REDUCE_CASE: 1-stage for 2 ranks; with full NVLink 1-stage below 512 KiB
    (n <= 4) / 256 KiB (n <= 8), else 2-stage."""
    if n == 2 or (n <= 4 and nbytes < 512 * KiB) or (n <= 8 and nbytes < 256 * KiB):
        return "oneshot"
    return "twoshot"


def _custom_refusal(impl: CollectiveImpl, n: int, hw: Hardware) -> str:
    """The reason vLLM / SGLang CustomAllreduce disables itself for this group ("" = enabled)."""
    if not hw.single_node:
        return "custom allreduce is disabled because this process group spans across nodes"
    if n not in VLLM_WORLD_SIZES:
        return f"custom allreduce is disabled due to an unsupported world size: {n}"
    if n > 2 and not hw.full_nvlink:
        return "custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs"
    if not hw.p2p:
        return "custom allreduce is disabled because your platform lacks GPU P2P capability"
    return ""


def symm_mem_pick(nbytes: float, n: int, multicast: bool, single_node: bool = True) -> Pick:
    """vLLM SymmMemCommunicator's dispatch for one all-reduce of `nbytes` over `n` ranks, from what a
    harness rank knows too: `multicast` = SM90 with NVLS multicast (the rendezvoused buffer has a
    multicast_ptr), `single_node` = the group sits in one node. multimem at 4/6/8 ranks
    (_WORLD_SIZES_MULTIMEM["9.0"]), two-shot at 2; NCCL above SYMM_MEM_ALL_REDUCE_MAX_SIZES["9.0"][n],
    for a world size it has no entry for, or without multicast (vLLM disables the communicator).
    The simulator (pick, family symm-mem or vLLM's hand-off) and the harness (hw.symm_mem) both call it."""
    if not (multicast and single_node):
        return Pick("nccl", "symmetric-memory all-reduce needs NVLS multicast on SM90 (vLLM SymmMemCommunicator "
                            "is not available here)")
    if n not in SYMM_MEM_SM90_MAX:
        return Pick("nccl", f"symmetric-memory all-reduce: vLLM's max sizes have no entry for {n} ranks "
                            f"(SYMM_MEM_ALL_REDUCE_MAX_SIZES: {', '.join(map(str, SYMM_MEM_SM90_MAX))})")
    if nbytes >= SYMM_MEM_SM90_MAX[n]:          # should_use_symm_mem: inp_size < self.max_size
        return Pick("nccl", f"at or above symmetric memory's max size {SYMM_MEM_SM90_MAX[n] // MiB} MiB at {n} ranks")
    return Pick("multimem" if n in SYMM_MEM_MULTIMEM_SM90 else "symm-twoshot")


def symm_mem_dtype_refusal(dtype: str) -> str:
    """Why torch's symm_mem kernels cannot take a `dtype` tensor ("" when they can); the simulator's
    symm-mem family and the harness (hw.symm_mem.dispatch) both ask it."""
    if dtype in SYMM_MEM_DTYPES:
        return ""
    return (f"torch's symm_mem kernels take {'/'.join(SYMM_MEM_DTYPES)} only (AT_DISPATCH_FLOAT_AND_BFLOAT16): "
            f"{dtype} runs NCCL")


# A direct caller's multimem: torch's multimem_all_reduce_ on the symmetric buffer itself, in place
# (CUDASymmetricMemoryOps.cu): no copy into a staging buffer and out of it, no size rule, no fallback.
# Its launch (init_elementwise_launch_config, splits = n, at most 8 blocks of 1024 threads): one block
# while a rank's 1/n slice is at most 1024 x 8 elements of 16 B vectors (16 KiB: up to 128 KiB at 8
# ranks), then one more block per 16 KiB of slice, up to 8.
MULTIMEM_INPLACE = "multimem-inplace"


def multimem_blocks(nbytes: float, n: int) -> int:
    """CTAs of one multimem_all_reduce_ of `nbytes` over `n` ranks (MULTIMEM_INPLACE's comment)."""
    per_split = -(-int(nbytes) // (16 * n)) * 16            # round_up(numel, alignment x splits) / splits, bytes
    return max(1, min(8, -(-per_split // (1024 * 16))))


def direct_multimem_refusal(hw: "Hardware", dtype: str) -> str:
    """Why a direct multimem_all_reduce_ cannot run here ("" when it can): torch checks the buffer's
    multicast support (SM90 + NVSwitch multicast objects, one node) and dispatches bf16 / fp32 only."""
    if not (hw.multicast and hw.single_node):
        return ("symm-mem-multimem: torch's multimem_all_reduce_ needs NVLS multicast in one node (SM90 + "
                "NVSwitch: the rendezvoused buffer's multicast_ptr); this profile has none")
    why = symm_mem_dtype_refusal(dtype)
    return f"symm-mem-multimem: {why.split(': ')[0]}; give --dtype bf16" if why else ""


def symm_mem_buffer_bytes(messages, n: int) -> int:
    """The symmetric buffer a group of `n` ranks needs for these all-reduce sizes (bytes): the largest
    message symm_mem_pick would send through symmetric memory on a multicast box, rounded up to 16 B
    (the kernels' widest vector); 0 when none would (no buffer to allocate). vLLM allocates the max
    size itself (64 MiB at 8 ranks); the harness knows its messages, so it allocates what they need."""
    sent = [b for b in messages if symm_mem_pick(b, n, True).kernel != "nccl"]
    return -(-int(max(sent)) // 16) * 16 if sent else 0


def _symm_mem_pick(nbytes: float, n: int, hw: Hardware) -> Pick:
    return symm_mem_pick(nbytes, n, hw.multicast, hw.single_node)


def pick(impl: CollectiveImpl, nbytes: float, n: int, hw: Hardware, width: int | None = None,
         dtype: str = "bf16") -> Pick:
    """The kernel the engine runs for one all-reduce of `nbytes` over `n` ranks, or "nccl" with why.
    `width`: the hidden size of the [tokens, width] tensor (TensorRT-LLM's table is by shape); None:
    4096, the shape aiconfigurator's collector gives every message. `dtype`: the tensor's (symmetric
    memory takes only some)."""
    if impl.family in ("vllm", "sglang"):
        why = _custom_refusal(impl, n, hw)
        if why:
            return Pick("nccl", f"{impl.engine}: {why}; falls back to NCCL")
        if nbytes % 16:
            return Pick("nccl", f"{impl.engine}: custom allreduce needs a multiple of 16 bytes")
        if impl.family == "sglang":
            limit = SGLANG_MAX_BYTES
        else:
            limit = min(VLLM_MAX_BYTES, VLLM_SM90_CA_MAX[n]) if hw.multicast else VLLM_MAX_BYTES
        if nbytes < limit:
            return Pick(_vllm_stage(nbytes, n, hw))
        if impl.family == "vllm" and hw.multicast and dtype == VLLM_SYMM_MEM_DTYPE:
            # vLLM's dispatch: custom AR, then symmetric memory, then pynccl (cuda_communicator.all_reduce)
            sm = _symm_mem_pick(nbytes, n, hw)
            if sm.kernel != "nccl":
                return sm
        skip = (f" and symmetric memory takes {VLLM_SYMM_MEM_DTYPE} only (SymmMemCommunicator), not {dtype}"
                if impl.family == "vllm" and hw.multicast and dtype != VLLM_SYMM_MEM_DTYPE else "")
        return Pick("nccl", f"{impl.engine}: message of {nbytes / MiB:.3g} MiB is at or above custom allreduce's "
                            f"max size {limit / MiB:.3g} MiB{skip}; falls back to NCCL")
    if impl.family == "trtllm":
        if not (hw.p2p and hw.full_nvlink and hw.single_node):
            return Pick("nccl", "TensorRT-LLM: custom allreduce needs P2P over NVLink in one node (ifFallbackToNCCL); "
                                "falls back to NCCL")
        if nbytes > WORKSPACE_BYTES:
            return Pick("nccl", f"TensorRT-LLM: message above the {WORKSPACE_BYTES // MiB} MiB workspace; NCCL")
        hidden = width or 4096
        elems = max(int(nbytes // 2), 1)          # bf16/fp16 elements
        if elems <= hidden:
            tokens, hidden = 1, elems             # aiconfigurator's shape rule [1, size] below one row
        else:
            tokens = elems // hidden
        if impl.strategy == "oneshot":
            return Pick("oneshot")
        if impl.strategy == "twoshot":
            return Pick("twoshot" if tokens >= n else "oneshot")
        k = auto_strategy(tokens, hidden, n)
        return Pick(k, "" if k != "nccl" else "TensorRT-LLM AUTO: its lookup table picks NCCL for "
                                              f"[{tokens}, {hidden}] at TP {n}")
    if impl.family == "symm-mem" and impl.strategy == "multimem":
        # a direct caller has nothing to fall back to: where the kernel cannot run, neither can the stack
        why = direct_multimem_refusal(hw, dtype)
        if why:
            raise ValueError(why)
        return Pick(MULTIMEM_INPLACE)
    if impl.family == "symm-mem":
        why = symm_mem_dtype_refusal(dtype)
        return Pick("nccl", why) if why else _symm_mem_pick(nbytes, n, hw)
    raise ValueError(f"no all-reduce rule for family {impl.family!r}")


def remote_bytes(kernel: str, nbytes: float, n: int) -> float:
    """Bytes one rank moves over its links (see the module docstring)."""
    if kernel == "oneshot":
        return (n - 1) * nbytes
    if kernel == "twoshot":
        return 2 * (n - 1) / n * nbytes
    raise ValueError(f"unknown kernel {kernel!r}")


@dataclass(frozen=True)
class Consts:
    """One family's fitted constants at one group size (seconds, bytes/s)."""

    floor_s: float
    oneshot_bps: float
    twoshot_bps: float
    eager_floor_s: float        # 0: no eager table (eager pays the profile's eager_extra)
    twoshot_extra_s: float = 0.0    # two-shot's middle barrier (end_sync + __threadfence_system)


def family_consts(profile, family: str, n: int) -> Consts | None:
    """The profile's constants for `family` at `n` ranks; between two fitted group sizes, linear in n;
    None when the profile has none (no measured table of that engine on this system)."""
    sec = (profile.raw.get("collectives") or {}).get("custom_allreduce") or {}
    groups = (sec.get(family) or {}).get("groups") or {}
    got = {int(g): v for g, v in groups.items()}
    if not got:
        return None

    def one(v: dict) -> Consts:
        os_ = v["oneshot_gbps"]
        return Consts(v["floor_us"] * 1e-6, os_ * 1e9, (v.get("twoshot_gbps") or os_) * 1e9,
                      (v.get("eager_floor_us") or 0.0) * 1e-6, (v.get("twoshot_extra_us") or 0.0) * 1e-6)
    if n in got:
        return one(got[n])
    lo = [g for g in got if g < n]
    hi = [g for g in got if g > n]
    if not lo or not hi:
        return None
    a, b = one(got[max(lo)]), one(got[min(hi)])
    f = (n - max(lo)) / (min(hi) - max(lo))
    return Consts(*(x + f * (y - x) for x, y in zip(
        (a.floor_s, a.oneshot_bps, a.twoshot_bps, a.eager_floor_s, a.twoshot_extra_s),
        (b.floor_s, b.oneshot_bps, b.twoshot_bps, b.eager_floor_s, b.twoshot_extra_s))))


def kernel_s(profile, family: str, kernel: str, nbytes: float, n: int) -> float | None:
    """Graph-mode seconds of one engine kernel, or None without constants for it."""
    if kernel in ("multimem", "symm-twoshot", MULTIMEM_INPLACE):
        return _symm_mem_s(profile, kernel, nbytes, n)
    c = family_consts(profile, family, n)
    if c is None:
        return None
    if kernel == "oneshot":
        return c.floor_s + remote_bytes(kernel, nbytes, n) / c.oneshot_bps
    return c.floor_s + c.twoshot_extra_s + remote_bytes(kernel, nbytes, n) / c.twoshot_bps


def _copy_s(profile, nbytes: float) -> float:
    """One device copy kernel of `nbytes`: read + write at the profile's HBM rate and efficiency, at
    least one graph-replayed kernel (as sim/price/cost.py prices any kernel on a GPU)."""
    moved = 2.0 * nbytes
    return max(profile.launch_s["graph"], moved / (profile.mem_bytes_per_s * profile.memory_efficiency(max(moved, 1.0))))


def _symm_mem_s(profile, kernel: str, nbytes: float, n: int) -> float | None:
    """vLLM SymmMemCommunicator.all_reduce: copy into the symmetric buffer, the symm_mem kernel, copy
    out; a direct caller's multimem (MULTIMEM_INPLACE) the kernel alone. The kernel's barriers are the
    vLLM kernel's (both sync_remote_blocks in / out over signal pads): its fitted floor; multimem at
    the NVLS bus rate, two-shot at vLLM's two-shot (n = 2: its one-shot) rate. The multimem rate is
    the switch's at every size: what its 1-8 blocks (multimem_blocks) reach below the NVLS bus rate
    has no public measurement (bench/gpu_symm_mem.py times it on a GPU box)."""
    c = family_consts(profile, "vllm", n)
    topo = profile.topology
    if c is None or topo is None:
        return None
    copies = 0.0 if kernel == MULTIMEM_INPLACE else 2 * _copy_s(profile, nbytes)
    if kernel in ("multimem", MULTIMEM_INPLACE):
        if topo.nvls_busbw_gbps <= 0:
            return None
        algbw = topo.nvls_busbw_gbps * 1e9 * n / (2 * (n - 1))
        return copies + c.floor_s + nbytes / algbw
    rate = c.oneshot_bps if n == 2 else c.twoshot_bps
    return copies + c.floor_s + remote_bytes("twoshot", nbytes, n) / rate


def eager_s(profile, family: str, kernel: str, graph_s: float, nbytes: float, n: int) -> tuple[float, str]:
    """(seconds, path suffix) of the eager call around a kernel that costs `graph_s` from a graph
    (a symmetric-memory kernel already pays its copies)."""
    c = family_consts(profile, "vllm" if family == "symm-mem" else family, n)
    if c is not None and c.eager_floor_s > 0:
        # the copy-in is one more kernel in the eager call: its bytes, not another launch floor
        copy = 2.0 * nbytes / (profile.mem_bytes_per_s * profile.memory_efficiency(max(2.0 * nbytes, 1.0)))
        t = graph_s + (0.0 if kernel in ("multimem", "symm-twoshot", MULTIMEM_INPLACE) else copy)
        return max(c.eager_floor_s, t), "+eager(copy-in, host floor)"
    return graph_s + profile.eager_extra_s, "+eager_extra"
