"""PyTorch symmetric-memory all-reduce on one GPU beside tpsim's price (bench/gpu_checks.sh STEPS=symm;
~20 s on an H200): writes OUT/symm-mem.json with provenance (bench/gpu_record.py's Doc).

World size 1. torch's source has no world-size check on the path: rendezvous (CUDASymmetricMemory.cu
make_peer_alloc_info) exchanges one request and maps no peer; one_shot_all_reduce / two_shot_all_reduce_
dispatch a generic kernel for world sizes other than 2/4/8 (DISPATCH_WORLD_SIZES' default), whose
sync_remote_blocks barrier is the rank with itself; multimem_all_reduce_ needs the buffer's multicast
object (cuMulticastCreate with numDevices 1), which a lone GPU may lack: then it is skipped, and the
"setup" item says why. So a group of 1 exercises every local part of the kernels and of the harness's
call (hw.symm_mem.SymmMemAllReduce.run: copy in, kernel, copy out; also captured in a CUDA graph, as a
decode step captures it), never the NVLink traffic: the simulator's prices are at 2/4/8 ranks, with
their copy-in/out part (what world size 1 does run) beside them. The kernels' rule never picks a
kernel at 1 rank (vLLM has no size for it), so every kernel here is forced.

Items (bf16; sizes 4 KiB .. 64 MiB): per size, µs per call of one_shot (one_shot_all_reduce_out),
two_shot (two_shot_all_reduce_), multimem (multimem_all_reduce_, with multicast) and the harness's call
(copy-in + two_shot + copy-out), each graph-replayed (20 calls in one graph, median of 5 replays) and
eager, beside sim_*: tpsim's graph price on h200-sxm (sim.price.comm.custom_allreduce.kernel_s, family symm-mem)
at 2/4/8 ranks and its copy-in/out part. --smoke (CPU): the prices and the JSON, no kernels (skipped).
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
from pathlib import Path

from gpu_record import PROFILE, Doc, guarded, time_calls

import torch
import torch.distributed as dist

from tpsim.hw.symm_mem import SymmMemAllReduce  # noqa: E402
from tpsim.sim.price.comm import custom_allreduce as car  # noqa: E402
from tpsim.sim.hardware.profile import load_profile  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = (4 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB)
SIM_RANKS = (2, 4, 8)
CALLS = 20


def sim_prices(nbytes: int) -> dict:
    """tpsim's graph-mode price of each symmetric-memory kernel at SIM_RANKS, and the copy-in/out
    part of it (two copies of nbytes at the profile's HBM rate: car._copy_s, what _symm_mem_s adds)."""
    prof = load_profile(PROFILE)
    out = {"sim_copies_us": 2 * car._copy_s(prof, nbytes) * 1e6}
    for n in SIM_RANKS:
        for k in ("multimem", "symm-twoshot"):
            t = car.kernel_s(prof, "symm-mem", k, nbytes, n)
            out[f"sim_{k}_n{n}_us"] = None if t is None else t * 1e6
        out[f"sim_pick_n{n}"] = car.symm_mem_pick(nbytes, n, True).kernel
    return out


def schema(op: str) -> str:
    try:
        return str(getattr(torch.ops.symm_mem, op).default._schema)
    except (AttributeError, RuntimeError) as e:         # an op this torch does not register
        return f"missing: {type(e).__name__}"


def setup_item(impl) -> dict:
    ops = {k: schema(k) for k in ("one_shot_all_reduce_out", "two_shot_all_reduce_", "multimem_all_reduce_")}
    return {"capability": list(torch.cuda.get_device_capability()), "multicast": impl.multicast,
            "buffer_bytes": impl.capacity_bytes, "schemas": ops, "notes": list(impl.notes)}


def size_item(impl, nbytes: int) -> dict:
    g = impl.group.group_name
    n = nbytes // 2
    x = torch.randn(n, device="cuda").to(torch.bfloat16)
    view, out = impl.buf[:n], torch.empty_like(x)
    item = sim_prices(nbytes) | {"bytes": nbytes, "timed": True}
    y = x.clone()
    impl.run("symm-twoshot", y)                              # a group of 1: the sum is the input itself
    torch.cuda.synchronize()
    item["harness_ok"] = bool(torch.equal(y, x))
    kernels = {"one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce_out(view, "sum", g, out),
               "two_shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(view, "sum", g),
               "harness_two_shot": lambda: impl.run("symm-twoshot", y)}
    if impl.multicast:
        kernels["multimem"] = lambda: torch.ops.symm_mem.multimem_all_reduce_(view, "sum", g)
    for name, fn in kernels.items():
        for mode in ("graph", "eager"):
            try:
                item[f"{name}_{mode}_us"] = time_calls(lambda i: fn(), CALLS, mode == "graph")
            except Exception as e:  # noqa: BLE001 - one kernel's failure must not hide the others
                item[f"{name}_{mode}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    # the harness's call captured as hw.runner captures it in a decode graph: forked to a comm stream,
    # joined back by the work's wait and the end-of-pass join; replayed, y is still x
    y.copy_(x)
    torch.cuda.synchronize()
    gr, comm = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(gr):
        comm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(comm):
            work = impl.run("symm-twoshot", y)
        work.wait()
        torch.cuda.current_stream().wait_stream(comm)
    view.zero_()                                             # the replay must copy y in again
    gr.replay()
    torch.cuda.synchronize()
    item["harness_graph_ok"] = bool(torch.equal(y, x) and torch.equal(view, x))
    return item


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for symm-mem.json")
    ap.add_argument("--smoke", action="store_true", help="CPU wiring check: prices and JSON, no kernels")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    doc = Doc(a.out / "symm-mem.json", "symm-mem", [str(Path(__file__)), *argv], a.smoke)
    if a.smoke or not torch.cuda.is_available():
        doc.skip("no CUDA: symmetric memory maps GPU buffers; the kernels and the harness's call were not run")
        for b in SIZES:
            doc.put(f"bf16:{b}", sim_prices(b) | {"bytes": b, "timed": False})
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60),
                            device_id=torch.device("cuda:0"))
    box = {}

    def setup() -> dict:
        # 1 rank: the rule sends nothing through symmetric memory, so nothing is allocated (the note
        # path of a real run); then the buffer every size below uses, as a real run's setup makes it
        box["impl"] = impl = SymmMemAllReduce(dist.group.WORLD, "cuda:0", "bf16", ())
        impl.allocate(max(SIZES))
        return setup_item(impl)
    setup = guarded(doc, "setup", setup)
    if "error" in setup:
        doc.skip("a 1-rank symmetric buffer could not be set up: " + setup["error"][:300])
        os._exit(0)
    impl = box["impl"]
    if not impl.multicast:
        doc.skip("multimem: no multicast object on this GPU's 1-rank buffer (or not SM90)")
    for b in SIZES:
        guarded(doc, f"bf16:{b}", size_item, impl, b)
    os._exit(0)                      # skip teardown: a symmetric buffer's unmap at exit is not what is checked


if __name__ == "__main__":
    sys.exit(main())
