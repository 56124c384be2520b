"""What the numbers their sources give only as a range do to an answer: the interval of each schedule's
tokens/s and speedup, the term that widens it most, and whether the order of the schedules holds.

A profile number may carry `"range": [lo, hi]` beside its `"value"` and `"source"`: the interval the
source supports when the profile had to pick one value in it (Concerto measured an 18-24% slowdown
of overlapped work; the built-in profiles take the midpoint, 1.21). A stack's number may carry one too
(a preset's (value, source, (lo, hi)), a stack file's "range"): a host-lane number (Stack.host_ranges,
`host.FIELD` here) or one of the stack's own (Stack.ranges, `stack.FIELD`: the eager layer's Python,
the fused all-reduce + RMSNorm epilogue's share, TokenWeave's kernel floor, the DBO threads' CPU time;
sim.stack.spec.RANGEABLE). The prediction is rerun on the fast path at settings of those ranges:

- the profile's and the stack's own numbers (which price ops, as the profile's do) at every corner of
  their ranges (each at its lo or hi; for more than MAX_JOINT numbers, each alone at its ends), each with
  the host numbers at their values and all at lo and all at hi: a host term only adds time to a step
  (sim.stack.host_lane), so those two are the ends any mix of them reaches;
- the host numbers, at the profile's values, all at lo, all at hi, and each alone at its ends.

The host settings reuse the passes priced for their profile (sim.predict's `passes`: the lane never
enters a one-rank pass; at the profile's values, those of the base prediction), so they cost the
lane's arithmetic only. Each schedule's interval is the
least and most it reaches over those settings (speedups over standard at the same setting); the term
that dominates it is the one whose range alone moves some schedule's tokens/s most (a profile
number's main effect over the corners where it has one). Two schedules whose order by tokens/s at the
given values is reversed at a setting form a `Flip`: their order is a call the sources cannot make,
and `tpsim predict` says so under its table.

No work for nothing: a setting is set on the parsed profile where parse reads the number as is (no
re-parse), and settings of numbers no op's price reads (the interference factors) rerun on the base
prediction's simulator: its prices, its built passes, and the timelines of passes where no compute ran
beside a collective, which those factors do not move (sim/predict.py `like`).

The schedules ordered are standard (the speedups' baseline, always) and those asked for that are a
way to run the model (upper-bound, model change "n/a", is a ceiling, not a contender; it gets an
interval all the same). Nothing here changes a prediction: the table keeps the given values.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field, replace

from tpsim.sim.predict import Prediction, Simulator, Workload, predict
from tpsim.sim.price import decode_price
from tpsim.sim.price.cost import UNPRICED, CostModel
from tpsim.sim.hardware.check import parse, set_as_read
from tpsim.sim.hardware.schema import Profile, ProfileError
from tpsim.sim.stack.spec import RANGEABLE, Stack


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
    # schedule -> {"tokens_per_s": (lo, hi), "speedup": (lo, hi)} over the base and every setting run
    intervals: dict = field(default_factory=dict)
    effects: dict = field(default_factory=dict)        # path -> (lo, hi) of the tokens/s it alone moves most
    profile_only: dict = field(default_factory=dict)   # schedule -> tokens/s (lo, hi) with the host at its values

    def to_dict(self) -> dict:
        out = {"fields": {r.path: {"value": r.value, "range": [r.lo, r.hi]} for r in self.ranged},
               "settings": [{"setting": dict(k), "tokens_per_s": v} for k, v in self.ends.items()],
               "flips": [{"ahead": f.ahead, "behind": f.behind, "setting": dict(f.setting),
                          "tokens_per_s": {f.ahead: f.tokens_per_s[0], f.behind: f.tokens_per_s[1]}}
                         for f in self.flips]}
        if self.intervals:
            out["intervals"] = {s: {k: list(v) for k, v in d.items()} for s, d in self.intervals.items()}
            out["dominant"] = self.dominant()
            out["effects"] = {k: {"schedule": s, "tokens_per_s": list(v)} for k, (s, v) in self.effects.items()}
            out["host_at_its_values"] = {s: list(v) for s, v in self.profile_only.items()}
        return out

    def dominant(self) -> str | None:
        """The ranged number whose range alone moves some schedule's tokens/s most."""
        if not self.effects:
            return None
        return max(self.effects, key=lambda k: _rel(self.effects[k][1]))

    def interval_note(self) -> str | None:
        """One line naming the term that dominates the intervals (None without ranges)."""
        top = self.dominant()
        if top is None:
            return None
        r = next(x for x in self.ranged if x.path == top)
        sched, (lo, hi) = self.effects[top]
        return (f"interval: the ends of {len(self.ranged)} ranged number{'s' * (len(self.ranged) > 1)} (--json: "
                f"sensitivity); widest from {top} {_show(top, r.value, r.lo, r.hi)}: alone it moves {sched} "
                f"{lo:.1f}-{hi:.1f} tokens/s")

    def notes(self) -> list[str]:
        """One line per reversed pair: at how many settings, and the one that reverses it most."""
        by_pair: dict[tuple[str, str], list[Flip]] = {}
        for f in self.flips:
            by_pair.setdefault((f.ahead, f.behind), []).append(f)
        values = {r.path: r.value for r in self.ranged}
        changed = lambda f: ", ".join(f"{path} {v:g}" for path, v in f.setting if v != values[path])  # noqa: E731
        host = [r for r in self.ranged if r.path.startswith(HOST)]
        ranges = ", ".join([f"{r.path} {_show(r.path, r.value, r.lo, r.hi)}" if r.path.startswith(STACK) else
                            f"{r.path} {r.value:g} in {r.lo:g}-{r.hi:g}" for r in self.ranged if r not in host]
                           + ([f"{len(host)} host terms of the stack"] if host else []))
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


