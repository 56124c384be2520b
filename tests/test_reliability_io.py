"""Issue #29 items 3-5: the output-path policy, side files, the input-file policy and the bounds
table, each shown on the real CLI (click's CliRunner, in process) with real files, symlinks,
FIFOs and device nodes (docs/reliability.md). Pure Python: no torch but for the calibrate case."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.fileio import policy as fileio
from tpsim.fileio.lock import acquire, check_writable, release

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
TRACE = ["trace", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "8"]
SWEEP = ["sweep", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "8"]
IMPORT = ["profiles", "import-nccl-tests", str(FIX / "nccl_tests" / "ar_v2_13.txt"), "--extends", "h100-sxm"]


def one_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def invoke(args, **kw):
    return CliRunner().invoke(cli.main, args, **kw)


# ------------------------------------------------------------------ item 3: --out is a regular file or -

@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


def _special(tmp_path, kind: str, victim: Path) -> Path:
    """An existing --out that is not a regular file: a symlink to a victim, a FIFO, a device."""
    if kind == "device":
        return Path("/dev/null")                      # a character device anyone may name
    p = tmp_path / f"out-{kind}"
    if kind == "symlink":
        p.symlink_to(victim)
    else:
        os.mkfifo(p)
    return p


@pytest.mark.parametrize("cmd", [TRACE, SWEEP, IMPORT], ids=["trace", "sweep", "import-nccl-tests"])
@pytest.mark.parametrize("kind", ["symlink", "fifo", "device"])
def test_an_existing_out_that_is_not_a_regular_file_is_refused(tmp_path, victim, cmd, kind):
    """Before: `--out /dev/full` turned the device into a regular file; a symlinked --out was replaced."""
    out = _special(tmp_path, kind, victim)
    line = one_line_exit_2(invoke([*cmd, "--out", str(out)]))
    assert f"--out {out} is a " in line and "not a regular file" in line
    assert victim.read_text() == "precious\n"
    if kind == "symlink":
        assert out.is_symlink()
    if kind == "fifo":
        assert out.is_fifo()


def test_sweeps_json_twin_obeys_the_same_policy(tmp_path, victim):
    (tmp_path / "s.json").symlink_to(victim)
    line = one_line_exit_2(invoke([*SWEEP, "--out", str(tmp_path / "s.csv")]))
    assert "s.json is a symbolic link" in line and victim.read_text() == "precious\n"


def test_out_dash_writes_stdout_on_purpose(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli.main, [*TRACE, "--out", "-"])       # stdout and stderr kept apart
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["traceEvents"] and "wrote stdout" in r.stderr
    r = CliRunner().invoke(cli.main, [*SWEEP, "--out", "-"])
    assert r.exit_code == 0 and r.stdout.splitlines()[0].startswith("model,tp,batch"), r.output
    assert os.listdir(tmp_path) == []                # no file named '-', no '-.json' twin or checkpoint


def test_out_dash_is_refused_where_a_file_is_needed(tmp_path):
    line = one_line_exit_2(invoke([*IMPORT, "--out", "-"]))
    assert "--out -: this command writes a file" in line


def test_atomic_writer_leaves_the_old_file_or_the_new_one_and_no_temporaries(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    fileio.write_json_atomic(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1} and os.listdir(tmp_path) == ["r.json"]
    fileio.write_json_atomic(out, {"x": [1.0, float("nan")], "y": float("inf")})   # bare NaN is invalid JSON
    assert json.loads(out.read_text(), parse_constant=pytest.fail) == {"x": [1.0, None], "y": None}
    assert os.listdir(tmp_path) == ["r.json"]


# ------------------------------------------------------------------ item 4: side files never followed

def test_a_planted_lock_symlink_is_refused_not_truncated(tmp_path, victim):
    """Before: OUT.lock -> victim was truncated and given the pid."""
    (tmp_path / "s.csv.lock").symlink_to(victim)
    line = one_line_exit_2(invoke([*SWEEP, "--out", str(tmp_path / "s.csv")]))
    assert "s.csv.lock is a symbolic link" in line and victim.read_text() == "precious\n"


def test_a_hard_linked_lock_is_refused(tmp_path, victim):
    os.link(victim, tmp_path / "s.csv.lock")
    with pytest.raises(ValueError, match="2 hard links"):
        acquire(tmp_path / "s.csv")
    assert victim.read_text() == "precious\n"


def test_a_planted_checkpoint_symlink_or_fifo_is_refused(tmp_path, victim):
    """Before: OUT.partial.jsonl -> victim was appended to; a FIFO would block the sweep."""
    (tmp_path / "a.csv.partial.jsonl").symlink_to(victim)
    line = one_line_exit_2(invoke([*SWEEP, "--out", str(tmp_path / "a.csv")]))
    assert "a.csv.partial.jsonl" in line and victim.read_text() == "precious\n"
    os.mkfifo(tmp_path / "b.csv.partial.jsonl")
    t = time.monotonic()
    line = one_line_exit_2(invoke([*SWEEP, "--out", str(tmp_path / "b.csv")]))
    assert "is a FIFO" in line and time.monotonic() - t < 30


def test_the_writable_probe_has_an_unpredictable_name(tmp_path, victim):
    """Before: `.OUT.PID.probe` could be planted as a symlink; the probe is now mkstemp's (O_EXCL)."""
    planted = tmp_path / f".r.json.{os.getpid()}.probe"
    planted.symlink_to(victim)
    check_writable(tmp_path / "r.json")
    assert victim.read_text() == "precious\n" and planted.is_symlink()
    assert sorted(os.listdir(tmp_path)) == sorted([planted.name, victim.name])


