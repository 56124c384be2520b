"""Where Inductor puts each all-reduce's wait in the reference's compiled decode step: the overlap windows.

The reference (mayank31398/ladder-residual-inference@ea2e9e44 benchmark.py:31) sets
`reorder_for_compute_comm_overlap = True` on PyTorch 2.5 and leaves the pass list at its default.
Under torch.compile its all-reduces are funcol.all_reduce (utils.all_reduce_func): traced as
`_c10d_functional.all_reduce` with its `wait_tensor` right after it (2.5's
_functional_collectives._maybe_wrap_tensor: wait_tensor when tracing), lowered to `all_reduce_` on
a clone + `wait_tensor` (2.5 lowering.py:6278, 2.13 comm_lowering.py: the same). The ladder's
overlap is only where Inductor's passes leave those waits.

PyTorch v2.5.0 (the wheel's torch/_inductor, git 32f585d9):
* config.py:259 `reorder_for_compute_comm_overlap_passes = ["reorder_compute_for_overlap",
  "sink_waits", "raise_comms"]`, run in that order by comms.reorder_compute_and_comm_for_overlap,
  after fusion (scheduler.py:1804). torch 2.13 (installed) defaults the list to [] and adds
  `reorder_for_peak_memory` (True) before it; 2.5 had no such pass.
* comms.py: all three are `_schedule_for_comm`, a list scheduler over the fused nodes whose ready
  queue pops the lowest (score_0, score_1, score_2): score_0 = the lowest index of the collectives
  the node is an ancestor of (raise_comms), score_1 = 1 for a wait (sink_waits), score_2 = its
  position in the incoming order; reorder_compute_for_overlap also, after each collective, takes
  ready compute nodes (never a wait) until their estimated runtimes add up to the collective's.
  2.13's sink_waits, raise_comms, reorder_compute_for_overlap and _schedule_for_comm are 2.5's
  (the only changes: type hints, set -> OrderedSet in unmet_deps / buffer_users, which does not
  change which node the heap pops: score_2 is unique). decide_global_ordering_of_comms (comms in
  graph order via WeakDeps) is 2.5's less its FSDP branch.
* fx_passes/post_grad.py reorder_for_locality (inference graphs, config.reorder_for_locality True in
  both) moves each producer to just before its first user. 2.13's is 2.5's plus two guards: it
  skips the producers of a wait (`check()`, only when torch.distributed is available: a
  collective stays where the graph put it) and ops that consume RNG state. 2.5 had neither, so
  there the pass also pulls each collective down to its (sunk) wait. torch25_locality() runs
  2.13's pass with torch.distributed.is_available() answering False inside it alone, which turns
  `check()` off; the RNG guard is moot here (the decode graph's one random op, the reference's
  sampler, comes after every collective). torch25_flags(): passes as above, no
  reorder_for_peak_memory.

Checked on torch 2.5.1 itself (the reference's; run this module with it and --locality-installed,
docs/compiled-stack-reference.md): every window holds the same compute as this emulation gives, and only the
waits sit elsewhere: 2.5.1 issues AR(mlp_i) before it waits for AR(attn_i) (tpsim's plan order), where
the emulation puts each wait before the next issue; one timeline on a comm stream run in issue order.

Runtime estimates: on the fake H100 every node's `estimate_op_runtime` is 0 (no device to
measure), so reorder_compute_for_overlap pulls no extra compute into a window. The result does
not depend on it: the last pass, raise_comms, reschedules every node by (score_0, position), so
each collective's ancestors run as one block in collective order and a window is every node of
the next collective's block. `derive(..., estimator=...)` reruns with given estimates to show it.

Run: python -m tpsim.hw.derive.inductor_overlap [--at llama-3.1-70b:8:64 ...] [--no-passes] [--kernels]
"""
from __future__ import annotations

import argparse
import contextlib
import re
from dataclasses import dataclass
from unittest import mock

import torch
from torch._inductor.fx_passes import post_grad
from torch._inductor.utils import contains_collective, contains_wait

from tpsim.sim.schedule.language import build_plan, plan_of
from tpsim.sim.stack.spec import Stack, Step

