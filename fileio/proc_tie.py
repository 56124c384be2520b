"""Children that die with their parent: the one tie every child process of tpsim installs (sweep
pool workers here in sim/, rank processes in hw/). Standard library only (no torch, no numpy), so a
rank installs it before `import torch` (hw.dist._BOOT) and a sweep worker before its first point.

A child is tied twice over, either way enough (docs/reliability.md, "Child processes"):
  * the kernel's parent-death signal (Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`): the kernel kills
    the child when the thread that forked it exits, however (SIGKILL of the parent included). It is
    checked right after it is set: a parent that died before has already reparented the child, and
    no signal will come, so the child ends itself;
  * a pipe whose write end only the parent holds: a daemon thread in the child blocks reading the
    read end and returns (EOF) once the parent's end is closed, at the parent's exit whatever its
    cause. This covers what the signal does not (a parent gone before prctl, non-Linux systems,
    a forking thread that is not the process) and lets the parent end its children on purpose by
    closing its end (`ParentTie.cut`).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable        # not typing: the tie is on every rank's start-up path

PR_SET_PDEATHSIG = 1                   # <linux/prctl.h>

WATCH_FD_ENV = "TPSIM_WATCH_FD"        # a rank's end of the launcher pipe (EOF: the launcher is gone)
LAUNCHER_PID_ENV = "TPSIM_LAUNCHER_PID"
LOG_TAG = "[tpsim]"


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits; False where there is
    no prctl (not Linux, or no libc found)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_pipe(fd: int, on_eof: Callable[[], None], name: str = "tpsim-parent-watchdog") -> threading.Thread:
    """A daemon thread that blocks reading `fd` and calls `on_eof` when the read returns EOF (or
    fails): the last write end is closed, i.e. the parent is gone or cut the tie."""
    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        on_eof()
    t = threading.Thread(target=watch, name=name, daemon=True)
    t.start()
    return t


def tie_to_parent(read_fd: int | None, parent_pid: int | None, on_death: Callable[[], None]) -> None:
    """Install both ties in this (child) process: `on_death` runs when the parent is gone (it must
    end the process). `parent_pid` is the pid the parent had when it started us (to catch a parent
    that died before the signal was set); `read_fd` is our end of the parent's pipe (None: no pipe)."""
    if set_parent_death_signal() and parent_pid is not None and os.getppid() != parent_pid:
        on_death()                     # reparented before prctl: no signal will ever come
    if read_fd is not None:
        watch_pipe(read_fd, on_death)


class ParentTie:
    """The parent's side: a pipe whose read end its children inherit (by fork, or `pass_fds` to a
    new program) and whose write end stays here only. `cut()` closes the write end: every child
    still tied sees EOF and ends. os.pipe's fds are not inheritable, so an exec'd child gets the
    read end only when it is passed on explicitly; a forked child inherits both and closes the
    write end first thing (`tie_pool_worker`)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.parent_pid = os.getpid()

    def close_read(self) -> None:
        """The parent's copy of the read end, once every child has its own."""
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def cut(self) -> None:
        """End every tied child (they see EOF at once), and release both fds."""
        self.close_read()
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def pool_initargs(self) -> tuple[int, int, int]:
        """`initargs` for a fork-started pool whose `initializer` is `tie_pool_worker`."""
        return (self.read_fd, self.write_fd, self.parent_pid)


def tie_pool_worker(read_fd: int, write_fd: int, parent_pid: int) -> None:
    """Pool initializer (fork start method): close the inherited write end (else this worker's own
    copy would keep the pipe open forever), then tie to the parent; on its death the worker exits
    at once (os._exit: no cleanup of a pool whose parent is gone). A worker never kills its process
    group: that is its parent's (the user's shell pipeline, the other workers)."""
    try:
        os.close(write_fd)
    except OSError:
        pass
    tie_to_parent(read_fd, parent_pid, lambda: os._exit(1))


def tie_rank_from_env() -> None:
    """A rank's tie to its launcher (hw.dist), from the environment the launcher gave it: the pipe
    fd and the launcher's pid (both removed from the environment, so nothing the rank starts
    inherits them). On the launcher's death the rank kills its own session (it leads one: hw.dist
    starts it with start_new_session), i.e. itself and whatever it started. Called by the rank's
    boot code before `import torch`; a second call is a no-op."""
    fd = os.environ.pop(WATCH_FD_ENV, None)
    parent = os.environ.pop(LAUNCHER_PID_ENV, None)
    if fd is None and parent is None:
        return
    tie_to_parent(int(fd) if fd is not None else None, int(parent) if parent is not None else None,
                  die_with_session)


def die_with_session() -> None:
    """End this rank and everything in its session (it is the session's leader)."""
    print(f"{LOG_TAG} rank {os.environ.get('RANK', '?')}: the launcher is gone; ending", file=sys.stderr, flush=True)
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    except OSError:
        pass
    os._exit(1)
