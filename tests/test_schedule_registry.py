"""One definition per schedule (sim/schedule/schedules): every consumer reads the registry, and a schedule
registered through the public function is at once parsed, planned, predicted, shown, given
calibration shapes and looked up by `tpsim check` (issue #28)."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim.cli import main
from tpsim.hw.derive import inductor_probe
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Workload, predict
from tpsim.sim.hardware.profile import load_profile
from tpsim.sim.schedule.language import SCHEDULE_HELP, model_change, no_retraining, plan_of
from tpsim.sim.schedule.schedules.registry import (MODEL_CHANGES, REGISTRY, LayerKind, ScheduleDef, each,
                                                   layer_kinds, register, schedule_help, unregister)
from tpsim.calib.shapes import ShapeCase
from tpsim.sim.stack.spec import Stack

ROOT = Path(__file__).resolve().parent.parent
TABLE = json.loads((ROOT / "sim" / "price" / "compiled_kernels.json").read_text())


def _attn_only(b, i, x):
    """A toy layer kind: attention, its all-reduce, the residual add; no MLP."""
    p = b.all_reduce(f"L{i}.attn.allreduce", b.attn(i, x), i)
    return b.add(f"L{i}.attn.add", x, p, f"L{i}.x", i)


@pytest.fixture
def attn_only():
    kind = LayerKind("attn-only", each(_attn_only), analytic="a test's kind: no compiled probe")
    d = register(ScheduleDef("attn-only", "attn-only (a test's)", "retrain", lambda n: ("attn-only",) * n, (kind,)))
    yield d
    unregister("attn-only")


def test_every_consumer_has_every_registered_schedule():
    assert SCHEDULE_HELP == schedule_help() and all(d.grammar in SCHEDULE_HELP for d in REGISTRY.values())
    assert set(no_retraining()) == {"standard", "token-split", "seq-parallel", "async-tp", "dbo", "tokenweave"}
    shapes = {k for s in ShapeCase(get_model("tiny"), 2, 2, 8, 4, Stack()).schedules() for k in s.plan}
    for d in REGISTRY.values():
        assert d.model_change in MODEL_CHANGES and model_change(d.example_spec) == d.model_change
        assert plan_of(d.example_spec, 4), d.name
        for kind in d.kinds:
            # the compiled-kernel probes (and the committed table derived from them), or a declared fallback
            assert all(inductor_probe.KINDS[p.key] == (p.spec, p.layers) for p in kind.probes)
            assert all(p.key in TABLE["layers"] for p in kind.probes), f"{kind.name}: table lacks its probe"
            assert kind.probes or kind.analytic
            assert kind.name in shapes, f"calibration shapes lack layer kind {kind.name}"   # calib.shapes


def test_every_layer_kind_has_a_reference_or_says_why_not():
    pytest.importorskip("torch")
    from tpsim.hw.check import REFERENCES, UNCHECKED
    for name in layer_kinds():
        assert (name in REFERENCES) != (name in UNCHECKED), name


def test_a_registered_schedule_is_predicted_shown_and_looked_up(attn_only):
    """One register() call: predict prices it, show lists its ops, calibration builds its shapes."""
    w = Workload(get_model("llama-3.2-1b"), 2, load_profile("h100-sxm"), batch=1, prompt_len=64, gen_len=8)
    std, toy = predict(w, ["standard", "attn-only"], record=False)
    assert toy.model_change == "retrain" and 0 < toy.prefill_s < std.prefill_s     # no MLP: less work
    out = CliRunner().invoke(main, ["show", "--model", "tiny", "--schedule", "attn-only", "--tp", "2", "--gen", "4"])
    assert out.exit_code == 0, out.output
    assert "L1.attn.allreduce" in out.output and "L1.mlp" not in out.output
    out = CliRunner().invoke(main, ["predict", "--model", "tiny", "--tp", "2", "--schedule", "attn-only",
                                    "--profile", "h100-sxm", "--gen", "4", "--prompt", "8", "--json"])
    assert out.exit_code == 0, out.output
    assert [r["model_change"] for r in json.loads(out.output)["schedules"]] == ["retrain"]
    kinds = {k for s in ShapeCase(get_model("tiny"), 2, 2, 8, 4, Stack()).schedules() for k in s.plan}
    assert "attn-only" in kinds
    assert "attn-only" not in inductor_probe.KINDS          # declared analytic: no probe to compile


def test_check_runs_a_registered_kind_unchecked_and_says_why(attn_only):
    pytest.importorskip("torch")
    from tpsim.hw.check import unchecked_reasons
    assert unchecked_reasons(plan_of("attn-only", 3)) == ["no reference for layer kind 'attn-only'"]
    assert unchecked_reasons(plan_of("upper-bound", 3)) == ["outputs meaningless by design"]
    assert unchecked_reasons(plan_of("ladder:2", 3)) == []


def test_registering_refuses_clashes_and_undeclared_kinds(attn_only):
    with pytest.raises(ValueError, match="registered already"):
        register(attn_only)
    with pytest.raises(ValueError, match="belong to another schedule"):
        register(ScheduleDef("other", "other", "retrain", lambda n: ("standard",) * n, (layer_kinds()["standard"],)))
    with pytest.raises(ValueError, match="say why it has none"):
        LayerKind("bare", each(_attn_only))
    with pytest.raises(ValueError, match="model_change"):
        ScheduleDef("x", "x", "maybe", lambda n: ())


def test_tpsim_help_lists_every_registered_schedule(attn_only):
    """`tpsim --help` reads the registry when it prints (cli.SECTIONS): each built-in schedule and one
    registered from outside, with what it asks of the model."""
    out = CliRunner().invoke(main, ["--help"]).output
    listed = out.split("Schedules")[1].split("Options:")[0]
    names = [line.split()[0] for line in listed.splitlines()[1:] if line.startswith("  ") and not line.startswith("    ")]
    assert names == list(REGISTRY) and names[-1] == "attn-only" and len(names) >= 8, out
    assert "[model change: drops syncs]" in " ".join(listed.split())


@pytest.fixture
def two_halves():
    """A toy schedule that keeps the model: standard layers built in two runs of its own kind."""
    from tpsim.sim.schedule.schedules import standard
    kind = LayerKind("two-halves", each(standard.layer), analytic="a test's kind: no compiled probe")
    d = register(ScheduleDef("two-halves", "two-halves (a test's)", "none", lambda n: ("two-halves",) * n, (kind,),
                             numerics_reference="standard"))
    yield d
    unregister("two-halves")


def test_a_schedule_that_keeps_the_model_is_checked_against_the_reference_it_names(two_halves):
    """Its ScheduleDef names standard's reference (numerics_reference): `tpsim check` holds it to that
    reference with no entry of its own in hw/check.py."""
    pytest.importorskip("torch")
    from tpsim.hw.check import OWN, REFERENCES, unchecked_reasons
    assert "two-halves" not in OWN and REFERENCES["two-halves"] is OWN["standard"]
    assert unchecked_reasons(plan_of("two-halves", 3)) == []
    assert REFERENCES["token-split"] is REFERENCES["seq-parallel"] is OWN["standard"]
    unregister("two-halves")
    assert "two-halves" not in REFERENCES
