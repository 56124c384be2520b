"""token-split and seq-parallel: their dataflow op by op, their timelines on toy costs, their pricing.

Toy costs (like tests/toy.py, per *full-batch* GEMM, scaled by the op's rows: a compute-bound GEMM):
qkv 2, out 2, up 4, down 2 at 2 rows, so a 1-row micro-batch pays 1, 1, 2, 1; every other compute
op 0; collectives a fixed time (latency-bound)."""
import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.engine.step import Interference
from tpsim.sim.engine.simpy_engine import simulate
from tpsim.sim.model.presets import ModelSpec, get_model
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import build, model_change, parse_schedule
from tpsim.sim.stack.spec import Stack, Step

ST = Stack()
ONE_LAYER = ModelSpec("toy-1l", 64, 1, 4, 2, 16, 128, 256)
M = get_model("toy-512")          # 8 layers, hidden 512
FULL = {"attn.qkv": 2, "attn.out": 2, "mlp.up": 4, "mlp.down": 2}


def names(s):
    return [op.name for op in s.ops]


def op(s, name):
    return next(o for o in s.ops if o.name == name)


def toy_time(comm: dict, full_rows: int = 2):
    def t(o):
        if o.is_comm:
            return comm[o.kind]
        base = FULL.get(o.name.split(".", 2)[-1] if ".mb" in o.name else o.name.split(".", 1)[-1], 0)
        return base * o.attr("m") / full_rows if o.kind == "gemm" and o.layer is not None else 0
    return t


# ---------------------------------------------------------------- token-split dataflow

def test_token_split_decode_issue_order_and_waits():
    """Per sublayer, micro-batch 0 then 1; each all-reduce is awaited by its own micro-batch's add,
    issued just before that micro-batch's next sublayer (so it overlaps the other's compute)."""
    s = build("token-split", ONE_LAYER, 2, Step.decode(2, 8, 4, 1, ST), ST)
    assert names(s) == [
        "embed", "L0.mb0.split", "L0.mb1.split",
        "L0.mb0.attn.norm", "L0.mb0.attn.qkv", "L0.mb0.attn.sdpa", "L0.mb0.attn.out", "L0.mb0.attn.allreduce",
        "L0.mb1.attn.norm", "L0.mb1.attn.qkv", "L0.mb1.attn.sdpa", "L0.mb1.attn.out", "L0.mb1.attn.allreduce",
        "L0.mb0.attn.add", "L0.mb0.mlp.norm", "L0.mb0.mlp.up", "L0.mb0.mlp.act", "L0.mb0.mlp.down",
        "L0.mb0.mlp.allreduce",
        "L0.mb1.attn.add", "L0.mb1.mlp.norm", "L0.mb1.mlp.up", "L0.mb1.mlp.act", "L0.mb1.mlp.down",
        "L0.mb1.mlp.allreduce",
        "L0.mb0.mlp.add", "L0.mb1.mlp.add", "L0.merge", "final.norm", "head", "sample"]
    assert op(s, "L0.mb1.attn.add").inputs == ("L0.mb1.x_in", "L0.mb1.attn.allreduce_out")
    assert op(s, "L0.merge").inputs == ("L0.mb0.x", "L0.mb1.x")
    # one sequence per micro-batch: its own KV-cache row b0, GEMMs at m = 1, all-reduce of 1 row
    a1 = dict(op(s, "L0.mb1.attn.sdpa").attrs)
    assert (a1["batch"], a1["b0"], a1["q_len"], a1["start_pos"]) == (1, 1, 1, 8)
    assert dict(op(s, "L0.mb1.mlp.up").attrs)["m"] == 1
    assert dict(op(s, "L0.mb0.attn.allreduce").attrs)["rows"] == 1
    assert dict(op(s, "L0.mb1.split").attrs) == {"rows": 1, "width": 64, "batch": 2, "q_len": 1, "b0": 1,
                                                 "nb": 1, "q0": 0, "nq": 1, "copy": 0}


def test_token_split_across_layers_awaits_in_the_next_layer():
    s = build("token-split", M, 2, Step.decode(4, 16, 8, 1, ST), ST)
    n = names(s)
    # layer 2's micro-batch 1 adds layer 1's MLP sum just before its own attention, after mb 0's attention
    assert n.index("L2.mb0.attn.allreduce") < n.index("L1.mb1.mlp.add") < n.index("L2.mb1.attn.norm")
    assert op(s, "L2.mb1.attn.norm").inputs == ("L1.mb1.x",)
    assert dict(op(s, "L2.mb1.attn.sdpa").attrs)["b0"] == 2          # sequences 2, 3
    assert len(s.collectives) == 2 * 2 * M.layers and s.notes == ()
    # the micro-batches are split once at the bottom and joined once at the top
    assert [o.name for o in s.ops if o.kind in ("slice", "concat")] == ["L0.mb0.split", "L0.mb1.split", "L7.merge"]


