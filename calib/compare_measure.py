"""Compare, step 1: measure one grid point on the harness, and rebuild the simulator's workload
(model, stack, shape) from what the measured JSON says was run."""
from __future__ import annotations

import json
from pathlib import Path

from tpsim.sim.collective_cost import message_bytes
from tpsim.sim.errors import UserError
from tpsim.sim.impls import ENGINE_COLLECTIVES, engine_collective
from tpsim.sim.model import ModelSpec, get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.stack import make_stack
from tpsim.sim.grid import Shape

from tpsim.hw import harness
from tpsim.hw.inductor_flags import harness_inductor_flags
from tpsim.hw.run_config import RunConfig, stack_collective

Point = Shape          # a grid point: model, TP, batch, prompt and gen lengths


class CompareError(UserError):
    """A grid point that cannot be compared; the message says why."""


def measure(point: Point, schedules: tuple[str, ...], out_dir: Path, backend: str = "gloo", device: str = "cpu",
            repeats: int = 3, warmup: int = 1, timeout_s: float = 120.0, deadline_s: float = 900.0,
            compile: bool = False, checkpoint: str | None = None) -> dict:
    """Run `tpsim bench` for one point (or reuse its saved result) and return the measured JSON;
    `checkpoint` (a snapshot folder, the point's model): its weights instead of drawn ones."""
    key = point.key.replace("/", "_").replace("\\", "_")        # a config.json path as --model
    path = out_dir / "measured" / f"{key}.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = None
        # reuse only a run of the same work: every asked schedule, same backend, device and repeats,
        # the backend's own all-reduce (what this runs); compiled: with the Inductor flags this harness
        # sets (an older run may lack them)
        if (old and {s for s in schedules} <= {r["schedule"] for r in old.get("schedules", [])}
                and old.get("env", {}).get("backend") == backend and old.get("env", {}).get("device") == device
                and old.get("stack", {}).get("collective", "auto") == "auto"
                and old.get("repeats") == repeats and bool(old.get("stack", {}).get("compile")) == compile
                and (not compile or old.get("env", {}).get("inductor_flags") == harness_inductor_flags())):
            return old
    cfg = RunConfig(model=point.model, tp=point.tp, batch=point.batch, prompt_len=point.prompt_len,
                    gen_len=point.gen_len, schedules=tuple(schedules), backend=backend, device=device,
                    dtype="fp32" if device == "cpu" else "fp16", repeats=repeats, warmup=warmup,
                    timeout_s=timeout_s, decode_graphs=device == "cuda", compile=compile, out=str(path),
                    checkpoint=checkpoint)
    cfg.validate()
    launch = harness("tpsim.hw.dist", "compare").launch
    launch("tpsim.hw.bench:worker", cfg.to_dict(), point.tp, timeout_s=timeout_s, deadline_s=deadline_s)
    return json.loads(path.read_text())


def workload_of(measured: dict, profile) -> Workload:
    """The simulator's Workload for a measured run: same model, shapes and serving stack, its
    all-reduces priced as the run ran them (stack.collective over env.backend: hw.run_config.stack_collective,
    as the harness's own RunConfig.stack; a run without the field ran the backend's)."""
    for key in ("model", "tp", "batch", "prompt_len", "gen_len", "schedules"):
        if key not in measured:
            raise CompareError(f"measured JSON lacks {key!r}: is it the output of `tpsim bench --json`?")
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
