"""Simulated vs measured: run the harness and the simulator on the same workloads with the same
profile, and show per op and end to end where the prediction is right and where it is wrong.

For each grid point (model, TP, batch) the harness (`hw.bench`) measures every schedule, and the
simulator predicts the same workload with the same profile and the same serving stack. Reported:
predicted vs measured prefill, decode and tokens/s with relative errors; the error of the
predicted *speedup* over standard (what users decide on) and whether its sign (faster or slower
than standard) agrees; and a per-op join of simulated and measured records on (phase, op,
stream), ordered by each op's contribution to the end-to-end error.

Measured JSONs are saved per point as they finish, so a rerun with the same --out-dir skips
finished points; a point that fails is reported and the rest of the grid still runs.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import click

from sim.model import ModelSpec, get_model
from sim.predict import Prediction, Simulator, Workload
from sim.profile import ProfileError, load_profile
from sim.schedule import DEFAULT_SCHEDULES
from sim.stack import Stack
from sim.sweep import Shape
from sim.trace import write_json_atomic, write_text_atomic

QUICK_MODELS = ("toy-512", "toy-1024")


Point = Shape          # a grid point: model, TP, batch, prompt and gen lengths


class CompareError(ValueError):
    """A grid point that cannot be compared; the message says why."""


# ------------------------------------------------------------------ measuring

def measure(point: Point, schedules: tuple[str, ...], out_dir: Path, backend: str = "gloo", device: str = "cpu",
            repeats: int = 3, warmup: int = 1, timeout_s: float = 120.0, deadline_s: float = 900.0,
            compile: bool = False) -> dict:
    """Run `tpsim bench` for one point (or reuse its saved result) and return the measured JSON."""
    from hw.dist import RunConfig, launch
    key = point.key.replace("/", "_").replace("\\", "_")        # a config.json path as --model
    path = out_dir / "measured" / f"{key}.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = None
        # reuse only a run of the same work: every asked schedule, same backend, device and repeats
        if (old and {s for s in schedules} <= {r["schedule"] for r in old.get("schedules", [])}
                and old.get("env", {}).get("backend") == backend and old.get("env", {}).get("device") == device
                and old.get("repeats") == repeats and bool(old.get("stack", {}).get("compile")) == compile):
            return old
    cfg = RunConfig(model=point.model, tp=point.tp, batch=point.batch, prompt_len=point.prompt_len,
                    gen_len=point.gen_len, schedules=tuple(schedules), backend=backend, device=device,
                    dtype="fp32" if device == "cpu" else "fp16", repeats=repeats, warmup=warmup,
                    timeout_s=timeout_s, decode_graphs=device == "cuda", compile=compile, out=str(path))
    cfg.validate()
    launch("hw.bench:worker", cfg.to_dict(), point.tp, timeout_s=timeout_s, deadline_s=deadline_s)
    return json.loads(path.read_text())


# ------------------------------------------------------------------ predicting the same workload

def workload_of(measured: dict, profile) -> Workload:
    """The simulator's Workload for a measured run: same model, shapes and serving stack."""
    for key in ("model", "tp", "batch", "prompt_len", "gen_len", "schedules"):
        if key not in measured:
            raise CompareError(f"measured JSON lacks {key!r}: is it the output of `tpsim bench --json`?")
    try:
        model = _measured_model(measured)
    except ValueError as e:
        raise CompareError(f"measured JSON is for {measured['model']!r}: {e}") from None
    st = measured.get("stack", {})
    env = measured.get("env", {})
    stack = Stack(dtype=measured.get("dtype", "fp16"), head=st.get("head", "replicated"),
                  attention=st.get("attention", "math"), kv=st.get("kv", "static"),
                  prefill_logits=st.get("prefill_logits", "all"), expand_gqa=st.get("expand_gqa", True),
                  prefill_graphs=False, decode_graphs=bool(st.get("decode_graphs", False)),
                  compile_prefill=bool(st.get("compile", False)), compile_decode=bool(st.get("compile", False)),
                  collective=env.get("backend", "nccl"))
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


