"""The rank side of a multi-process run: join the process group (from torchrun's or our launcher's
environment), pin CPU ranks to their cores, mark progress and start the heartbeat (hw/beat.py),
honour test faults. `_worker_main` is what each launched rank runs (hw/dist.py starts it, after its
boot code has tied the rank to the launcher: fileio/proc_tie.py, before torch is imported); `run_rank`
is one rank of `bench` or `check`. Like every module of hw/ but commands.py, run_config.py and
beat.py, it imports torch at its top: the CLI reaches it only through `hw.harness` (hw/__init__.py).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module

import torch
import torch.distributed as dist

from tpsim.hw.beat import heartbeat_interval_s, mark, start_heartbeat, stop_heartbeat
from tpsim.fileio.proc_tie import LOG_TAG, tie_rank_from_env
from tpsim.fileio.policy import write_json_atomic

from tpsim.hw.run_config import RunConfig

PIN_ENV = "TPSIM_PIN_CORES"  # "0" leaves CPU ranks unpinned


FAULT_ENV = "TPSIM_FAULT"    # "RANK:PHASE:MODE", e.g. "1:decode:exit" or "1:prefill:hang" (tests)


PATH_ENV = "TPSIM_SYS_PATH"            # the launcher's import path (JSON), minus the working directory (hw.dist._BOOT)


def run_rank(config: dict, body, render) -> tuple[RunConfig, dict]:
    """One rank of `bench` or `check`: set up the process group, `body(cfg, ctx) -> result` (the
    same result on rank 0 of every rank's work), rank 0 writes it atomically to --out and/or prints
    it (`render(result)` for the table form), and the group is torn down whatever happens."""
    cfg = RunConfig.from_dict(config)
    if cfg.fault:
        os.environ[FAULT_ENV] = cfg.fault
    ctx = init_from_env(cfg.backend, cfg.device, cfg.timeout_s)
    try:
        result = body(cfg, ctx)
        if ctx.rank == 0:
            if cfg.out:
                write_json_atomic(cfg.out, result)
            if cfg.print_result:
                print(json.dumps(result, indent=1) if cfg.json else render(result), flush=True)
    finally:
        shutdown()
    return cfg, result


@dataclass(frozen=True)
class DistContext:
    rank: int
    world: int
    local_rank: int
    backend: str
    device: str          # "cpu" or "cuda:<local_rank>"
    cores: tuple[int, ...] | None = None     # the CPU cores this rank is pinned to (None: not pinned)


def core_share(available: list[int], local_rank: int, local_world: int) -> tuple[int, ...] | None:
    """The cores local rank `local_rank` of `local_world` gets: an equal contiguous slice of
    `available` (the leftover cores of an uneven split stay unused, so every rank gets the same
    number), or None when there are fewer cores than ranks (then the OS schedules them)."""
    cores = sorted(available)
    share = len(cores) // local_world if local_world > 0 else 0
    if share < 1 or not 0 <= local_rank < local_world:
        return None
    return tuple(cores[local_rank * share:(local_rank + 1) * share])


def pin_cores(local_rank: int, local_world: int) -> tuple[int, ...] | None:
    """Pin every thread of this process to its `core_share` (before the process group exists, so
    gloo's threads, created at init, inherit it). Returns the cores, or None when not pinned
    (TPSIM_PIN_CORES=0, more ranks than cores, or no sched_setaffinity on this OS)."""
    if os.environ.get(PIN_ENV, "1") == "0" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = core_share(list(os.sched_getaffinity(0)), local_rank, local_world)
    if cores is None:
        return None
    # sched_setaffinity(0) pins the calling thread only; threads torch already started
    # (its intra-op pool) are pinned through /proc/self/task.
    for tid in [0] + [int(t) for t in os.listdir("/proc/self/task") if t.isdigit()]:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:          # a thread that has exited meanwhile
            pass
    return cores


def init_from_env(backend: str, device: str, timeout_s: float) -> DistContext:
    """Join the process group described by torchrun-style env vars (single process if unset)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda")
    dev, cores = "cpu", None
    if device == "cpu":
        cores = pin_cores(local, int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda but torch sees no GPU")
        torch.cuda.set_device(local)
        dev = f"cuda:{local}"
    if "MASTER_ADDR" not in os.environ:          # plain `python -m tpsim.hw.bench`: a group of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    kw = {"device_id": torch.device(dev)} if device == "cuda" else {}
    timeout = timedelta(seconds=timeout_s)
    store = rendezvous_store(rank, world, timeout)
    if store is not None:
        kw["store"] = store
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **kw)
    start_heartbeat(heartbeat_interval_s(timeout_s))   # from here a stale heartbeat means a stopped rank (hw.beat)
    return DistContext(rank, world, local, backend, dev, cores)


def rendezvous_store(rank: int, world: int, timeout: timedelta):
    """The TCPStore of the group, its server (rank 0) listening on MASTER_ADDR:MASTER_PORT only.

    torch's env:// rendezvous binds the server to every interface; a local group would then take
    connections from the network. Rank 0 binds the socket itself and hands it to TCPStore
    (master_listen_fd). None under torchrun (its agent's store is used, as env:// would)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank != 0:
        return dist.TCPStore(host, port, world, False, timeout=timeout)
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(max(128, world))
    except OSError as e:
        # no fallback to env:// here: the other ranks already talk to a store without its key prefix
        raise RuntimeError(f"rank 0 cannot listen on MASTER_ADDR:MASTER_PORT = {host}:{port}: {e.strerror}") from None
    # detach: the store owns the listening fd from here on (no Python object closes it under it)
    return dist.TCPStore(host, port, world, True, timeout=timeout, master_listen_fd=sock.detach(),
                         wait_for_workers=False)


def cpu_group():
    """A gloo group over all ranks for barriers and Python-object gathers (also under NCCL)."""
    return dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def fault_point(rank: int, phase: str) -> None:
    """Test hook: die or hang here when TPSIM_FAULT names this rank and phase; then mark progress."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec:
        _fault(spec, rank, phase)
    mark(phase)


def _fault(spec: str, rank: int, phase: str) -> None:
    try:
        r, ph, mode = spec.split(":")
    except ValueError:
        raise ValueError(f"{FAULT_ENV} must be RANK:PHASE:MODE (MODE exit|hang), got {spec!r}") from None
    if int(r) != rank or ph != phase:
        return
    if mode == "exit":
        print(f"{LOG_TAG} rank {rank}: injected fault, exiting in {phase}", file=sys.stderr, flush=True)
        os._exit(17)
    if mode == "hang":
        print(f"{LOG_TAG} rank {rank}: injected fault, hanging in {phase}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    raise ValueError(f"{FAULT_ENV}: unknown mode {mode!r} (exit|hang)")


def _worker_main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m tpsim.hw.rank MODULE:FUNCTION CONFIG.json")
    tie_rank_from_env()            # done by the boot code before `import torch` already (hw.dist._BOOT)
    mod, _, fn = argv[0].partition(":")
    with open(argv[1]) as f:
        config = json.load(f)
    rank = os.environ.get("RANK", "?")
    try:
        rc = getattr(import_module(mod), fn)(config)
    except Exception as e:   # noqa: BLE001 - report every failure in one line the launcher shows
        stop_heartbeat()
        traceback.print_exc()
        print(f"{LOG_TAG} rank {rank} failed: {type(e).__name__}: {_one_line(e)}", file=sys.stderr, flush=True)
        sys.exit(1)
    stop_heartbeat()               # only the exit is left: its teardown is not a hang
    sys.exit(int(rc or 0))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if "timed out" in text.lower() or "timeout" in text.lower():
        text = "a collective timed out (--timeout-s); a peer is hung or dead. " + text
    return text[:400]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
