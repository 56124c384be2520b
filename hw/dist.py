"""Process groups and the multi-process launcher (one process per TP rank).

Two ways in, one worker code path:
  * `torchrun --nproc-per-node N -m hw.bench ...`: torchrun sets RANK/WORLD_SIZE/MASTER_*; the
    worker calls `init_from_env`.
  * `tpsim bench --nproc N`: `launch` starts N `python -m hw.dist TARGET CONFIG` processes with
    the same environment torchrun would give them, and watches them.

No silent hangs: the process group gets `timeout_s` (a collective that waits longer raises on
gloo, and NCCL's watchdog aborts), and the launcher kills every other rank as soon as one exits
nonzero, and everything once `deadline_s` passes. Torch is imported inside functions only, so the
launcher (and the CLI) run without it.

CPU ranks are pinned, each to its own share of the cores (`pin_cores`), unless TPSIM_PIN_CORES=0.
Why: unpinned, the OS migrates each rank's compute thread and gloo's communication threads across
all cores, and on a small machine a rank's compute then often waits behind the *other* rank's
threads. On 2 cores with 2 ranks that made ladder's measured speedup swing 0.85-1.3x from run to
run around ~1.04; pinned (compute and communication of one rank share one core, as a serving
process on its own socket or GPU would not share with a peer) it is 1.25-1.37x with intervals
that exclude 1. Pinning is skipped when there are more ranks than cores.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from importlib import import_module

from sim.model import ModelSpec, get_model
from sim.schedule import build
from sim.stack import Stack, Step

PIN_ENV = "TPSIM_PIN_CORES"  # "0" leaves CPU ranks unpinned
FAULT_ENV = "TPSIM_FAULT"    # "RANK:PHASE:MODE", e.g. "1:decode:exit" or "1:prefill:hang" (tests)


def check_backend_device(backend: str, device: str) -> None:
    """The process-group backend and the device must exist and go together (NCCL is GPU-only)."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; choose gloo or nccl")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose cpu or cuda")
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda (use gloo on CPU)")


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
    attention: str = "math"
    kv: str = "static"
    prefill_logits: str = "all"
    expand_gqa: bool = True
    decode_graphs: bool = False        # CUDA graphs for decode (cuda only)
    compile: bool = False              # torch.compile each whole pass (hw.bench.compile_passes)
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

    def __post_init__(self) -> None:
        for f in ("tp", "batch", "prompt_len", "gen_len", "repeats"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout-s must be positive, got {self.timeout_s}")
        check_backend_device(self.backend, self.device)
        if self.decode_graphs and self.device != "cuda":
            raise ValueError("CUDA graphs need --device cuda")
        if self.emulate_tp is not None and (self.emulate_tp < 1 or self.tp != 1):
            raise ValueError(f"--emulate-tp {self.emulate_tp} runs one process (--tp 1) as rank 0 of a TP "
                             f"job of that degree; got --tp {self.tp}")
        self.stack()

    def model_spec(self) -> ModelSpec:
        m = get_model(self.model)
        return m.truncated(self.layers) if self.layers else m

    def stack(self) -> Stack:
        return Stack(dtype=self.dtype, head=self.head, attention=self.attention, kv=self.kv,
                     prefill_logits=self.prefill_logits, expand_gqa=self.expand_gqa,
                     decode_graphs=self.decode_graphs, collective=self.backend,
                     compile_prefill=self.compile, compile_decode=self.compile)

    def steps(self) -> tuple[Step, Step | None]:
        """The prefill step and the decode step every decode pass reuses (None when gen_len == 1)."""
        st = self.stack()
        pre = Step.prefill(self.batch, self.prompt_len, self.gen_len, st)
        dec = Step.decode(self.batch, self.prompt_len, self.gen_len, 1, st) if self.gen_len > 1 else None
        return pre, dec

    @property
    def model_tp(self) -> int:
        """The TP degree whose shards and schedules run (the emulated one, if any)."""
        return self.emulate_tp or self.tp

    def validate(self) -> None:
        """Raise ValueError for anything the user got wrong, before processes start."""
        m = self.model_spec()
        m.shard(self.model_tp)
        pre, _ = self.steps()
        for s in self.schedules:
            build(s, m, self.model_tp, pre, self.stack())

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


def run_rank(config: dict, body, render) -> tuple[RunConfig, dict]:
    """One rank of `bench` or `check`: set up the process group, `body(cfg, ctx) -> result` (the
    same result on rank 0 of every rank's work), rank 0 writes it atomically to --out and/or prints
    it (`render(result)` for the table form), and the group is torn down whatever happens."""
    import json
    from sim.trace import write_json_atomic
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


class WorkerFailed(RuntimeError):
    """A rank died, hung past the deadline, or raised."""


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
    import torch
    import torch.distributed as dist
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
    if "MASTER_ADDR" not in os.environ:          # plain `python -m hw.bench`: a group of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    kw = {"device_id": torch.device(dev)} if device == "cuda" else {}
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s), **kw)
    return DistContext(rank, world, local, backend, dev, cores)


