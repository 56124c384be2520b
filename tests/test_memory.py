"""Per-rank memory estimate (pure arithmetic: no torch needed)."""
import pytest
from click.testing import CliRunner

from tpsim.sim.memory import GIB, DoesNotFit, Placement, check_fits, estimate, local_param_shapes
from tpsim.sim.model.presets import get_model
from tpsim.sim.stack.spec import Stack

H100 = 80 * GIB


def test_405b_tp8_refused_on_80gb_with_numbers():
    est = estimate(get_model("llama-3.1-405b"), 8, 1, 1024, 512, Stack())
    with pytest.raises(DoesNotFit) as e:
        check_fits(est, H100, "an 80 GiB GPU")
    msg = str(e.value)
    for part in ("layer weights", "embed + head", "KV cache", "activations", "workspace", "total per rank",
                 "80.00 GiB", "--layers"):
        assert part in msg
    assert 90 * GIB < est.layer_weights_bytes < 100 * GIB      # 405B fp16 / 8 minus embeddings


def test_405b_tp16_or_8_layers_accepted():
    check_fits(estimate(get_model("llama-3.1-405b"), 16, 1, 1024, 512, Stack()), H100)
    check_fits(estimate(get_model("llama-3.1-405b").truncated(8), 8, 1, 1024, 512, Stack()), H100)
    check_fits(estimate(get_model("llama-3.1-405b[:8]"), 8, 1, 1024, 512, Stack()), H100)


def test_405b_tp8_fits_h200():
    check_fits(estimate(get_model("llama-3.1-405b"), 8, 1, 1024, 512, Stack()), 141 * 10**9)


def test_weight_bytes_match_param_count():
    m = get_model("llama-3.1-8b")
    est = estimate(m, 1, 1, 16, 16, Stack(dtype="fp32"))
    assert est.layer_weights_bytes + est.embed_head_bytes == 4 * m.param_count()


def test_kv_replication_placement():
    m = get_model("tiny")                       # 4 heads, 2 KV heads
    assert [Placement(m, 4, r).kv_heads for r in range(4)] == [range(0, 1), range(0, 1), range(1, 2), range(1, 2)]
    assert Placement(m, 2, 1).kv_heads == range(1, 2)
    assert Placement(m, 4, 3, "vocab-parallel").vocab == range(192, 256)
    with pytest.raises(ValueError, match="TP 3"):
        Placement(m, 3, 0)


def test_local_shapes_tied_head():
    m = get_model("llama-3.2-1b")
    assert "head" not in local_param_shapes(Placement(m, 2, 0))             # tied + replicated: no copy
    assert local_param_shapes(Placement(m, 2, 0, "vocab-parallel"))["head"] == (64128, 2048)


@pytest.mark.hw
def test_cli_refuses_before_launching():
    pytest.importorskip("torch")          # without torch bench refuses earlier, for that reason
    from tpsim.commands.bench import bench_cmd
    res = CliRunner().invoke(bench_cmd, ["--model", "llama-3.1-405b", "--tp", "8", "--gpu-mem-gib", "80",
                                         "--device", "cpu", "--dtype", "fp16"])
    assert res.exit_code == 2, res.output
    assert "needs" in res.output and "KV cache" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_vocab_parallel_embedding_holds_its_shard_only():
    """Under the engines' VocabParallelEmbedding (Stack.embed) a rank holds ceil(vocab / tp) embedding rows:
    70B TP8, vocab 128256 x hidden 8192 fp16: 2004 MiB replicated -> 250.5 MiB sharded (16032 rows)."""
    from tpsim.sim.memory import estimate
    from tpsim.sim.model.presets import get_model
    from tpsim.sim.stack.spec import Stack
    m = get_model("llama-3.1-70b")
    rep, par = (estimate(m, 8, 8, 32, 128, Stack(embed=e)).embed_head_bytes for e in ("replicated", "vocab-parallel"))
    assert rep - par == (128256 - 16032) * 8192 * 2


def test_tied_vocab_parallel_head_and_embedding_are_one_shard():
    """llama-3.2-1b (tied, vocab 128256 x hidden 2048) at TP 2: both vocab-parallel share one 64128-row
    shard (vLLM's ParallelLMHead.tie_weights), as hw.model allocates it; one of the two vocab-parallel:
    a shard and the whole table. embed + head + final norm, fp16."""
    m = get_model("llama-3.2-1b")
    shapes = local_param_shapes(Placement(m, 2, 1, "vocab-parallel", "vocab-parallel"))
    assert shapes["embed"] == (64128, 2048) and "head" not in shapes
    assert local_param_shapes(Placement(m, 2, 1, "replicated", "vocab-parallel"))["head"] == (128256, 2048)
    assert Placement(m, 2, 1, "replicated", "vocab-parallel").embed_vocab == range(64128, 128256)

    def embed_head(head, embed):
        return estimate(m, 2, 1, 16, 16, Stack(head=head, embed=embed)).embed_head_bytes
    assert embed_head("vocab-parallel", "vocab-parallel") == (64128 * 2048 + 2048) * 2
    assert embed_head("replicated", "vocab-parallel") == ((64128 + 128256) * 2048 + 2048) * 2
    assert embed_head("replicated", "replicated") == (128256 * 2048 + 2048) * 2
