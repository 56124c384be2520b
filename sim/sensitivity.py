"""Whether the order of the schedules rests on a number its source gives only as a range.

A profile number may carry `"range": [lo, hi]` beside its `"value"` and `"source"`: the interval the
source supports when the profile had to pick one value in it (Concerto measured an 18-24% slowdown
of overlapped work; the built-in profiles take the midpoint, 1.21). The prediction is rerun on the
fast path at every corner of those ranges (each number at its lo or hi; for more than MAX_JOINT
numbers, each alone at its ends). Two schedules whose order by tokens/s at the profile's own values
is reversed at a setting form a `Flip`: their order is a call the sources cannot make, and
`tpsim predict` says so under its table.

No work for nothing: a setting is set on the parsed profile where parse reads the number as is (no
re-parse), and settings of numbers no op's price reads (the interference factors) rerun on the base
prediction's simulator: its prices, its built passes, and the timelines of passes where no compute ran
beside a collective, which those factors do not move (sim/predict.py `like`).

The schedules ordered are standard (the speedups' baseline, always) and those asked for that are a
way to run the model (upper-bound, model change "n/a", is a ceiling, not a contender). Nothing here
changes a prediction: the table keeps the profile's values.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, replace

from tpsim.sim.predict import Prediction, Simulator, Workload, predict
from tpsim.sim.price import decode_grid
from tpsim.sim.price.cost import UNPRICED, CostModel
from tpsim.sim.hardware.check import parse, set_as_read
from tpsim.sim.hardware.schema import Profile, ProfileError


@dataclass(frozen=True)
class Ranged:
    """One ranged number of a profile: its field path, the value used, and its source's interval."""

    path: str
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Flip:
    """`ahead` has more tokens/s than `behind` at the profile's values, fewer at `setting`."""

    setting: tuple[tuple[str, float], ...]     # (path, value) of every ranged number at this corner
    ahead: str
    behind: str
    tokens_per_s: tuple[float, float]          # (ahead, behind) at `setting`

    def margin(self) -> float:
        return self.tokens_per_s[1] / self.tokens_per_s[0] - 1


@dataclass(frozen=True)
class Sensitivity:
    ranged: tuple[Ranged, ...]
    base: dict                                 # schedule -> tokens/s at the profile's values
    ends: dict                                 # setting -> {schedule: tokens/s}
    flips: tuple[Flip, ...]

    def to_dict(self) -> dict:
        return {"fields": {r.path: {"value": r.value, "range": [r.lo, r.hi]} for r in self.ranged},
                "settings": [{"setting": dict(k), "tokens_per_s": v} for k, v in self.ends.items()],
                "flips": [{"ahead": f.ahead, "behind": f.behind, "setting": dict(f.setting),
                           "tokens_per_s": {f.ahead: f.tokens_per_s[0], f.behind: f.tokens_per_s[1]}}
                          for f in self.flips]}

    def notes(self) -> list[str]:
        """One line per reversed pair: at how many settings, and the one that reverses it most."""
        by_pair: dict[tuple[str, str], list[Flip]] = {}
        for f in self.flips:
            by_pair.setdefault((f.ahead, f.behind), []).append(f)
        values = {r.path: r.value for r in self.ranged}
        changed = lambda f: ", ".join(f"{path} {v:g}" for path, v in f.setting if v != values[path])  # noqa: E731
        ranges = ", ".join(f"{r.path} {r.value:g} in {r.lo:g}-{r.hi:g}" for r in self.ranged)
        out = []
        for (a, b), fs in by_pair.items():
            most = max(fs, key=Flip.margin)
            out.append(f"order not settled by the sources: {a} leads {b} ({self.base[a]:.1f} vs {self.base[b]:.1f} "
                       f"tokens/s) at the profile's values, but {b} leads at {len(fs)} of {len(self.ends)} settings "
                       f"within the ranges their sources give ({ranges}); most with {changed(most)}: "
                       f"{b} {most.tokens_per_s[1]:.1f} vs {a} {most.tokens_per_s[0]:.1f} (--json: sensitivity)")
        return out


def ranged_values(profile: Profile) -> tuple[Ranged, ...]:
    """The profile's ranged numbers, in the order the parser read them."""
    return tuple(Ranged(path, float(_leaf(profile.raw, path)["value"]), lo, hi)
                 for path, (lo, hi) in profile.ranges.items())


def with_values(profile: Profile, setting: tuple[tuple[str, float], ...]) -> Profile:
    """The profile with each (path, value) of `setting` in place: set on the parsed profile where parse
    reads the number as is (sim.hardware.check.AS_READ), else parsed again (every check holds)."""
    done = set_as_read(profile, setting)
    if done is not None:
        return done
    data = copy.deepcopy(profile.raw)
    for path, value in setting:
        _leaf(data, path)["value"] = value
    return parse(data, profile.source_path)


