"""Hardware profiles: what one op and one collective cost on a cluster, with provenance.

A profile is a versioned JSON file (format "tpsim-profile", version 1; docs/profile-format.md).
Every number sits next to the `source` it came from, as {"value": x, "source": "..."}, or a table
carries one `source` for all its points. Loading validates the file and names the bad field and
the file on any problem. `"extends": "h100-sxm"` completes a partial profile from a base one:
sections merge key by key, and measured tables are put in front of the base's (the first match wins);
an object carrying `"replace": true` replaces the base's object whole instead (a P2P-off twin
replaces `collectives`, since none of the P2P-on measurements apply to it).

An optional `topology` section (sim/topology.py) describes the box's links; when present it prices
every collective that has no measured table, and `collectives.model` (the plain NCCL protocol
model) becomes optional and is used only where the topology cannot answer.

This module owns the format both ways: reading (`load_profile`, `read_raw`, `describe`) and
writing (`new_profile`, `sourced`, `write_profile`, used by calibration and the nccl-tests
import). Its vocabulary and types are sim/profile_schema.py; field validation sim/profile_check.py.
"""
from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

from .profile_check import parse, read_json
from .profile_schema import (COLLECTIVES, FORMAT, JITTER_DISTS, MODES, SCOPES, VERSION, ArrivalJitter,  # noqa: F401
                             CollectiveTable, ComputePoint, Curve, LinkModel, Profile, ProfileError, _short)
from .trace import write_json_atomic


# ------------------------------------------------------------------ loading

def builtin_dir() -> Path:
    """sim/profiles/, the built-in profiles beside this module (read as data files)."""
    return Path(__file__).resolve().parent / "profiles"


def builtin_names() -> list[str]:
    d = builtin_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def resolve(name_or_path: str) -> Path:
    """A built-in name ("h100-sxm") or a path to a profile JSON."""
    p = Path(name_or_path)
    if p.suffix == ".json" or os.sep in name_or_path:
        if not p.is_file():
            raise ProfileError(f"profile file not found: {name_or_path}")
        return p
    cand = builtin_dir() / f"{name_or_path}.json"
    if not cand.is_file():
        raise ProfileError(f"unknown profile {name_or_path!r}; built-in profiles: {', '.join(builtin_names())} "
                           f"(or give a path to a profile .json)")
    return cand


def read_raw(name_or_path: str, _seen: tuple = ()) -> tuple[dict, Path]:
    """The profile's JSON with its `extends` chain merged in (base first)."""
    path = resolve(name_or_path)
    if str(path.resolve()) in _seen:
        raise ProfileError(f"profile {path}: 'extends' forms a cycle")
    data = read_json(path)
    if data.get("format") != FORMAT:
        raise ProfileError(f"profile {path}: field 'format' must be {FORMAT!r}, got {_short(data.get('format'))}")
    if data.get("version") != VERSION:
        raise ProfileError(f"profile {path}: field 'version' must be {VERSION}, got {_short(data.get('version'))}")
    base = data.get("extends")
    if "extends" in data:               # present but null/empty is a broken reference, not "no base"
        if not isinstance(base, str) or not base:
            raise ProfileError(f"profile {path}: field 'extends' must name a profile, got {_short(base)}")
        try:
            base_data, _ = read_raw(base, _seen + (str(path.resolve()),))
        except ProfileError as e:
            raise ProfileError(f"profile {path}: field 'extends': {e}") from None
        data = merge(base_data, data)
    return data, path


_PREPEND_LISTS = {("collectives", "tables"), ("compute", "tables")}


def merge(base: dict, child: dict, _path: tuple = ()) -> dict:
    """Child over base, key by key; measured tables of the child go before the base's."""
    out = copy.deepcopy(base)
    for k, v in child.items():
        p = _path + (k,)
        if isinstance(v, dict) and v.get("replace") is True:
            out[k] = _strip_replace(v)
        elif p in _PREPEND_LISTS and isinstance(v, list):
            out[k] = copy.deepcopy(v) + out.get(k, [])
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and not _is_leaf(v):
            out[k] = merge(out[k], v, p)
        else:
            out[k] = _strip_replace(v)
    out.pop("extends", None) if not _path else None
    return out


