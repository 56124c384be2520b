"""~15 s on the H200: the CUDA/NCCL patterns hw.runner relies on, world size 1, before the real steps."""
import datetime, os
import torch, torch.distributed as dist
import socket
with socket.socket() as _s:
    _s.bind(("127.0.0.1", 0)); os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_s.getsockname()[1]))
torch.cuda.set_device(0)
print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), flush=True)
dist.init_process_group("nccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60),
                        device_id=torch.device("cuda:0"))
cpu = dist.new_group(backend="gloo")
dist.barrier(group=cpu); box = [None]; dist.all_gather_object(box, {"ok": 1}, group=cpu)
x = torch.ones(1 << 20, device="cuda", dtype=torch.float16)
dist.all_reduce(x); torch.cuda.synchronize(); print("eager all_reduce ok", flush=True)
comm = torch.cuda.Stream()

def step(y, with_comm, join_always):
    y = y * 2
    if with_comm:                                   # hw.runner._issue / _wait
        comm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(comm):
            w = dist.all_reduce(y, async_op=True)
        w.wait()
    if with_comm or join_always:                    # hw.runner.forward's end-of-pass join
        torch.cuda.current_stream().wait_stream(comm)
    return y + 1

def capture(with_comm, join_always):
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(x, with_comm, join_always)
    torch.cuda.current_stream().wait_stream(side); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(x, with_comm, join_always)
    for _ in range(3):
        x.fill_(1); g.replay()
    torch.cuda.synchronize()
    assert out.float().mean().item() == 3.0, out.float().mean().item()
    return g, out

keep = [capture(True, False), capture(False, False)]
print("graph capture ok: async all_reduce on a comm stream; pass without collectives", flush=True)
print("preflight ok", flush=True)
try:                                                # the current runner's pattern for upper-bound
    keep.append(capture(False, True))
    print("unconditional join of an idle stream inside capture: allowed here", flush=True)
except Exception as e:                              # noqa: BLE001
    print("unconditional join of an idle stream inside capture FAILS:", type(e).__name__, str(e)[:200], flush=True)
os._exit(0)                                         # skip teardown after a deliberately broken capture
