"""Every bad CLI value is refused before any work with one line and exit 2; outputs are checked
writable first; resume never trusts stale inputs; resource bounds hold (docs/reliability.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.commands import sweep_grid as sw
from tpsim.sim.grid import grid
from tpsim.sim.hardware.profile import builtin_dir

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "nccl_tests"


def one_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, r.output
    return lines[0]


# ------------------------------------------------------------------ bench / check (no process starts)

BENCH = ["--model", "tiny", "--device", "cpu"]


@pytest.mark.hw
@pytest.mark.parametrize("args, says", [
    (["--prompt", "0"], "--prompt must be in 1.."),           # was: silently 1024
    (["--gen", "0"], "--gen must be in 1.."),                 # was: silently 512
    (["--layers", "0"], "--layers must be in 1.."),           # was: all layers
    (["--timeout-s", "nan"], "--timeout-s must be a number of seconds"),
    (["--timeout-s", "inf"], "--timeout-s must be a number of seconds"),
    (["--deadline-s", "0"], "--deadline-s must be a number of seconds"),
    (["--deadline-s", "-5"], "--deadline-s must be a number of seconds"),
    (["--out", "/dev/null/r.json"], "--out /dev/null/r.json: cannot use it: Not a directory"),
    (["--batch", "0"], "--batch must be in 1.."),
])
def test_bench_values_refused_before_work(args, says):
    from tpsim.commands.bench import bench_cmd
    t = time.monotonic()
    line = one_line_exit_2(CliRunner().invoke(bench_cmd, [*BENCH, *args]))
    assert says in line
    assert time.monotonic() - t < 5                           # refused at once, no rank started


@pytest.mark.hw
def test_unwritable_bench_out_refused_before_work(tmp_path):
    from tpsim.commands.bench import bench_cmd
    r = CliRunner().invoke(bench_cmd, [*BENCH, "--out", str(tmp_path)])     # click's own usage error
    assert r.exit_code == 2 and "is a directory" in r.output and "Traceback" not in r.output
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root)")
        line = one_line_exit_2(CliRunner().invoke(bench_cmd, [*BENCH, "--out", str(ro / "r.json")]))
        assert "cannot write" in line
    finally:
        ro.chmod(0o700)


@pytest.mark.hw
def test_device_cuda_without_a_gpu_is_one_line():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from tpsim.commands.bench import bench_cmd, check_cmd
    for cmd in (bench_cmd, check_cmd):
        line = one_line_exit_2(CliRunner().invoke(cmd, ["--model", "tiny", "--device", "cuda"]))
        assert "torch sees no GPU" in line
    from tpsim.commands.calibrate import calibrate_cmd
    line = one_line_exit_2(CliRunner().invoke(calibrate_cmd, ["--backend", "nccl", "--out", "x.json"]))
    assert "torch sees no GPU" in line


# ------------------------------------------------------------------ calibrate

@pytest.mark.hw
@pytest.mark.parametrize("args, says", [
    (["--extends", "no-such-base"], "--extends: unknown profile 'no-such-base'"),   # was: after the whole run
    (["--nproc", "0"], "--nproc must be in 1.."),
    (["--timeout-s", "inf"], "--timeout-s must be a number"),
    (["--prompt", "0"], "--prompt must be in 1.."),
])
def test_calibrate_values_refused_before_work(tmp_path, args, says):
    from tpsim.commands.calibrate import calibrate_cmd
    t = time.monotonic()
    line = one_line_exit_2(CliRunner().invoke(calibrate_cmd, ["--quick", "--parts", "device", "--extends",
                                                              "h100-sxm", "--out", str(tmp_path / "p.json"), *args]))
    assert says in line and time.monotonic() - t < 5


@pytest.mark.hw
def test_calibrate_out_under_a_file_refused_before_work(tmp_path):
    from tpsim.commands.calibrate import calibrate_cmd
    (tmp_path / "f").write_text("")
    line = one_line_exit_2(CliRunner().invoke(calibrate_cmd, ["--quick", "--out", str(tmp_path / "f" / "p.json")]))
    assert "Not a directory" in line


@pytest.mark.hw
@pytest.mark.slow
def test_calibrate_keeps_an_unrelated_unfitted_json_and_leaves_no_side_files(tmp_path):
    mine = tmp_path / "p.unfitted.json"
    mine.write_text('{"mine": true}')
    r = subprocess.run([sys.executable, str(ROOT / "cli.py"), "calibrate", "--quick", "--nproc", "1", "--parts",
                        "device", "--extends", "h100-sxm", "--out", str(tmp_path / "p.json")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert mine.read_text() == '{"mine": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "p.unfitted.json"]


@pytest.mark.hw
@pytest.mark.slow
def test_calibrate_rank_failure_is_one_clear_message_without_traceback(tmp_path):
    env = dict(os.environ, TPSIM_FAULT="1:group:exit")
    r = subprocess.run([sys.executable, str(ROOT / "cli.py"), "calibrate", "--quick", "--nproc", "2", "--parts",
                        "device", "--extends", "h100-sxm", "--out", str(tmp_path / "p.json")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    err = r.stderr.strip().splitlines()
    first = next(x for x in err if x.startswith("Error: "))
    assert "calibration failed: rank 1 of 2 exited with code 17" in first, r.stderr
    assert "no group had finished; nothing was kept" in r.stderr          # no claim of a file that is not there
    assert not Path(f"{tmp_path / 'p.json'}.state.json").exists()


# ------------------------------------------------------------------ simulator commands

def test_predict_gen_is_bounded():
    line = one_line_exit_2(CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--gen",
                                                         "1000000000", "--no-memory-check"]))
    assert "--gen must be in 1..1048576" in line


@pytest.mark.parametrize("args, says", [
    (["--tp", "8", "--gpus-per-node", "3"], "TP 8 does not fill nodes of 3 ranks evenly"),      # was: "TP8 (3 nodes)"
    (["--tp", "2", "--comm-group", "3"], "comm_group (--comm-group) must divide the TP degree 2"),
    (["--tp", "4", "--comm-group", "3"], "must divide the TP degree 4 (1: one rank emulated"),   # issue 48: accepted
    (["--tp", "8", "--model", "llama-3.1-8b:4"], "for its first 4 layers write llama-3.1-8b[:4]"),
    (["--tp", "8", "--model", "llama-3.1-8b[:0]"], "(--layers, or K in NAME[:K]) must be in 1..32"),
])
def test_predict_placement_and_model_values_refused(args, says):
    model = [] if "--model" in args else ["--model", "llama-3.1-8b"]
    assert says in one_line_exit_2(CliRunner().invoke(cli.main, ["predict", *model, *args]))


def test_a_config_naming_no_architecture_says_so(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4,
                                                      "num_hidden_layers": 2, "intermediate_size": 128,
                                                      "vocab_size": 100}))
    line = one_line_exit_2(CliRunner().invoke(cli.main, ["predict", "--model", str(tmp_path), "--tp", "2"]))
    assert "names no architecture" in line and "?" not in line


def test_predict_json_says_where_the_ranks_sit_and_lists_a_schedule_once():
    r = CliRunner().invoke(cli.main, ["predict", "--model", "llama-3.1-8b", "--tp", "16", "--comm-group", "8",
                                      "--schedule", "ladder", "--schedule", "ladder", "--gen", "4", "--json"])
    d = json.loads(r.output)
    assert (d["gpus_per_node"], d["nodes"], d["comm_group"]) == (8, 2, 8)
    assert [s["schedule"] for s in d["schedules"]] == ["ladder"]


def test_a_closed_stdout_pipe_ends_quietly():
    """`tpsim show ... | head -1`: the reader leaves early; no `Error: [Errno 32] Broken pipe`."""
    p = subprocess.run(f"{sys.executable} {ROOT / 'cli.py'} show --model llama-3.1-8b --schedule upper-bound "
                       f"--layer 31 | head -1", shell=True, capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() and "Error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_trace_out_checked_before_simulating(tmp_path):
    """A folder on the way that is a file is refused up front; a missing folder is made when the trace
    is written (issue 48: as compare --out-dir, sweep --plot; sweep --out refused it)."""
    (tmp_path / "f").write_text("")
    line = one_line_exit_2(CliRunner().invoke(cli.main, ["trace", "--model", "tiny", "--tp", "2", "--out",
                                                         str(tmp_path / "f" / "t.json")]))
    assert "Not a directory" in line
    r = CliRunner().invoke(cli.main, ["trace", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "8",
                                      "--out", str(tmp_path / "new" / "dir" / "t.json")])
    assert r.exit_code == 0 and (tmp_path / "new" / "dir" / "t.json").is_file(), r.output


def test_sweep_jobs_capped_at_the_cores(tmp_path):
    r = CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--tp", "2", "--batch", "1", "--batch", "2",
                                      "--gen", "4", "--prompt", "16", "--jobs", "100", "--out", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    assert f"--jobs 100 capped at {sw.max_jobs()}" in r.output
    line = one_line_exit_2(CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--tp", "2", "--jobs", "0",
                                                         "--out", str(tmp_path / "s.csv")]))
    assert "--jobs must be in 1..1024" in line


def test_the_busy_message_names_the_holders_kind(tmp_path):
    """A sweep whose --out a calibration holds says 'another calibration', not 'another sweep': the holder
    writes its own kind into the lock file (issue #29 item 9)."""
    from tpsim.fileio.lock import output_lock
    out = tmp_path / "s.csv"
    with output_lock(out, "calibration"):
        line = one_line_exit_2(CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--tp", "2", "--gen", "4",
                                                             "--prompt", "16", "--out", str(out)]))
    assert f"another calibration (pid {os.getpid()}) is writing {out}" in line


