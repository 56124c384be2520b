"""/proc helpers for the process-tree tests (Linux): which processes are alive, whose children
they are, and an assertion that a set of them is gone within a bound (what is left is killed, so
no test leaves processes behind for the next one)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
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


def ctrl_c_when(args: list[str], cwd: Path, tmp: Path, ready, within_s: float = 90) -> tuple[int, str, str, list[int]]:
    """Run `python -m tpsim ARGS` in `cwd` with TMPDIR=`tmp`, send it SIGINT (what Ctrl-C sends) once
    ready(ranks) is true (ranks: its live rank processes), and return (exit status, stdout, stderr,
    ranks). Fails if it is not ready within `within_s` (generous: the launcher imports torch first);
    the launcher never outlives the call, and the ranks are asserted gone 5 s after it ends."""
    p = subprocess.Popen([sys.executable, "-m", "tpsim", *args], cwd=cwd, env=dict(os.environ, TMPDIR=str(tmp)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    ranks: list[int] = []
    try:
        end = time.monotonic() + within_s
        while p.poll() is None and time.monotonic() < end and not ready(ranks := children(p.pid, "_worker_main")):
            time.sleep(0.05)
        assert p.poll() is None and ready(ranks), f"not ready to interrupt: ranks {ranks}, exit {p.poll()}"
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert_gone(ranks, 5.0, "ranks")
    return p.returncode, out, err, ranks
