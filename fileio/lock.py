"""One writer per output: an advisory lock on `<out>.lock` held while a sweep or calibration runs.

Two runs on the same --out would interleave their checkpoint/state writes (a calibration's state
file flip-flopped between two runs and its profile got contended numbers). The second run now
refuses at once, naming the first one's PID. The lock is flock(2) on an open file: the kernel
drops it when the holder dies however it dies (SIGKILL too), so a stale lock file never blocks.
The lock file is opened O_NOFOLLOW and must be a regular file with one link (fileio/policy.py):
a planted `OUT.lock -> victim` is refused, never truncated.
The lock file is removed at release (re-checked after locking, so a run that opened the old file
just before it was removed starts over on the new one).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from tpsim.fileio.policy import check_output, open_side_file


def check_writable(out: str | os.PathLike, option: str = "--out", *, stdout_ok: bool = False) -> None:
    """The output-path policy's up-front check (sim/fileio.check_output): a regular file or a new
    name in a writable directory (or `-` where `stdout_ok`); devices, symlinks, FIFOs refused."""
    check_output(out, option, stdout_ok=stdout_ok)


class OutputBusy(ValueError):
    """Another live run holds the lock on this output."""


def lock_path(out: str | os.PathLike) -> str:
    return f"{out}.lock"


def acquire(out: str | os.PathLike, what: str = "run") -> int:
    """Lock `out` for this process; returns the lock's fd (inheritable by passing it on to children,
    which then hold the lock too). Raises OutputBusy when another live process holds it, and
    ValueError when the lock file cannot be created (the output's directory is not writable)."""
    import fcntl   # lazy: POSIX-only; the rest of this module (check_writable, which predict uses) imports anywhere
    path = lock_path(out)
    while True:
        fd = open_side_file(path)       # O_NOFOLLOW, a regular file of its own: a planted link is refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                pid, _, kind = os.pread(fd, 128, 0).decode(errors="replace").strip().partition(" ")
            finally:
                os.close(fd)
            # the holder wrote its own kind ("sweep", "calibration"): a sweep blocked by a calibration
            # says so, not "another sweep"
            raise OutputBusy(f"another {kind or what} (pid {pid or '?'}) is writing {out}; wait for it to finish or "
                             f"stop it, or choose another --out") from None
        # the holder before us may have removed the file between our open and our flock: then
        # the lock we hold is on a dead inode; start over on the path's current file
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {what}\n".encode(), 0)
    _paths[fd] = path
    return fd


_paths: dict[int, str] = {}


def release(fd: int) -> None:
    """Remove the lock file (while still holding the lock, so nobody else holds one on it) and
    drop the lock. Children that inherited the fd keep holding it on the unlinked file until they
    exit; a new run then locks a new file: only the launcher calls this, after its ranks are gone."""
    path = _paths.pop(fd, None)
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        os.close(fd)                # closing the last descriptor drops the flock
    except OSError:
        pass


@contextlib.contextmanager
def output_lock(out: str | os.PathLike, what: str = "run") -> Iterator[int]:
    fd = acquire(out, what)
    try:
        yield fd
    finally:
        release(fd)
