"""Hugging Face configs through the real harness: `tpsim check` at TP 2 (gloo ranks) on the Qwen2
(qkv bias) and Qwen3 (q/k norm, head_dim != hidden/heads, tied) tiny configs of tests/fixtures/hf."""
import json
import os

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from tpsim.commands.bench import check_cmd  # noqa: E402

pytestmark = [pytest.mark.hw, pytest.mark.slow]
HF = os.path.join(os.path.dirname(__file__), "fixtures", "hf")


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-qwen3/config.json"])
def test_check_tp2_matches_reference(name):
    r = CliRunner().invoke(check_cmd, ["--model", os.path.join(HF, name), "--tp", "2", "--prompt", "16", "--gen", "5",
                                       "--device", "cpu", "--backend", "gloo", "--schedule", "standard",
                                       "--schedule", "ladder", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["ok"] and out["model"] == name.split("/")[0]
    for row in out["schedules"]:
        assert row["ok"] and row["prefill_err"] < 1e-4 and row["decode_err"] < 1e-4
