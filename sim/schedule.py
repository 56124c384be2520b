"""The schedule language: a spec like "ladder:16" or "spd:0.7" -> a plan (the layer kind of
every layer) -> the IR ops of one forward pass (sim/ir.py, built by sim/builder.py).

`SCHEDULES` maps each schedule name to its plan function; adding a schedule is an entry there,
its MODEL_CHANGE, and (for a new kind of layer) a builder in sim/builder.py's LAYER_KINDS.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .bounds import BOUNDS, check as check_bound
from .builder import LAYER_KINDS, Builder, kind_base, runs  # noqa: F401  (re-exported: public names)
from .ir import COMM, COMPUTE, GIVEN_COST, KINDS, TOKENS, Op, Schedule  # noqa: F401  (re-exported)
from .model import ModelSpec
from .stack import Stack, Step


# Schedule name -> plan function (spec arguments -> the kind of every layer). Feeds the CLI's choices.
def plan_standard(n: int) -> tuple[str, ...]:
    return ("standard",) * n


def plan_upper_bound(n: int) -> tuple[str, ...]:
    """Standard with every all-reduce removed: each rank adds its own partials (speed ceiling only)."""
    return ("upper-bound",) * n


def plan_parallel(n: int) -> tuple[str, ...]:
    return ("parallel",) * n


def plan_ladder(n: int, upper: int | None = None) -> tuple[str, ...]:
    """Ladder on the upper `upper` layers (all when None); standard below them."""
    k = n if upper is None else upper
    if not 1 <= k <= n:
        raise ValueError(f"ladder:K needs 1 <= K <= {n} layers, got {k}")
    return ("standard",) * (n - k) + ("ladder",) * k


def plan_spd(n: int, layers: tuple[int, ...] = ()) -> tuple[str, ...]:
    chosen = set(layers)
    return tuple("spd" if i in chosen else "standard" for i in range(n))


def plan_token_split(n: int, splits: int = 2) -> tuple[str, ...]:
    """Every layer split into `splits` micro-batches (batch in decode, tokens in prefill)."""
    return (f"token-split:{splits}",) * n


def plan_seq_parallel(n: int) -> tuple[str, ...]:
    return ("seq-parallel",) * n


SCHEDULES = {
    "standard": plan_standard,
    "ladder": plan_ladder,
    "spd": plan_spd,
    "parallel": plan_parallel,
    "upper-bound": plan_upper_bound,
    "token-split": plan_token_split,
    "seq-parallel": plan_seq_parallel,
}

# What running each schedule asks of the model (predict's model_change column):
#   none         the same model and outputs as standard TP (only the order and shape of the work change)
#   retrain      a different architecture: the model must be trained (or fine-tuned) for it
#   drops syncs  the trained model with some all-reduces skipped: outputs change, some accuracy is lost
#   n/a          not a way to run the model (upper-bound: no communication, a speed ceiling only)
MODEL_CHANGE = {
    "standard": "none", "token-split": "none", "seq-parallel": "none",
    "ladder": "retrain", "parallel": "retrain", "spd": "drops syncs", "upper-bound": "n/a",
}
NO_RETRAINING = tuple(k for k, v in MODEL_CHANGE.items() if v == "none")


def model_change(spec: str) -> str:
    """none | retrain | drops syncs | n/a for schedule `spec` (see MODEL_CHANGE)."""
    return MODEL_CHANGE[spec.partition(":")[0]]

# What every command runs when given no --schedule: the five schedules, SPD on the SPD paper's 70% of blocks.
DEFAULT_SCHEDULES = ("standard", "ladder", "parallel", "spd:0.7", "upper-bound")

SCHEDULE_HELP = ("standard | ladder | ladder:K (upper K layers) | spd:F (fraction F of blocks from the top) "
                 "| spd:3,5,9-12 (layer list; one layer as spd:[7]) | parallel | upper-bound "
                 "| token-split | token-split:N (N micro-batches) | seq-parallel")


def parse_schedule(spec: str, n_layers: int) -> tuple[str, dict]:
    """'ladder:16' -> ('ladder', {'upper': 16}); 'spd:0.7' -> ('spd', {'layers': (...)})."""
    base, _, arg = spec.partition(":")
    if base not in SCHEDULES:
        raise ValueError(f"unknown schedule {spec!r}; choose from: {SCHEDULE_HELP}")
    if not arg:
        if base == "spd":
            raise ValueError("spd needs an argument: spd:F (fraction of blocks) or spd:3,5,7 (layers)")
        return base, {}
    if base == "ladder":
        try:
            return base, {"upper": int(arg)}
        except ValueError:
            raise ValueError(f"bad ladder spec {spec!r}; use ladder or ladder:K (K = upper layers)") from None
    if base == "spd":
        return base, {"layers": _spd_layers(spec, arg, n_layers)}
    if base == "token-split":
        try:
            splits = int(arg)
        except ValueError:
            splits = 0
        if splits < 2:
            raise ValueError(f"bad token-split spec {spec!r}; use token-split or token-split:N with N >= 2")
        # each micro-batch is simulated on its own: N buys N times the work (token-split:1000: 11 min)
        return base, {"splits": check_bound("micro_batches", splits, "token-split:N's N (micro-batches)")}
    raise ValueError(f"schedule {base!r} takes no argument (got {spec!r})")


def _spd_layers(spec: str, arg: str, n_layers: int) -> tuple[int, ...]:
    try:
        frac = float(arg)                       # a fraction of blocks, counted from the top
    except ValueError:
        frac = None
    if frac is not None:
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"spd fraction must be within 0..1, got {arg} (a layer list is spd:3,5,9-12)")
        k = math.floor(frac * n_layers + 0.5)   # round half up: spd:0.5 of 5 blocks is 3, not 2
        if frac > 0 and k == 0:
            raise ValueError(f"spd:{arg} of {n_layers} blocks rounds to none; use a larger fraction or a layer list")
        return tuple(range(n_layers - k, n_layers))
    out: set[int] = set()
    for part in arg.strip("[]").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            lo, _, hi = part.partition("-")
            lo_i, hi_i = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"bad spd spec {spec!r}; use spd:F (0<=F<=1) or a layer list like spd:3,5,9-12") from None
        if hi_i < lo_i:
            raise ValueError(f"empty spd layer range {part!r} in {spec!r}; write low-high")
        if not (0 <= lo_i and hi_i < n_layers):       # checked before the loop: spd:0-999999999 loops 10^9 times
            raise ValueError(f"spd layer {lo_i if lo_i < 0 else hi_i} outside 0..{n_layers - 1}")
        for i in range(lo_i, hi_i + 1):
            if not 0 <= i < n_layers:
                raise ValueError(f"spd layer {i} outside 0..{n_layers - 1}")
            out.add(i)
    if not out:
        raise ValueError(f"spd layer list {spec!r} names no layer")
    return tuple(sorted(out))


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule spec parsed once, at the edge (the CLI, `predict`, the harness's config): its text
    as the user wrote it ("ladder:16"), its name in SCHEDULES and its argument text. Its plan for
    a model depth is computed once and cached, not re-parsed for every simulated step."""

    text: str
    base: str
    arg: str = ""

    @classmethod
    def parse(cls, spec: "str | ScheduleSpec") -> "ScheduleSpec":
        """Check the spec's syntax (ValueError naming the choices); a layer list is checked
        against a model's depth when `plan` gets one."""
        if isinstance(spec, ScheduleSpec):
            return spec
        parse_schedule(spec, ANY_DEPTH)
        base, _, arg = spec.partition(":")
        return cls(spec, base, arg)

    def plan(self, n_layers: int) -> tuple[str, ...]:
        """The kind of each of `n_layers` layers (see SCHEDULE_HELP)."""
        return _plan(self.text, n_layers, SCHEDULES.get(self.base))

    def __str__(self) -> str:
        return self.text


