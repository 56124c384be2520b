"""/proc helpers for the process-tree tests (Linux): which processes are alive, whose children
they are, and an assertion that a set of them is gone within a bound (what is left is killed, so
no test leaves processes behind for the next one)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a live process, None when it is gone (a zombie counts as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else (fields[0], int(fields[1]))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children(parent: int, marker: str = "") -> list[int]:
    """Live children of `parent` whose command line contains `marker`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(int(d))
            if st and st[1] == parent and marker in cmdline(int(d)):
                out.append(int(d))
    return sorted(out)


def assert_gone(pids: list[int], within_s: float, what: str = "processes") -> None:
    """Every pid is gone within `within_s` of now (those left are killed, then the test fails)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and any(stat(p) for p in pids):
        time.sleep(0.02)
    alive = [p for p in pids if stat(p)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"{what} {alive} outlived their parent by {within_s} s"