def check_profile_covers(w: Workload) -> None:
    """The profile must price this workload's collectives with the harness's implementation."""
    impl = w.stack.collective
    group = w.comm_group or w.tp
    if group > 1 and not any(t.impl == impl for t in w.profile.collective_tables):
        have = sorted({t.impl for t in w.profile.collective_tables}) or ["none"]
        raise CompareError(f"profile {w.profile.name} has no collective tables for {impl!r} "
                           f"(it has: {', '.join(have)}); calibrate with --backend {impl} first")


# ------------------------------------------------------------------ joining

def _rel(pred: float, meas: float) -> float:
    return (pred - meas) / meas if meas else float("nan")


def op_join(measured_records: list[dict], pred: Prediction, gen_len: int) -> list[dict]:
    """Per (phase, op, stream): measured median duration over ranks vs simulated duration, and the
    op's contribution to the end-to-end error (x1 for prefill, x(gen-1) for decode)."""
    meas: dict[tuple, list[float]] = {}
    for r in measured_records:
        meas.setdefault((r["phase"], r["op"], r["stream"]), []).append(r["end_s"] - r["start_s"])
    sim: dict[tuple, float] = {}
    for res in (pred.prefill, pred.decode):
        for r in (res.records if res else []):
            if r.rank == 0:
                sim[(r.phase, r.op, r.stream)] = sim.get((r.phase, r.op, r.stream), 0.0) + r.dur_s
    rows = []
    for key in sorted(set(meas) | set(sim)):
        phase, op, stream = key
        m = statistics.median(meas[key]) if key in meas else 0.0
        s = sim.get(key, 0.0)
        times = 1 if phase == "prefill" else max(gen_len - 1, 0)
        rows.append({"phase": phase, "op": op, "stream": stream, "measured_s": m, "predicted_s": s,
                     "rel_err": _rel(s, m) if m else None, "contribution_s": (s - m) * times})
    rows.sort(key=lambda r: -abs(r["contribution_s"]))
    return rows


def _sign(s: dict) -> str:
    if s["sign_match"]:
        return "ok"
    return "undetermined" if s["measured_speedup_within_noise"] or s.get("predicted_speedup_within_noise") else "WRONG"


def _predicted_speedup(s: dict) -> str:
    iv = s["predicted"].get("speedup_interval")
    return f"{s['predicted']['speedup']:.3f}" + (f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv else "")


PREDICTED_INTERVAL = (0.05, 0.95)       # quantiles of the bootstrap: a 90% interval


def overlap_samples(profile) -> list[tuple[float, float, float]]:
    """Bootstrap (compute_slowdown, comm_slowdown, wake_s) triples of the profile's overlap
    calibration: the refits kept by a simulation fit (calib.overlap_fit), else the closed form
    redrawn from the kept trials (calib.overlap_summary.factor_samples, no wake-up); [] when the profile
    kept no trials (GPU, imported or built-in)."""
    from calib.overlap_summary import factor_samples, profile_factors
    groups = (profile.raw or {}).get("raw", {}).get("groups", {})                # the file's raw section
    used = {"compute_slowdown": profile.compute_slowdown, "comm_slowdown": profile.comm_slowdown}
    for g in reversed(list(groups.values())):       # a profile's own groups follow its base's
        sm = g.get("summary", {}) if g.get("kind") == "overlap" else {}
        fit = sm.get("fit")
        if fit and {k: fit[k] for k in used} == used and fit["wake_us"] * 1e-6 == profile.wake_s:
            return [(cs, ks, w_us * 1e-6) for cs, ks, w_us in fit["samples"]]
        if sm and not fit and profile_factors(sm) == used:      # the group whose factors the profile uses
            return [(cs, ks, 0.0) for cs, ks in factor_samples(sm)]
    return []


