"""Compare, step 1: measure one grid point on the harness, and rebuild the simulator's workload
(model, stack, shape) from what the measured JSON says was run."""
from __future__ import annotations

import json
from pathlib import Path

from tpsim.sim.bounds import problem
from tpsim.sim.price.comm.collective import message_bytes
from tpsim.sim.errors import UserError
from tpsim.sim.stack.impls import ENGINE_COLLECTIVES, engine_collective
from tpsim.sim.model.presets import ModelSpec, get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.fileio.shape import Depends, ShapeError, check_shape
from tpsim.sim.stack.spec import make_stack
from tpsim.sim.grid import Shape

from tpsim.hw import harness
from tpsim.hw.inductor_flags import harness_inductor_flags
from tpsim.hw.run_config import RunConfig, stack_collective

Point = Shape          # a grid point: model, TP, batch, prompt and gen lengths


class CompareError(UserError):
    """A grid point that cannot be compared; the message says why."""


def saved_path(point: Point, out_dir: Path) -> Path:
    """Where a point's measured JSON is kept: out_dir/measured/KEY.json."""
    key = point.key.replace("/", "_").replace("\\", "_")        # a config.json path as --model
    return out_dir / "measured" / f"{key}.json"


def saved_run(point: Point, schedules: tuple[str, ...], out_dir: Path, backend: str, device: str, repeats: int,
              compile: bool) -> dict | None:
    """The point's saved measured JSON when it is a run of the same work, else None (measure it)."""
    path = saved_path(point, out_dir)
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if not isinstance(old, dict):
        return None
    # a damaged field is not the same work: measured again, not a traceback
    env, stack = _object_or_empty(old, "env"), _object_or_empty(old, "stack")
    rows = old.get("schedules") if isinstance(old.get("schedules"), list) else []
    ran = {r.get("schedule") for r in rows if isinstance(r, dict)}
    # reuse only a run of the same work: every asked schedule, same backend, device and repeats,
    # the backend's own all-reduce (what this runs); compiled: with the Inductor flags this harness
    # sets (an older run may lack them)
    if (set(schedules) <= ran and env.get("backend") == backend and env.get("device") == device
            and stack.get("collective", "auto") == "auto"
            and old.get("repeats") == repeats and bool(stack.get("compile")) == compile
            and (not compile or env.get("inductor_flags") == harness_inductor_flags())):
        return old
    return None


def _object_or_empty(d: dict, key: str) -> dict:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def measure(point: Point, schedules: tuple[str, ...], out_dir: Path, backend: str = "gloo", device: str = "cpu",
            repeats: int = 3, warmup: int = 1, timeout_s: float = 120.0, deadline_s: float = 900.0,
            compile: bool = False, checkpoint: str | None = None, progress=None) -> dict:
    """Run `tpsim bench` for one point (or reuse its saved result, `saved_run`) and return the
    measured JSON; `checkpoint` (a snapshot folder, the point's model): its weights instead of drawn ones.
    `progress(done, total)`: rank 0's progress marks of RunConfig.bench_marks, a few times a second."""
    old = saved_run(point, schedules, out_dir, backend, device, repeats, compile)
    if old is not None:
        return old
    path = saved_path(point, out_dir)
    cfg = RunConfig(model=point.model, tp=point.tp, batch=point.batch, prompt_len=point.prompt_len,
                    gen_len=point.gen_len, schedules=tuple(schedules), backend=backend, device=device,
                    dtype="fp32" if device == "cpu" else "fp16", repeats=repeats, warmup=warmup,
                    timeout_s=timeout_s, decode_graphs=device == "cuda", compile=compile, out=str(path),
                    checkpoint=checkpoint)
    cfg.validate()
    launch = harness("tpsim.hw.dist", "compare").launch
    on_beat = (lambda st: progress(st.count if st else 0, cfg.bench_marks)) if progress else None
    launch("tpsim.hw.bench:worker", cfg.to_dict(), point.tp, timeout_s=timeout_s, deadline_s=deadline_s,
           on_beat=on_beat)
    return json.loads(path.read_text())