def test_sweep_refuses_while_another_holds_its_out(tmp_path):
    from tpsim.fileio.lock import output_lock
    out = tmp_path / "s.csv"
    with output_lock(out, "sweep"):
        line = one_line_exit_2(CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--tp", "2", "--gen", "4",
                                                             "--prompt", "16", "--out", str(out)]))
    assert f"another sweep (pid {os.getpid()}) is writing {out}" in line
    r = CliRunner().invoke(cli.main, ["sweep", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "16",
                                      "--out", str(out)])
    assert r.exit_code == 0, r.output                      # the lock went with its holder
    assert not Path(f"{out}.lock").exists()


def test_sweep_resume_recomputes_points_of_an_edited_profile(tmp_path):
    prof = tmp_path / "p.json"
    data = json.loads((builtin_dir() / "h100-sxm.json").read_text())
    prof.write_text(json.dumps(data))
    pts = grid(["llama-3.2-1b"], [2, 4], [1], [str(prof)], 128, 8)
    ck = tmp_path / "ck.jsonl"
    old = sw.sweep(pts, ("standard", "ladder"), checkpoint=ck)        # "killed" after finishing: all checkpointed
    for t in data["collectives"]["tables"]:                           # the profile is edited before the rerun
        t["time_us"] = [4 * v for v in t["time_us"]]
    prof.write_text(json.dumps(data))
    resumed = sw.sweep(pts, ("standard", "ladder"), checkpoint=ck)
    fresh = sw.sweep(pts, ("standard", "ladder"))
    assert resumed == fresh
    assert all(a["decode_s"] != b["decode_s"] for a, b in zip(old, resumed))
    # unchanged inputs are reused as before
    again = sw.sweep(pts, ("standard", "ladder"), checkpoint=ck)
    assert again == fresh


