"""One writer per output: an advisory lock on `<out>.lock` held while a sweep or calibration runs.

Two runs on the same --out would interleave their checkpoint/state writes (a calibration's state
file flip-flopped between two runs and its profile got contended numbers). The second run now
refuses at once, naming the first one's PID. The lock is flock(2) on an open file: the kernel
drops it when the holder dies however it dies (SIGKILL too), so a stale lock file never blocks.
The lock file is removed at release (re-checked after locking, so a run that opened the old file
just before it was removed starts over on the new one).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


def check_writable(out: str | os.PathLike, option: str = "--out") -> None:
    """`out` can be written (checked before any work, so a long run never fails at its last step):
    its directory exists and takes a new file (a probe created and removed: permission bits lie to
    root and on read-only mounts), and an existing `out` is a writable file."""
    p = Path(out)
    d = p.resolve().parent
    if p.is_dir():
        raise ValueError(f"{option} {out} is a directory; give a file path")
    if not d.is_dir():
        raise ValueError(f"{option} {out}: directory {d} does not exist")
    probe = d / f".{p.name}.{os.getpid()}.probe"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"{option} {out}: cannot write in {d}: {e.strerror}") from None
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{option} {out}: the existing file is not writable")


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
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ValueError(f"cannot write beside --out {out}: {e.strerror} ({path})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise OutputBusy(f"another {what} (pid {holder}) is writing {out}; wait for it to finish or "
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
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