def workload_of(measured: dict, profile) -> Workload:
    """The simulator's Workload for a measured run: same model, shapes and serving stack, its
    all-reduces priced as the run ran them (stack.collective over env.backend: hw.run_config.stack_collective,
    as the harness's own RunConfig.stack; a run without the field ran the backend's)."""
    _check_run(measured)
    try:
        model = _measured_model(measured)
    except ValueError as e:
        raise CompareError(f"measured JSON is for {measured['model']!r}: {e}") from None
    st = measured.get("stack", {})
    env = measured.get("env", {})
    backend = env.get("backend", "nccl")
    collective = stack_collective(st.get("collective") or "auto", backend)
    tables = {t.impl for t in profile.collective_tables}
    if engine_collective(collective) is None and collective not in tables | {backend}:
        # nothing else may stand in for it: the point fails, naming what could be priced
        raise CompareError(f"the measured run's all-reduce ran {collective!r}, which the simulator cannot price with "
                           f"profile {profile.name} (it prices {backend}, its tables' implementations and the "
                           f"engine all-reduces {', '.join(ENGINE_COLLECTIVES)})")
    # what bench ran: its JSON's stack (eager, no graphs unless recorded); fields it lacks: Stack's defaults
    stack = make_stack(dict(dtype=measured.get("dtype", "fp16"), head=st.get("head"), embed=st.get("embed"),
                            attention=st.get("attention"),
                            kv=st.get("kv"), prefill_logits=st.get("prefill_logits"), expand_gqa=st.get("expand_gqa"),
                            prefill_graphs=False, decode_graphs=bool(st.get("decode_graphs", False)),
                            compile=bool(st.get("compile", False)),
                            collective=collective,
                            mm_decompose_m1=st.get("mm_decompose_m1")))
    emulated = measured.get("emulated")          # one rank of a TP job on one device (bench --emulate-tp)
    # the run happened, so no memory check: the simulator's estimate must not veto a measurement
    return Workload(model, int(measured["tp"]), profile, int(measured["batch"]), int(measured["prompt_len"]),
                    int(measured["gen_len"]), stack, memory_check=False,
                    comm_group=int(emulated["ranks"]) if emulated else None)


# ------------------------------------------------------------------ the measured JSON's shape

_BENCH_JSON = "is it the output of `tpsim bench --json`?"


def _bounded(bound: str):
    """A count within sim/bounds.py's entry `bound` (which refuses strings, booleans and fractions)."""
    return lambda v: problem(bound, v)


_PAIRED = ("median", "ci_hi", "ci_coverage")        # with ci_lo: spread.speedup's paired interval, read together
# what compare reads of a measured run (hw.bench's result JSON), as a fileio/shape.py spec: the run's
# own fields (workload_of), then each schedule's row
_RUN = {
    "model": "text",
    "tp": _bounded("tp"), "batch": _bounded("batch"), "prompt_len": _bounded("tokens"), "gen_len": _bounded("tokens"),
    "dtype?": "text",
    # model_spec's counts (sliding_window may be 0: full attention, so it is not bounded here)
    "model_spec?": {"hidden?": _bounded("hidden"), "layers?": _bounded("layers"), "heads?": _bounded("heads"),
                    "kv_heads?": _bounded("heads"), "head_dim?": _bounded("head_dim"), "ffn?": _bounded("ffn"),
                    "vocab?": _bounded("vocab"), "rope?": {"theta": "number"}},
    "stack?": {**{f"{k}?": "text" for k in ("collective", "head", "embed", "attention", "kv", "prefill_logits")},
               **{f"{k}?": "bool" for k in ("expand_gqa", "decode_graphs", "compile", "mm_decompose_m1")},
               "collective_kernels?": {"*": "text"}},       # bool("false") would be true: flags are booleans
    "env?": {"backend?": "text", "device?": "text", "probe_s?": ["number"]},
    "emulated?": {"ranks": "count"},
    "schedules": ["object"],
}
_ROW = {
    "schedule": "text",
    **{k: "number" for k in ("prefill_s", "decode_s", "tokens_per_s", "speedup")},
    "exposed_comm_s": "number or null",             # null: not measured (a compiled run, hw.bench)
    "spread?": {"speedup?": Depends(lambda sp: {
        **{f"{k}?": "number" for k in ("ci_lo", "p25", "p75")},
        # a paired interval (ci_lo) comes with its median, upper end and coverage: compare reads all four
        **{k + ("" if isinstance(sp, dict) and "ci_lo" in sp else "?"): "number" for k in _PAIRED}})},
    "records?": [{"op": "text", "stream": "text", "phase": "text", "start_s": "number", "end_s": "number",
                  "rank": "count", "pass?": "count", "kind?": "text"}],
}


def check_measured(measured) -> None:
    """Every field compare reads of a measured run (hw.bench's result JSON) has its type, so a
    hand-edited or foreign file is one failed point naming the field, not a traceback that ends
    the grid. CompareError otherwise."""
    _check(measured, {**_RUN, "schedules": [_ROW]})