def _strip_replace(v):
    """A copy without `"replace": true` markers (they only steer merging; a base may lack the key)."""
    if isinstance(v, dict):
        return {k: _strip_replace(x) for k, x in v.items() if not (k == "replace" and x is True)}
    if isinstance(v, list):
        return [_strip_replace(x) for x in v]
    return copy.deepcopy(v)


def _is_leaf(v: dict) -> bool:
    return "value" in v


def load_profile(name_or_path: str) -> Profile:
    """Read, merge `extends`, validate. Errors name the file (and the base it extends) and field."""
    data, path = read_raw(name_or_path)
    where = str(path)
    base = read_json(path).get("extends")
    if base:
        where = f"{path} (extends {base})"
    try:
        return parse(data, where)
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError) as e:
        # a backstop: every field check above should have named the field already
        raise ProfileError(f"profile {where}: invalid value ({type(e).__name__}: {e})") from None


def describe(name_or_path: str) -> list[tuple[str, str, str]]:
    """(field, value, source) for every sourced number and table of a profile, `extends` merged,
    after validating it (so what is shown is what `load_profile` uses). For `tpsim profiles show`."""
    data, path = read_raw(name_or_path)
    prof = load_profile(name_or_path)
    out = [("name", prof.name, str(path)), ("description", prof.description, "")]
    # raw calibration points and stack defaults carry no numbers of the cost model
    out += sources({k: v for k, v in data.items()
                    if k not in ("format", "version", "name", "description", "raw", "stack_defaults")})
    return out


def sources(data: dict, prefix: str = "") -> list[tuple[str, str, str]]:
    """(field, value, source) for every sourced number and table, for `tpsim profiles show`."""
    out = []
    for k, v in data.items():
        path = f"{prefix}{k}"
        if k == "replace":
            continue
        if isinstance(v, dict) and "value" in v:
            out.append((path, str(v["value"]), str(v.get("source", ""))))
        elif isinstance(v, dict) and "source" in v:
            keys = [kk for kk in v if kk not in ("source",)]
            out.append((path, f"table ({', '.join(keys)})", str(v["source"])))
        elif isinstance(v, dict):
            out.extend(sources(v, path + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                label = ", ".join(f"{kk}={x[kk]}" for kk in ("collective", "group", "scope", "mode", "impl") if kk in x)
                n = len(x.get("bytes", x.get("points", [])))
                what = (f"{len(x['rows'])} (n, k) rows x {len(x.get('m', []))} m" if isinstance(x.get("rows"), list)
                        else f"{label} ({n} points)".strip())
                out.append((f"{path}[{i}]", what, str(x.get("source", ""))))
    return out


# ------------------------------------------------------------------ writing

def sourced(value, source: str) -> dict:
    """One value of the format with its provenance, as every number of a profile is written."""
    return {"value": value, "source": source}


def new_profile(name: str, description: str, extends: str | None = None) -> dict:
    """The head of a profile document: format, version, name, the base it extends, description."""
    doc: dict = {"format": FORMAT, "version": VERSION, "name": name}
    if extends:
        doc["extends"] = extends
    doc["description"] = description
    return doc


def load_document(data: dict, near: str | os.PathLike) -> Profile:
    """Validate a profile document not yet written, with its `extends` base merged, as
    `load_profile` would read it: through a side file beside `near` (removed again)."""
    out = Path(near)
    fd, side_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}.", suffix=".probe.json")
    os.close(fd)
    try:
        write_json_atomic(side_name, data)
        return load_profile(side_name)
    finally:
        Path(side_name).unlink(missing_ok=True)


def write_profile(path: str | os.PathLike, data: dict) -> Profile:
    """Validate a profile document, then write it to `path` atomically: one that does not validate
    raises ProfileError naming the field and leaves `path` as it was. Returns the loaded profile."""
    loaded = load_document(data, near=path)
    write_json_atomic(path, data)
    return loaded
