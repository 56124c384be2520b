"""GEMMs priced from the measured tables of the built-in profiles (compute.gemm_tables).

The numbers below are rows of aiconfigurator 0.12.0's h100_sxm sglang 0.5.14 GEMM parquet
(kernel_source sglang_torch_linear, bf16), written out by hand: the profile keeps 5 significant
digits of latency (ms) x 1000.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import op_work, roofline_s
from tpsim.sim.model.presets import MODELS, get_model, valid_tp
from tpsim.sim.hardware.profile import ProfileError, builtin_dir, builtin_names, load_profile, parse, read_raw
from tpsim.sim.hardware.schema import ComputePoint, GemmTable
from tpsim.sim.schedule.language import Op, build
from tpsim.sim.stack.spec import Stack, Step

AIC_DATA = Path("/work/aic/core/aiconfigurator_core/systems/data")


def _gemm(m, n, k, dtype="fp16"):
    return Op("g", "gemm", ("x",), ("y",), (("m", m), ("n", n), ("k", k)), dtype)


def _prefill_op(name, tp=8, batch=1, stack=Stack()):
    step = Step.prefill(batch, 1024, 512, stack)
    sched = build("standard", get_model("llama-3.1-70b"), tp, step, stack)
    return next(op for op in sched.ops if op.name == name)


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm")


def test_70b_tp8_prefill_gemm_is_the_database_row(h100):
    # L0.mlp.up of a 70B TP8 prefill at batch 1: [1024, 8192] @ [8192, 2 * 28672 / 8] -> m 1024,
    # n 7168, k 8192; the parquet row (m=1024, n=7168, k=8192) says 0.16640533341301814 ms
    op = _prefill_op("L0.mlp.up")
    assert dict(op.attrs) == {"m": 1024, "n": 7168, "k": 8192}
    cost = CostModel(h100, Stack())
    assert cost.compute_s(op, "prefill") == pytest.approx(166.41e-6, rel=1e-12)
    assert cost.compute_s(op, "prefill") == pytest.approx(0.16640533341301814e-3, rel=5e-5)
    # the same kernel under a compiled/graph phase and in eager: one price (device time >> launch)
    assert cost.compute_s(op, "decode") == cost.compute_s(op, "prefill")
    # attn.out at batch 1 (m 1024, n 8192, k 1024): parquet 0.03446577654944526 ms
    assert CostModel(h100, Stack()).compute_s(_prefill_op("L0.attn.out"), "prefill") == pytest.approx(34.466e-6)


def test_off_grid_m_interpolates_log_log_between_neighbours(h100):
    # m 3000 lies between the table's m 2048 (303.75 us) and 4096 (649.38 us) for n 7168, k 8192
    t = CostModel(h100, Stack()).compute_s(_gemm(3000, 7168, 8192), "prefill")
    f = math.log(3000 / 2048) / math.log(2)
    expect = math.exp(math.log(303.75e-6) + f * (math.log(649.38e-6) - math.log(303.75e-6)))
    assert t == pytest.approx(expect, rel=1e-12)
    assert 303.75e-6 < t < 649.38e-6


def test_beyond_the_table_the_roofline_shape_anchored_on_the_last_row(h100):
    # m 131072 > the largest m (65536, 10864 us): the roofline's ratio carries the last point
    cost = CostModel(h100, Stack())
    op, last = _gemm(131072, 7168, 8192), _gemm(65536, 7168, 8192)
    ratio = roofline_s(h100, op_work(op, False), "fp16") / roofline_s(h100, op_work(last, False), "fp16")
    assert cost.compute_s(op, "prefill") == pytest.approx(10864e-6 * ratio, rel=1e-12)


def test_unlisted_shape_falls_back_to_the_roofline(h100):
    # n 7000 is no IR shape: no row, so the efficiency-curve roofline prices it
    cost = CostModel(h100, Stack())
    op = _gemm(1024, 7000, 8192)
    assert cost._measured(op, False) is None
    assert cost.compute_s(op, "prefill") == pytest.approx(
        max(roofline_s(h100, op_work(op, False), "fp16"), h100.launch_s["eager"]))


def test_bf16_stack_reads_the_same_rows(h100):
    op = _prefill_op("L0.mlp.up", stack=Stack(dtype="bf16"))
    assert op.dtype == "bf16"
    assert CostModel(h100, Stack(dtype="bf16")).compute_s(op, "prefill") == pytest.approx(166.41e-6)


def test_a_gemm_shorter_than_its_launch_costs_the_launch(h100):
    # 8B TP8 decode qkv at batch 2: m 2, n (4096 + 2 * 1024) / 8 = 768, k 4096 (an extern cuBLAS
    # mm: at batch 1, m 1, Inductor runs a generated GEMV instead, tests/test_gemm_decode.py); its
    # table time is below the 8.81 us eager launch: eager decode spends the launch on the rank's CPU
    # chain (issue_s) and the kernel on the GPU, as graph replay does (at least the device floor)
    op = _gemm(2, 768, 4096)
    t_table = dict(CostModel(h100, Stack())._points[False][("gemm", "fp16", (("k", 4096), ("n", 768)))])[2]
    assert t_table < h100.launch_s["eager"]
    eager_cm = CostModel(h100, Stack(decode_graphs=False))
    eager = eager_cm.compute_s(op, "decode")
    graph = CostModel(h100, Stack(decode_graphs=True)).compute_s(op, "decode")
    assert eager == graph == pytest.approx(max(t_table, h100.launch_s["graph"]))
    assert eager_cm.issue_s(op, "decode") == pytest.approx(h100.launch_s["eager"])


def test_points_then_tables_first_time_at_each_m_wins(h100):
    # one (n, k) in a calibrated point (m 2) and in two tables (m 1, 2, 4 and m 2, 8), toy times in us:
    # the point wins at m 2, the first table at m 1 and 4, the second adds only m 8 (the index makes a
    # key's points at its first lookup, sim/price/cost.py _Index, in the profile's order)
    point = ComputePoint("gemm", (("k", 64), ("m", 2), ("n", 32)), "fp16", 5e-6)
    first = GemmTable("toy", ("fp16",), (1, 2, 4), ((32, 64, (10e-6, 20e-6, 40e-6)),))
    second = GemmTable("toy", ("fp16",), (2, 8), ((32, 64, (99e-6, 80e-6)),))
    prof = dataclasses.replace(h100, compute_points=(point,), gemm_tables=(first, second))
    for graphs in (False, True):
        pts = CostModel(prof, Stack())._points[graphs][("gemm", "fp16", (("k", 64), ("n", 32)))]
        assert pts == [(1, 10e-6), (2, 5e-6), (4, 40e-6), (8, 80e-6)]
    assert CostModel(prof, Stack())._points[False].get(("gemm", "fp16", (("k", 64), ("n", 33)))) is None


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm", "a100-sxm", "l40s-pcie", "h100-sxm-p2p-off"])
def test_every_ir_gemm_of_every_preset_has_a_row(name):
    p = load_profile(name)
    have = {(n, k) for t in p.gemm_tables for n, k, _ in t.rows}
    for model in MODELS.values():
        for tp in valid_tp(model, 16):
            s = model.shard(tp)
            want = {(s.qkv_dim, model.hidden), (model.hidden, s.q_dim), (2 * s.ffn, model.hidden),
                    (model.hidden, s.ffn), (model.vocab, model.hidden), (-(-model.vocab // tp), model.hidden)}
            assert want <= have, (name, model.name, tp, want - have)


def test_builtin_profiles_validate_and_stay_small():
    for name in builtin_names():
        load_profile(name)
    for path in builtin_dir().glob("*.json"):
        # two GEMM tables where the GPU has FP8 tensor cores (16-bit and FP8 linears): ~0.04 s to load
        assert path.stat().st_size < 200_000, path


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.pop("source"), "compute.gemm_tables[0]"),
    (lambda t: t.update(m=[4, 2] + t["m"][2:]), "compute.gemm_tables[0].m"),
    (lambda t: t["rows"][0]["time_us"].pop(), "compute.gemm_tables[0].rows[0]"),
    (lambda t: t["rows"][3].update(time_us=[0.0] * len(t["m"])), "compute.gemm_tables[0].rows[3]"),
    (lambda t: t["rows"][1].pop("n"), "compute.gemm_tables[0].rows[1]"),
    # a time that is no number, true, past 1e12 us or below 1e-3 us, in a row otherwise of floats
    (lambda t: t["rows"][2]["time_us"].__setitem__(1, "5"), "compute.gemm_tables[0].rows[2]"),
    (lambda t: t["rows"][2]["time_us"].__setitem__(1, True), "compute.gemm_tables[0].rows[2]"),
    (lambda t: t["rows"][2]["time_us"].__setitem__(-1, 2e12), "compute.gemm_tables[0].rows[2]"),
    (lambda t: t["rows"][2]["time_us"].__setitem__(0, 1e-4), "compute.gemm_tables[0].rows[2]"),
    (lambda t: t.update(dtypes="fp16"), "compute.gemm_tables[0].dtypes"),
])
def test_bad_gemm_tables_name_the_field(edit, field):
    data, _ = read_raw("h100-sxm")
    edit(data["compute"]["gemm_tables"][0])
    with pytest.raises(ProfileError, match=re.escape(f"field '{field}'")):
        parse(json.loads(json.dumps(data)), "x.json")


@pytest.mark.skipif(not AIC_DATA.is_dir(), reason="aiconfigurator 0.12.0 database not unpacked here")
@pytest.mark.parametrize("name, system, kernel", [("h100-sxm", "h100_sxm", "sglang_torch_linear"),
                                                  ("a100-sxm", "a100_sxm", "sglang")])
def test_collected_sites_are_the_parquet_rows(name, system, kernel):
    pd = pytest.importorskip("pandas")
    data, _ = read_raw(name)
    table = data["compute"]["gemm_tables"][0]
    rel = table["source"].split(f"systems/data/{system}/gemm/")[1].split("/gemm_perf")[0]
    d = pd.read_parquet(AIC_DATA / system / "gemm" / rel / "gemm_perf.parquet")
    d = d[(d.kernel_source == kernel) & (d.gemm_dtype == "bfloat16")]
    raw = {(int(r.m), int(r.n), int(r.k)): float(r.latency) * 1e3 for r in d.itertuples()}
    checked = 0
    for row in table["rows"]:
        for m, us in zip(table["m"], row["time_us"]):
            if (m, row["n"], row["k"]) in raw:
                assert us == pytest.approx(raw[(m, row["n"], row["k"])], rel=1e-4), (m, row)
                checked += 1
                assert "nk" not in row
    assert checked > 1000


def test_breakdown_json_prices_with_sim():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import breakdown
    args = breakdown.argparse.Namespace(profile="h100-sxm", model="llama-3.1-70b", tp=8, batch=[1],
                                        schedule="standard", prompt=1024, gen=512, stack=[])
    out = breakdown.run(args)
    pre, dec = out["cases"]
    up = next(r for r in pre["layer_ops"] if r["name"] == "mlp.up")
    assert up["us"] == pytest.approx(166.41)
    for c in (pre, dec):
        assert sum(v["us"] for v in c["by_kind"].values()) == pytest.approx(c["sum_us"])
        assert c["sum_us"] == pytest.approx(c["sum_compute_us"] + c["sum_comm_us"])
        assert sum(r["share"] for r in c["layer_ops"]) == pytest.approx(1.0)
        # standard TP: every collective blocks, so the simulated step is the serial sum -- plus, in the
        # compiled prefill (no CUDA graph: Inductor's kernels launched from Python), the CPU launch
        # chain's lag where it is behind the GPU (the pass's first kernels)
        if c is dec:
            assert c["step_us"] == pytest.approx(c["sum_us"], rel=1e-9)
        else:
            assert c["sum_us"] - 1e-6 <= c["step_us"] <= c["sum_us"] * 1.001
    assert pre["by_kind"]["gemm"]["count"] == 80 * 4 + 1