ANY_DEPTH = BOUNDS["layers"].hi   # a syntax check of a spec before a model is known: any real layer index is valid


@functools.lru_cache(maxsize=1024)
def _plan(spec: str, n_layers: int, plan_fn) -> tuple[str, ...]:
    # keyed by the plan function too, so a registry entry replaced (a test's monkeypatch) is not stale
    _, kwargs = parse_schedule(spec, n_layers)
    return plan_fn(n_layers, **kwargs)


def plan_of(spec: "str | ScheduleSpec", n_layers: int) -> tuple[str, ...]:
    """The kind of each of `n_layers` layers under schedule `spec` (see SCHEDULE_HELP): parsed
    once per (spec, depth), however many steps ask."""
    text = str(spec)
    return _plan(text, n_layers, SCHEDULES.get(text.partition(":")[0]))


def build_plan(name: str, plan: tuple[str, ...], model: ModelSpec, tp: int, step: Step,
               stack: Stack = Stack()) -> Schedule:
    """The ops of one forward pass whose layers follow `plan` (len(plan) == model.layers)."""
    if len(plan) != model.layers:
        raise ValueError(f"plan has {len(plan)} layers, model {model.name} has {model.layers}")
    b = Builder(model, tp, step, stack)
    b.layers(plan)
    return Schedule(name, model, tp, step, stack, tuple(b.ops), plan=tuple(plan), notes=tuple(b.notes))


def notes_of(spec: str, model: ModelSpec, tp: int, steps, stack: Stack = Stack()) -> tuple[str, ...]:
    """The builder's notes for `spec` over `steps` (e.g. prefill and a decode step), each once."""
    out: dict[str, None] = {}
    for step in steps:
        if step is not None:
            out.update(dict.fromkeys(build(spec, model, tp, step, stack).notes))
    return tuple(out)


def build(spec: "str | ScheduleSpec", model: ModelSpec, tp: int, step: Step, stack: Stack = Stack()) -> Schedule:
    """Build the ops of one forward pass of schedule `spec` (see SCHEDULE_HELP)."""
    return build_plan(str(spec), plan_of(spec, model.layers), model, tp, step, stack)
