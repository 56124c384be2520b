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

Ranks never outlive the launcher and never run code from the working directory (docs/reliability.md):
  * each rank leads its own session (process group), so one killpg ends it and whatever it started;
  * a rank holds the read end of a pipe whose write end only the launcher has; a watchdog thread in
    the rank blocks on it and kills the rank's process group when it reads EOF, i.e. when the
    launcher is gone for any reason (SIGKILL included). On Linux PR_SET_PDEATHSIG adds the same
    from the kernel. SIGINT/SIGTERM of the launcher kill every rank before it exits;
  * ranks start as `python -I -c BOOT ROOT ...`: an isolated interpreter (no cwd, no PYTHON* env
    on sys.path) that imports hw.dist from ROOT, the directory the launcher's own `hw` came from;
  * rank 0's rendezvous store listens on MASTER_ADDR only (loopback for a local group), not on
    every interface;
  * every rank marks its progress (a counter and a phase name in a small mmapped file); when a
    collective times out, the launcher names the rank whose progress stopped first, not the one
    whose wait happened to expire.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from importlib import import_module

from sim.model import ModelSpec, get_model
from sim.schedule import build
from sim.stack import Stack, Step

PIN_ENV = "TPSIM_PIN_CORES"  # "0" leaves CPU ranks unpinned
FAULT_ENV = "TPSIM_FAULT"    # "RANK:PHASE:MODE", e.g. "1:decode:exit" or "1:prefill:hang" (tests)
WATCH_FD_ENV = "TPSIM_WATCH_FD"        # the rank's end of the launcher pipe (EOF: the launcher is gone)
LAUNCHER_PID_ENV = "TPSIM_LAUNCHER_PID"
BEAT_ENV = "TPSIM_BEAT_FILE"           # the rank's progress file (see `mark`)
PATH_ENV = "TPSIM_SYS_PATH"            # the launcher's import path (JSON), minus the working directory
MAX_TIMEOUT_S = 86400.0


def check_backend_device(backend: str, device: str) -> None:
    """The process-group backend and the device must exist and go together (NCCL is GPU-only)."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; choose gloo or nccl")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose cpu or cuda")
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl needs --device cuda (use gloo on CPU)")


def check_timeout(v: float, name: str) -> None:
    """A finite, positive number of seconds up to a day (nan/inf would disable the watchdogs)."""
    import math
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= MAX_TIMEOUT_S:
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
        check_timeout(self.timeout_s, "--timeout-s")
        if self.layers is not None and self.layers < 1:
            raise ValueError(f"--layers must be >= 1, got {self.layers}")
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
    timeout = timedelta(seconds=timeout_s)
    store = rendezvous_store(rank, world, timeout)
    if store is not None:
        kw["store"] = store
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **kw)
    return DistContext(rank, world, local, backend, dev, cores)


def rendezvous_store(rank: int, world: int, timeout: timedelta):
    """The TCPStore of the group, its server (rank 0) listening on MASTER_ADDR:MASTER_PORT only.

    torch's env:// rendezvous binds the server to every interface; a local group would then take
    connections from the network. Rank 0 binds the socket itself and hands it to TCPStore
    (master_listen_fd). None under torchrun (its agent's store is used, as env:// would)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    import torch.distributed as dist
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
    import torch.distributed as dist
    return dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD


def shutdown() -> None:
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def fault_point(rank: int, phase: str) -> None:
    """Test hook: die or hang here when TPSIM_FAULT names this rank and phase; then mark progress."""
    spec = os.environ.get(FAULT_ENV, "")
    if spec:
        _fault(spec, rank, phase)
    mark(phase)


class _Beat:
    """This rank's progress file: 8-byte count, 8-byte monotonic time, 48-byte phase name, written
    through an mmap (a store to memory, no system call: cheap inside timed decode loops)."""

    SIZE = 64

    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, self.SIZE)
            self.mm = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)
        self.count = 0

    def write(self, phase: str) -> None:
        import struct
        self.count += 1
        self.mm[:self.SIZE] = struct.pack("<qd48s", self.count, time.monotonic(), phase.encode()[:48])


_beat: list = []


def mark(phase: str) -> None:
    """Record that this rank got this far (the launcher reads it to name the rank that stopped)."""
    path = os.environ.get(BEAT_ENV)
    if not path:
        return
    if not _beat:
        try:
            _beat.append(_Beat(path))
        except OSError:
            os.environ.pop(BEAT_ENV, None)
            return
    _beat[0].write(phase)


def read_beat(path: str) -> tuple[int, float, str] | None:
    """(count, monotonic time, phase) of a rank's progress file; None before its first mark."""
    import struct
    try:
        with open(path, "rb") as f:
            data = f.read(_Beat.SIZE)
    except OSError:
        return None
    if len(data) < _Beat.SIZE:
        return None
    n, t, ph = struct.unpack("<qd48s", data)
    return (n, t, ph.rstrip(b"\0").decode(errors="replace")) if n > 0 else None


