"""Reading one field of a profile's JSON: a number, a count, a string or a sourced choice, each checked
where it is read (finite, in range, with a source when it is an object) so that a failure names the
file and the field. sim/hardware/check.py reads a profile's sections with it."""
from __future__ import annotations

from tpsim.sim.bounds import BOUNDS
from tpsim.sim.hardware.schema import ProfileError, finite, has_source, short

# TFLOP/s, GB/s, GiB: 1e-6 is 1 MFLOP/s, 1 kB/s, 1 KiB -- below any device, and the smallest nonzero value a
# calibration writes (rates rounded to 6 decimals; a fitted small-message protocol's busbw can be ~3e-6)
RATE_FLOOR = 1e-6


class Fields:
    """Typed access to a profile's JSON by dotted path; every failure names the file and the field.
    A number may be bare or {"value", "source"}, with an optional "range" its source gives, which is
    kept in `ranges` (sim/sensitivity.py)."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where
        self.ranges: dict[str, tuple[float, float]] = {}     # path -> its source's (lo, hi), as num read them

    def fail(self, path: str, msg: str):
        raise ProfileError(f"profile {self.where}: field '{path}' {msg}")

    def get(self, path: str, default=...):
        cur = self.data
        for part in path.split("."):
            if not isinstance(cur, dict) or part not in cur:
                if default is not ...:
                    return default
                self.fail(path, "is missing")
            cur = cur[part]
        return cur

    def obj(self, path: str) -> dict:
        v = self.get(path)
        if not isinstance(v, dict):
            self.fail(path, "must be an object")
        return v

    def str_(self, path: str, default=...) -> str:
        v = self.get(path, default)
        if not isinstance(v, str):
            self.fail(path, f"must be a string, got {short(v)}")
        return v

    def num(self, path: str, default=..., positive: bool = False, min_: float | None = None,
            max_: float = 1e9, floor: float | None = None) -> float:
        """A finite number (bare or {"value", "source"}) in range. `max_`: no profile number in its
        units (TFLOP/s, GB/s, us, GiB, ratios) is anywhere near 1e9; larger is a typo or an attack.
        `floor`: a nonzero value must be at least this; `positive` numbers (rates, sizes, counts)
        default to RATE_FLOOR: 1e-320 TFLOP/s gave NaN outputs, 1e-300 gave 10^302 s."""
        v = self.get(path, default)
        span = None
        if isinstance(v, dict):           # {"value": x, "source": "..."}, optionally "range": [lo, hi]
            if "value" not in v:
                self.fail(path, "is an object without 'value'")
            if not has_source(v):
                self.fail(path, "has no 'source' (every number states where it came from)")
            span = v.get("range")
            v = v["value"]
        v = self._in_bounds(path, v, positive, min_, max_, floor)
        if span is not None:
            self._range(path, span, v, positive, min_, max_, floor)
        return v

    def _range(self, path: str, span, v: float, positive, min_, max_, floor) -> None:
        """A number's "range": [lo, hi], the interval its source supports (sim/sensitivity.py varies
        the value over it): two numbers lo < hi around the value, each as valid as the value itself."""
        if not (isinstance(span, list) and len(span) == 2):
            self.fail(f"{path}.range", f"must be [lo, hi], two numbers around 'value', got {short(span)}")
        lo, hi = (self._in_bounds(f"{path}.range", x, positive, min_, max_, floor) for x in span)
        if not lo <= v <= hi or lo == hi:
            self.fail(f"{path}.range", f"must hold 'value' ({v:g}) with lo < hi, got [{lo:g}, {hi:g}]")
        self.ranges[path] = (lo, hi)

    def _in_bounds(self, path: str, v, positive, min_, max_, floor) -> float:
        """v as a float when it is a finite number within num's bounds, else the failure naming `path`."""
        if not finite(v):
            self.fail(path, f"must be a number, got {short(v)}")
        if positive and v <= 0:
            self.fail(path, f"must be positive, got {v}")
        if min_ is not None and v < min_:
            self.fail(path, f"must be >= {min_}, got {v}")
        if abs(v) > max_:
            self.fail(path, f"must be at most {max_:g}, got {v:g}")
        floor = RATE_FLOOR if floor is None and positive else floor
        if floor and v != 0 and abs(v) < floor:
            self.fail(path, f"must be {'' if positive else '0 or '}at least {floor:g} (no real device is that slow "
                            f"or small), got {v:g}")
        return float(v)

    def count(self, path: str, bound: str, default=..., hi: int | None = None) -> int:
        """A whole number within BOUNDS[bound] (and at most `hi`), bare or {"value", "source"}."""
        b = BOUNDS[bound]
        top = min(b.hi, hi if hi is not None else b.hi)
        v = self.num(path, default=default)
        if path in self.ranges:
            self.fail(f"{path}.range", "is for a measured or derived number; a count has none")
        if v != int(v) or not b.lo <= v <= top:
            self.fail(path, f"must be a whole number in {b.lo}..{top} ({b.why if top == b.hi else 'at most gpus_per_node'}), "
                            f"got {v:g}")
        return int(v)

    def sourced(self, path: str, types: tuple, default=...):
        """A non-numeric value (string, bool) given as {"value": v, "source": "..."} or bare."""
        v = self.get(path, default)
        if isinstance(v, dict):
            if "value" not in v:
                self.fail(path, "is an object without 'value'")
            if not has_source(v):
                self.fail(path, "has no 'source' (every number states where it came from)")
            if "range" in v:
                self.fail(f"{path}.range", "is for a number; this field is a choice, not a measurement")
            v = v["value"]
        if not isinstance(v, types):
            self.fail(path, f"must be {' or '.join(t.__name__ for t in types)}, got {short(v)}")
        return v
