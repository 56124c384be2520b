"""The number a user weighs against retraining (issue 45, sim/baseline.py): the best way to run the same
model -- the fastest prefill and the fastest decode over every schedule that keeps it -- and each model
change's gain over it, in predict (a line under the table, --json) and sweep (three columns)."""
import json

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.commands import sweep_grid as sw
from tpsim.sim import baseline
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Prediction, Simulator, Workload, predict
from tpsim.sim.stack.presets import PRESETS
from tpsim.sim.stack.spec import make_stack

H100 = load_profile("h100-sxm")


def test_candidates_are_the_registered_free_schedules():
    assert baseline.candidates() == ("standard", "token-split", "seq-parallel", "async-tp", "dbo", "tokenweave",
                                     "token-split:4")


def test_best_is_the_fastest_prefill_and_decode_and_gains_are_over_it():
    w = Workload(get_model("llama-3.2-1b"), 2, H100, 4, 256, 32)
    preds = predict(w, ["standard", "ladder", "upper-bound"], record=False)
    best = baseline.best_free(Simulator(w, record=False), {p.schedule: p for p in preds})
    pre = min(best.times, key=lambda k: best.times[k][0])
    dec = min(best.times, key=lambda k: best.times[k][1])
    assert (best.prefill, best.decode) == (pre, dec)
    assert best.tokens_per_s == pytest.approx(4 * 32 / (best.times[pre][0] + best.times[dec][1]))
    assert best.tokens_per_s >= preds[0].tokens_per_s          # standard is a candidate
    ladder = preds[1]
    assert baseline.gain(ladder, best) == pytest.approx(ladder.tokens_per_s / best.tokens_per_s)
    assert baseline.gain(preds[0], best) is None and "dbo" in best.times
    line = baseline.line(preds, best)
    assert line.startswith(f"best keeping the model: {best.name} (") and "ladder " in line and "upper-bound" not in line


def test_on_the_predictions_own_simulator_the_best_is_the_same():
    """predict hands best_free the simulator its predictions ran on (its prices and built passes serve
    the candidates too): every candidate's times equal those of a fresh simulator's."""
    w = Workload(get_model("llama-3.2-1b"), 2, H100, 4, 256, 32)
    preds = predict(w, ["standard", "ladder"], record=False)
    shared = baseline.best_free(preds[0].simulator, {p.schedule: p for p in preds})
    assert shared.times == baseline.best_free(Simulator(w, record=False)).times and len(shared.times) == 7


def test_by_hand_per_phase_and_what_cannot_run_is_skipped():
    """Two made-up candidates: A prefill 1 s decode 9 s, B 2 s and 5 s; batch 2, gen 10: the best is A / B,
    20 / 6 tokens/s; a model change at 5 tokens/s gains 5 / (20 / 6) = 1.5."""
    b = baseline.BestFree("A", "B", 1.0, 5.0, 20 / 6, (), {"A": (1.0, 9.0), "B": (2.0, 5.0)})
    assert b.name == "A / B"
    p = Prediction("ladder", 1.0, 3.0, 0.0, 2, 10, model_change="retrain")
    assert p.tokens_per_s == 5.0 and baseline.gain(p, b) == pytest.approx(1.5)
    w = Workload(get_model("llama-3.2-1b"), 2, H100, 1, 256, 32)           # batch 1: dbo cannot run
    best = baseline.best_free(Simulator(w, record=False))
    assert "dbo" not in best.times and any(s.startswith("dbo: dbo splits") for s in best.skipped)


def test_an_engine_stack_adds_its_fused_all_reduce_as_a_candidate():
    w = Workload(get_model("llama-3.1-8b"), 2, H100, 4, 256, 32, make_stack({}, preset=PRESETS["vllm"].values))
    best = baseline.best_free(Simulator(w, record=False))
    assert baseline.FUSED in best.times
    assert best.times[baseline.FUSED][1] < best.times["standard"][1]      # no norm kernels in decode
    ref = baseline.best_free(Simulator(Workload(get_model("llama-3.1-8b"), 2, H100, 4, 256, 32), record=False))
    assert baseline.FUSED not in ref.times


def test_predict_prints_the_line_and_the_json_holds_the_gains():
    args = ["predict", "--model", "llama-3.2-1b", "--tp", "2", "--batch", "4", "--prompt", "256", "--gen", "32"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and "best keeping the model: " in r.output, r.output
    # the table, the best-free line and every note under it fit 80 columns (tests/test_table_width.py)
    assert all(len(line) <= 80 for line in r.output.splitlines())
    d = json.loads(CliRunner().invoke(main, args + ["--json"]).output)
    rows = {s["schedule"]: s for s in d["schedules"]}
    assert "gain_over_best_free" in rows["ladder"] and "gain_over_best_free" not in rows["standard"]
    assert rows["ladder"]["gain_over_best_free"] == pytest.approx(rows["ladder"]["tokens_per_s"]
                                                                  / d["best_free"]["tokens_per_s"])
    only_free = CliRunner().invoke(main, args + ["--schedule", "standard", "--schedule", "token-split"])
    assert "best keeping the model" not in only_free.output         # nothing to weigh it against


def test_sweep_rows_carry_the_best_free_and_the_plot_uses_it(tmp_path):
    out = tmp_path / "s.csv"
    r = CliRunner().invoke(main, ["sweep", "--model", "llama-3.2-1b", "--tp", "2", "--batch", "1", "--batch", "4",
                                  "--prompt", "256", "--gen", "16", "--schedule", "ladder", "--out", str(out),
                                  "--plot", str(tmp_path / "p.png"), "--plot-view", "no-retraining"])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.with_suffix(".json").read_text())
    lad = [x for x in rows if x["schedule"] == "ladder"]
    assert all(x["gain_over_best_free"] == pytest.approx(x["tokens_per_s"] / x["best_free_tokens_per_s"]) for x in lad)
    best = sw.best_no_retraining(rows)
    for x in lad:
        k = (x["model"], x["tp"], x["profile"], x["bw_scale"], x["lat_scale"], x["batch"])
        assert best[k]["schedule"] == x["best_free"]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