def _fault(spec: str, rank: int, phase: str) -> None:
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


def package_root() -> str:
    """The directory holding the `hw` package this launcher runs (a source checkout or site-packages)."""
    import hw
    return os.path.dirname(os.path.dirname(os.path.abspath(hw.__file__)))


# Started as `python -I -c _BOOT ROOT TARGET CONFIG`: -I keeps the working directory (and PYTHON*
# variables) off sys.path, so hw.dist comes from ROOT, the launcher's own package root.
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from hw.dist import _worker_main; "
         "_worker_main(sys.argv[2:])")


def rank_command(target: str, cfg_path: str) -> list[str]:
    return [sys.executable, "-I", "-c", _BOOT, package_root(), target, cfg_path]


def _import_path() -> str:
    """The launcher's sys.path without the working directory (JSON), for the ranks to append: the
    same third-party packages (a user site, PYTHONPATH) as the launcher, none of the cwd's code."""
    cwd, root = os.path.realpath(os.getcwd()), os.path.realpath(package_root())
    keep = [p for p in sys.path if p and (os.path.realpath(p) != cwd or os.path.realpath(p) == root)]
    return json.dumps(keep)


def launch(target: str, config: dict, nproc: int, *, timeout_s: float, deadline_s: float | None = None,
           poll_s: float = 0.05, cancel: threading.Event | None = None, keep_fds: tuple[int, ...] = ()) -> None:
    """Run `target` ("module:function", called with `config`) on `nproc` local ranks; raise on failure.

    The first rank to exit nonzero ends the run: the others are terminated and WorkerFailed
    carries its exit code (or, when a collective timed out, the rank that stopped making
    progress) and the tail of its log. `deadline_s` bounds the whole run. Setting `cancel` (from
    another thread) kills the ranks and raises KeyboardInterrupt. SIGTERM/SIGHUP of the launcher
    (when this runs in the main thread) kill the ranks and exit 128+signal; SIGINT raises
    KeyboardInterrupt after killing them. `keep_fds` are passed on to every rank (an output lock
    they then hold too).
    """
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    check_timeout(timeout_s, "--timeout-s")
    if deadline_s is not None:
        check_timeout(deadline_s, "--deadline-s")
    tmp = tempfile.mkdtemp(prefix="tpsim-run-")
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(config, f)
    port = free_port()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // nproc)          # as pin_cores splits them (a container's cpuset, not the host's)
    procs, logs, beats = [], [], []
    start = time.monotonic()
    # the watchdog pipe: ranks inherit the read end; the write end stays here only (os.pipe fds are
    # not inheritable, and pass_fds hands each rank just its read end)
    watch_r, watch_w = os.pipe()
    old = _install_signal_handlers()
    try:
        for r in range(nproc):
            log = os.path.join(tmp, f"rank{r}.log")
            logs.append(log)
            beats.append(os.path.join(tmp, f"rank{r}.beat"))
            env = worker_env(r, nproc, port, threads)
            env.update({WATCH_FD_ENV: str(watch_r), LAUNCHER_PID_ENV: str(os.getpid()), BEAT_ENV: beats[-1],
                        PATH_ENV: _import_path()})
            with open(log, "w") as out:
                procs.append(subprocess.Popen(
                    rank_command(target, cfg_path), env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(watch_r, *keep_fds)))
        os.close(watch_r)
        watch_r = -1
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                _kill_all(procs)
                why = f"signal {-c}" if c < 0 else f"code {c}"
                stalled = _stalled_rank(logs, beats, r)
                raise WorkerFailed((stalled + "\n" if stalled else "")
                                   + f"rank {r} of {nproc} exited with {why} after "
                                   f"{time.monotonic() - start:.1f} s; stopped the other ranks.\n"
                                   + _tails(logs, first=r))
            if all(c == 0 for c in codes):
                shutil.rmtree(tmp, ignore_errors=True)     # logs are kept only when a run fails
                return
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                _kill_all(procs)
                stalled = _stalled_rank(logs, beats, None)
                raise WorkerFailed(f"run exceeded its {deadline_s:.0f} s deadline (a hang?); "
                                   f"killed all {nproc} ranks.\n" + (stalled + "\n" if stalled else "")
                                   + _tails(logs))
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
            time.sleep(poll_s)
    except BaseException:
        _kill_all(procs)
        raise
    finally:
        if watch_r >= 0:
            os.close(watch_r)
        os.close(watch_w)                  # any rank still alive sees EOF and ends itself
        _restore_signal_handlers(old)