def test_token_split_prefill_chunks_are_causal():
    """Prefill splits tokens: chunk 1 covers positions 6..11 of every sequence, attends to the whole
    prefix (the filled cache ends at 12) and runs after chunk 0's attention wrote positions 0..5."""
    stack = Stack(kv="filled")
    s = build("token-split", ONE_LAYER, 2, Step.prefill(3, 12, 4, stack), stack)
    c0, c1 = dict(op(s, "L0.mb0.attn.sdpa").attrs), dict(op(s, "L0.mb1.attn.sdpa").attrs)
    assert (c0["batch"], c0["q_len"], c0["start_pos"], c0["kv_len"]) == (3, 6, 0, 6)
    assert (c1["batch"], c1["q_len"], c1["start_pos"], c1["kv_len"]) == (3, 6, 6, 12)
    assert "b0" not in c1
    assert op(s, "L0.mb1.attn.sdpa").inputs == ("L0.mb1.attn.qkv_out", "L0.mb0.attn.sdpa_out")
    assert dict(op(s, "L0.mb1.split").attrs)["copy"] == 1           # rows 6..11 of 3 sequences: strided
    assert dict(op(s, "L0.merge").attrs)["axis"] == "tokens"
    assert dict(op(s, "L0.mb0.mlp.down").attrs)["m"] == 18


def test_token_split_falls_back_and_says_so():
    s = build("token-split", M, 2, Step.decode(1, 16, 8, 1, ST), ST)
    assert names(s) == names(build("standard", M, 2, Step.decode(1, 16, 8, 1, ST), ST))
    assert s.notes == ("decode of 1 sequence cannot be split along batch: runs standard",)
    s3 = build("token-split:3", M, 2, Step.decode(2, 16, 8, 1, ST), ST)
    assert s3.notes == ("decode splits into 2, not 3 (only 2 along batch)",)
    s3 = build("token-split:3", M, 2, Step.decode(5, 16, 8, 1, ST), ST)
    assert [dict(op(s3, f"L0.mb{j}.split").attrs)["nb"] for j in range(3)] == [2, 2, 1]
    assert parse_schedule("token-split:4", 8) == ("token-split", {"splits": 4})
    assert parse_schedule("token-split", 8) == ("token-split", {})
    with pytest.raises(ValueError, match="N >= 2"):
        parse_schedule("token-split:1", 8)


# ---------------------------------------------------------------- seq-parallel dataflow

def test_seq_parallel_dataflow_without_padding():
    s = build("seq-parallel", ONE_LAYER, 2, Step.decode(4, 8, 4, 1, ST), ST)
    assert names(s) == [
        "embed", "L0.sp.shard",
        "L0.attn.norm", "L0.attn.allgather", "L0.attn.qkv", "L0.attn.sdpa", "L0.attn.out",
        "L0.attn.reducescatter", "L0.attn.add",
        "L0.mlp.norm", "L0.mlp.allgather", "L0.mlp.up", "L0.mlp.act", "L0.mlp.down",
        "L0.mlp.reducescatter", "L0.mlp.add", "L0.sp.gather", "final.norm", "head", "sample"]
    # norms and residual adds on this rank's 2 of 4 token rows; GEMMs on all 4
    assert dict(op(s, "L0.attn.norm").attrs)["rows"] == 2 and dict(op(s, "L0.mlp.add").attrs)["rows"] == 2
    assert dict(op(s, "L0.attn.qkv").attrs)["m"] == 4
    assert dict(op(s, "L0.attn.allgather").attrs) == {"rows": 2, "width": 64, "group": 2, "dim": 0}
    assert dict(op(s, "L0.attn.reducescatter").attrs) == {"rows": 4, "width": 64, "group": 2}
    assert op(s, "L0.attn.add").inputs == ("L0.sp.x_in", "L0.attn.reducescatter_out")
    assert op(s, "L0.attn.qkv").inputs == ("L0.attn.allgather_out",)
    assert s.notes == ()


