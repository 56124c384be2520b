"""The IR's dataflow for each schedule (docs/design.md, "The schedules"), checked op by op."""
import pytest

from tpsim.sim.model.presets import get_model
from tpsim.sim.schedule.language import build, parse_schedule
from tpsim.sim.stack.spec import Stack, Step

M = get_model("toy-512")          # 8 layers
ST = Stack()


def sched(spec, tp=2, stack=ST, step=None, model=M):
    return build(spec, model, tp, step or Step.decode(2, 16, 8, 1, stack), stack)


def reads(s, name):
    return next(op for op in s.ops if op.name == name).inputs


def writer(s, value):
    """The one op whose outputs include `value`."""
    (op,) = [op for op in s.ops if value in op.outputs]
    return op


def test_standard_dataflow():
    s = sched("standard")
    assert reads(s, "L0.attn.norm") == ("embed.x",)
    assert reads(s, "L3.attn.norm") == ("L2.x",)
    assert reads(s, "L3.attn.add") == ("L2.x", "L3.attn.allreduce_out")
    assert reads(s, "L3.mlp.norm") == ("L3.h",)
    assert len(s.collectives) == 2 * M.layers


def test_ladder_reads_stale_residuals():
    s = sched("ladder")
    # attention of layer i reads R after attn_{i-1} was added but before mlp_{i-1}
    assert reads(s, "L3.attn.norm") == ("L2.h",)
    # R after attn_2 (L2.h) is L1.x (R with mlp_1) plus attn_2's sum
    h = writer(s, "L2.h")
    assert h.name == "L2.attn.add" and h.inputs == ("L1.x", "L2.attn.allreduce_out")
    # MLP of layer i reads R with mlp_{i-1} added but not attn_i
    assert reads(s, "L3.mlp.norm") == ("L2.x",)
    # layer 0 sees zeros as previous outputs; after the last layer both pending sums are added
    assert reads(s, "L0.attn.norm") == ("embed.x",) and reads(s, "L0.mlp.norm") == ("embed.x",)
    names = [op.name for op in s.ops]
    assert names[-5:] == ["L7.attn.add", "L7.mlp.add", "final.norm", "head", "sample"]
    # the attention AR of layer i is issued before mlp_{i-1}'s add, which is awaited before mlp_i
    assert names.index("L3.attn.allreduce") < names.index("L2.mlp.add") < names.index("L3.mlp.norm")
    assert s.ladder_layers == tuple(range(8))


def test_hybrid_ladder_only_upper_layers():
    s = sched("ladder:3")
    assert s.ladder_layers == (5, 6, 7)
    assert reads(s, "L4.attn.norm") == ("L3.x",)          # standard below
    assert reads(s, "L5.attn.norm") == ("L4.x",)          # first ladder layer: previous outputs complete
    assert reads(s, "L6.attn.norm") == ("L5.h",)
    assert reads(s, "L6.mlp.norm") == ("L5.x",)


def test_spd_block_dataflow():
    s = sched("spd:[4]")
    assert s.spd_layers == (4,)
    assert reads(s, "L4.attn.add") == ("L3.x", "L4.attn.partial")      # X + P_r, local
    assert reads(s, "L4.mlp.norm") == ("L4.h",)
    assert reads(s, "L4.mlp.sum") == ("L4.attn.partial", "L4.mlp.partial")   # P_r + Z_r
    assert reads(s, "L4.mlp.allreduce") == ("L4.pz",)
    assert reads(s, "L4.mlp.add") == ("L3.x", "L4.mlp.allreduce_out")   # X added after the AR
    assert "L4.attn.allreduce" not in [op.name for op in s.ops]
    assert len(s.collectives) == 2 * M.layers - 1


def test_parallel_dataflow():
    s = sched("parallel")
    assert reads(s, "L2.attn.qkv") == ("L2.norm_out",) and reads(s, "L2.mlp.up") == ("L2.norm_out",)
    assert reads(s, "L2.allreduce") == ("L2.pz",)
    assert len(s.collectives) == M.layers


def test_upper_bound_adds_local_partials():
    s = sched("upper-bound")
    assert not s.collectives
    assert reads(s, "L2.attn.add") == ("L1.x", "L2.attn.partial")


def test_spd_specs():
    assert parse_schedule("spd:0.5", 8) == ("spd", {"layers": (4, 5, 6, 7)})
    assert parse_schedule("spd:1", 8)[1]["layers"] == tuple(range(8))
    assert parse_schedule("spd:0", 8)[1]["layers"] == ()
    assert parse_schedule("spd:1,3,5-6", 8)[1]["layers"] == (1, 3, 5, 6)
    assert parse_schedule("spd:[7]", 8)[1]["layers"] == (7,)
    assert parse_schedule("ladder:16", 32) == ("ladder", {"upper": 16})


@pytest.mark.parametrize("spec, msg", [
    ("nope", "unknown schedule"), ("spd", "spd needs an argument"), ("spd:1.5", "within 0..1"),
    ("spd:3,99", "outside 0..7"), ("ladder:x", "bad ladder"), ("ladder:9", "1 <= K <= 8"),
    ("parallel:2", "takes no argument"), ("spd:5-3", "empty spd layer range"), ("spd:0.01", "rounds to none"),
    ("spd:-0.5", "within 0..1"), ("spd:[]", "names no layer")])