HOST = "host."        # a stack's ranged host numbers: "host.FIELD" (a profile has no "host" section)
STACK = "stack."      # the stack's own ranged numbers: "stack.FIELD" (nor a "stack" section)


def stack_ranged(stack: Stack) -> tuple[Ranged, ...]:
    """The stack's ranged host-lane numbers (Stack.host_ranges), as "host.FIELD"."""
    return tuple(Ranged(HOST + k, float(getattr(stack.host, k)), lo, hi) for k, lo, hi in stack.host_ranges)


def stack_own_ranged(stack: Stack) -> tuple[Ranged, ...]:
    """The stack's own ranged numbers (Stack.ranges), as "stack.FIELD"."""
    return tuple(Ranged(STACK + k, float(getattr(stack, k)), lo, hi) for k, lo, hi in stack.ranges)


def with_stack_values(stack: Stack, setting: tuple[tuple[str, float], ...]) -> Stack:
    """The stack with each ("host.FIELD", value) of `setting` in its host lane and each ("stack.FIELD",
    value) in the stack (other paths ignored)."""
    host = {path[len(HOST):]: v for path, v in setting if path.startswith(HOST)}
    own = {path[len(STACK):]: v for path, v in setting if path.startswith(STACK)}
    if host:
        stack = replace(stack, host=replace(stack.host, **host))
    return replace(stack, **own) if own else stack


# The ops whose price can read each of the stack's own ranged numbers, from the code that reads them
# (sim/price/cost.py issue_s: the layer's Python at an attention op, DBO's threads at the ops marked
# "yield" / "ubatch_start"; sim/price/comm/fused_allreduce.py fused_s: the epilogue of a fused all-reduce
# + RMSNorm kernel, TokenWeave's floor of its multimem one). Every other op is priced alike at any value
# of the number (tests/test_intervals.py prices every op at both ends to hold this table to the code).
READERS = {
    "layer_host_s": lambda op: op.kind == "attention",
    "ar_norm_epilogue_share": lambda op: op.is_comm and bool(op.get("fuse", "")) and op.get("kernel", "") != "multimem",
    "tokenweave_floor_s": lambda op: op.is_comm and op.get("kernel", "") == "multimem",
    "ubatch_switch_s": lambda op: bool(op.get("yield", 0)),
    "ubatch_start_s": lambda op: bool(op.get("ubatch_start", 0)),
    "launch_host_s": lambda op: True,        # every op an eager phase launches (issue_s)
}
assert set(READERS) == set(RANGEABLE), "every rangeable stack number names the ops that read it"


def stack_number_moves(r: Ranged, workload: Workload, schedules: list[str], passes=None) -> bool:
    """Whether the stack's own ranged number `r` can move the workload's prediction: some op of the prefill
    step or the first decode step of a schedule asked for that reads it (READERS) is priced (compute,
    collective or launch) apart at its ends. A number no op reads (TokenWeave's floor without tokenweave,
    the fused epilogue without the fused kernel, the layer's Python in compiled phases) is no setting to
    rerun. `passes(spec, step)` gives the ops (Workload.schedule, or a Simulator's warm_pass)."""
    steps = [workload.prefill_step()] + ([workload.decode_step(1)] if workload.gen_len >= 2 else [])
    reads, passes = READERS[r.path[len(STACK):]], passes or workload.schedule
    ops = [(s, op) for spec in dict.fromkeys(["standard", *schedules]) for st in steps
           for s in [passes(spec, st)] for op in s.ops if reads(op)]
    if not ops:
        return False
    ends = []
    for v in (r.lo, r.hi):
        sim = Simulator(replace(workload, stack=with_stack_values(workload.stack, ((r.path, v),)),
                                memory_check=False), record=False, mode="fast")
        ends.append([(sim.comm_s(op, s.step.phase) if op.is_comm else sim.cost.compute_s(op, s.step.phase, s),
                      sim.cost.issue_s(op, s.step.phase, s)) for s, op in ops])
    return ends[0] != ends[1]


