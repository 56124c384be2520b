"""Property-based fuzzing (issue #29) of the two readers of hand-edited files: the profile schema
and the Hugging Face config reader. For any hostile value at any field, through the real CLI
(`predict --json`): exit 0 or 2, never a traceback; an error is one line naming the file; a
result holds only finite numbers (strict JSON, no NaN or Infinity). Derandomized (the same examples on
every run, so CI is reproducible) and small: 100 examples per property, ~5-10 CPU-s each.
Skipped cleanly where hypothesis is not installed (it is in the `test` extra)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from tpsim import cli  # noqa: E402
from tpsim.sim.model.hf.check import BOOLS, COUNTS, FLOATS, STRINGS  # noqa: E402
from tpsim.sim.hardware.profile import builtin_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# hostile values: every JSON type, the numbers that broke things before (denormals, huge, negative,
# NaN/Infinity written as JSON literals), text with rich markup and escape sequences
HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.sampled_from([0, -1, 1, 2, 7, 1e-320, 1e-300, 1e-9, 1e308, -1e308, 1e9, 2 ** 63, 0.5, 1.5]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["NaN", "Infinity", "-Infinity"]).map(lambda s: ("__literal__", s)),
    st.text(max_size=12), st.sampled_from(["[/]", "[bold]x", "\x1b[2J", "yes", "no", "false", "1e9"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def dumps(doc) -> str:
    """JSON text where ("__literal__", "NaN") becomes a bare NaN literal, as a hand edit would write it."""
    marks = {}

    def walk(v):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "__literal__":
            key = f"@@{len(marks)}@@"
            marks[key] = v[1]
            return key
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    text = json.dumps(walk(doc))
    for key, lit in marks.items():
        text = text.replace(f'"{key}"', lit)
    return text


def leaf_paths(obj, prefix=()) -> list[tuple]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += leaf_paths(v, prefix + (k,)) or [prefix + (k,)]
    elif isinstance(obj, list) and obj:
        out += leaf_paths(obj[0], prefix + (0,)) or [prefix + (0,)]       # the first entry of each list
    return out


def set_at(doc, path, value):
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value


def check_outcome(r, named: str) -> None:
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), (r.output, repr(r.exception))
    assert r.exit_code in (0, 2), (r.exit_code, r.output)
    hypothesis.event(f"exit {r.exit_code}")          # --hypothesis-show-statistics: how many loaded
    if r.exit_code == 2:
        lines = [x for x in r.output.strip().splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ") and named in lines[0], r.output
        return
    out = json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-finite {c} in the output"))
    for s in out["schedules"]:
        for k in NUMBERS:                       # a number in a sane run is a finite number here (not null)
            assert isinstance(s[k], (int, float)) and math.isfinite(s[k]), (k, s[k])


# the fields that are numbers in a sane run's output
_SANE = json.loads(CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--gen", "3", "--prompt",
                                                 "8", "--json"]).output)["schedules"][0]
NUMBERS = [k for k, v in _SANE.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]

# the profile: a copy of the built-in l40s-pcie (topology, tables, curves) minus its bulky GEMM
# table, mutated at one field; extends nothing, so every field is the fuzzed file's own
BASE = json.loads((builtin_dir() / "l40s-pcie.json").read_text())
BASE["compute"].pop("gemm_tables", None)
BASE.pop("raw", None)
PROFILE_PATHS = leaf_paths(BASE)


@SETTINGS
@given(path=st.sampled_from(PROFILE_PATHS), value=HOSTILE, data=st.data())
def test_a_profile_with_any_hostile_field_loads_or_is_one_line(tmp_path_factory, path, value, data):
    doc = json.loads(json.dumps(BASE))
    if data.draw(st.booleans()):
        set_at(doc, path, value)
    else:                                          # or drop the field entirely
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
    f = tmp_path_factory.mktemp("prof") / "fuzz.json"
    f.write_text(dumps(doc))
    r = CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--gen", "3", "--prompt", "8",
                                      "--profile", str(f), "--json", "--no-memory-check"])
    check_outcome(r, str(f))


HF_BASE = json.loads((ROOT / "tests" / "fixtures" / "hf" / "tiny-qwen3" / "config.json").read_text())
HF_KEYS = sorted(set(COUNTS) | set(BOOLS) | set(STRINGS) | set(FLOATS) | {"architectures", "rope_scaling"})


@SETTINGS
@given(edits=st.dictionaries(st.sampled_from(HF_KEYS), HOSTILE, min_size=1, max_size=3))
def test_an_hf_config_with_any_hostile_keys_loads_or_is_one_line(tmp_path_factory, edits):
    cfg = dict(HF_BASE, **edits)
    # a count small enough to price in a test when it is valid (the bounds table allows 1024 layers)
    for key in ("num_hidden_layers",):
        if isinstance(cfg.get(key), int) and not isinstance(cfg[key], bool) and 0 < cfg[key] <= 1024:
            cfg[key] = min(cfg[key], 4)
    f = tmp_path_factory.mktemp("hf") / "config.json"
    f.write_text(dumps(cfg))
    r = CliRunner().invoke(cli.main, ["predict", "--model", str(f), "--tp", "1", "--gen", "3", "--prompt", "8",
                                      "--json", "--no-memory-check", "--schedule", "standard"])
    check_outcome(r, str(f))