def speedup_interval(w: Workload, spec: str, samples: list[tuple[float, float, float]]) -> list[float] | None:
    """The predicted speedup's interval from the calibration's own noise: `spec` over standard
    predicted under each bootstrap triple of overlap parameters, its PREDICTED_INTERVAL quantiles.
    None without samples. Schedules that never overlap a collective get a zero-width interval."""
    import dataclasses
    if not samples:
        return None

    def speedup(cs: float, ks: float, wake_s: float) -> float:
        p = dataclasses.replace(w.profile, compute_slowdown=cs, comm_slowdown=ks, wake_s=wake_s)
        sim = Simulator(dataclasses.replace(w, profile=p), record=False)
        return sim.predict(spec).tokens_per_s / sim.predict("standard").tokens_per_s
    free, worst = speedup(1.0, 1.0, 0.0), speedup(*max(samples))
    if free == worst == speedup(*min(samples)):     # nothing overlaps: the factors change nothing
        return [free, free]
    got = sorted(speedup(*t) for t in samples)
    lo, hi = PREDICTED_INTERVAL
    return [got[round(lo * (len(got) - 1))], got[round(hi * (len(got) - 1))]]


def _measured_speedup(s: dict) -> str:
    ci = s["measured"].get("speedup_ci")
    return f"{s['measured']['speedup']:.3f}" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def _interval_note(result: dict) -> str:
    """What the measured speedup and its interval are, and how sure (coverage depends on repeats)."""
    cov = [s["measured"]["speedup_ci_coverage"] for pt in result["points"] for s in pt["schedules"]
           if "speedup_ci_coverage" in s["measured"]]
    pred = any("speedup_interval" in s["predicted"] for pt in result["points"] for s in pt["schedules"])
    if not (cov or pred):
        return ""
    note = (f"meas speedup [lo-hi]: the median per-repeat paired ratio and an at least {min(cov):.0%} confidence "
            "interval for it (sign test over the repeats).") if cov else ""
    if pred:
        note += (" pred speedup [lo-hi]: a 90% bootstrap interval over the trials of the profile's overlap "
                 "calibration (the prediction's own noise).")
    note += (" sign 'undetermined': prediction and measurement disagree but one of the intervals contains 1;"
             " 'WRONG': neither does.")
    if cov and min(cov) < 0.9:
        note += (" Fewer than 5 repeats: too few for a 90% interval, so the measurement rarely calls a "
                 "disagreement undetermined.")
    return note.strip()


def speedup_undetermined(spread: dict) -> bool:
    """True when the measurement cannot tell the speedup's side of 1: the median's confidence
    interval over the per-repeat paired ratios (hw.bench.median_ci, sign test) contains 1.
    Measured JSONs written before that interval existed fall back to the interquartile range."""
    if not spread:
        return False
    lo, hi = (spread["ci_lo"], spread["ci_hi"]) if "ci_lo" in spread else (spread.get("p25", 1), spread.get("p75", 1))
    return lo <= 1.0 <= hi


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


def compare_point(measured: dict, profile, schedules: tuple[str, ...] | None = None) -> dict:
    """Predicted vs measured for every schedule of one measured run."""
    w = workload_of(measured, profile)
    check_profile_covers(w)
    rows_m = {r["schedule"]: r for r in measured["schedules"]}
    wanted = [s for s in (schedules or rows_m) if s in rows_m]
    if "standard" not in rows_m:
        raise CompareError("measured JSON has no standard run: speedups need it")
    missing = [s for s in (schedules or ()) if s not in rows_m]
    sim = Simulator(w, record=True)
    base = sim.predict("standard")
    samples = overlap_samples(profile)
    out = []
    for spec in dict.fromkeys(["standard", *wanted]):
        p = base if spec == "standard" else sim.predict(spec)
        p.speedup = p.tokens_per_s / base.tokens_per_s
        m = rows_m[spec]
        sp = m.get("spread", {}).get("speedup", {})
        noise = spec != "standard" and speedup_undetermined(sp)
        # The measured speedup: the median of the per-repeat paired ratios (the repeats are
        # interleaved, so pairing cancels drift) when the run has them, the one its interval is
        # about; else tokens/s over standard's.
        paired = "ci_lo" in sp and spec != "standard"
        meas_speedup = sp["median"] if paired else m["speedup"]
        pred = p.to_dict()
        iv = speedup_interval(w, spec, samples) if spec != "standard" else None
        if iv:
            pred["speedup_interval"] = iv
        out.append({
            "schedule": spec,
            "measured": {k: m[k] for k in ("prefill_s", "decode_s", "tokens_per_s", "exposed_comm_s")}
            | {"speedup": meas_speedup, "speedup_of_medians": m["speedup"]}
            | ({"speedup_ci": [sp["ci_lo"], sp["ci_hi"]], "speedup_ci_coverage": sp["ci_coverage"]} if paired else {}),
            "predicted": pred,
            "err": {k: _rel(getattr(p, k), m[k]) for k in ("prefill_s", "decode_s", "tokens_per_s")},
            "speedup_err": p.speedup - meas_speedup,
            "sign_match": spec == "standard" or (p.speedup >= 1.0) == (meas_speedup >= 1.0),
            "measured_speedup_within_noise": noise,
            "predicted_speedup_within_noise": bool(iv and iv[0] <= 1.0 <= iv[1]),
            "ops": op_join(m.get("records", []), p, w.gen_len),
        })
    return {"model": w.model.name, "tp": w.tp, "batch": w.batch, "prompt_len": w.prompt_len,
            "gen_len": w.gen_len, "profile": profile.name, "missing_schedules": missing, "schedules": out,
            "machine_drift": machine_drift(measured, profile), "env": measured.get("env", {})}


