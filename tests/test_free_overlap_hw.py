"""The free overlap techniques on real gloo process groups (issue 45): async-tp's ring steps (point-to-point
sends and receives, the blocks summed and put back in rank order), dbo's two micro-batches of sequences,
tokenweave's token halves with its fused multimem all-reduce + RMSNorm run unfused, and the engines' fused
all-reduce + RMSNorm run unfused, each held to its single-process reference (standard's math) by `check`.
The shapes reach the split paths: dbo from 512 prefill / 32 decode tokens, tokenweave from 1024."""
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.commands.bench import check_cmd  # noqa: E402

pytestmark = pytest.mark.hw


def _check(*args):
    r = CliRunner().invoke(check_cmd, ["--model", "tiny", "--json", *args])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["ok"], res
    for row in res["schedules"]:
        assert max(row["prefill_err"], row["decode_err"]) < 1e-5, row
    return {row["schedule"]: row.get("note", "") for row in res["schedules"]}


def test_async_tp_ring_steps_match_standard_at_tp2_with_padding():
    """Batch 3: prefill 48 rows (24 a rank), decode 3 rows padded to 4."""
    notes = _check("--nproc", "2", "--batch", "3", "--prompt", "16", "--gen", "4", "--schedule", "async-tp")
    assert "pads 3 token rows to 4" in notes["async-tp"]


@pytest.mark.slow
def test_async_tp_at_tp4_and_the_split_paths_of_dbo_and_tokenweave():
    _check("--nproc", "4", "--batch", "2", "--prompt", "16", "--gen", "3", "--schedule", "async-tp",
           "--head", "vocab-parallel", "--kv", "filled")
    notes = _check("--nproc", "2", "--batch", "32", "--prompt", "32", "--gen", "3", "--schedule", "dbo",
                   "--schedule", "tokenweave", "--schedule", "standard", "--ar-norm-fusion", "sglang")
    assert "under vLLM's DBO threshold" not in notes["dbo"]                  # both phases split
    assert "each half's all-reduce + add + RMSNorm is one multimem kernel" in notes["tokenweave"]
    assert "runs oneshot fused kernels" in notes["standard"]
    notes = _check("--nproc", "2", "--batch", "1", "--prompt", "1100", "--gen", "2", "--schedule", "tokenweave",
                   "--kv", "filled", "--attention", "flash")
    assert "pads 1100 tokens to 1280" in notes["tokenweave"]