def test_the_lock_still_works_and_is_removed(tmp_path):
    fd = acquire(tmp_path / "s.csv", "sweep")
    # the holder's pid, then its kind: a second run's busy message names both (fileio/lock.py)
    assert (tmp_path / "s.csv.lock").read_text().split() == [str(os.getpid()), "sweep"]
    release(fd)
    assert not (tmp_path / "s.csv.lock").exists()


# ------------------------------------------------------------------ item 5: inputs are bounded regular files

def _zero_link(tmp_path, name: str) -> Path:
    p = tmp_path / name
    p.symlink_to("/dev/zero")
    return p


@pytest.mark.parametrize("args", [
    lambda z: ["collective", "--group", "8", "--compare", str(z)],
    lambda z: ["profiles", "import-nccl-tests", str(z), "--extends", "h100-sxm", "--out", str(z.parent / "o.json")],
    lambda z: ["predict", "--model", "tiny", "--tp", "2", "--profile", str(z)],
    lambda z: ["models", "--show", str(z)],
], ids=["collective--compare", "import-nccl-tests", "--profile", "hf-config"])
def test_a_symlink_to_dev_zero_is_refused_at_once(tmp_path, args):
    """Before: read until memory ran out."""
    z = _zero_link(tmp_path, "in.json")
    t = time.monotonic()
    line = one_line_exit_2(invoke(args(z)))
    assert str(z) in line and "is a character device, not a regular file" in line
    assert time.monotonic() - t < 10


def test_compare_measured_refuses_dev_zero_and_fifos(tmp_path):
    z = _zero_link(tmp_path, "m.json")
    f = tmp_path / "f.json"
    os.mkfifo(f)
    r = invoke(["compare", "--measured", str(z), "--measured", str(f), "--profile", "h100-sxm",
                "--out-dir", str(tmp_path / "cmp")])
    assert "Traceback" not in r.output and r.exit_code in (1, 2), r.output
    assert "m.json is a character device" in r.output or "nothing could be compared" in r.output
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    errors = " ".join(x["error"] for x in data["failed"])
    assert "m.json is a character device" in errors and "f.json is a FIFO" in errors


def test_an_oversized_input_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)                   # sparse: costs no disk
    t = time.monotonic()
    line = one_line_exit_2(invoke(["predict", "--model", "tiny", "--tp", "2", "--profile", str(big)]))
    assert "over the 64 MiB limit" in line and time.monotonic() - t < 5


# ------------------------------------------------------------------ item 5: one value never buys unbounded work

@pytest.mark.parametrize("args, says", [
    (["predict", "--model", "tiny", "--tp", "2", "--schedule", "token-split:1000"],
     "token-split:N's N (micro-batches) must be in 2..64"),                              # was: 11+ minutes
    (["predict", "--model", "tiny", "--tp", "2", "--schedule", "spd:0-999999999"], "spd layer 999999999 outside"),
    (["collective", "--group", "2000000"], "--group must be in 1..16384"),               # was: out of memory
    (["collective", "--group", "8", "--bytes", str(10 ** 23)], "--bytes must be in 1..1099511627776"),
    (["collective", "--group", "8", "--gpus-per-node", "100000"], "--gpus-per-node must be in 1..1024"),
])
def test_counts_beyond_the_bounds_table_are_refused_at_once(args, says):
    t = time.monotonic()
    assert says in one_line_exit_2(invoke(args))
    assert time.monotonic() - t < 5


