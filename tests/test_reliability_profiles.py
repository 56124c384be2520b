"""Fuzz: mutated built-in profiles through the real loader and the real CLI (`predict --profile FILE`).

Every mutation either still loads (a harmless change, e.g. one source string for another) or is
refused with one ProfileError line that names the file and the field that was mutated (or, for
what spoils the whole file -- its encoding, nesting, an absurd integer literal -- the file). The
CLI must turn it into exit 2 and one line, never a traceback. Pure Python, no torch.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.sim.hardware.profile import ProfileError, builtin_dir, load_profile

DEEP = "__DEEP__"
HUGE = "__HUGE__"
# what a hostile or careless edit puts where a value was
BAD_VALUES = [float("nan"), float("inf"), float("-inf"), HUGE, 1e300, -1, 0, -1e-9, True, None, "x", "",
              [1, 2], [], {}, {"a": {"b": [1]}}, {"value": float("nan"), "source": "s"}, DEEP, 10 ** 19,
              [float("nan")], ["a", None], 1.5]
FILE_LEVEL = ("not UTF-8", "nested deeper", "integer ", "not valid JSON")


def _paths(v, path=()):
    """Every value's path in a JSON tree (containers too)."""
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, path + (i,))


def _set(tree, path, value):
    cur = tree
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value


def _dotted(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _text(tree) -> str:
    text = json.dumps(tree, allow_nan=True)      # NaN / Infinity literals, as a hand edit would write them
    return (text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000)
                .replace(json.dumps(HUGE), "1" + "0" * 400))


def _cases(n_per_profile: int = 150):
    rng = random.Random(18)
    out = []
    for name in ("h100-sxm", "l40s-pcie", "h100-sxm-p2p-off"):
        base = json.loads((builtin_dir() / f"{name}.json").read_text())
        paths = [p for p in _paths(base) if p]
        # the sections the cost model reads first, then a random sample of everything else
        for path in rng.sample(paths, min(n_per_profile, len(paths))):
            out.append((name, path, rng.choice(BAD_VALUES)))
    return out


CASES = _cases()


def _write(tmp_path, name, tree) -> Path:
    f = tmp_path / f"fuzz-{name}.json"
    if tree.get("extends"):           # keep the base resolvable (a built-in name)
        pass
    f.write_text(_text(tree))
    return f


def _check_error(msg: str, f: Path, path) -> None:
    assert "\n" not in msg.strip(), msg
    assert str(f) in msg, f"the error does not name the file: {msg}"
    if any(k in msg for k in FILE_LEVEL):
        return
    m = re.search(r"field '([^']*)'", msg)
    assert m, f"the error names no field: {msg}"
    named, mutated = m.group(1), _dotted(path)
    # the field named is the one mutated, a part of it or the object holding it
    assert mutated.startswith(named) or named.startswith(mutated), f"mutated {mutated}, error names {named}: {msg}"


def test_fuzz_cases_are_many():
    assert len(CASES) >= 300