def test_seq_parallel_pads_decode_below_tp():
    """Decode at batch 1 on TP 8: 1 token row padded to 8; the padding is dropped before the GEMMs and
    appended again (zeros) before each reduce-scatter."""
    s = build("seq-parallel", M, 8, Step.decode(1, 16, 8, 1, ST), ST)
    layer = [o.name for o in s.ops if o.layer == 3]
    assert layer == ["L3.attn.norm", "L3.attn.allgather", "L3.attn.allgather.unpad", "L3.attn.qkv", "L3.attn.sdpa",
                     "L3.attn.out", "L3.attn.reducescatter.pad", "L3.attn.reducescatter", "L3.attn.add",
                     "L3.mlp.norm", "L3.mlp.allgather", "L3.mlp.allgather.unpad", "L3.mlp.up", "L3.mlp.act",
                     "L3.mlp.down", "L3.mlp.reducescatter.pad", "L3.mlp.reducescatter", "L3.mlp.add"]
    assert dict(op(s, "L3.attn.reducescatter").attrs)["rows"] == 8
    assert dict(op(s, "L3.attn.reducescatter.pad").attrs) == {"rows": 8, "width": 512, "pad": 7}
    assert dict(op(s, "L3.attn.qkv").attrs)["m"] == 1
    assert s.notes == ("decode pads 1 token row to 8 (TP 8): every all-gather / reduce-scatter moves 8 rows, "
                       "7 of them padding",)
    assert len(s.collectives) == 4 * M.layers + 1


def test_model_change():
    assert [model_change(x) for x in ("standard", "token-split:4", "seq-parallel", "ladder:3", "parallel",
                                      "spd:0.5", "upper-bound")] == \
        ["none", "none", "none", "retrain", "retrain", "drops syncs", "n/a"]
    # SPD that drops no block runs standard's pass: none, at any depth or the model's; one block: drops syncs
    assert [model_change(x) for x in ("spd:0", "spd:0.0", "spd:[0]", "spd:1")] == \
        ["none", "none", "drops syncs", "drops syncs"]
    assert [model_change(x, M.layers) for x in ("spd:0", "spd:0.0", "spd:0.5", f"spd:[{M.layers - 1}]")] == \
        ["none", "none", "drops syncs", "drops syncs"]


# ---------------------------------------------------------------- timelines on toy costs

def test_token_split_timeline_hides_all_but_the_last_all_reduce():
    """Decode at batch 2, one layer, all-reduce 2. Standard: attn 4, AR 2, mlp 6, AR 2 = 14, 4 exposed.
    Token-split, per micro-batch attn 2 (qkv 1 + out 1), mlp 3 (up 2 + down 1):
      mb0 attn [0,2] AR [2,4] | mb1 attn [2,4] AR [4,6] | mb0 mlp [4,7] AR [7,9] | mb1 mlp [7,10] AR [10,12]
    mb0's final add needs AR [7,9] (done), mb1's waits [10,12]: 12, 2 exposed."""
    step = Step.decode(2, 8, 4, 1, ST)
    t = toy_time({"all_reduce": 2})
    std = simulate(build("standard", ONE_LAYER, 2, step, ST), t)
    assert (std.duration_s, std.exposed_comm_s) == (14, 4)
    res = simulate(build("token-split", ONE_LAYER, 2, step, ST), t)
    assert (res.duration_s, res.exposed_comm_s) == (12, 2)
    spans = {r.op: (r.start_s, r.end_s) for r in res.records if r.stream == "comm"}
    assert [spans[f"L0.mb{j}.{h}.allreduce"] for h in ("attn", "mlp") for j in (0, 1)] == \
        [(2, 4), (4, 6), (7, 9), (10, 12)]


def test_token_split_pays_the_interference_of_overlap():
    """Same pass with compute at half speed while a collective runs (the profile's overlap slowdown):
    mb1 qkv (1) runs under AR_a0 [2,4] -> [2,4]; out [4,5]; AR_a1 [5,7]; mb0 up (2) 1 unit slowed in
    [5,7] + 1 in [7,8]; down [8,9]; AR_m0 [9,11]; mb1 up [9,12] (slowed [9,11]); down [12,13];
    AR_m1 [13,15]: 15, and the standard schedule overlaps nothing so it stays 14."""
    step = Step.decode(2, 8, 4, 1, ST)
    t = toy_time({"all_reduce": 2})
    slow = Interference(compute_slowdown=2.0)
    assert simulate(build("standard", ONE_LAYER, 2, step, ST), t, interference=slow).duration_s == 14
    res = simulate(build("token-split", ONE_LAYER, 2, step, ST), t, interference=slow)
    assert (res.duration_s, res.exposed_comm_s) == (15, 2)


def test_seq_parallel_timeline_is_blocking():
    """Every all-gather (1) and reduce-scatter (1) is awaited at once: attn 4 + mlp 6 + 4 collectives
    + the final all-gather of the residual = 15, all 5 collectives exposed."""
    step = Step.decode(2, 8, 4, 1, ST)
    res = simulate(build("seq-parallel", ONE_LAYER, 2, step, ST), toy_time({"all_gather": 1, "reduce_scatter": 1}))
    assert (res.duration_s, res.exposed_comm_s) == (15, 5)


