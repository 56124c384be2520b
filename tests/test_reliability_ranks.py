"""Rank processes never outlive their launcher, never run code from the working directory, and the
rendezvous store of a local group listens on loopback only (docs/reliability.md).

Process-tree tests: a real launcher (`python cli.py bench|calibrate ...`, tiny model, 2 gloo ranks)
runs in a subprocess; its rank PIDs are found in /proc (children of the launcher running the rank
bootstrap); the launcher gets SIGINT, SIGTERM or SIGKILL; every rank must be gone within seconds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import procs
from procs import children, stat as _stat
from tpsim.hw.beat import BEAT_ENV, read_beat

pytestmark = [pytest.mark.hw, pytest.mark.slow]
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
CLI = str(ROOT / "cli.py")
# long enough that the ranks are still decoding when the launcher is signalled
LONG_BENCH = ["bench", "--model", "tiny", "--prompt", "16", "--gen", "400", "--repeats", "200", "--warmup", "0",
              "--device", "cpu", "--backend", "gloo", "--schedule", "standard", "--timeout-s", "120"]


def rank_pids(launcher: int) -> list[int]:
    """The launcher's children running a rank (the bootstrap, or the old `-m tpsim.hw.dist`)."""
    return sorted(set(children(launcher, "_worker_main")) | set(children(launcher, "tpsim.hw.dist")))