class _Terminated(SystemExit):
    """SIGTERM/SIGHUP in the launcher: unwind (killing the ranks) and exit 128 + signal."""


def _on_signal(signum, _frame):
    raise _Terminated(128 + signum)


def _install_signal_handlers() -> dict | None:
    """SIGTERM/SIGHUP -> _Terminated in the main thread (Python only lets it set handlers), so
    `launch`'s cleanup runs; SIGINT already raises KeyboardInterrupt. Off the main thread the
    pipe watchdog alone ends the ranks when the process dies."""
    if threading.current_thread() is not threading.main_thread():
        return None
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            old[sig] = signal.signal(sig, _on_signal)
    return old


def _restore_signal_handlers(old: dict | None) -> None:
    for sig, h in (old or {}).items():
        signal.signal(sig, h)


def _stalled_rank(logs: list[str], beats: list[str], failed: int | None) -> str:
    """When a collective timed out (or the deadline passed): the rank whose progress stopped first.

    A hung rank stops marking progress while its peers go on to the next collective and wait
    there until their timeout fires; the first rank to *exit* is then a waiting one, not the hung
    one. The rank with the fewest marks (ties: the oldest last mark) is the one that stopped."""
    timed_out = failed is None or _timed_out(logs[failed])
    if not timed_out or len(beats) < 2:
        return ""
    now = time.monotonic()
    states = [read_beat(b) for b in beats]
    order = sorted(range(len(beats)), key=lambda r: (states[r][0], states[r][1]) if states[r] else (0, -1.0))
    lo = order[0]
    hi = max(range(len(beats)), key=lambda r: states[r][0] if states[r] else 0)
    if states[hi] is None or (states[lo] and states[lo][0] == states[hi][0]):
        return ""                      # no rank is behind: nothing to blame on one rank
    last = (f"its last progress mark was '{states[lo][2]}' #{states[lo][0]}, {now - states[lo][1]:.1f} s ago"
            if states[lo] else "it never reached its first progress mark")
    return (f"rank {lo} stopped making progress ({last}; rank {hi} reached '{states[hi][2]}' "
            f"#{states[hi][0]}): the other ranks timed out waiting for it in a collective")


def _timed_out(log: str) -> bool:
    try:
        with open(log) as f:
            text = f.read()
    except OSError:
        return False
    return any(line.startswith(_TAG) and "timed out" in line for line in text.splitlines())


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


def _tails(logs: list[str], first: int | None = None, n: int = 3) -> str:
    """Every rank's own one-line reports ([tpsim] lines, the failing rank first), the last lines of
    a log that has none (a crash), and where the full logs are kept. No Python tracebacks here:
    they stay in the logs."""
    order = ([first] if first is not None else []) + [r for r in range(len(logs)) if r != first]
    out = []
    for r in order:
        try:
            with open(logs[r]) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        tagged = [line for line in lines if line.startswith(_TAG)]
        out += tagged
        if not tagged and r == first and lines:
            out += [f"rank {r} log ends: " + " | ".join(x.strip() for x in lines[-n:])]
    if logs:
        out.append(f"rank logs: {os.path.dirname(logs[0])}/rank*.log")
    return "\n".join(out)


def _worker_main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m hw.dist MODULE:FUNCTION CONFIG.json")
    _tie_to_launcher()
    extra = os.environ.get(PATH_ENV)
    if extra:
        sys.path += [p for p in json.loads(extra) if p not in sys.path]
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
PR_SET_PDEATHSIG = 1


def _tie_to_launcher() -> None:
    """End this rank (and its process group) when the launcher dies, however it dies.

    Two ways, either enough: the kernel's parent-death signal (Linux), and a daemon thread blocked
    reading the launcher's pipe, which returns (EOF) once the launcher's end is closed: at its
    exit, on SIGKILL too. The thread covers what PDEATHSIG cannot: a launcher that died before
    this rank set it, and non-Linux systems."""
    fd = os.environ.pop(WATCH_FD_ENV, None)
    parent = os.environ.pop(LAUNCHER_PID_ENV, None)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if parent and os.getppid() != int(parent):     # died before prctl: nobody will signal us
            _die_with_group()
    if fd is None:
        return

    def watch() -> None:
        try:
            while os.read(int(fd), 1):
                pass
        except OSError:
            pass
        _die_with_group()
    threading.Thread(target=watch, name="tpsim-launcher-watchdog", daemon=True).start()


def _die_with_group() -> None:
    print(f"{_TAG} rank {os.environ.get('RANK', '?')}: the launcher is gone; ending", file=sys.stderr, flush=True)
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)      # the rank's own session: it and what it started
    except OSError:
        pass
    os._exit(1)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if "timed out" in text.lower() or "timeout" in text.lower():
        text = "a collective timed out (--timeout-s); a peer is hung or dead. " + text
    return text[:400]


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