from tpsim.hw.derive import reference_model as R
from tpsim.hw.derive.inductor_gpu import call_launches, compile_decode, launch_order, real_shapes
from tpsim.hw.derive.inductor_probe import DTYPE, PROBE, probe_model
from tpsim.hw.derive.reference_ladder import MODELS
from tpsim.hw.derive.inductor_kernels import node_ops
from tpsim.hw.torch_compat import known_inductor_flags

PASSES_2_5 = ("reorder_compute_for_overlap", "sink_waits", "raise_comms")     # v2.5.0 config.py:259
LAYERS = 3
# reference model -> tpsim schedule it is compared with
SCHEDULES = {"ladder": "ladder", "parallel": "parallel", "dense": "standard"}


def torch25_flags(passes: bool = True) -> dict:
    """The reference's overlap settings as PyTorch 2.5 ran them (module doc)."""
    return known_inductor_flags({"reorder_for_compute_comm_overlap": True,
                                 "reorder_for_compute_comm_overlap_passes": list(PASSES_2_5) if passes else [],
                                 "reorder_for_peak_memory": False})


@contextlib.contextmanager
def torch25_locality():
    """post_grad.reorder_for_locality as 2.5 ran it: no exception for a wait's producers."""
    orig = post_grad.reorder_for_locality

    def locality(graph):
        with mock.patch.object(torch.distributed, "is_available", lambda: False):
            return orig(graph)
    with mock.patch.object(post_grad, "reorder_for_locality", locality):
        yield


@dataclass(frozen=True)
class Launch:
    """One launch of the output code's call(), in order: kind "issue" / "wait" / "compute", the
    IR op names (tpsim_op annotations) of the nodes it fuses."""

    kind: str
    ops: tuple[str, ...]


def launches(cap) -> list[Launch]:
    """The captured graph's scheduler nodes in codegen order (what call() launches, in order)."""
    return [Launch("issue" if contains_collective(n) else "wait" if contains_wait(n) else "compute", node_ops(n))
            for n, _ in cap.nodes]


def windows(ls: list[Launch], comm_ops: set[str]) -> dict[str, list[str]]:
    """all-reduce op -> what is launched between its issue and its wait, in order: each compute
    kernel's IR ops that no earlier kernel had (a view's origin rides along with its reader; the
    all-reduce input copy fused into its producer is the collective's, left out), "issue:X" /
    "wait:X" for another all-reduce issued or awaited in between."""
    out: dict[str, list[str]] = {}
    open_: dict[str, list[str]] = {}
    seen: set[str] = set()
    for ln in ls:
        if ln.kind in ("issue", "wait"):
            (name,) = [o for o in ln.ops if o in comm_ops]
            if ln.kind == "wait":
                out[name] = open_.pop(name)
            for w in open_.values():
                w.append(f"{ln.kind}:{name}")
            if ln.kind == "issue":
                open_[name] = []
        else:
            new = [o for o in ln.ops if o not in comm_ops and o not in seen]
            for w in open_.values():
                w.extend(new)
        seen.update(ln.ops)
    return out


def plan_windows(schedule: str, layers: int, model=None) -> dict[str, list[str]]:
    """tpsim's plan (sim/schedule/schedules/): all-reduce op -> the compute ops issued between it and the
    first op that reads its result ("issue:X": another all-reduce issued in between)."""
    model = model or probe_model(layers)
    stack = Stack(dtype=DTYPE)
    step = Step.decode(PROBE["b"], PROBE["q"], PROBE["L"] - PROBE["q"], 1, stack)
    ops = build_plan(schedule, plan_of(schedule, layers), model, 1, step, stack).ops
    out = {}
    for k, c in enumerate(ops):
        if not c.is_comm:
            continue
        w = []
        for o in ops[k + 1:]:
            if set(o.inputs) & set(c.outputs):
                break
            w.append(f"issue:{o.name}" if o.is_comm else o.name)
        out[c.name] = w
    return out


def compile_order(model: str, shapes: R.Shapes, passes: bool = True, estimator=None, locality_2_5: bool = True):
    """Compile `model` (hw.derive.reference_ladder.MODELS) at `shapes` for the fake H100 as 2.5 would
    (torch25_flags(passes); torch25_locality unless locality_2_5 is False: the installed torch's
    own pass): the capture (hw.derive.inductor_gpu._Capture: scheduler nodes in order, output code).
    estimator: a function of a scheduler node -> runtime, in place of Inductor's
    (config.estimate_op_runtime)."""
    flags = torch25_flags(passes) | ({"estimate_op_runtime": estimator} if estimator else {})
    with torch25_locality() if locality_2_5 else contextlib.nullcontext():
        return compile_decode(shapes, True, model=MODELS[model], flags=flags)


