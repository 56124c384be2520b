"""Issue 48 item 7, `tpsim show`: it takes --stack (a preset or stack file) as predict, trace and sweep do,
and the guide says; `--schedule spd:F` shows a dropped block, not layer 1 (which spd:F keeps standard)."""
from __future__ import annotations

from click.testing import CliRunner

from tpsim import cli


def show(*args):
    r = CliRunner().invoke(cli.main, ["show", "--model", "llama-3.1-8b", "--tp", "4", *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_show_takes_the_stack_preset():
    """vLLM's preset attends over the filled KV with its flash kernel: the ops shown are the ones predict
    prices under --stack vllm; an explicit flag still wins."""
    ref, vllm = show(), show("--stack", "vllm")
    assert "kv_len=1536" in ref and "impl=math" in ref                  # static cache of prompt + gen, math SDPA
    assert "kv_len=1025" in vllm and "impl=math" not in vllm and "impl=fa" in vllm
    assert "impl=math" in show("--stack", "vllm", "--attention", "math")


def test_spd_shows_a_dropped_block():
    out = show("--schedule", "spd:0.5")
    assert "ops issued for layer 16 of llama-3.1-8b" in out and "SPD blocks 16-31" in out
    # the block's one all-reduce (of its attention and MLP partials), no attention all-reduce
    assert "L16.attn.allreduce" not in out and "allreduce" in out
    assert "layer 1 of" in show("--schedule", "standard")
