"""bench/validate_collectives.py: the held-apart collective measurements and how they are scored.

Every bench/data/*.json source is checked for the fields the script needs, every source that keeps
its posted text under bench/data/raw/ is re-read through calib/imports.py and must give exactly the
points entered (so no row was mistyped), and the coverage classes are pinned on hand-made rows.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tpsim.commands.collective_table import COLLECTIVES, MODES, collective_rows
from tpsim.sim.hardware.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
SOURCES = sorted(DATA.glob("*.json"))


def _script():
    spec = importlib.util.spec_from_file_location("validate_collectives", ROOT / "bench" / "validate_collectives.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vc = _script()


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_source_has_the_fields_the_script_reads(path):
    d = json.loads(path.read_text())
    assert d["source"].startswith("https://"), "every source names its public URL first"
    if d["profile"] is None:
        # a system no built-in profile describes: printed, never priced, so it must say why
        assert d.get("in_median") is False and d["out_of_scope"]
    else:
        load_profile(d["profile"])
    assert d["collective"] in COLLECTIVES and d["mode"] in MODES
    assert d["nodes"] in (1, 2) and isinstance(d["p2p"], bool)
    assert d["group"] >= 2 and d["group"] <= d["gpus_per_node"] * d["nodes"]
    assert d["points"] and all(b > 0 and us > 0 for b, us in d["points"])
    assert [b for b, _ in d["points"]] == sorted({b for b, _ in d["points"]}), "one point per size, ascending"
    if not d.get("in_median", True):
        assert d["out_of_scope"], "a source kept out of the medians says why"
    if "gpus_per_process" in d:
        assert 1 <= d["gpus_per_process"] <= d["group"]


RAW_SOURCES = [p for p in SOURCES if "raw" in json.loads(p.read_text())]


def test_the_one_node_sources_keep_their_posted_text():
    # the sources added for the one-node P2P-on class all keep the text they were read from
    names = {p.name for p in RAW_SOURCES}
    assert {"ncb-4xh100-all-reduce.json", "ncb-4xh100-all-gather.json", "ncb-4xh100-reduce-scatter.json",
            "ncb-4xh100-all-reduce-graph1.json", "nccl-tests-290-8xh100.json", "ncb-scaling-6xh100.json",
            "ncb-4xh100-torch-graph.json", "dgxc-nccl-8xh100.json"} <= names


@pytest.mark.parametrize("path", RAW_SOURCES, ids=lambda p: p.name)
def test_points_are_the_posted_rows(path):
    """The points entered are what the importer reads from the posted text (out-of-place time)."""
    d = json.loads(path.read_text())
    raw = DATA / "raw" / d["raw"]
    head = raw.read_text()[:600]
    assert "https://" in head, "the raw file names where it was copied from"
    assert vc.points_from_raw(d) == d["points"]


def test_graph_flag_matches_the_posted_header():
    """nccl-tests prints 'graph: 1' for -G 1; the source's graph_launched flag says the same."""
    for name, graph in (("ncb-4xh100-all-reduce-graph1.json", True), ("ncb-4xh100-all-reduce-graph0.json", False)):
        d = json.loads((DATA / name).read_text())
        assert d["graph_launched"] is graph
        assert f"graph: {int(graph)}" in (DATA / "raw" / d["raw"]).read_text()