def _rel(span: tuple[float, float]) -> float:
    lo, hi = span
    return (hi - lo) / hi if hi > 0 else 0.0


def _show(path: str, v: float, lo: float, hi: float) -> str:
    """A ranged number and its range as the note prints them: a stack's seconds in us, others as given."""
    if path.startswith(HOST) or (path.startswith(STACK) and path.endswith("_s")):
        return f"{v * 1e6:.4g} us (range {lo * 1e6:.4g}-{hi * 1e6:.4g})"
    return f"{v:g} (range {lo:g}-{hi:g})"


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


def grid_rate_moves(r: Ranged, workload: Workload, schedules: list[str], passes=None) -> bool:
    """Whether ranged number `r` can move the workload's prediction: any number but a decode attention
    grid's (sim/price/decode_grid.py, priced by decode_price.py); the per-CTA rate only under a kernel with a grid, and only where
    some decode attention op turns CTA-bound at the rate's low end (its high end only shortens a term the
    price does not take): checked at the first and last decode step of every schedule asked for, on the
    ops `passes(spec, step)` gives (as stack_number_moves)."""
    if not r.path.startswith(decode_price.GRID_PATHS):
        return True
    if not decode_price.reads(r.path, workload.stack) or workload.gen_len < 2:
        return False
    steps = [workload.decode_step(j) for j in sorted({1, workload.gen_len - 1})]
    passes = passes or workload.schedule
    ops = [op for spec in dict.fromkeys(["standard", *schedules]) for st in steps
           for op in passes(spec, st).ops if op.kind == "attention"]
    return decode_price.rate_binds(CostModel(workload.profile, workload.stack), ops,
                                  lambda op: workload.stack.graphs("decode", op.name), r.lo * 1e9)


NET_HOST = "collectives.graph_net_host_us"


def net_host_moves(r: Ranged, workload: Workload, schedules: list[str], passes=None) -> bool:
    """Whether ranged number `r` can move the workload's prediction: any number but NCCL's graph host node,
    which only a collective that crosses NCCL's node boundary in a CUDA-graph phase pays (CostModel.host_s,
    0 elsewhere): checked on the prefill step and the first decode step of every schedule asked for, on
    the ops `passes(spec, step)` gives (as stack_number_moves)."""
    if r.path != NET_HOST or workload.comm_group is not None:
        return True
    cost = CostModel(replace(workload.profile, graph_net_host_s=max(r.hi, 1.0) * 1e-6), workload.stack,
                     workload.gpus_per_node)
    # every collective of a TP job spans at most its tp ranks, and NCCL's node count does not grow as a group
    # shrinks: a job inside one NCCL node has no collective that pays the host node (no pass to build)
    if workload.tp <= cost.gpus_per_node and cost.nccl_nnodes(workload.tp) == 1:
        return False
    steps = [("prefill", workload.prefill_step())] + ([("decode", workload.decode_step(1))]
                                                      if workload.gen_len >= 2 else [])
    passes = passes or workload.schedule
    return any(cost.host_s(op, phase) > 0 for spec in dict.fromkeys(["standard", *schedules])
               for phase, st in steps for op in passes(spec, st).ops if op.is_comm)