def _check_run(measured) -> None:
    """The run's own fields, which workload_of reads: model, shape, dtype, stack, env, emulated,
    and that the schedules are a list of objects."""
    _check(measured, _RUN)


def _check(doc, spec) -> None:
    try:
        check_shape(doc, spec, "measured JSON field", "the measured JSON")
    except ShapeError as e:
        raise CompareError(f"{e}; {_BENCH_JSON}") from None


def _measured_model(measured: dict) -> ModelSpec:
    """The shapes the run carries (hw.bench "model_spec", when it is of the model the run names:
    a Hugging Face config.json run needs no path to its config here), else the preset it names."""
    spec = measured.get("model_spec")
    if isinstance(spec, dict) and spec.get("name") == measured["model"]:
        try:
            return ModelSpec(**spec)
        except TypeError:            # written by another tpsim version: fall back on the name
            pass
    return get_model(measured["model"])


def check_profile_covers(w: Workload, backend: str) -> None:
    """The profile must price this workload's collectives with the harness's implementation: its
    tables, or for an engine's all-reduce (symm-mem) those of the `backend` it hands the rest to
    (the other collectives, and the sizes it refuses)."""
    impl = w.stack.collective
    check_covers(w.profile, backend if engine_collective(impl) else impl, w.comm_group or w.tp)


def collective_notes(measured: dict, sim: Simulator, specs) -> tuple[str, ...]:
    """One line per way the simulator prices a run's engine all-reduce (symm-mem) with another kernel
    than the run's: the kernel the harness recorded per message size (stack.collective_kernels,
    hw.symm_mem `ran`) against the one the cost model prices it with (CostModel.engine_kernel: NCCL
    where the profile's hardware makes the engine refuse its kernel, or the profile holds no constants
    for it, with why), over the all-reduces of `specs`' prefill and decode passes. () for a run on
    the backend's own all-reduce, or one that recorded no kernels."""
    w = sim.w
    eng = engine_collective(w.stack.collective)
    ran = (measured.get("stack") or {}).get("collective_kernels") or {}
    if eng is None or not ran:
        return ()
    steps = [w.prefill_step()] + ([w.decode_step(1)] if w.gen_len > 1 else [])
    differ: dict[tuple[str, str, str], set[int]] = {}        # (ran, priced, why) -> message bytes
    for spec in specs:
        for step in steps:
            for op in w.schedule(spec, step).collectives:
                nbytes, group = message_bytes(op), w.comm_group or op.attr("group")
                got = ran.get(str(nbytes))
                if op.kind != "all_reduce" or got is None or group <= 1:
                    continue
                p = sim.cost.engine_kernel(eng, nbytes, group, op.attr("width"))
                if p.kernel != got:
                    differ.setdefault((got, p.kernel, p.note), set()).add(nbytes)
    def name(kernel: str) -> str:
        return "NCCL" if kernel == "nccl" else kernel
    return tuple(f"collective {eng.name}: the run's all-reduce ran {name(got)} at {', '.join(map(str, sorted(b)))} B; "
                 f"the simulator prices {name(priced)} there" + (f" ({why})" if why else "")
                 for (got, priced, why), b in differ.items())


def check_covers(profile, impl: str, group: int) -> None:
    """A profile that is to price collectives of `group` ranks run by `impl` (the harness's
    backend, gloo or nccl) has tables for it (CompareError otherwise, naming what it has)."""
    if group > 1 and not any(t.impl == impl for t in profile.collective_tables):
        have = sorted({t.impl for t in profile.collective_tables}) or ["none"]
        raise CompareError(f"profile {profile.name} has no collective tables for {impl!r} "
                           f"(it has: {', '.join(have)}); calibrate with --backend {impl} first")


def machine_drift(measured: dict, profile) -> dict | None:
    """How much slower (> 1) or faster the machine computed during the measurement than while the
    profile's compute points were taken: hw.probe timed in both (calibration: once per compute
    group; measurement: before and after the timed repeats), the fastest of each side, since a
    transient (another process on the core for a moment) only ever slows one probe down while a
    drift slows them all. None without both probes."""
    groups = (profile.raw or {}).get("raw", {}).get("groups", {})
    cal = [g["probe_s"] for g in groups.values() if g.get("kind") == "compute" and g.get("probe_s")]
    meas = (measured.get("env") or {}).get("probe_s")
    if not cal or not meas:
        return None
    c, m = min(cal), min(meas)
    return {"calibration_probe_s": c, "measurement_probe_s": list(meas), "ratio": m / c}