def cpu_group():
    """A gloo group over all ranks for barriers and Python-object gathers (also under NCCL)."""
    import torch.distributed as dist
    return dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD


def shutdown() -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def fault_point(rank: int, phase: str) -> None:
    """Test hook: die or hang here when TPSIM_FAULT names this rank and phase."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    try:
        r, ph, mode = spec.split(":")
    except ValueError:
        raise ValueError(f"{FAULT_ENV} must be RANK:PHASE:MODE (MODE exit|hang), got {spec!r}") from None
    if int(r) != rank or ph != phase:
        return
    if mode == "exit":
        print(f"{_TAG} rank {rank}: injected fault, exiting in {phase}", file=sys.stderr, flush=True)
        os._exit(17)
    if mode == "hang":
        print(f"{_TAG} rank {rank}: injected fault, hanging in {phase}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    raise ValueError(f"{FAULT_ENV}: unknown mode {mode!r} (exit|hang)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, world: int, port: int, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.setdefault("OMP_NUM_THREADS", str(threads))     # N ranks share the cores: no oversubscription
    return env


def launch(target: str, config: dict, nproc: int, *, timeout_s: float, deadline_s: float | None = None,
           poll_s: float = 0.05) -> None:
    """Run `target` ("module:function", called with `config`) on `nproc` local ranks; raise on failure.

    The first rank to exit nonzero ends the run: the others are terminated and WorkerFailed
    carries its exit code and the tail of its log. `deadline_s` bounds the whole run.
    """
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    tmp = tempfile.mkdtemp(prefix="tpsim-run-")
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    port = free_port()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // nproc)          # as pin_cores splits them (a container's cpuset, not the host's)
    procs, logs = [], []
    start = time.monotonic()
    try:
        for r in range(nproc):
            log = os.path.join(tmp, f"rank{r}.log")
            logs.append(log)
            with open(log, "w") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "hw.dist", target, cfg_path], env=worker_env(r, nproc, port, threads),
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                _kill_all(procs)
                why = f"signal {-c}" if c < 0 else f"code {c}"
                raise WorkerFailed(f"rank {r} of {nproc} exited with {why} after "
                                   f"{time.monotonic() - start:.1f} s; stopped the other ranks.\n"
                                   + _tails(logs, first=r))
            if all(c == 0 for c in codes):
                shutil.rmtree(tmp, ignore_errors=True)     # logs are kept only when a run fails
                return
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                _kill_all(procs)
                raise WorkerFailed(f"run exceeded its {deadline_s:.0f} s deadline (a hang?); "
                                   f"killed all {nproc} ranks.\n" + _tails(logs))
            time.sleep(poll_s)
    except BaseException:
        _kill_all(procs)
        raise


def _kill_all(procs: list) -> None:
    """Terminate our own worker processes (each leads its own session), then kill stragglers."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    end = time.monotonic() + 3.0
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _tails(logs: list[str], first: int | None = None, n: int = 15) -> str:
    """Every rank's own one-line reports first, then the tail of each log."""
    order = ([first] if first is not None else []) + [r for r in range(len(logs)) if r != first]
    out = []
    for r in order:
        try:
            with open(logs[r]) as f:
                out += [line for line in f.read().splitlines() if line.startswith(_TAG)]
        except OSError:
            pass
    for r in order:
        try:
            with open(logs[r]) as f:
                lines = f.read().splitlines()[-n:]
        except OSError:
            continue
        if lines:
            out.append(f"--- rank {r} log (last {len(lines)} lines, {logs[r]}) ---\n" + "\n".join(lines))
    return "\n".join(out)


def _worker_main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m hw.dist MODULE:FUNCTION CONFIG.json")
    mod, _, fn = argv[0].partition(":")
    with open(argv[1]) as f:
        config = json.load(f)
    rank = os.environ.get("RANK", "?")
    try:
        rc = getattr(import_module(mod), fn)(config)
    except Exception as e:   # noqa: BLE001 - report every failure in one line the launcher shows
        import traceback
        traceback.print_exc()
        print(f"{_TAG} rank {rank} failed: {type(e).__name__}: {_one_line(e)}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.exit(int(rc or 0))


_TAG = "[tpsim]"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if "timed out" in text.lower() or "timeout" in text.lower():
        text = "a collective timed out (--timeout-s); a peer is hung or dead. " + text
    return text[:400]


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