def _hf(tmp_path, **edit) -> Path:
    cfg = json.loads((FIX / "hf" / "llama-3.1-8b" / "config.json").read_text())
    cfg.update(edit)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("layers", [10 ** 6, 10 ** 9])
def test_hf_layer_counts_are_bounded(tmp_path, layers):
    """Before: 10^6 layers took minutes and 2.3 GB, 10^9 took 8 GB."""
    t = time.monotonic()
    line = one_line_exit_2(invoke(["predict", "--model", str(_hf(tmp_path, num_hidden_layers=layers)), "--tp", "1"]))
    assert "'num_hidden_layers' must be in 1..1024" in line and time.monotonic() - t < 5


def _profile(tmp_path, doc: dict, name="p.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "p", "extends": "h100-sxm", **doc}))
    return p


@pytest.mark.parametrize("field", ["sockets", "nics_per_node"])
def test_profile_socket_and_nic_counts_are_bounded(tmp_path, field):
    """Before: 1e9 sockets or NICs grew to 4.5 GB."""
    p = _profile(tmp_path, {"topology": {field: {"value": 1e9, "source": "hostile"}}})
    t = time.monotonic()
    line = one_line_exit_2(invoke(["predict", "--model", "tiny", "--tp", "2", "--profile", str(p)]))
    assert f"field 'topology.{field}' must be a whole number in" in line and time.monotonic() - t < 5


def test_300k_compute_points_are_refused_before_they_are_indexed(tmp_path):
    """Before: 300k points took 83 s to load."""
    pts = [{"kind": "gemm", "attrs": {"m": i + 1, "n": 64, "k": 64}, "time_s": 1e-5} for i in range(300_000)]
    p = _profile(tmp_path, {"compute": {"tables": [{"source": "hostile", "points": pts}]}})
    t = time.monotonic()
    line = one_line_exit_2(invoke(["predict", "--model", "tiny", "--tp", "2", "--profile", str(p)]))
    assert "has 300000 entries; at most 100000 in any list" in line and time.monotonic() - t < 30
    pts = pts[:60_000]                               # under the list cap, over the compute-points bound
    p = _profile(tmp_path, {"compute": {"tables": [{"source": "hostile", "points": pts}]}})
    line = one_line_exit_2(invoke(["predict", "--model", "tiny", "--tp", "2", "--profile", str(p)]))
    assert "60000 compute points; at most 50000" in line


def test_calibrate_checks_the_size_before_any_process_starts(tmp_path):
    """Before: `calibrate --models llama-3.1-405b` on a 2-core CPU started with no size check."""
    pytest.importorskip("torch")
    t = time.monotonic()
    line = one_line_exit_2(invoke(["calibrate", "--models", "llama-3.1-405b", "--nproc", "64",
                                   "--out", str(tmp_path / "p.json")]))
    assert "--models llama-3.1-405b: one layer with its embedding and head" in line and "GiB per rank" in line
    assert time.monotonic() - t < 10 and os.listdir(tmp_path) == []


def test_calibrate_refuses_a_planted_state_file_link_before_any_process_starts(tmp_path, victim):
    pytest.importorskip("torch")
    (tmp_path / "p.json.state.json").symlink_to(victim)
    line = one_line_exit_2(invoke(["calibrate", "--quick", "--models", "tiny", "--out", str(tmp_path / "p.json")]))
    assert "p.json.state.json is a symbolic link" in line and victim.read_text() == "precious\n"


@pytest.mark.hw
def test_bench_out_obeys_the_policy_before_any_rank_starts(tmp_path, victim):
    pytest.importorskip("torch")
    from tpsim.commands.bench import bench_cmd
    link = tmp_path / "r.json"
    link.symlink_to(victim)
    for out, says in ((link, "is a symbolic link"), ("/dev/null", "is a character device"),
                      ("-", "this command writes a file")):
        t = time.monotonic()
        line = one_line_exit_2(CliRunner().invoke(bench_cmd, ["--model", "tiny", "--device", "cpu", "--out", str(out)]))
        assert says in line and time.monotonic() - t < 10
    assert victim.read_text() == "precious\n" and link.is_symlink()


def test_calibrate_refuses_a_device_out_before_any_process_starts(tmp_path):
    pytest.importorskip("torch")
    line = one_line_exit_2(invoke(["calibrate", "--quick", "--models", "tiny", "--out", "/dev/null"]))
    assert "--out /dev/null is a character device" in line