def test_bad_specs(spec, msg):
    with pytest.raises(ValueError, match=msg):
        sched(spec)


def test_shapes_follow_shard_and_stack():
    m = get_model("llama-3.1-70b")
    stack = Stack(head="vocab-parallel", prefill_logits="last", kv="filled")
    s = build("standard", m, 8, Step.prefill(4, 1024, 512, stack), stack)
    qkv = next(op for op in s.ops if op.name == "L0.attn.qkv")
    assert dict(qkv.attrs) == {"m": 4 * 1024, "n": (8 + 2 * 1) * 128, "k": 8192}
    sdpa = dict(next(op for op in s.ops if op.name == "L0.attn.sdpa").attrs)
    assert sdpa["kv_len"] == 1024 and sdpa["heads"] == 8 and sdpa["kv_heads"] == 1
    head = dict(next(op for op in s.ops if op.name == "head").attrs)
    assert head == {"m": 4, "n": 128256 // 8, "k": 8192}             # last position only, vocab split
    assert [op.name for op in s.collectives][-1] == "head.allgather"
    dec = build("standard", m, 8, Step.decode(4, 1024, 512, 10, Stack()), Stack())
    assert dict(next(op for op in dec.ops if op.name == "L0.attn.sdpa").attrs)["kv_len"] == 1536   # static cache


def test_upper_bound_leaves_out_the_collectives_outside_the_layers():
    """A vocab-parallel stack adds embed.allreduce and head.allgather outside the layers; upper-bound
    ("no communication") has none at all, and samples from the rank's own padded shard of the vocab."""
    m = get_model("llama-3.1-70b")
    stack = Stack(head="vocab-parallel", embed="vocab-parallel", kv="filled")
    step = Step.decode(4, 32, 8, 3, stack)
    std = build("standard", m, 8, step, stack)
    assert [op.name for op in std.collectives][0] == "embed.allreduce"
    assert [op.name for op in std.collectives][-1] == "head.allgather"
    ub = build("upper-bound", m, 8, step, stack)
    assert list(ub.collectives) == []
    assert dict(next(op for op in ub.ops if op.name == "sample").attrs)["vocab"] == -(-128256 // 8)
    assert dict(next(op for op in std.ops if op.name == "sample").attrs)["vocab"] == 128256
    # every other op is standard's, by name, in order
    assert [op.name for op in ub.ops] == [op.name for op in std.ops if not op.is_comm]


def test_kv_head_replication_and_tp_errors():
    m = get_model("llama-3.1-70b")                # 8 KV heads
    assert m.shard(16).kv_heads == 1 and m.shard(4).kv_heads == 2
    with pytest.raises(ValueError, match="valid TP degrees"):
        get_model("llama-2-13b").shard(16)
    with pytest.raises(ValueError, match="unknown model"):
        get_model("llama-9")
    assert get_model("llama-3.1-405b[:8]").layers == 8


def test_a_new_layer_kind_is_one_registry_entry():
    """A schedule whose layers are attention only: one ScheduleDef registered (sim.schedule.schedules.register)."""
    from tpsim.sim.schedule.schedules.registry import LayerKind, ScheduleDef, each, register, unregister

    def attn_only(b, i, x):
        p = b.all_reduce(f"L{i}.attn.allreduce", b.attn(i, x), i)
        return b.add(f"L{i}.attn.add", x, p, f"L{i}.x", i)
    kind = LayerKind("attn-only", each(attn_only), analytic="a test's kind: no compiled probe")
    register(ScheduleDef("attn-only", "attn-only", "retrain", lambda n: ("attn-only",) * n, (kind,)))
    try:
        s = sched("attn-only")
        assert s.plan == ("attn-only",) * M.layers and len(s.collectives) == M.layers
        assert reads(s, "L1.attn.norm") == ("L0.x",) and not [op for op in s.ops if ".mlp." in op.name]
    finally:
        unregister("attn-only")


def test_schedule_spec_is_parsed_once_at_the_edge():
    """A ScheduleSpec checks the syntax without a model, plans per depth, and prints as written."""
    from tpsim.sim.schedule.language import ScheduleSpec, plan_of
    s = ScheduleSpec.parse("spd:0.5")
    assert (s.base, s.arg, str(s)) == ("spd", "0.5", "spd:0.5") and ScheduleSpec.parse(s) is s
    assert s.plan(5) == ("standard", "standard", "spd", "spd", "spd")      # round half up: 3 of 5
    assert plan_of(s, 5) == plan_of("spd:0.5", 5) == s.plan(5)
    assert sched(s).name == "spd:0.5"
    with pytest.raises(ValueError, match="unknown schedule 'bogus'"):
        ScheduleSpec.parse("bogus")
    with pytest.raises(ValueError, match="spd layer 9 outside 0..7"):
        ScheduleSpec.parse("spd:[9]").plan(8)                   # the layer list checked once the depth is known