def summarize(points: list[dict]) -> dict:
    """Median |error| of tokens/s and |speedup error| per schedule, and sign agreement."""
    by: dict[str, list[dict]] = {}
    for pt in points:
        for s in pt.get("schedules", []):
            by.setdefault(s["schedule"], []).append(s)
    out = {}
    for spec, xs in by.items():
        out[spec] = {"points": len(xs),
                     "median_abs_err_tokens_per_s": statistics.median(abs(x["err"]["tokens_per_s"]) for x in xs),
                     "median_abs_err_prefill_s": statistics.median(abs(x["err"]["prefill_s"]) for x in xs),
                     "median_abs_err_decode_s": statistics.median(abs(x["err"]["decode_s"]) for x in xs),
                     "median_abs_speedup_err": statistics.median(abs(x["speedup_err"]) for x in xs),
                     "sign_matches": sum(x["sign_match"] for x in xs),
                     "sign_mismatches_within_noise": sum((not x["sign_match"]) and x["measured_speedup_within_noise"]
                                                         for x in xs),
                     # the measurement is sure of its side of 1, the prediction's own interval is not
                     "sign_mismatches_prediction_uncertain": sum(
                         (not x["sign_match"]) and not x["measured_speedup_within_noise"]
                         and x.get("predicted_speedup_within_noise", False) for x in xs)}
    return out


# ------------------------------------------------------------------ reports

