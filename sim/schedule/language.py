"""The schedule language: a spec like "ladder:16" or "spd:0.7" -> a plan (the layer kind of
every layer) -> the IR ops of one forward pass (sim/schedule/ir.py, built by sim/schedule/builder.py).

Every schedule is one `ScheduleDef` of the registry in sim/schedule/schedules/ (one module per schedule):
this module parses a spec with it, plans with it and builds its layer kinds' runs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tpsim.sim.bounds import BOUNDS
from tpsim.sim.schedule.builder import Builder, kind_base, runs  # noqa: F401  (re-exported: public names)
from tpsim.sim.schedule.ir import COMM, COMPUTE, GIVEN_COST, KINDS, TOKENS, Op, Schedule  # noqa: F401  (re-exported)
from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.schedule.schedules.registry import (REGISTRY, layer_builder, layer_kinds,  # noqa: F401  (re-exported)
                                                   schedule_def, schedule_help)
from tpsim.sim.stack.spec import Stack, Step

# What every command runs when given no --schedule: the five schedules, SPD on the SPD paper's 70% of blocks.
DEFAULT_SCHEDULES = ("standard", "ladder", "parallel", "spd:0.7", "upper-bound")

SCHEDULE_HELP = schedule_help()     # the built-in schedules' grammar, for click's help texts


def model_change(spec: str, n_layers: int | None = None) -> str:
    """none | retrain | drops syncs | n/a for schedule `spec`: its ScheduleDef.model_change, except that
    a spec whose plan is standard on every layer (spd:0, spd:0.0: no block dropped) builds standard
    TP's pass, so it asks nothing of the model: none. `n_layers` is the model's depth (a plan depends
    on it); without one the spec is planned at any depth, which gives the same answer for every spec
    valid at the model's depth (an SPD fraction that rounds to no block is refused, not planned)."""
    d = _def(spec.partition(":")[0], spec)
    if d.model_change != "none" and not d.comm_free and \
            set(plan_of(spec, ANY_DEPTH if n_layers is None else n_layers)) == {"standard"}:
        return "none"
    return d.model_change


def no_retraining() -> tuple[str, ...]:
    """The registered schedules that keep the model (model change 'none')."""
    return tuple(name for name, d in REGISTRY.items() if d.model_change == "none")


def _def(base: str, spec: str):
    d = schedule_def(base)
    if d is None:
        raise ValueError(f"unknown schedule {spec!r}; choose from: {schedule_help()}")
    return d


def parse_schedule(spec: str, n_layers: int) -> tuple[str, dict]:
    """'ladder:16' -> ('ladder', {'upper': 16}); 'spd:0.7' -> ('spd', {'layers': (...)})."""
    base, colon, arg = spec.partition(":")
    kwargs = _def(base, spec).parse(spec, arg, n_layers)
    if colon and not arg:                  # 'upper-bound:', 'ladder:': a ':' and nothing after it
        raise ValueError(f"schedule {spec!r} ends in ':' with no argument; write {base!r}")
    return base, kwargs


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule spec parsed once, at the edge (the CLI, `predict`, the harness's config): its text
    as the user wrote it ("ladder:16"), its registered name (sim/schedule/schedules) and its argument text. Its plan for
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
        return _plan(self.text, n_layers, schedule_def(self.base))

    def __str__(self) -> str:
        return self.text


ANY_DEPTH = BOUNDS["layers"].hi   # a syntax check of a spec before a model is known: any real layer index is valid


@functools.lru_cache(maxsize=1024)
def _plan(spec: str, n_layers: int, defn) -> tuple[str, ...]:
    # keyed by the ScheduleDef too, so a registry entry replaced or removed is not stale
    _, kwargs = parse_schedule(spec, n_layers)
    return defn.plan(n_layers, **kwargs)


def plan_of(spec: "str | ScheduleSpec", n_layers: int) -> tuple[str, ...]:
    """The kind of each of `n_layers` layers under schedule `spec` (see SCHEDULE_HELP): parsed
    once per (spec, depth), however many steps ask."""
    text = str(spec)
    return _plan(text, n_layers, schedule_def(text.partition(":")[0]))


def runs_of(spec: str | ScheduleSpec, n_layers: int) -> tuple[tuple[str, int, int], ...]:
    """runs(plan_of(spec, n_layers)), found once per (spec, depth): the fast path asks for them at every
    pass it compresses (a walk over every layer each time)."""
    text = str(spec)
    return _runs(text, n_layers, schedule_def(text.partition(":")[0]))


@functools.lru_cache(maxsize=1024)
def _runs(spec: str, n_layers: int, defn) -> tuple[tuple[str, int, int], ...]:
    return tuple(runs(_plan(spec, n_layers, defn)))      # keyed by the ScheduleDef too, as _plan


def build_plan(name: str, plan: tuple[str, ...], model: ModelSpec, tp: int, step: Step,
               stack: Stack = Stack()) -> Schedule:
    """The ops of one forward pass whose layers follow `plan` (len(plan) == model.layers)."""
    if len(plan) != model.layers:
        raise ValueError(f"plan has {len(plan)} layers, model {model.name} has {model.layers}")
    defn = schedule_def(name.partition(":")[0])          # None for a bare layer kind (calib.shapes)
    b = Builder(model, tp, step, stack, comm=not (defn is not None and defn.comm_free))
    x = b.embed()
    for kind, first, end in runs(plan):
        x = layer_builder(kind)(b, first, end, x)
    b.head(x)
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