def start(args: list[str], cwd, n: int = 2, settle: bool = True) -> tuple[subprocess.Popen, list[int]]:
    """Start a launcher; return it and its `n` rank PIDs, with `settle` once every rank is at work: it
    made its first progress mark (hw.beat: torch imported, its group joined, its first phase begun)."""
    p = subprocess.Popen([sys.executable, CLI, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    end = time.monotonic() + 90
    ranks: list[int] = []
    while time.monotonic() < end and len(ranks) < n:
        if p.poll() is not None:
            pytest.fail(f"launcher exited early ({p.returncode}): {p.stdout.read().decode()[-2000:]}")
        ranks = rank_pids(p.pid)
        time.sleep(0.1)
    assert len(ranks) == n, f"found ranks {ranks}"
    beats = [Path(_env(r)[BEAT_ENV]) for r in ranks] if settle else []
    while beats and time.monotonic() < end and not all((st := read_beat(b)) and st.count for b in beats):
        if p.poll() is not None:
            pytest.fail(f"launcher exited early ({p.returncode}): {p.stdout.read().decode()[-2000:]}")
        time.sleep(0.05)
    assert not beats or all((st := read_beat(b)) and st.count for b in beats), "a rank never began its work"
    assert all(_stat(r) for r in ranks), "a rank ended before the test signalled the launcher"
    return p, ranks


def assert_gone(ranks: list[int], within_s: float = 2.0) -> None:
    procs.assert_gone(ranks, within_s, "ranks")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_bench_ranks_end_with_their_launcher(tmp_path, sig):
    p, ranks = start(LONG_BENCH, tmp_path)
    os.kill(p.pid, sig)
    p.wait(timeout=20)
    assert_gone(ranks)
    if sig == signal.SIGTERM:
        assert p.returncode == 128 + signal.SIGTERM, p.stdout.read().decode()[-2000:]


def test_calibrate_ctrl_c_ends_every_rank_and_a_second_run_on_the_same_out_refuses(tmp_path):
    out = tmp_path / "p.json"
    args = ["calibrate", "--quick", "--nproc", "2", "--models", "tiny", "--prompt", "16", "--gen", "9",
            "--out", str(out), "--timeout-s", "120"]
    p, ranks = start(args, tmp_path)
    # a second calibration on the same --out while the first lives: refused at once, nothing started
    second = subprocess.run([sys.executable, CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"another calibration (pid {p.pid}) is writing {out}" in second.stderr
    assert "Traceback" not in second.stderr
    assert set(rank_pids(p.pid)) == set(ranks)          # the first run's ranks were not disturbed
    os.kill(p.pid, signal.SIGINT)                       # what Ctrl-C sends
    p.wait(timeout=20)
    assert_gone(ranks)
    state = Path(f"{out}.state.json")
    before = state.stat().st_mtime_ns if state.exists() else None
    time.sleep(1.5)
    assert (state.stat().st_mtime_ns if state.exists() else None) == before, "the state file is still written"


def test_calibrate_ctrl_c_says_what_the_state_file_keeps(tmp_path):
    """Ctrl-C once a group is finished: the launcher says what a rerun continues from (before: click's
    bare "Aborted!", exit 1), exits 130, and leaves no rank behind, nor an unnamed rank-log folder."""
    out, tmp = tmp_path / "p.json", tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([sys.executable, CLI, "calibrate", "--quick", "--nproc", "2", "--models", "tiny", "--tp", "2",
                          "--prompt", "8", "--gen", "4", "--out", str(out), "--timeout-s", "120"],
                         cwd=tmp_path, env=dict(os.environ, TMPDIR=str(tmp)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    state = Path(f"{out}.state.json")
    end = time.monotonic() + 90
    while not state.exists() and p.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    ranks = rank_pids(p.pid)
    assert state.exists() and len(ranks) == 2, "no group finished while the ranks ran"
    os.kill(p.pid, signal.SIGINT)                       # what Ctrl-C sends
    _, err = p.communicate(timeout=30)
    assert_gone(ranks)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert "finished group(s) are kept in " + str(state) + ": rerun the same command to continue" in err, err
    left = list(tmp.glob("tpsim-run-*"))
    assert all(f"rank logs: {d}/rank*.log" in err for d in left), (left, err)


def test_ranks_do_not_run_code_from_the_working_directory(tmp_path):
    """Booby traps where the user runs tpsim (./hw/rank.py, ./tpsim/, ./_checkout.py) and another
    `tpsim` first on PYTHONPATH, as another installed copy would be: neither the launcher nor its
    ranks may import any of them; the ranks run the launcher's own tpsim (this checkout)."""
    work, other = tmp_path / "work", tmp_path / "other"
    marker = tmp_path / "TRAP_RAN"
    trap = f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\nimport sys\nsys.exit(99)\n"
    for d in (work / "hw", work / "tpsim" / "hw", other / "tpsim" / "hw"):
        d.mkdir(parents=True)
        (d / "__init__.py").write_text(trap)
        (d / "rank.py").write_text(trap)
    for d in (work / "tpsim", other / "tpsim"):
        (d / "__init__.py").write_text(trap)
    (work / "_checkout.py").write_text(trap)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(other), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, CLI, "check", "--model", "tiny", "--tp", "2", "--device", "cpu",
                        "--prompt", "8", "--gen", "3", "--schedule", "standard", "--timeout-s", "120"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert not marker.exists(), f"imported a booby trap: {marker.read_text()}"
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* write them) of sockets listening on `port`."""
    out = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            addr, p = cols[1].rsplit(":", 1)
            if cols[3] == "0A" and int(p, 16) == port:          # 0A: LISTEN
                out.append(addr)
    return out


def test_rendezvous_store_of_a_local_group_listens_on_loopback_only(tmp_path):
    p, ranks = start(LONG_BENCH, tmp_path, settle=False)      # no settling: it waits for the listener below
    try:
        env = dict(kv.split("=", 1) for kv in Path(f"/proc/{ranks[0]}/environ").read_bytes().decode()
                   .split("\0") if "=" in kv)
        assert env["MASTER_ADDR"] == "127.0.0.1"
        end = time.monotonic() + 60                       # rank 0 may still be importing torch
        while not (addrs := _listeners(int(env["MASTER_PORT"]))) and time.monotonic() < end:
            time.sleep(0.1)
        assert addrs, "no socket listens on MASTER_PORT"
        loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
        assert set(addrs) <= loopback, f"the store listens on {addrs} (all interfaces?), not 127.0.0.1 only"
    finally:
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=20)
        assert_gone(ranks)


def test_a_hung_rank_is_named_not_the_rank_whose_wait_expired(tmp_path):
    """Rank 0 hangs before its prefill; rank 1 enters the prefill's first collective and its wait
    times out first. The report must blame rank 0."""
    r = subprocess.run([sys.executable, CLI, "bench", "--model", "tiny", "--prompt", "16", "--gen", "5",
                        "--repeats", "1", "--warmup", "0", "--device", "cpu", "--schedule", "standard",
                        "--timeout-s", "5", "--fault", "0:prefill:hang"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    first = r.stderr.strip().splitlines()[0]
    assert "rank 0 stopped making progress" in first, r.stderr
    assert "Traceback" not in r.stderr


def test_default_timeout_is_proportionate_to_the_work():
    from tpsim.commands.bench import _config, bench_cmd

    def timeout(*args):
        kw = dict(bench_cmd.make_context("bench", ["--device", "cpu", *args]).params)
        kw.pop("trace_path", None)
        kw.pop("stack_name", None)
        return _config("bench", compile=kw.pop("compile_"), deadline_s=kw.pop("deadline_s"), **kw).timeout_s
    tiny = timeout("--model", "tiny")
    assert 30 <= tiny <= 40                          # was 300 s for everything
    big = timeout("--model", "llama-3.1-8b", "--prompt", "4096", "--tp", "2", "--gpu-mem-gib", "1000")
    assert big > 10 * tiny
    assert timeout("--model", "tiny", "--timeout-s", "7") == 7


def _env(pid: int) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                .split("\0") if "=" in kv)


def test_a_stopped_rank_is_named_from_its_stale_heartbeat(tmp_path):
    """SIGSTOP of RANK=1 mid-decode (issue #29 item 2): every rank is in the same phase (the
    progress marks tie), so only the heartbeat tells the stopped rank from the waiting one. The
    launcher names rank 1 (before: rank 0, whose wait expired, after up to 2x --timeout-s), ends
    the run (exit 1: a failed run, not a usage error) and leaves no rank behind."""
    # --timeout-s 5: the launcher names rank 1 once its heartbeat is 5 s stale, or (if rank 0's wait
    # expires first) from its heartbeat then older than half the timeout; either way the same message
    args = [a if a != "120" else "5" for a in LONG_BENCH]
    p, ranks = start(args, tmp_path, settle=False)
    by_rank = {int(_env(r)["RANK"]): r for r in ranks}
    end = time.monotonic() + 90
    beat = Path(_env(by_rank[1])["TPSIM_BEAT_FILE"])
    while time.monotonic() < end and not (beat.exists() and "decode" in beat.read_bytes().decode(errors="replace")):
        time.sleep(0.05)                                              # rank 1 has started decoding
    os.kill(by_rank[1], signal.SIGSTOP)
    try:
        out, _ = p.communicate(timeout=120)
    finally:
        for r in ranks:
            if _stat(r):
                os.kill(r, signal.SIGCONT)
    text = out.decode()
    assert p.returncode == 1, text[-2000:]
    first = text.strip().splitlines()[0]
    assert first.startswith("Error: rank 1 stopped responding"), text[-2000:]
    assert "heartbeat" in first and "Traceback" not in text
    assert_gone(ranks)


def test_ranks_die_with_a_launcher_killed_while_they_import_torch(tmp_path):
    """SIGKILL of the launcher the moment its ranks exist (issue #29 item 10): they are starting
    Python or importing torch (seconds), and must still be gone within 2 s. Before, the tie to
    the launcher was installed after `import torch`: the ranks lived on for 4-7 s."""
    p = subprocess.Popen([sys.executable, CLI, *LONG_BENCH], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    end = time.monotonic() + 90
    ranks: list[int] = []
    while time.monotonic() < end and len(ranks) < 2 and p.poll() is None:
        ranks = rank_pids(p.pid)
        time.sleep(0.01)
    assert len(ranks) == 2, f"found ranks {ranks}"
    # no rank has torch loaded yet (its shared library is not mapped): the kill lands before or during the import
    loaded = [r for r in ranks if "libtorch" in Path(f"/proc/{r}/maps").read_text(errors="replace")]
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=20)
    assert_gone(ranks)
    assert not loaded, f"ranks {loaded} had imported torch already: the test did not kill them mid-import"