def derive(model: str, shapes: R.Shapes, passes: bool = True, estimator=None,
           locality_2_5: bool = True) -> dict[str, list[str]]:
    """The windows (windows()) of compile_order(...)'s launches."""
    ls = launches(compile_order(model, shapes, passes, estimator, locality_2_5))
    return windows(ls, {o for ln in ls for o in ln.ops if o.endswith("allreduce")})


def all_reduce_producers(code: str) -> list[tuple[str, bool]]:
    """For each in-place all_reduce_(buf) of the output code's call(): (the launch just before it:
    a Triton kernel's name or "extern_kernels.mm", whether that launch names buf among its arguments,
    i.e. wrote what is reduced). The functional collective's clone (comm_lowering._all_reduce)
    would be a copy kernel there, between the GEMM and the collective."""
    out, last = [], None
    for name, args in call_launches(code):
        if name.startswith("all_reduce_("):
            out.append((last[0], bool(re.search(rf"\b{args}\b", last[1]))) if last else ("-", False))
        elif not name.startswith("wait_tensor("):
            last = (name, args)
    return out


def probe_shapes(batch: int = PROBE["b"], layers: int = LAYERS) -> R.Shapes:
    m = probe_model(layers)
    return R.Shapes(batch, PROBE["L"], m.heads, m.kv_heads, m.head_dim, m.hidden, m.ffn, m.vocab, layers)


def compute_only(w: list[str], known: set[str] | None = None) -> list[str]:
    """A window's compute ops (no issue / wait markers), those in `known` only when given."""
    return [o for o in w if ":" not in o and (known is None or o in known)]


def compare(model: str, derived: dict[str, list[str]], layers: int = LAYERS) -> dict[str, tuple]:
    """all-reduce -> (Inductor's compute in its window, tpsim's) where they differ, over the ops
    tpsim's plan has (the ladder's block-0 adds of zeros and the model-level index are not)."""
    plan = plan_windows(SCHEDULES[model], layers)
    known = {o for w in plan.values() for o in compute_only(w)}
    out = {}
    for ar, w in plan.items():
        d, p = compute_only(derived.get(ar, []), known), compute_only(w)
        if d != p:
            out[ar] = (d, p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=list(MODELS), nargs="*", default=["ladder", "parallel"])
    ap.add_argument("--at", metavar="MODEL:TP:BATCH", nargs="*", default=[],
                    help="real per-rank shapes (default: the prime probe)")
    ap.add_argument("--no-passes", action="store_true", help="reorder_for_compute_comm_overlap_passes = []")
    ap.add_argument("--kernels", action="store_true", help="print the output code's launches instead of the windows")
    ap.add_argument("--locality-installed", action="store_true",
                    help=f"the installed torch {torch.__version__}'s reorder_for_locality instead of 2.5's")
    a = ap.parse_args(argv)
    shapes = {f"probe b={PROBE['b']}": probe_shapes()} | {
        spec: real_shapes(*(lambda m, t, b: (m, int(t), int(b)))(*spec.split(":"))) for spec in a.at}
    for label, s in shapes.items():
        for model in a.model:
            if a.kernels:
                code = compile_order(model, s, passes=not a.no_passes, locality_2_5=not a.locality_installed).code
                print(f"{model} @ {label}: call() launches")
                print("\n".join(f"  {x}" for x in launch_order(code)))
                continue
            w = derive(model, s, passes=not a.no_passes, locality_2_5=not a.locality_installed)
            print(f"{model} @ {label} (passes {'[]' if a.no_passes else list(PASSES_2_5)}, reorder_for_locality "
                  f"of torch {torch.__version__ if a.locality_installed else '2.5'}):")
            for ar, ops in w.items():
                print(f"  {ar:22s} overlaps {', '.join(ops) or '-'}")
            diff = compare(model, w)
            print("  tpsim's plan: " + ("the same windows" if not diff else
                                        "; ".join(f"{ar}: inductor {d} vs tpsim {p}" for ar, (d, p) in diff.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
