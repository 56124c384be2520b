"""token-split and seq-parallel run for real on gloo ranks: the same outputs as standard, and bench
records that name the IR's ops (including the reduce-scatters)."""
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.commands.bench import bench_cmd, check_cmd  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402

pytestmark = pytest.mark.hw
SMALL = ["--model", "tiny", "--prompt", "15", "--gen", "9", "--device", "cpu", "--backend", "gloo"]
BOTH = ["--schedule", "token-split", "--schedule", "seq-parallel", "--schedule", "token-split:3"]


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
@pytest.mark.parametrize("tp, extra", [
    (2, ["--batch", "3", "--kv", "filled"]),                     # uneven micro-batches; 45 rows padded to 46
    (2, ["--batch", "1"]),                                       # decode falls back; prefill splits tokens
    (4, ["--batch", "2", "--head", "vocab-parallel", "--prefill-logits", "last", "--attention", "flash"])])
def test_check_matches_standard_reference(tp, extra):
    res = CliRunner().invoke(check_cmd, [*SMALL, "--tp", str(tp), *BOTH, "--json", *extra])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["ok"]
    for r in out["schedules"]:
        assert r["ok"] and r["prefill_err"] < 1e-4 and r["decode_err"] < 1e-4 and r["decode_steps"] == 8
    if "1" in extra:
        assert out["schedules"][0]["note"] == "decode of 1 sequence cannot be split along batch: runs standard"


@pytest.mark.slow          # starts real gloo ranks: 5-20 s
def test_bench_records_name_the_ir_ops():
    res = CliRunner().invoke(bench_cmd, [*SMALL, "--tp", "2", "--batch", "2", "--schedule", "token-split",
                                         "--schedule", "seq-parallel", "--repeats", "1", "--warmup", "0", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    m, st = get_model("tiny"), Stack(dtype="fp32", collective="gloo")
    for r in d["schedules"]:
        ir = build(r["schedule"], m, 2, Step.decode(2, 15, 9, 1, st), st)
        recs = [x for x in r["records"] if x["phase"] == "decode" and x["rank"] == 0]
        assert {x["op"] for x in recs if x["stream"] == "comm"} == {o.name for o in ir.collectives}
        assert {x["op"] for x in recs if x["stream"] == "compute"} == {o.name for o in ir.ops if not o.is_comm}
    kinds = {x["kind"] for r in d["schedules"] for x in r["records"] if x["stream"] == "comm"}
    assert kinds == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(r["notes"] == [] for r in d["schedules"])        # batch 2 splits; 30 and 2 rows need no padding


@pytest.mark.slow
def test_emulated_rank_runs_seq_parallel_shapes():
    # one process as rank 0 of a TP-4 job: reduce-scatter over a group of 1 = all-reduce + its block
    res = CliRunner().invoke(bench_cmd, [*SMALL, "--tp", "1", "--emulate-tp", "4", "--schedule", "seq-parallel",
                                         "--repeats", "1", "--warmup", "0", "--json"])
    assert res.exit_code == 0, res.output
    sp = json.loads(res.output)["schedules"][1]
    assert sp["schedule"] == "seq-parallel" and sp["notes"] == [
        "prefill pads 15 token rows to 16 (TP 4): every all-gather / reduce-scatter moves 16 rows, 1 of them padding",
        "decode pads 1 token row to 4 (TP 4): every all-gather / reduce-scatter moves 4 rows, 3 of them padding"]