def test_evaluate_scores_a_source_against_the_priced_time(tmp_path):
    """A made-up source measured at twice the priced time scores -50% at every size, in every class
    it belongs to; the same source flagged out of scope is in no median."""
    prof = load_profile("h100-sxm")
    sizes = (4096, 1 << 20)
    priced = {r.bytes: r.time_us for r in collective_rows(prof, "all_gather", 4, "nccl", sizes, 8)}
    src = {"file": "made-up.json", "profile": "h100-sxm", "collective": "all_gather", "group": 4,
           "gpus_per_node": 8, "mode": "nccl", "impl": "nccl", "p2p": True, "nodes": 1,
           "graph_launched": True, "gpus_per_process": 4,
           "points": [[b, 2 * priced[b]] for b in sizes]}
    rows = vc.evaluate([src])
    assert [r["error_pct"] for r in rows] == [-50.0, -50.0]
    s = vc.summary(rows)
    for k in ("1 node P2P on", "  all_gather", "  group 4", "  graph-launched", "  1 process, N GPUs"):
        assert s[k] == {"points": 2, "median_abs_error_pct": 50.0}
    assert s["  small (<= 64 KiB)"]["points"] == 1 and s["  large (> 64 KiB)"]["points"] == 1
    assert s["  stream-launched"]["points"] == 0 and s["  1 process per GPU"]["points"] == 0
    assert s["two nodes"]["median_abs_error_pct"] is None
    assert vc.per_source(rows) == {"made-up.json": {"points": 2, "median_abs_error_pct": 50.0,
                                                    "median_error_pct": -50.0}}
    src["in_median"], src["out_of_scope"] = False, "made up"
    assert vc.summary(vc.evaluate([src]))["all"]["points"] == 0


def test_summary_medians_are_per_class():
    """Hand-made rows: the one-node P2P-on class and its splits take the median of their own rows."""
    base = {"in_median": True, "forced": False, "nodes": 1, "p2p": True, "collective": "all_reduce",
            "graph_launched": False, "gpus_per_process": 1}
    rows = [dict(base, group=8, bytes=8192, error_pct=-10.0),
            dict(base, group=8, bytes=8192, error_pct=30.0, gpus_per_process=8),
            dict(base, group=2, bytes=1 << 30, error_pct=-2.0, graph_launched=True),
            dict(base, group=8, bytes=1 << 30, error_pct=5.0, p2p=False),
            dict(base, group=16, bytes=1 << 20, error_pct=40.0, nodes=2)]
    s = vc.summary(rows)
    assert s["all"] == {"points": 5, "median_abs_error_pct": 10.0}
    assert s["1 node P2P on"] == {"points": 3, "median_abs_error_pct": 10.0}
    assert s["  small, 1 process/GPU"] == {"points": 1, "median_abs_error_pct": 10.0}
    assert s["  small, 1 proc N GPUs"] == {"points": 1, "median_abs_error_pct": 30.0}
    assert s["  group 2"] == {"points": 1, "median_abs_error_pct": 2.0}
    assert s["  graph-launched"] == {"points": 1, "median_abs_error_pct": 2.0}
    assert s["P2P off"] == {"points": 1, "median_abs_error_pct": 5.0}


# ------------------------------------------------------------------ timing loops (sim/price/comm/timing.py)

from tpsim.sim.price.comm.timing import KINDS, Timing  # noqa: E402


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_source_states_its_timing_loop(path):
    d = json.loads(path.read_text())
    t = Timing.from_dict(d["timing"])
    assert t.kind in KINDS and len(d["timing"]["source"]) > 20, "the loop says where it was read"


@pytest.mark.parametrize("path", [p for p in RAW_SOURCES if json.loads(p.read_text()).get("raw_kind") != "torch-json"],
                         ids=lambda p: p.name)
def test_timing_matches_the_posted_nccl_tests_header(path):
    """'nGpus N' in the header is the GPUs one thread launches; 'graph: 1' a -G batch of 'iters' calls."""
    import re
    d = json.loads(path.read_text())
    t = Timing.from_dict(d["timing"])
    head = (DATA / "raw" / d["raw"]).read_text()
    m = re.search(r"nGpus (\d+)", head)
    if m is None:                            # a file of sections without headers: the command is in `source`
        m = re.search(r" -g (\d+)", d["source"])
    assert t.gpus_per_thread == int(m.group(1))
    g = re.search(r"graph: (\d+)", head)
    if g and int(g.group(1)) > 0:
        assert t.kind == "graph_replay_batched"
        assert t.calls_per_graph == int(re.search(r"(?<!warmup) iters: (\d+)", head).group(1))
        assert t.graph_launches == int(g.group(1))          # -G k: the launches of each timed graph
    else:
        assert t.kind == ("single_thread_n_gpus" if t.gpus_per_thread > 1 else "back_to_back_stream")


