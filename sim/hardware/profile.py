"""Hardware profiles: what one op and one collective cost on a cluster, with provenance.

A profile is a versioned JSON file (format "tpsim-profile", version 1; docs/profile-format.md).
Every number sits next to the `source` it came from, as {"value": x, "source": "..."}, or a table
carries one `source` for all its points. Loading validates the file and names the bad field and
the file on any problem. `"extends": "h100-sxm"` completes a partial profile from a base one:
sections merge key by key, and measured tables are put in front of the base's (the first match wins);
an object carrying `"replace": true` replaces the base's object whole instead (a P2P-off twin
replaces `collectives`, since none of the P2P-on measurements apply to it).

An optional `topology` section (sim/hardware/topology.py) describes the box's links; when present it prices
every collective that has no measured table, and `collectives.model` (the plain NCCL protocol
model) becomes optional and is used only where the topology cannot answer.

This module owns the format both ways: reading (`load_profile`, `read_raw`, `describe`) and
writing (`new_profile`, `sourced`, `write_profile`, used by calibration and the nccl-tests
import). Its vocabulary and types are sim/hardware/schema.py; field validation sim/hardware/check.py.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

from tpsim.sim.hardware.check import parse
from tpsim.sim.hardware.read import first_bad_value, read_json
from tpsim.sim.hardware.schema import (COLLECTIVES, FORMAT, JITTER_DISTS, MODES, SCOPES,  # noqa: F401
                                       VERSION, ArrivalJitter, CollectiveTable, GemmTable,
                                       ComputePoint, Curve, LinkModel, Profile, ProfileError,
                                       short)
from tpsim.fileio.policy import write_json_atomic


# ------------------------------------------------------------------ loading

def builtin_dir() -> Path:
    """sim/hardware/profiles/, the built-in profiles beside this module (read as data files)."""
    return Path(__file__).resolve().parent / "profiles"


def builtin_names() -> list[str]:
    d = builtin_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


MAX_EXTENDS = 16          # profiles in one `extends` chain (real ones: 2 or 3 -- a calibration over a built-in)


def _is_path(ref: str) -> bool:
    return ref.endswith(".json") or os.sep in ref or (os.altsep is not None and os.altsep in ref)


def resolve(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A built-in name ("h100-sxm") or a path to a profile JSON; a relative path inside a profile's
    `extends` is relative to that profile's folder (`relative_to`), not to the working directory."""
    if _is_path(name_or_path):
        p = Path(name_or_path)
        if relative_to is not None and not p.is_absolute():
            p = relative_to / p
        if not p.exists():          # present but not a regular file: refused by read_json, by name
            raise ProfileError(f"profile file not found: {p}")
        return p
    cand = builtin_dir() / f"{name_or_path}.json"
    if cand.is_file():
        return cand
    # not a built-in: a file or folder of that name is what was meant (as --stack reads one)
    p = Path(name_or_path) if relative_to is None else relative_to / name_or_path
    if p.is_dir():
        raise ProfileError(f"profile {p} is a directory; give a profile's JSON file or a built-in name "
                           f"({', '.join(builtin_names())})")
    if p.exists():
        return p
    raise ProfileError(f"unknown profile {name_or_path!r}: no built-in profile and no file of that name"
                       f"{f' in its folder ({relative_to})' if relative_to is not None else ''}; built-in profiles: "
                       f"{', '.join(builtin_names())} (or give a path to a profile .json)")


def _check_head(data: dict, where) -> None:
    if data.get("format") != FORMAT:
        raise ProfileError(f"profile {where}: field 'format' must be {FORMAT!r}, got {short(data.get('format'))}")
    if data.get("version") != VERSION:
        raise ProfileError(f"profile {where}: field 'version' must be {VERSION}, got {short(data.get('version'))}")


def _base_of(data: dict, path, folder: Path | None, seen: tuple) -> dict | None:
    """The merged JSON of the profile `data` extends (None without `extends`). Errors in the base's
    own file name that file, once (no chain of "field 'extends': profile ...: field 'extends'")."""
    if "extends" not in data:
        return None
    base = data["extends"]
    if not isinstance(base, str) or not base:           # present but null/empty: a broken reference
        raise ProfileError(f"profile {path}: field 'extends' must name a profile, got {short(base)}")
    if len(seen) >= MAX_EXTENDS:
        raise ProfileError(f"profile {path}: field 'extends': the chain is over {MAX_EXTENDS} profiles long")
    try:
        ref = resolve(base, folder)
    except ProfileError as e:
        raise ProfileError(f"profile {path}: field 'extends': {e}") from None
    base_data, _ = read_raw(str(ref), seen)
    return base_data


def read_raw(name_or_path: str, _seen: tuple = ()) -> tuple[dict, Path]:
    """The profile's JSON with its `extends` chain merged in (base first), at most MAX_EXTENDS deep."""
    data, path, _ = _read_chain(name_or_path, _seen)
    return data, path


def _read_chain(name_or_path: str, _seen: tuple = ()) -> tuple[dict, Path, str | None]:
    """read_raw, and the `extends` the file itself names (read once, not once more to say so)."""
    path = resolve(name_or_path)
    key = str(path.resolve())
    if key in _seen:
        raise ProfileError(f"profile {path}: 'extends' forms a cycle")
    data = read_json(path)
    _check_head(data, path)
    base = _base_of(data, path, path.parent, _seen + (key,))
    return (data if base is None else merge(base, data)), path, data.get("extends")


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
    data, path, base = _read_chain(name_or_path)
    where = str(path)
    if base:
        where = f"{path} (extends {base})"
    return _parse(data, where)


def _parse(data: dict, where: str) -> Profile:
    try:
        return parse(data, where)
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError, ZeroDivisionError) as e:
        # a backstop: every field check should have named the field already
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
            span = v.get("range")
            shown = str(v["value"]) + (f" (source's range {span[0]:g}-{span[1]:g})" if isinstance(span, list) else "")
            out.append((path, shown, str(v.get("source", ""))))
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


def anchored(data: dict, out: str | os.PathLike) -> dict:
    """`data` as it must be written to `out`: a path in `extends` (given relative to the working
    directory, as a user types it) rewritten relative to `out`'s folder, which is what a reader of
    the written file resolves it against."""
    base = data.get("extends")
    if not isinstance(base, str) or not _is_path(base) or os.path.isabs(base):
        return data
    folder = os.path.dirname(os.path.abspath(out))
    return {**data, "extends": os.path.relpath(os.path.abspath(base), folder)}


def load_document(data: dict, near: str | os.PathLike) -> Profile:
    """Validate a profile document not yet written to `near`, with its `extends` base merged, as
    `load_profile` would read it from there; in memory (errors name `near`, not a temporary)."""
    out = Path(near)
    doc = anchored(data, out)
    _check_head(doc, out)
    bad = first_bad_value(doc)
    if bad:
        raise ProfileError(f"profile {out}: field '{bad[0]}' {bad[1]}")
    base = _base_of(doc, out, out.parent, ())
    where = f"{out} (extends {doc['extends']})" if base is not None else str(out)
    return _parse(doc if base is None else merge(base, doc), where)


def write_profile(path: str | os.PathLike, data: dict) -> Profile:
    """Validate a profile document, then write it to `path` atomically: one that does not validate
    raises ProfileError naming the field and leaves `path` as it was. Returns the loaded profile."""
    loaded = load_document(data, near=path)
    write_json_atomic(path, anchored(data, path))
    return loaded