def _leaf(data: dict, path: str) -> dict:
    cur = data
    for part in path.split("."):
        cur = cur[part]
    return cur


def order_flips(base: dict[str, float], at_end: dict[str, float]) -> list[tuple[str, str]]:
    """(a, b) for each pair with a strictly ahead of b by tokens/s in `base` and b strictly ahead in
    `at_end`; in the order of `base`'s keys."""
    names = list(base)
    return [(a, b) if base[a] > base[b] else (b, a)
            for i, a in enumerate(names) for b in names[i + 1:]
            if (base[a] - base[b]) * (at_end[a] - at_end[b]) < 0]


# every corner of the ranged numbers up to this many of them (2^4 = 16 reruns); beyond, each alone
MAX_JOINT = 4


def settings(ranged: tuple[Ranged, ...]) -> list[tuple[tuple[str, float], ...]]:
    """The settings to rerun: every corner of the ranges (each number at lo or hi) for up to MAX_JOINT
    numbers -- numbers from one source move together, as the two Concerto factors do -- else each
    number alone at lo and at hi, the others at their values."""
    if len(ranged) <= MAX_JOINT:
        return [tuple((r.path, v) for r, v in zip(ranged, corner))
                for corner in itertools.product(*((r.lo, r.hi) for r in ranged))] if ranged else []
    return [tuple((q.path, v if q is r else q.value) for q in ranged) for r in ranged for v in (r.lo, r.hi)]


def grid_rate_moves(r: Ranged, workload: Workload, schedules: list[str]) -> bool:
    """Whether ranged number `r` can move the workload's prediction: any number but a decode attention
    grid's (sim/price/decode_grid.py); the per-CTA rate only under a kernel with a grid, and only where
    some decode attention op turns CTA-bound at the rate's low end (its high end only shortens a term the
    price does not take): checked at the first and last decode step of every schedule asked for."""
    if not r.path.startswith(decode_grid.GRID_PATHS):
        return True
    if not decode_grid.reads(r.path, workload.stack) or workload.gen_len < 2:
        return False
    steps = [workload.decode_step(j) for j in sorted({1, workload.gen_len - 1})]
    ops = [op for spec in dict.fromkeys(["standard", *schedules]) for st in steps
           for op in workload.schedule(spec, st).ops if op.kind == "attention"]
    return decode_grid.rate_binds(CostModel(workload.profile, workload.stack), ops,
                                  lambda op: workload.stack.graphs("decode", op.name), r.lo * 1e9)


def check(workload: Workload, schedules: list[str], base: list[Prediction] | None = None) -> Sensitivity:
    """Rerun `schedules` at each setting of the ranged numbers of the workload's profile (the module
    doc, `settings`). `base`: the fast-path predictions at the profile's values, when already made."""
    # a number that cannot move this workload's prediction is no setting to rerun (moves: grid_rate_moves)
    ranged = tuple(r for r in ranged_values(workload.profile) if grid_rate_moves(r, workload, schedules))
    # the speedups' baseline is always a contender: the given predictions serve when they hold it
    if ranged and (base is None or any(p.mode != "fast" for p in base) or "standard" not in {p.schedule for p in base}):
        base = predict(workload, list(dict.fromkeys(["standard", *schedules])), record=False, mode="fast")
    contenders = [p.schedule for p in base or [] if p.model_change != "n/a"]
    at_base = {p.schedule: p.tokens_per_s for p in base or [] if p.schedule in contenders}
    if len(contenders) < 2:
        return Sensitivity(ranged, at_base, {}, ())
    ends, flips = {}, []
    # settings that change only numbers no op's price reads (sim.price.cost.UNPRICED) run on the base's
    # pricing: its cost model, its passes and those of their timelines these numbers do not move
    alike, made = all(r.path in UNPRICED for r in ranged), base[0].simulator
    like = made if alike and made is not None and made.w is workload else None
    for setting in settings(ranged):
        try:
            profile = with_values(workload.profile, setting)
        except ProfileError as e:     # an end another field's check does not allow (gpc_sms must sum to sms)
            raise ProfileError(f"{e}; with {', '.join(f'{k} = {v:g}' for k, v in setting)}, ends of the ranges "
                               f"its sources give (sim/sensitivity.py): narrow those ranges") from None
        # the same run at another speed: whether it fits was the workload's own check
        w = replace(workload, profile=profile, memory_check=False)
        sim = Simulator(w, record=False, mode="fast", like=like)
        like = like or (sim if alike else None)
        tps = ends[setting] = {s: sim.predict(s).tokens_per_s for s in contenders}
        flips += [Flip(setting, a, b, (tps[a], tps[b])) for a, b in order_flips(at_base, tps)]
    return Sensitivity(ranged, at_base, ends, tuple(flips))
