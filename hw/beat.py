"""A rank's beat file: its progress marks and its heartbeat, which the launcher (hw.dist) reads to
name the rank that stopped. Standard library only (no torch): the launcher and the ranks share it.

One 72-byte file per rank (in the launcher's run directory, named by TPSIM_BEAT_FILE), written by
the rank through an mmap (a store to memory, no system call: cheap inside timed decode loops):

    offset  0  int64    count of progress marks (`mark`: phases such as 'prefill', 'decode', 'group')
    offset  8  float64  time.monotonic() of the last mark
    offset 16  48 bytes the last mark's phase name (UTF-8, NUL-padded)
    offset 64  float64  time.monotonic() of the last heartbeat (0: none yet)

The heartbeat is a daemon thread that rewrites its timestamp every `interval_s` from the moment the
rank has joined its process group (`start_heartbeat`). Waiting in a collective does not stop it
(torch releases the GIL while a collective waits); a stopped process (SIGSTOP, a debugger) or a
rank stuck in native code holding the GIL does. So a rank whose heartbeat is older than
--timeout-s is the one that hung, even when every rank is in the same phase (the progress marks
then tie), and the launcher names it as soon as its heartbeat is that stale, not after its peers'
collectives time out. CLOCK_MONOTONIC is one clock for every process of the machine, so the
launcher compares the ranks' timestamps with its own `time.monotonic()`.
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass

BEAT_ENV = "TPSIM_BEAT_FILE"           # the rank's beat file (set by the launcher; unset: no marks)

_MARK = struct.Struct("<qd48s")        # count, mark time, phase
_ALIVE = struct.Struct("<d")           # heartbeat time
SIZE = _MARK.size + _ALIVE.size        # 72 bytes


@dataclass(frozen=True)
class BeatState:
    """What a rank's beat file says: `count` marks (0: none yet), the last at `mark_s` in `phase`;
    its heartbeat last at `alive_s` (0.0: not started). Times are time.monotonic() seconds."""

    count: int
    mark_s: float
    phase: str
    alive_s: float


class _Beat:
    """The rank's side of its beat file (one per process, opened at first use)."""

    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self.mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.count = 0

    def mark(self, phase: str) -> None:
        self.count += 1
        self.mm[:_MARK.size] = _MARK.pack(self.count, time.monotonic(), phase.encode()[:48])

    def alive(self) -> None:
        self.mm[_MARK.size:SIZE] = _ALIVE.pack(time.monotonic())


_beat: list[_Beat] = []


def _open() -> _Beat | None:
    path = os.environ.get(BEAT_ENV)
    if not path:
        return None
    if not _beat:
        try:
            _beat.append(_Beat(path))
        except OSError:
            os.environ.pop(BEAT_ENV, None)         # no beat file: run without marks
            return None
    return _beat[0]


def mark(phase: str) -> None:
    """Record that this rank got this far (the launcher reads it to name the rank that stopped)."""
    b = _open()
    if b is not None:
        b.mark(phase)


def start_heartbeat(interval_s: float) -> bool:
    """Refresh this rank's heartbeat every `interval_s` from now on (a daemon thread); False when
    the launcher gave no beat file. A second call does nothing."""
    b = _open()
    if b is None or any(t.name == "tpsim-heartbeat" for t in threading.enumerate()):
        return b is not None

    def beat() -> None:
        while not _stopped.is_set():
            b.alive()
            _stopped.wait(interval_s)
    b.alive()
    threading.Thread(target=beat, name="tpsim-heartbeat", daemon=True).start()
    return True


def stop_heartbeat() -> None:
    """This rank is done (its work returned or failed) and only exits from here: its heartbeat is
    cleared, so the seconds interpreter and torch teardown may take are never read as a hang."""
    _stopped.set()
    if _beat:
        _beat[0].mm[_MARK.size:SIZE] = _ALIVE.pack(0.0)


_stopped = threading.Event()


def heartbeat_interval_s(timeout_s: float) -> float:
    """A tenth of the collective timeout, at most 0.5 s: many beats before a live rank could look stale."""
    return min(0.5, timeout_s / 10)


def read_beat(path: str) -> BeatState | None:
    """A rank's beat file (None when it does not exist yet or is short)."""
    try:
        with open(path, "rb") as f:
            data = f.read(SIZE)
    except OSError:
        return None
    if len(data) < SIZE:
        return None
    n, t, ph = _MARK.unpack_from(data)
    (alive,) = _ALIVE.unpack_from(data, _MARK.size)
    return BeatState(n, t, ph.rstrip(b"\0").decode(errors="replace"), alive)
