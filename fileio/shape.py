"""A JSON document's shape, declared once as a spec and checked in one walk, so that a file tpsim
reads back (a calibration state file, a measured run) is refused naming the field that is wrong,
not found later by a KeyError or a TypeError deep in the code that uses it.

A spec is one of:
- a dict {key: spec}: an object holding those keys; a key ending in "?" may be absent, "*" stands
  for every key the object has;
- a list [spec]: a list (possibly empty) whose every item is `spec`;
- a tuple (spec, ...): all of them, in order (("non-empty list", [spec]): a list of at least one);
- a name of CHECKS ("text", "number", "count", ...);
- a callable check(value) -> None, or the problem ("must be ..., got ...", "is not ...");
- Depends(fn): the spec fn(value) returns, for a shape that depends on the value itself.

check_shape raises ShapeError with one line: "<field> 'a.b[3]' must be ..., got ..." or
"<field> 'a.b' is missing" (<field> is the caller's, e.g. "measured JSON field"), or for the
document itself "<top> must be ..., got ...".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


class ShapeError(ValueError):
    """A document whose shape is not its spec's; the message names the field."""


@dataclass(frozen=True)
class Depends:
    """A spec chosen by the value it checks: fn(value) -> spec."""

    fn: Callable


def short(v) -> str:
    """A value for an error message, cut to one short line."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def finite(v) -> bool:
    """A JSON number that is real and finite (true / false are no numbers here)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def is_(test: Callable, what: str) -> Callable:
    """A check: None when test(v), else "must be <what>, got <v>"."""
    return lambda v: None if test(v) else f"must be {what}, got {short(v)}"


def _number(v) -> bool:
    return finite(v) and v >= 0


CHECKS: dict[str, Callable] = {
    "text": is_(lambda v: isinstance(v, str), "a string"),
    "bool": is_(lambda v: isinstance(v, bool), "true or false"),
    "object": is_(lambda v: isinstance(v, dict), "an object"),
    "number": is_(_number, "a finite number >= 0"),
    "positive": is_(lambda v: _number(v) and v > 0, "a number > 0"),
    "count": is_(lambda v: _number(v) and v == int(v), "a whole number >= 0"),
    "positive count": is_(lambda v: _number(v) and v == int(v) and v > 0, "a whole number > 0"),
    "number or null": is_(lambda v: v is None or _number(v), "a number >= 0 or null"),
    "non-empty list": is_(lambda v: isinstance(v, list) and bool(v), "a non-empty list"),
}


def check_shape(v, spec, field: str = "field", top: str = "the document") -> None:
    """ShapeError naming the first place where `v` is not as `spec` says (the module docstring)."""
    _walk(v, spec, "", field, top)


def _walk(v, spec, path: str, field: str, top: str) -> None:
    where = f"{field} {path!r}" if path else top
    if isinstance(spec, Depends):
        _walk(v, spec.fn(v), path, field, top)
    elif isinstance(spec, dict):
        if not isinstance(v, dict):
            raise ShapeError(f"{where} must be an object, got {short(v)}")
        for key, sub in spec.items():
            name = key.rstrip("?")
            for k in (v if name == "*" else [name]):
                if k in v:
                    _walk(v[k], sub, f"{path}.{k}" if path else k, field, top)
                elif not key.endswith("?"):
                    raise ShapeError(f"{field} {(f'{path}.{k}' if path else k)!r} is missing")
    elif isinstance(spec, tuple):
        for sub in spec:
            _walk(v, sub, path, field, top)
    elif isinstance(spec, list):
        if not isinstance(v, list):
            raise ShapeError(f"{where} must be a list, got {short(v)}")
        for i, item in enumerate(v):
            _walk(item, spec[0], f"{path}[{i}]", field, top)
    else:
        problem = (CHECKS[spec] if isinstance(spec, str) else spec)(v)
        if problem:
            raise ShapeError(f"{where} {problem}")
