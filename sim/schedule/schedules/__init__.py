"""The schedule registry: one `ScheduleDef` per schedule, each in its own module of this package.

A schedule is everything its consumers need, in one place: its name, grammar and help line; how
its argument parses; its plan (the layer kind of every layer); the builders of the layer kinds it
introduces, each with the compiled-kernel probe that derives its Inductor table or the reason it is
priced by the analytic fused model; and what running it asks of the model. The schedule language
(sim/schedule/language.py), the builder, predict and show, calibration's shapes, the compiled-kernel probes
(hw/derive/inductor_probe.py) and the CLI's help all read this registry; `tpsim check` keys its references
(hw/check.py) by the same layer-kind names, and a schedule that computes another's math names that one
(`numerics_reference`: the schedules that keep the model name standard).

Adding a schedule: one module here with its `DEF`, listed in registry.BUILTIN (or
`registry.register(DEF)` from outside), plus its test; and a reference in hw/check.py only if its maths
differs from every existing one (else `numerics_reference` names the one it computes). The types
are in _def.py, the registry and its lookups in registry.py (this file imports nothing, so the
schedule modules can import each other without a cycle).
"""