def check(workload: Workload, schedules: list[str], base: list[Prediction] | None = None) -> Sensitivity:
    """Rerun `schedules` at each setting of the ranged numbers of the workload's profile and stack (the
    module doc). `base`: the fast-path predictions at the given values, when already made."""
    # a number that cannot move this workload's prediction is no setting to rerun (moves: grid_rate_moves),
    # asked of the warm passes the fast path builds (an op priced as each of the whole pass's)
    made = base[0].simulator if base else None
    warm = (made if made is not None and made.w is workload else Simulator(workload, record=False, mode="fast"))
    pr = tuple(r for r in ranged_values(workload.profile)
               if grid_rate_moves(r, workload, schedules, warm.warm_pass)
               and net_host_moves(r, workload, schedules, warm.warm_pass))
    # the stack's own numbers price ops as the profile's do: set with them (a setting of its own passes)
    pr += tuple(r for r in stack_own_ranged(workload.stack)
                if stack_number_moves(r, workload, schedules, warm.warm_pass))
    sr = stack_ranged(workload.stack)
    ranged = pr + sr
    # the speedups' baseline is always a contender: the given predictions serve when they hold it
    if ranged and (base is None or any(p.mode != "fast" for p in base) or "standard" not in {p.schedule for p in base}):
        base = predict(workload, list(dict.fromkeys(["standard", *schedules])), record=False, mode="fast")
    contenders = [p.schedule for p in base or [] if p.model_change != "n/a"]
    at_base = {p.schedule: p.tokens_per_s for p in base or [] if p.schedule in contenders}
    if not ranged:
        return Sensitivity(ranged, at_base, {}, ())
    shown = [p.schedule for p in base]
    all_base = {p.schedule: p.tokens_per_s for p in base}
    values = lambda rs: tuple((r.path, r.value) for r in rs)  # noqa: E731
    joint = [tuple((r.path, r.lo) for r in sr), tuple((r.path, r.hi) for r in sr)] if sr else []
    alone = [tuple((q.path, v if q is r else q.value) for q in sr) for r in sr for v in (r.lo, r.hi)]
    ends, flips = {}, []
    # settings of profile numbers no op's price reads (sim.price.cost.UNPRICED) run on the base's pricing:
    # its cost model, its passes and those of their timelines these numbers do not move
    alike, made = all(r.path in UNPRICED for r in pr), base[0].simulator
    like = made if alike and made is not None and made.w is workload else None

    def run(prof: tuple, host: tuple, profile: Profile, passes: dict, like: Simulator | None = None) -> Simulator:
        # the same run at another speed: whether it fits was the workload's own check
        w = replace(workload, profile=profile, stack=with_stack_values(workload.stack, prof + host), memory_check=False)
        sim = Simulator(w, record=False, mode="fast", like=like, passes=passes)
        tps = ends[prof + host] = {s: sim.predict(s).tokens_per_s for s in shown}
        flips.extend(Flip(prof + host, a, b, (tps[a], tps[b]))
                     for a, b in order_flips(at_base, {s: tps[s] for s in contenders}))
        return sim

    # the profile at its values: the base prediction's passes, where its simulator kept them (the host lane
    # never enters a one-rank pass), else priced here once
    kept = made.kept_passes if made is not None and made.w is workload else None
    passes: dict = kept if kept is not None else {}
    for host in joint + alone:
        run(values(pr), host, workload.profile, passes)
    for setting in settings(pr):
        try:
            profile = with_values(workload.profile, tuple((k, v) for k, v in setting if not k.startswith(STACK)))
        except ProfileError as e:     # an end another field's check does not allow (gpc_sms must sum to sms)
            raise ProfileError(f"{e}; with {', '.join(f'{k} = {v:g}' for k, v in setting)}, ends of the ranges "
                               f"its sources give (sim/sensitivity.py): narrow those ranges") from None
        passes = {}
        for host in [values(sr)] + joint:
            sim = run(setting, host, profile, passes, like)
            like = like or (sim if alike else None)
    return Sensitivity(ranged, at_base, ends, tuple(flips), *_intervals(pr, sr, all_base, ends, contenders))


def _intervals(pr: tuple[Ranged, ...], sr: tuple[Ranged, ...], base: dict, ends: dict,
               contenders: list[str]) -> tuple[dict, dict, dict]:
    """(intervals, effects, profile_only) of the module doc from the base and the settings run."""
    runs = [base, *ends.values()]
    intervals = {s: {"tokens_per_s": (min(r[s] for r in runs), max(r[s] for r in runs)),
                     "speedup": (min(r[s] / r["standard"] for r in runs), max(r[s] / r["standard"] for r in runs))}
                 for s in base}
    host_at_values = tuple((r.path, r.value) for r in sr)
    prof_runs = [base] + [t for k, t in ends.items() if k[len(pr):] == host_at_values]
    profile_only = {s: (min(r[s] for r in prof_runs), max(r[s] for r in prof_runs)) for s in base}
    effects = {}
    for i, r in enumerate(pr + sr):
        # the runs where this number sits at an end and every other at its value (host terms alone,
        # a profile number in one-at-a-time settings), else its mean at lo and at hi over the corners
        # that hold the host at its values (a profile number's main effect)
        others = lambda k: all(v == q.value for j, ((_, v), q) in enumerate(zip(k, pr + sr)) if j != i)  # noqa: E731
        lo = [t for k, t in ends.items() if k[i][1] == r.lo and others(k)]
        hi = [t for k, t in ends.items() if k[i][1] == r.hi and others(k)]
        if not (lo and hi) and i < len(pr):
            lo = [t for k, t in ends.items() if k[i][1] == r.lo and k[len(pr):] == host_at_values]
            hi = [t for k, t in ends.items() if k[i][1] == r.hi and k[len(pr):] == host_at_values]
        if not (lo and hi):
            continue
        mean = lambda ts, s: sum(t[s] for t in ts) / len(ts)  # noqa: E731
        moves = {s: tuple(sorted((mean(lo, s), mean(hi, s)))) for s in (contenders or base)}
        effects[r.path] = max(moves.items(), key=lambda kv: _rel(kv[1]))
    return intervals, effects, profile_only
