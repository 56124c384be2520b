"""The multi-process launcher (one process per TP rank); the rank side is hw/rank.py, the bench
config hw/run_config.py.

Two ways in, one worker code path:
  * `torchrun --nproc-per-node N -m tpsim.hw.bench ...`: torchrun sets RANK/WORLD_SIZE/MASTER_*; the
    worker calls `hw.rank.init_from_env`.
  * `tpsim bench --nproc N`: `launch` starts N rank processes (hw.rank._worker_main) with the
    same environment torchrun would give them, and watches them.

No silent hangs: the process group gets `timeout_s` (a collective that waits longer raises on
gloo, and NCCL's watchdog aborts), and the launcher kills every other rank as soon as one exits
nonzero, and everything once `deadline_s` passes. The launcher imports torch (through hw.rank, whose
constants it shares with the ranks); the CLI reaches it only through `hw.harness` (hw/__init__.py).

CPU ranks are pinned, each to its own share of the cores (`pin_cores`), unless TPSIM_PIN_CORES=0.
Why: unpinned, the OS migrates each rank's compute thread and gloo's communication threads across
all cores, and on a small machine a rank's compute then often waits behind the *other* rank's
threads, so measured speedups swing from run to run by more than the schedules differ. Pinned, a
rank's compute and communication share its own cores (as a serving process on its own socket or GPU
does not share with a peer), and the measured speedups are stable enough for their intervals to
exclude 1 where the schedules really differ. Pinning is skipped when there are more ranks than cores.

Ranks never outlive the launcher and never run code from the working directory (docs/reliability.md):
  * each rank leads its own session (process group), so one killpg ends it and whatever it started;
  * the first thing a rank does, before it imports torch, is tie itself to the launcher
    (fileio.proc_tie, shared with the sweep's pool workers): PR_SET_PDEATHSIG on Linux, and a
    watchdog thread on the read end of a pipe whose write end only the launcher has, which kills
    the rank's session when it reads EOF (the launcher is gone, SIGKILL included). SIGINT/SIGTERM
    of the launcher kill every rank before it exits;
  * ranks start as `python -I -c BOOT ROOT ...`: an isolated interpreter (no cwd, no PYTHON* env
    on sys.path) that loads the package `tpsim` from ROOT, the directory the launcher's own tpsim
    came from, by path (_checkout.py): never another installed tpsim, nor a ./tpsim;
  * rank 0's rendezvous store listens on MASTER_ADDR only (loopback for a local group), not on
    every interface;
  * every rank marks its progress and keeps a heartbeat in a small mmapped file (hw.beat). A rank
    whose heartbeat is older than --timeout-s (stopped, or stuck holding the GIL) is named and the
    run ended as soon as it is that stale; when a collective times out first, the launcher names
    the rank whose progress (or heartbeat) stopped first, not the one whose wait happened to expire.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

import tpsim
from tpsim.hw.beat import BEAT_ENV, BeatState, heartbeat_interval_s, read_beat
from tpsim.hw.rank import PATH_ENV, free_port
from tpsim.hw.run_config import check_timeout
from tpsim.fileio.proc_tie import LAUNCHER_PID_ENV, LOG_TAG, WATCH_FD_ENV, ParentTie


class WorkerFailed(RuntimeError):
    """A rank died, hung past the deadline, or raised."""


def worker_env(rank: int, world: int, port: int, threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.setdefault("OMP_NUM_THREADS", str(threads))     # N ranks share the cores: no oversubscription
    return env


def package_root() -> str:
    """The directory of the `tpsim` package this launcher runs: a source checkout's root, or
    site-packages/tpsim."""
    return os.path.dirname(os.path.abspath(tpsim.__file__))


# Started as `python -I -c _BOOT ROOT TARGET CONFIG`: -I keeps the working directory (and PYTHON*
# variables) off sys.path; ROOT/_checkout.py then registers ROOT itself as the package tpsim
# (by path), so every tpsim.* module of the rank is the launcher's own, even where another tpsim
# is installed or a ./tpsim lies in the working directory. ROOT leaves sys.path again: its
# directories (sim/, hw/, ...) are not top-level names. The launcher's other import paths
# (PATH_ENV: a user site, PYTHONPATH) are appended before hw.rank is imported, since hw.rank
# imports torch, which may live on one of them. The tie to the launcher (fileio.proc_tie: standard
# library only) comes first, before torch: importing torch takes seconds, and a rank must not
# outlive a launcher killed meanwhile.
_BOOT = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); import _checkout; _checkout.load(sys.argv[1]); "
         "del sys.path[0], sys.modules['_checkout']; "
         "from tpsim.fileio.proc_tie import tie_rank_from_env; tie_rank_from_env(); "
         f"sys.path += [p for p in json.loads(os.environ.get({PATH_ENV!r}) or '[]') if p not in sys.path]; "
         "from tpsim.hw.rank import _worker_main; _worker_main(sys.argv[2:])")


def rank_command(target: str, cfg_path: str) -> list[str]:
    return [sys.executable, "-I", "-c", _BOOT, package_root(), target, cfg_path]


def _import_path() -> str:
    """The launcher's sys.path without the working directory (JSON), for the ranks to append: the
    same third-party packages (a user site, PYTHONPATH) as the launcher, none of the cwd's code.
    Appended after the rank's own path; tpsim itself is already loaded by then (_BOOT), so no entry
    here can stand in for it."""
    cwd = os.path.realpath(os.getcwd())
    return json.dumps([p for p in sys.path if p and os.path.realpath(p) != cwd])


def launch(target: str, config: dict, nproc: int, *, timeout_s: float, deadline_s: float | None = None,
           poll_s: float = 0.05, cancel: threading.Event | None = None, keep_fds: tuple[int, ...] = (),
           on_beat: Callable[[BeatState | None], None] | None = None) -> None:
    """Run `target` ("module:function", called with `config`) on `nproc` local ranks; raise on failure.

    The first rank to exit nonzero ends the run: the others are terminated and WorkerFailed
    carries its exit code (or, when a collective timed out, the rank that stopped making
    progress) and the tail of its log. `deadline_s` bounds the whole run. Setting `cancel` (from
    another thread) kills the ranks and raises Interrupted (a KeyboardInterrupt). SIGTERM/SIGHUP of the
    launcher (when this runs in the main thread) kill the ranks and exit 128+signal; SIGINT raises
    Interrupted after killing them. The run folder (config, rank logs, heartbeats) is kept only where
    a rank failed (WorkerFailed names it) or, when the run was interrupted, a rank had reported
    something ([tpsim] lines; Interrupted.logs names it); else it is removed. `keep_fds` are passed
    on to every rank (an output lock they then hold too). `on_beat` is called with rank 0's beat file
    (hw.beat.BeatState; None before it exists) a few times a second: the command's progress bar.
    """
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    check_timeout(timeout_s, "--timeout-s")
    if deadline_s is not None:
        check_timeout(deadline_s, "--deadline-s")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // nproc)          # as pin_cores splits them (a container's cpuset, not the host's)
    procs, logs, beats = [], [], []
    start = time.monotonic()
    # the tie: ranks get the pipe's read end (pass_fds); its write end stays here only
    tie = ParentTie()
    old = install_signal_handlers()
    tmp = None
    try:
        # made inside the try: a Ctrl-C right after it still removes it (the bug: /tmp/tpsim-run-* left behind)
        tmp = tempfile.mkdtemp(prefix="tpsim-run-")
        cfg_path = os.path.join(tmp, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(config, f)
        port = free_port()
        for r in range(nproc):
            log = os.path.join(tmp, f"rank{r}.log")
            logs.append(log)
            beats.append(os.path.join(tmp, f"rank{r}.beat"))
            env = worker_env(r, nproc, port, threads)
            env.update({WATCH_FD_ENV: str(tie.read_fd), LAUNCHER_PID_ENV: str(tie.parent_pid), BEAT_ENV: beats[-1],
                        PATH_ENV: _import_path()})
            with open(log, "w") as out:
                procs.append(subprocess.Popen(
                    rank_command(target, cfg_path), env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=(tie.read_fd, *keep_fds)))
        tie.close_read()
        next_beat_check = time.monotonic()
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                # read the beats before stopping the others: a killed rank's heartbeat ages too
                stalled = _stalled_rank(logs, beats, r, codes, timeout_s)
                _kill_all(procs)
                why = f"signal {-c}" if c < 0 else f"code {c}"
                raise WorkerFailed((stalled + "\n" if stalled else "")
                                   + f"rank {r} of {nproc} exited with {why} after "
                                   f"{time.monotonic() - start:.1f} s; stopped the other ranks.\n"
                                   + _tails(logs, first=r))
            if all(c == 0 for c in codes):
                shutil.rmtree(tmp, ignore_errors=True)     # logs are kept only when a run fails
                return
            now = time.monotonic()
            if now >= next_beat_check:                     # a few reads of 72 bytes per second
                next_beat_check = now + 0.25
                if on_beat is not None:
                    on_beat(read_beat(beats[0]))
                stale = _stale_heartbeat(beats, codes, timeout_s)
                if stale:
                    _kill_all(procs)
                    raise WorkerFailed(stale + f"; killed all {nproc} ranks after {now - start:.1f} s.\n"
                                       + _tails(logs))
            if deadline_s is not None and now - start > deadline_s:
                stalled = _stalled_rank(logs, beats, None, codes, timeout_s)
                _kill_all(procs)
                raise WorkerFailed(f"run exceeded its {deadline_s:g} s deadline (a hang?); "
                                   f"killed all {nproc} ranks.\n" + (stalled + "\n" if stalled else "")
                                   + _tails(logs))
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt        # -> Interrupted below, after the ranks are stopped
            time.sleep(poll_s)
    except WorkerFailed:
        raise                              # the ranks are stopped; its message names the kept logs
    except BaseException as e:             # Ctrl-C, cancel, SIGTERM/SIGHUP, or a launch that failed
        with _sigint_ignored():            # a second Ctrl-C must not cut the cleanup short
            _kill_all(procs)
            kept = _keep_if_reported(tmp, logs)
        if isinstance(e, KeyboardInterrupt):
            raise Interrupted(kept) from None
        raise
    finally:
        tie.cut()                          # any rank still alive sees EOF and ends itself
        restore_signal_handlers(old)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or `cancel`) ended a launch: every rank is stopped. `logs` is the run folder when a
    rank had reported something there (kept for its [tpsim] lines), else None (the folder is gone).
    str(): one line saying so, for the command's `Aborted! ...` (about the rank logs only: a command
    that keeps a resumable file, spd-plan --out, says so on a line of its own)."""

    def __init__(self, logs: str | None):
        super().__init__(f"all ranks stopped; rank logs: {logs}/rank*.log" if logs
                         else "all ranks stopped; no rank logs kept")
        self.logs = logs