def test_compare_exits_nonzero_when_nothing_could_be_compared(tmp_path):
    from tpsim.commands.compare import compare_cmd
    r = CliRunner().invoke(compare_cmd, ["--measured", str(tmp_path / "nope.json"), "--profile", "h100-sxm",
                                         "--out-dir", str(tmp_path / "out")])
    assert r.exit_code != 0 and "nothing could be compared" in r.output, r.output
    # the file policy's own message already says what could not be read: said once, not twice
    assert f"(first: cannot read measured JSON {tmp_path / 'nope.json'}: No such file or directory)" in r.output
    assert "cannot read measured JSON: cannot read" not in r.output, r.output


# ------------------------------------------------------------------ nccl-tests imports

def test_import_json_claiming_a_billion_ranks_is_refused_with_its_line(tmp_path):
    from tpsim.calib.imports import read_nccl_tests
    f = tmp_path / "ar.json"
    f.write_text((FIX / "ar.json").read_text().replace('"nranks": 8', '"nranks": 1e9'))
    with pytest.raises(ValueError, match=r"ar\.json line 4: 'nranks' must be a whole number of ranks"):
        read_nccl_tests(f)
    f.write_text((FIX / "ar.json").read_text().replace('"nranks": 8', '"nranks": Infinity'))
    with pytest.raises(ValueError, match=r"ar\.json: field 'config\.nranks' must be a finite number"):
        read_nccl_tests(f)


def test_import_refuses_infinite_times(tmp_path):
    from tpsim.calib.imports import read_nccl_tests
    f = tmp_path / "ar.json"
    f.write_text((FIX / "ar.json").read_text().replace('"time": 20.70', '"time": Infinity'))
    with pytest.raises(ValueError, match="out_of_place.time. must be a finite number"):
        read_nccl_tests(f)
    lines = (FIX / "ar_v2_13.txt").read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if x.strip() and x.split()[0].isdigit())
    toks = lines[i].split()
    toks[5] = "inf"
    lines[i] = "  ".join(toks)
    f = tmp_path / "ar.txt"
    f.write_text("\n".join(lines))
    with pytest.raises(ValueError, match=rf"ar\.txt line {i + 1}: time must be a finite number of us"):
        read_nccl_tests(f)


def test_import_concatenated_runs_of_different_rank_counts_is_refused_with_the_line(tmp_path):
    from tpsim.calib.imports import read_nccl_tests
    one = (FIX / "ar_v2_13.txt").read_text()
    rank_lines = [x for x in one.splitlines() if x.lstrip("# ").startswith("Rank")]
    assert len(rank_lines) >= 2
    # the same run with its last rank line dropped: one rank fewer
    fewer = "\n".join(x for x in one.splitlines() if x != rank_lines[-1])
    f = tmp_path / "two.txt"
    f.write_text(one + "\n" + fewer)
    second_header = (one + "\n").count("\n") + 1 + next(i for i, x in enumerate(fewer.splitlines())
                                                         if x == rank_lines[0])
    with pytest.raises(ValueError, match=rf"two\.txt line {second_header}: a second run with "
                                         rf"{len(rank_lines) - 1} ranks follows one with {len(rank_lines)}"):
        read_nccl_tests(f)
    f.write_text(one + "\n" + one)                         # the same rank count twice: merged, as before
    assert read_nccl_tests(f).group == len(rank_lines)
