"""A profile file read as data: the input policy (fileio/policy.py: a regular file, at most 64 MiB,
UTF-8, no duplicate keys, NaN, Infinity or integers past 2**63, bounded nesting) plus what no field
check catches later (control characters in any text). Field checks: sim/hardware/check.py."""
from __future__ import annotations

import math
from pathlib import Path

from tpsim.sim.bounds import BOUNDS
from tpsim.fileio.policy import CONTROL, parse_json, read_input_text
from tpsim.sim.hardware.schema import MAX_DEPTH, MAX_FILE_BYTES, ProfileError


def read_json(path: Path) -> dict:
    """One profile file, read by the input policy (fileio/policy.py: a regular file, at most 64 MiB,
    UTF-8, no duplicate keys, NaN, Infinity or integers past 2**63, nesting bounded) and checked
    for what no field check can catch later: control characters in any text (a profile's name,
    description and sources are printed; an escape sequence could clear the screen or set the
    window title). Every error names the file (and the field, where there is one)."""
    where = f"profile {path}"
    try:
        data = parse_json(read_input_text(path, "profile", MAX_FILE_BYTES), where, max_depth=MAX_DEPTH,
                          walk=False)                 # first_bad_value below walks it, once
    except ValueError as e:
        raise ProfileError(str(e)) from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: top level must be a JSON object")
    bad = first_bad_value(data)
    if bad:
        field_, why = bad
        raise ProfileError(f"profile {path}: field '{field_}' {why}")
    return data


MAX_LIST_ENTRIES = 2 * BOUNDS["compute_points"].hi   # no list of a real profile comes near (raw points: ~10^3)
_CONTROL = CONTROL                  # the one rule for text tpsim prints (fileio/policy.py)


def first_bad_value(data) -> tuple[str, str] | None:
    """(field path, what is wrong) of the first non-finite number, too-deep nesting or text holding
    a control character, walking the tree without recursion (so the walk itself cannot hit
    Python's recursion limit). A tree with none (every profile read) is told by a walk that builds no
    path (_all_plain); only one with something wrong is walked again to name the first."""
    if _all_plain(data):
        return None
    stack = [("", data, 0)]
    while stack:
        path, v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return path, f"nests deeper than {MAX_DEPTH} levels"
        if isinstance(v, float) and not math.isfinite(v):
            return path, f"must be a finite number, got {v}"
        if isinstance(v, str) and _CONTROL.search(v):
            return path, (f"holds a control character ({_CONTROL.search(v).group()!r}); profile text is printed "
                          f"as is, so it must be plain text")
        if isinstance(v, dict):
            for k in v:
                if _CONTROL.search(str(k)):
                    return f"{path}.{k!r}" if path else repr(k), "is a key holding a control character"
            stack += [(f"{path}.{k}" if path else str(k), x, depth + 1) for k, x in reversed(v.items())]
        elif isinstance(v, list):
            if len(v) > MAX_LIST_ENTRIES:      # refused before the merge copies it and the checks index it
                return path, (f"has {len(v)} entries; at most {MAX_LIST_ENTRIES} in any list of a profile "
                              f"(compute points: {BOUNDS['compute_points'].hi}, {BOUNDS['compute_points'].why})")
            stack += [(f"{path}[{i}]", x, depth + 1) for i, x in reversed(list(enumerate(v)))]
    return None


def _all_plain(data) -> bool:
    """True when first_bad_value would find nothing in `data`; False when it may (it then looks). A
    list of numbers only is checked at C speed: their sum is finite exactly when none is NaN or
    infinite (a sum past the float range is a false alarm the full walk clears); the texts and keys
    are searched for control characters at once, joined (a control character is one character)."""
    stack, texts = [(data, 0)], []
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif isinstance(v, str):
            texts.append(v)
        elif isinstance(v, dict):
            texts.extend(map(str, v))
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            if len(v) > MAX_LIST_ENTRIES or (v and depth + 1 > MAX_DEPTH):
                return False
            try:
                if math.isfinite(sum(v)):
                    continue                  # numbers only, every one finite
                return False
            except (TypeError, OverflowError):     # not numbers only (or past the float range): one by one
                stack.extend((x, depth + 1) for x in v)
    return _CONTROL.search("".join(texts)) is None