def write_report(result: dict, out_dir: Path) -> list[Path]:
    """compare.json, report.md and its PNG plots under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compare.json", result)
    pngs = _plots(result, out_dir)
    md = ["# tpsim compare: simulated vs measured", "",
          f"Profile `{result['profile']}`; {len(result['points'])} grid point(s)"
          + (f", {len(result['failed'])} failed" if result["failed"] else "") + ".", "",
          "## Summary per schedule", "",
          "| schedule | points | median abs err tokens/s | prefill | decode | median abs speedup err | sign matches "
          "| undetermined: measurement | undetermined: prediction |",
          "|---|---|---|---|---|---|---|---|---|"]
    for spec, s in result["summary"].items():
        md.append(f"| {spec} | {s['points']} | {s['median_abs_err_tokens_per_s']:.1%} | "
                  f"{s['median_abs_err_prefill_s']:.1%} | {s['median_abs_err_decode_s']:.1%} | "
                  f"{s['median_abs_speedup_err']:.3f} | {s['sign_matches']}/{s['points']} | "
                  f"{s['sign_mismatches_within_noise']} | {s.get('sign_mismatches_prediction_uncertain', 0)} |")
    for note in (_interval_note(result), _drift_note(result)):
        if note:
            md += ["", note]
    for png in pngs:
        md += ["", f"![{png.stem}]({png.name})"]
    for pt in result["points"]:
        md += ["", f"## {pt['model']} TP{pt['tp']} batch {pt['batch']} prompt {pt['prompt_len']} gen {pt['gen_len']}",
               "", "| schedule | measured tok/s | predicted tok/s | err | measured speedup | predicted speedup | sign |",
               "|---|---|---|---|---|---|---|"]
        for s in pt["schedules"]:
            md.append(f"| {s['schedule']} | {s['measured']['tokens_per_s']:.1f} | {s['predicted']['tokens_per_s']:.1f} | "
                      f"{s['err']['tokens_per_s']:+.1%} | {_measured_speedup(s)} | "
                      f"{_predicted_speedup(s)} | {_sign(s)} |")
        std = pt["schedules"][0]
        md += ["", "Largest per-op contributors to the standard schedule's error (predicted - measured, "
               "x1 prefill, x(gen-1) decode). Streams: compute = the op's kernel; comm = measured from "
               "issue to completion (waiting for peers included), simulated from the last rank's arrival "
               "to the end; wait = time the compute stream was blocked on that collective. Measured "
               "records come from one recorded prefill and a few decode steps per rank (median over ranks and steps):", "", "| phase | op | stream | measured ms | predicted ms | contribution ms |",
               "|---|---|---|---|---|---|"]
        for o in std["ops"][:8]:
            md.append(f"| {o['phase']} | {o['op']} | {o['stream']} | {o['measured_s'] * 1e3:.3f} | "
                      f"{o['predicted_s'] * 1e3:.3f} | {o['contribution_s'] * 1e3:+.2f} |")
    for pt in result["points"]:
        if pt["missing_schedules"]:
            md += ["", f"**Not measured** for {pt['model']} TP{pt['tp']} batch {pt['batch']}: "
                   f"{', '.join(pt['missing_schedules'])}"]
    for f in result["failed"]:
        md += ["", f"**Failed point** {f['point']}: {f['error']}"]
    path = out_dir / "report.md"
    write_text_atomic(path, "\n".join(md) + "\n")
    return [out_dir / "compare.json", path, *pngs]


def _plots(result: dict, out_dir: Path) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    pts = result["points"]
    if not pts:
        return []
    out = []
    # predicted vs measured tokens/s
    fig, ax = plt.subplots(figsize=(5, 4.5))
    specs = list(dict.fromkeys(s["schedule"] for p in pts for s in p["schedules"]))
    allv = []
    for spec in specs:
        xs = [s["measured"]["tokens_per_s"] for p in pts for s in p["schedules"] if s["schedule"] == spec]
        ys = [s["predicted"]["tokens_per_s"] for p in pts for s in p["schedules"] if s["schedule"] == spec]
        ax.scatter(xs, ys, label=spec)
        allv += xs + ys
    lo, hi = min(allv) * 0.8, max(allv) * 1.2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="grey", alpha=0.15, label="±15%")
    ax.set(xscale="log", yscale="log", xlabel="measured tokens/s", ylabel="predicted tokens/s",
           title="tokens/s: predicted vs measured")
    ax.legend(fontsize=7)
    out.append(out_dir / "scatter.png")
    fig.savefig(out[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    # speedup bars per point and schedule
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(pts) * (len(specs) - 1)), 3.8))
    labels, meas, pred = [], [], []
    for p in pts:
        for s in p["schedules"][1:]:
            labels.append(f"{p['model']}\nTP{p['tp']} b{p['batch']}\n{s['schedule']}")
            meas.append(s["measured"]["speedup"])
            pred.append(s["predicted"]["speedup"])
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], meas, 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], pred, 0.4, label="predicted")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(x), labels, fontsize=6)
    ax.set(ylabel="speedup over standard", title="speedup over standard: measured vs predicted")
    ax.legend(fontsize=7)
    out.append(out_dir / "speedup.png")
    fig.savefig(out[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    # one decode step, side by side: measured (rank 0) and simulated, for the first non-standard schedule
    p = pts[0]
    s = next((s for s in p["schedules"] if s["schedule"] == "ladder"), p["schedules"][-1])
    timeline = result.get("timelines", {}).get(f"{p['model']}|{p['tp']}|{p['batch']}|{s['schedule']}")
    if timeline:
        fig, ax = plt.subplots(figsize=(11, 2.8))
        colors = {"compute": "tab:blue", "comm": "tab:orange", "wait": "tab:red"}
        rows = [("measured", "compute"), ("measured", "comm"), ("measured", "wait"),
                ("simulated", "compute"), ("simulated", "comm"), ("simulated", "wait")]
        for y, (src, stream) in enumerate(rows):
            spans = [(r["start_s"] * 1e3, (r["end_s"] - r["start_s"]) * 1e3) for r in timeline[src]
                     if r["stream"] == stream]
            ax.broken_barh(spans, (y - 0.4, 0.8), color=colors[stream])
        ax.set_yticks(range(len(rows)), [f"{a} {b}" for a, b in rows], fontsize=7)
        ax.set(xlabel="ms", title=f"one decode step, rank 0: {p['model']} TP{p['tp']} {s['schedule']}")
        out.append(out_dir / "timeline.png")
        fig.savefig(out[-1], dpi=110, bbox_inches="tight")
        plt.close(fig)
    return out


def _timeline(measured: dict, spec: str, pred: dict | None, profile) -> dict:
    """Rank-0 records of one decode step, measured and simulated."""
    rec = next((r.get("records", []) for r in measured["schedules"] if r["schedule"] == spec), [])
    meas = [r for r in rec if r["rank"] == 0 and r["phase"] == "decode" and r.get("pass", 0) == 0]
    sim = Simulator(workload_of(measured, profile), record=True)
    res = sim.step(spec, sim.w.decode_step(1)) if sim.w.gen_len > 1 else None
    return {"measured": meas, "simulated": [r.to_dict() for r in (res.records if res else []) if r.rank == 0]}


def write_point_trace(measured: dict, profile, out_dir: Path) -> Path:
    """traces/MODEL-tpN-bB-pP-gG.json: measured and simulated tracks side by side per rank and schedule."""
    from sim.measured_trace import side_by_side_trace
    w = workload_of(measured, profile)
    name = f"{w.model.name}-tp{w.tp}-b{w.batch}-p{w.prompt_len}-g{w.gen_len}".replace("/", "_").replace("[:", "-L")
    path = out_dir / "traces" / f"{name.rstrip(']')}.json"
    write_json_atomic(path, side_by_side_trace(measured, w))
    return path


# ------------------------------------------------------------------ the command

def _collective_kinds(points: list[Point], schedules: tuple[str, ...]) -> tuple[str, ...]:
    """all_reduce plus every collective kind the schedules emit on the grid (e.g. reduce_scatter)."""
    from sim.schedule import KINDS, build
    from sim.stack import Step
    used = {"all_reduce"}
    for p in points:
        step = Step.prefill(p.batch, p.prompt_len, p.gen_len, Stack())
        used |= {op.kind for spec in schedules for op in build(spec, get_model(p.model), p.tp, step).collectives}
    return tuple(k for k in KINDS if k in used)


def run_compare(points: list[Point], schedules: tuple[str, ...], out_dir: Path, profile_arg: str | None,
                backend: str, device: str, nproc: int, quick: bool, repeats: int, measured_files: tuple[str, ...],
                timeout_s: float, echo=print, compile: bool = False) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    if profile_arg is None and not measured_files:
        from calib.run import calibrate
        models = tuple(dict.fromkeys(p.model for p in points))
        echo(f"calibrating {backend} on {nproc} ranks for {', '.join(models)} -> {out_dir / 'profile.json'}")
        # a quick calibration measures all-reduce only; also the collectives the schedules use (seq-parallel)
        used = _collective_kinds(points, schedules)
        calibrate(backend, nproc, models, tuple(sorted({p.tp for p in points})), tuple(sorted({p.batch for p in points})),
                  points[0].prompt_len, points[0].gen_len, quick, out_dir / "profile.json",
                  **({"collectives": used} if quick and used != ("all_reduce",) else {}))
        profile_arg = str(out_dir / "profile.json")
    if profile_arg is None:
        raise CompareError("--measured needs --profile: the profile to predict with")
    profile = load_profile(profile_arg)
    measured_runs: list[tuple[str, dict | Exception]] = []
    for f in measured_files:
        try:
            measured_runs.append((f, json.loads(Path(f).read_text())))
        except (OSError, json.JSONDecodeError) as e:
            measured_runs.append((f, CompareError(f"cannot read measured JSON {f}: {e}")))
    if not measured_files:
        for i, p in enumerate(points):
            echo(f"[{i + 1}/{len(points)}] bench {p.key} ({len(schedules)} schedules, {repeats} repeats)")
            try:
                measured_runs.append((p.key, measure(p, schedules, out_dir, backend, device, repeats=repeats,
                                                     timeout_s=timeout_s, compile=compile)))
            except Exception as e:          # noqa: BLE001 - a failed point is reported, the grid goes on
                measured_runs.append((p.key, e))
    results, failed, timelines = [], [], {}
    for name, m in measured_runs:
        if isinstance(m, Exception):
            failed.append({"point": name, "error": str(m).splitlines()[0]})
            continue
        try:
            pt = compare_point(m, profile, schedules if not measured_files else None)
            results.append(pt)
            spec = "ladder" if any(s["schedule"] == "ladder" for s in pt["schedules"]) else pt["schedules"][-1]["schedule"]
            timelines[f"{pt['model']}|{pt['tp']}|{pt['batch']}|{spec}"] = _timeline(m, spec, None, profile)
            pt["trace"] = str(write_point_trace(m, profile, out_dir))
        except (CompareError, ValueError, ProfileError) as e:
            failed.append({"point": name, "error": str(e)})
    result = {"profile": profile.name, "profile_path": profile.source_path, "points": results, "failed": failed,
              "summary": summarize(results), "timelines": timelines}
    write_report(result, out_dir)
    return result


class _Fail(click.ClickException):
    exit_code = 2


@click.command("compare")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None, help="Default: cpu for gloo, cuda for nccl.")
@click.option("--nproc", type=int, default=2, show_default=True, help="Ranks to launch (= TP unless --tp).")
@click.option("--quick", is_flag=True, help=f"Small grid ({', '.join(QUICK_MODELS)}; prompt 32, gen 16) "
                                            "and a quick calibration: a few minutes on a 2-core box.")
@click.option("--profile", "profile_arg", default=None,
              help="Profile to predict with (built-in or JSON). Default: calibrate this machine first.")
@click.option("--model", "models", multiple=True, help="Repeatable.")
@click.option("--tp", "tps", type=int, multiple=True, help="Repeatable; default --nproc.")
@click.option("--batch", "batches", type=int, multiple=True, default=(1,), show_default=True)
@click.option("--prompt", "prompt_len", type=int, default=None, help="Default 32 with --quick, else 128.")
@click.option("--gen", "gen_len", type=int, default=None, help="Default 16 with --quick, else 64.")
@click.option("--schedule", "schedules", multiple=True, help=f"Repeatable. Default: {' '.join(DEFAULT_SCHEDULES)}.")
@click.option("--repeats", type=int, default=None,
              help="Measured generations per schedule (default 9: the sign test then gives a 96% interval for the "
                   "median speedup that leaves out both extremes).")
@click.option("--measured", "measured_files", multiple=True, type=click.Path(dir_okay=False),
              help="Compare existing `tpsim bench --json` outputs (e.g. from a GPU cluster) instead of running.")
@click.option("--out-dir", default="compare-out", show_default=True, type=click.Path(file_okay=False),
              help="compare.json, report.md, plots, measured/*.json (reused on rerun), profile.json.")
@click.option("--timeout-s", type=float, default=120.0, show_default=True, help="Per collective / rank timeout.")
@click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
              help="Bench whole compiled passes (`tpsim bench --compile`) and predict the compiled stack.")
def compare_cmd(backend, device, nproc, quick, profile_arg, models, tps, batches, prompt_len, gen_len, schedules,
                repeats, measured_files, out_dir, timeout_s, compile_):
    """Run the harness and the simulator on the same grid and report where the prediction is right."""
    if not measured_files:                  # the harness runs here (and calibration, without --profile)
        from hw.commands import require_torch
        require_torch("compare")
    device = device or ("cpu" if backend == "gloo" else "cuda")
    models = models or (QUICK_MODELS if quick or not measured_files else ())
    prompt_len = prompt_len or (32 if quick else 128)
    gen_len = gen_len or (16 if quick else 64)
    repeats = repeats or 9
    schedules = tuple(dict.fromkeys(("standard",) + (schedules or DEFAULT_SCHEDULES)))
    try:
        for m in models:
            get_model(m)
        if profile_arg:
            load_profile(profile_arg)
        points = [Point(m, tp, b, prompt_len, gen_len) for m in models for tp in (tps or (nproc,)) for b in batches]
        result = run_compare(points, schedules, Path(out_dir), profile_arg, backend, device, nproc, quick, repeats,
                             tuple(measured_files), timeout_s, echo=click.echo, compile=compile_)
    except (ValueError, ProfileError) as e:
        raise _Fail(str(e)) from None
    _print_summary(result, Path(out_dir))
    if not result["points"]:             # every point failed: a report of nothing is not a success
        raise click.ClickException(f"nothing could be compared: all {len(result['failed'])} point(s) failed "
                                   f"(first: {result['failed'][0]['error'] if result['failed'] else 'none given'})")


def _drift_note(result: dict) -> str:
    """The machine's speed during each point's measurement against calibration (hw.probe)."""
    got = [(f"{pt['model']} TP{pt['tp']} b{pt['batch']}", pt["machine_drift"]["ratio"]) for pt in result["points"]
           if pt.get("machine_drift")]
    if not got:
        return ""
    return ("machine speed (a fixed matmul probe, measurement time / calibration time): "
            + ", ".join(f"{k} x{r:.2f}" for k, r in got)
            + ". A prediction is no closer to a measurement than the machine's own drift between the two.")


def _print_summary(result: dict, out_dir: Path) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    t = Table(title=f"simulated vs measured (profile {result['profile']})", title_justify="left")
    for col in ("point", "schedule", "meas tok/s", "pred tok/s", "err", "meas speedup", "pred speedup", "sign"):
        t.add_column(col, justify="left" if col in ("point", "schedule") else "right")
    for pt in result["points"]:
        for s in pt["schedules"]:
            t.add_row(f"{pt['model']} TP{pt['tp']} b{pt['batch']}", s["schedule"],
                      f"{s['measured']['tokens_per_s']:.1f}", f"{s['predicted']['tokens_per_s']:.1f}",
                      f"{s['err']['tokens_per_s']:+.1%}", escape(_measured_speedup(s)),
                      escape(_predicted_speedup(s)), _sign(s))
    c = Console(width=120)
    c.print(t)
    for spec, s in result["summary"].items():
        why = [f"{n} with the measured interval containing 1" for n in [s["sign_mismatches_within_noise"]] if n]
        why += [f"{n} with only the predicted interval containing 1"
                for n in [s.get("sign_mismatches_prediction_uncertain", 0)] if n]
        c.print(f"{spec:12} median |err| tokens/s {s['median_abs_err_tokens_per_s']:.1%}  "
                f"speedup sign {s['sign_matches']}/{s['points']}" + (f" (undetermined: {'; '.join(why)})" if why else ""))
    for note in (_interval_note(result), _drift_note(result)):
        if note:
            c.print(escape(note))
    for pt in result["points"]:
        if pt["missing_schedules"]:
            c.print(f"[yellow]not measured[/yellow] {pt['model']} TP{pt['tp']} b{pt['batch']}: "
                    f"{', '.join(pt['missing_schedules'])}")
    for f in result["failed"]:
        c.print(f"[red]failed[/red] {f['point']}: {f['error']}")
    c.print(f"report: {out_dir / 'report.md'}  data: {out_dir / 'compare.json'}  traces (measured beside "
            f"simulated; ui.perfetto.dev): {out_dir / 'traces'}")