def _made_up(timing: dict, sizes, factor: float, mode="nccl") -> dict:
    prof = load_profile("h100-sxm")
    priced = {r.bytes: r.time_us for r in collective_rows(prof, "all_reduce", 4, "nccl", sizes, 8)}
    return {"file": "made-up.json", "profile": "h100-sxm", "collective": "all_reduce", "group": 4,
            "gpus_per_node": 8, "mode": mode, "impl": "nccl", "p2p": True, "nodes": 1, "timing": timing,
            "points": [[b, factor * priced[b]] for b in sizes]}


def test_one_thread_n_gpus_class_rule_does_not_look_at_the_measurement():
    """-g 4 at 4 KiB (9.77 us kernel < 4 x 8.81 = 35.24 us) is out of every median; 8 MiB (62.77 us)
    is in. The same whether the measurement agrees with the price or is twice it."""
    sizes = (4096, 8 << 20)
    for factor in (1.0, 2.0):
        rows = vc.evaluate([_made_up({"kind": "single_thread_n_gpus", "gpus_per_thread": 4}, sizes, factor)])
        assert [r["in_median"] for r in rows] == [False, True]
        assert "nccl-tests -g 4" in rows[0]["out_of_scope"] and rows[1]["out_of_scope"] is None
        assert rows[0]["path"] == "table+host-floor?(g4)" and rows[1]["path"] == "table"
        assert vc.summary(rows)["  timing single_thread_n_gpus"]["points"] == 1


def test_eager_sync_per_call_is_the_kernel_plus_one_eager_launch():
    """4 ranks, 1 KiB: table 9.45 us + launch_us.eager 8.81 us = 18.26 us, path table+eager_launch;
    measured at 18.26 x 1.1 it scores -9.1% and stays in the medians."""
    (row,) = vc.evaluate([_made_up({"kind": "eager_sync_per_call"}, (1024,), 1.0, mode="eager")])
    assert row["priced_us"] == pytest.approx(18.26, abs=0.01) and row["path"] == "table+eager_launch"
    (row,) = vc.evaluate([_made_up({"kind": "eager_sync_per_call"}, (1024,), 1.0, mode="eager")
                          | {"points": [[1024, 18.26 * 1.1]]}])
    assert row["error_pct"] == pytest.approx(-9.1, abs=0.05) and row["in_median"]


def test_graph_replay_per_call_is_out_of_every_median():
    rows = vc.evaluate([_made_up({"kind": "graph_replay_per_call"}, (1024, 1 << 20), 1.0)])
    assert not any(r["in_median"] for r in rows) and all("cudaGraphLaunch" in r["out_of_scope"] for r in rows)
    assert vc.summary(rows)["all"]["points"] == 0


def test_the_real_sources_leave_out_only_the_unpriced_loops():
    """Over bench/data: an out-of-median row is a source flagged as a whole, a graph replay per call,
    a -G 1 batch (each sample the fresh graph's first launch), or a one-thread-N-GPU row whose kernel
    is under N x 8.81 us; no such row is in a median."""
    rows = vc.evaluate(vc.load())
    by_file = {d["file"]: d for d in vc.load()}
    for r in rows:
        d = by_file[r["file"]]
        t = Timing.from_dict(d["timing"])
        unpriced = t.kind == "graph_replay_per_call" or (t.kind == "graph_replay_batched" and t.graph_launches == 1) or (
            t.kind == "single_thread_n_gpus" and r["priced_us"] is not None
            and r["priced_us"] < t.gpus_per_thread * 8.81 - 1e-9)
        assert r["in_median"] == (d.get("in_median", True) and not unpriced), (r["file"], r["bytes"])