# ---------------------------------------------------------------- pricing

def test_seq_parallel_collectives_priced_at_nccl_tests_sizes():
    """A reduce-scatter is priced at its input (the padded rows), an all-gather at its gathered output:
    the same bytes, from the profile's measured reduce_scatter / all_gather tables."""
    p = load_profile("h100-sxm")
    m = get_model("llama-3.1-70b")
    s = build("seq-parallel", m, 8, Step.decode(1, 1024, 512, 1, ST), ST)
    cm = CostModel(p, ST)
    rs, ag = op(s, "L0.attn.reducescatter"), op(s, "L0.attn.allgather")
    nbytes = 2 * 8 * 8192
    assert cm.comm_s(rs, "decode") == cm.collective_s("reduce_scatter", nbytes, 8, "graph")
    assert cm.comm_s(ag, "decode") == cm.collective_s("all_gather", nbytes, 8, "graph")
    assert cm.price("reduce_scatter", nbytes, 8, "graph")[1].startswith("table")
    # the views cost nothing; the zero padding and a concat are one copy kernel each
    assert cm.compute_s(op(s, "L0.attn.allgather.unpad"), "decode") == 0.0
    assert cm.compute_s(op(s, "L0.attn.reducescatter.pad"), "decode") > 0.0
    ts = build("token-split", m, 8, Step.decode(8, 1024, 512, 1, ST), ST)
    assert cm.compute_s(op(ts, "L0.mb1.split"), "decode") == 0.0
    assert cm.compute_s(op(ts, "L79.merge"), "decode") > 0.0
    # a micro-batch's attention is priced like a step of its own batch (b0 never changes the cost)
    a = op(ts, "L0.mb1.attn.sdpa")
    whole = op(build("standard", m, 8, Step.decode(4, 1024, 512, 1, ST), ST), "L0.attn.sdpa")
    assert cm.compute_s(a, "decode") == cm.compute_s(whole, "decode")


# ---------------------------------------------------------------- sweep's no-retraining view

def _row(schedule, batch, prefill_s, decode_s):
    tps = batch * 10 / (prefill_s + decode_s)
    return {"model": "m", "tp": 8, "profile": "p", "bw_scale": 1.0, "lat_scale": 1.0, "batch": batch, "gen_len": 10,
            "schedule": schedule, "prefill_s": prefill_s, "decode_s": decode_s, "tokens_per_s": tps,
            "speedup": 1.0, "error": ""}


def test_best_no_retraining_picks_the_fastest_schedule_per_phase(tmp_path):
    from tpsim.commands import sweep_grid as sw
    rows = [_row("standard", 1, 1.0, 9.0), _row("token-split", 1, 1.2, 9.0), _row("seq-parallel", 1, 0.9, 9.5),
            _row("ladder", 1, 0.5, 5.0), _row("spd:0.5", 1, 0.4, 4.0),
            _row("standard", 8, 4.0, 6.0), _row("token-split", 8, 3.0, 5.0), _row("seq-parallel", 8, 3.5, 5.5),
            _row("ladder", 8, 3.0, 4.0)]
    best = sw.best_no_retraining(rows)
    b1, b8 = best[("m", 8, "p", 1.0, 1.0, 1)], best[("m", 8, "p", 1.0, 1.0, 8)]
    # batch 1: seq-parallel's prefill (0.9) with standard's decode (9.0): 10 / 9.9 tokens/s over 10 / 10
    assert b1["schedule"] == "seq-parallel / standard" and b1["speedup"] == pytest.approx(10 / 9.9)
    # batch 8: token-split wins both phases: 80 / 8 over 80 / 10
    assert b8["schedule"] == "token-split" and b8["speedup"] == pytest.approx(10 / 8)
    out = tmp_path / "p.png"
    sw.plot(rows, out, "no-retraining")
    assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="unknown plot view"):
        sw.plot(rows, out, "nope")
    with pytest.raises(ValueError, match="keeps the model"):
        sw.plot([_row("ladder", 1, 1.0, 1.0)], out, "no-retraining")


def test_compare_calibrates_the_collectives_the_schedules_use():
    from tpsim.calib.compare import _collective_kinds
    from tpsim.sim.grid import Shape
    pts = [Shape("toy-512", 2, 2, 32, 16)]
    assert _collective_kinds(pts, ("standard", "token-split", "ladder")) == ("all_reduce",)
    assert _collective_kinds(pts, ("standard", "seq-parallel")) == ("all_reduce", "all_gather", "reduce_scatter")