def _keep_if_reported(tmp: str | None, logs: list[str]) -> str | None:
    """After an interrupt: `tmp` (the run folder) when a rank's log holds one of its own reports
    ([tpsim] lines: a failure under way, the launcher gone), else remove it and return None. A rank
    stopped by the interrupt says nothing (SIGTERM), so the usual Ctrl-C leaves no folder behind."""
    if tmp is None:
        return None
    for log in logs:
        try:
            with open(log) as f:
                if any(line.startswith(LOG_TAG) for line in f):
                    return tmp
        except OSError:
            continue
    shutil.rmtree(tmp, ignore_errors=True)
    return None


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored inside, then as before (main thread only: Python sets handlers there alone)."""
    old = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if old is not None:                    # None: a handler not set from Python, left alone
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


class _Terminated(SystemExit):
    """SIGTERM/SIGHUP in the launcher: unwind (killing the ranks) and exit 128 + signal."""


def _on_signal(signum, _frame):
    raise _Terminated(128 + signum)


def install_signal_handlers() -> dict | None:
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


def restore_signal_handlers(old: dict | None) -> None:
    for sig, h in (old or {}).items():
        signal.signal(sig, h)


def _stalled_rank(logs: list[str], beats: list[str], failed: int | None, codes: list, timeout_s: float) -> str:
    """When a collective timed out (or the deadline passed): the rank that stopped first.

    A hung rank stops marking progress while its peers go on to the next collective and wait
    there until their timeout fires; the first rank to *exit* is then a waiting one, not the hung
    one. The rank with the fewest marks (ties: the oldest last mark) is the one that stopped. When
    every rank made as many marks (it stopped within a phase), a rank still running whose
    heartbeat is old (over half the timeout: its peers waited that long for it) is the one."""
    timed_out = failed is None or _timed_out(logs[failed])
    if not timed_out or len(beats) < 2:
        return ""
    now = time.monotonic()
    states = [read_beat(b) for b in beats]
    count = [st.count if st else 0 for st in states]
    lo = min(range(len(beats)), key=lambda r: (count[r], states[r].mark_s if count[r] else -1.0))
    hi = max(range(len(beats)), key=lambda r: count[r])
    if count[lo] < count[hi]:
        last = (f"its last progress mark was '{states[lo].phase}' #{count[lo]}, {now - states[lo].mark_s:.1f} s ago"
                if count[lo] else "it never reached its first progress mark")
        return (f"rank {lo} stopped making progress ({last}; rank {hi} reached '{states[hi].phase}' "
                f"#{count[hi]}): the other ranks timed out waiting for it in a collective")
    ages = {r: now - st.alive_s for r, st in enumerate(states) if st and st.alive_s > 0 and codes[r] is None}
    if ages:
        r = max(ages, key=ages.get)
        if ages[r] > max(2 * heartbeat_interval_s(timeout_s), timeout_s / 2):
            return (f"rank {r} stopped responding (its heartbeat is {ages[r]:.1f} s old{_last_mark(states[r], now)}): "
                    f"the other ranks timed out waiting for it in a collective; it is stopped or stuck")
    return ""                      # no rank is behind: nothing to blame on one rank


def _stale_heartbeat(beats: list[str], codes: list, timeout_s: float) -> str:
    """The running rank whose heartbeat is older than `timeout_s` (the stalest), as an error
    message; "" when every running rank's heartbeat is fresh (or has not started)."""
    now = time.monotonic()
    ages = {}
    for r, path in enumerate(beats):
        st = read_beat(path) if codes[r] is None else None
        if st and st.alive_s > 0:
            ages[r] = (now - st.alive_s, st)
    if not ages:
        return ""
    r = max(ages, key=lambda k: ages[k][0])
    age, st = ages[r]
    if age <= timeout_s:
        return ""
    return (f"rank {r} stopped responding: its heartbeat is {age:.1f} s old "
            f"(--timeout-s {timeout_s:g}{_last_mark(st, now)}); the process is stopped or stuck")


def _last_mark(st, now: float) -> str:
    return f"; last progress mark '{st.phase}' #{st.count}, {now - st.mark_s:.1f} s ago" if st and st.count else ""


def _timed_out(log: str) -> bool:
    try:
        with open(log) as f:
            text = f.read()
    except OSError:
        return False
    return any(line.startswith(LOG_TAG) and "timed out" in line for line in text.splitlines())


def _kill_all(procs: list) -> None:
    """Terminate our own worker processes (each leads its own session), then kill stragglers."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                os.killpg(p.pid, signal.SIGCONT)       # a stopped rank (SIGSTOP) acts on SIGTERM only once continued
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
        tagged = [line for line in lines if line.startswith(LOG_TAG)]
        out += tagged
        if not tagged and r == first and lines:
            out += [f"rank {r} log ends: " + " | ".join(x.strip() for x in lines[-n:])]
    if logs:
        out.append(f"rank logs: {os.path.dirname(logs[0])}/rank*.log")
    return "\n".join(out)