@pytest.mark.parametrize("i", range(0, len(CASES)))
def test_mutated_profile_loads_or_names_field(tmp_path, i):
    name, path, value = CASES[i]
    tree = json.loads((builtin_dir() / f"{name}.json").read_text())
    _set(tree, path, value)
    f = _write(tmp_path, name, tree)
    try:
        load_profile(str(f))
    except ProfileError as e:
        _check_error(str(e), f, path)
    # the CLI: exit 0 (harmless) or 2 with one line; never a traceback
    r = CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--gen", "4", "--prompt", "16",
                                      "--profile", str(f), "--schedule", "ladder"])
    assert r.exit_code in (0, 2), f"{_dotted(path)}={value!r}: exit {r.exit_code}\n{r.output}\n{r.exception!r}"
    assert "Traceback" not in r.output
    if r.exit_code == 2:
        lines = [x for x in r.output.strip().splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: "), r.output


@pytest.mark.parametrize("mutate", ["non-utf8", "bom", "empty", "huge-file", "directory", "top-list"])
def test_file_level_problems_name_the_file(tmp_path, mutate):
    src = (builtin_dir() / "h100-sxm.json").read_bytes()
    f = tmp_path / "bad.json"
    if mutate == "non-utf8":
        f.write_bytes(src.replace(b'"name"', b'"n\xffame"', 1))
    elif mutate == "bom":                      # a BOM is not an error: Windows editors write one
        f.write_bytes(b"\xef\xbb\xbf" + src)
        assert load_profile(str(f)).name == "h100-sxm"
        return
    elif mutate == "empty":
        f.write_bytes(b"")
    elif mutate == "huge-file":
        with open(f, "wb") as fh:
            fh.truncate((64 << 20) + 1)
    elif mutate == "directory":
        f.mkdir()
    elif mutate == "top-list":
        f.write_text("[1, 2]")
    with pytest.raises(ProfileError) as e:
        load_profile(str(f))
    assert str(f) in str(e.value)
    r = CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2", "--profile", str(f)])
    assert r.exit_code == 2 and "Traceback" not in r.output and str(f) in r.output, r.output


def test_nan_in_a_collective_table_is_refused_naming_the_point(tmp_path):
    tree = json.loads((builtin_dir() / "h100-sxm.json").read_text())
    tree["collectives"]["tables"][0]["time_us"][3] = float("nan")
    f = _write(tmp_path, "nan", tree)
    with pytest.raises(ProfileError, match=r"field 'collectives\.tables\[0\]\.time_us\[3\]' must be a finite number"):
        load_profile(str(f))


def test_infinity_in_an_efficiency_curve_is_refused(tmp_path):
    tree = json.loads((builtin_dir() / "h100-sxm.json").read_text())
    tree["compute"]["gemm_efficiency"]["efficiency"][0] = float("inf")
    f = _write(tmp_path, "inf", tree)
    with pytest.raises(ProfileError, match=r"field 'compute\.gemm_efficiency\.efficiency\[0\]' must be a finite"):
        load_profile(str(f))


def test_list_valued_attrs_and_huge_ints_name_their_field(tmp_path):
    tree = json.loads((builtin_dir() / "h100-sxm.json").read_text())
    tree["compute"]["tables"] = [{"source": "t", "points": [{"kind": "gemm", "attrs": {"m": [1, 2]}, "time_s": 1e-5}]}]
    f = _write(tmp_path, "attrs", tree)
    with pytest.raises(ProfileError, match=r"field 'compute\.tables\[0\]\.points\[0\]\.attrs\.m' must be an integer"):
        load_profile(str(f))
    tree = json.loads((builtin_dir() / "h100-sxm.json").read_text())
    tree["memory_gib"] = HUGE
    f = _write(tmp_path, "huge", tree)
    with pytest.raises(ProfileError, match="out of range"):
        load_profile(str(f))


def test_a_misspelt_top_level_field_is_refused_with_the_near_name(tmp_path):
    """`gpu_per_node` once loaded without a word, leaving the base's gpus_per_node in force."""
    p = tmp_path / "typo.json"
    p.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "extends": "h100-sxm", "gpu_per_node": 4}))
    with pytest.raises(ProfileError, match=r"unknown field 'gpu_per_node' \(did you mean 'gpus_per_node'\?\)"):
        load_profile(str(p))
    for name in ("h100-sxm", "a100-sxm", "l40s-pcie", "h200-sxm-coschedule"):
        load_profile(name)                                  # the built-ins hold only known fields


def test_the_walk_names_the_first_bad_value_and_passes_a_plain_tree():
    """sim/hardware/read.py first_bad_value: a tree with nothing wrong is told by a walk that builds no
    path (a list of numbers by its sum); each thing wrong is still found and named, inside a list of
    numbers too; a sum past the float range is no bad value."""
    from tpsim.sim.hardware.read import MAX_LIST_ENTRIES, first_bad_value
    plain = {"a": [1, 2.5, True], "b": {"c": ["x", {"d": 1e308}], "e": [1e308, 1e308]}, "f": []}
    assert first_bad_value(plain) is None
    assert first_bad_value({"a": [1.0, float("inf")]}) == ("a[1]", "must be a finite number, got inf")
    assert first_bad_value({"a": [1, {"b": float("nan")}]}) == ("a[1].b", "must be a finite number, got nan")
    assert first_bad_value({"a": ["ok", "bell\x07"]})[0] == "a[1]"
    assert first_bad_value({"a": {"k\x01": 1}})[1] == "is a key holding a control character"
    assert "entries" in first_bad_value({"a": [0] * (MAX_LIST_ENTRIES + 1)})[1]
    deep: list = [1.0]
    for _ in range(200):
        deep = [deep]
    assert "nests deeper" in first_bad_value({"a": deep})[1]
