"""Compare, step 3: the report of a comparison (compare.md, plots) and the side-by-side
measured vs simulated Chrome trace of each point."""
from __future__ import annotations

from pathlib import Path

from tpsim.calib.measured_trace import side_by_side_trace
from tpsim.sim.predict import Simulator
from tpsim.fileio.policy import save_figure, write_json_atomic, write_text_atomic

from tpsim.calib.compare_intervals import interval_note
from tpsim.calib.compare_join import measured_speedup_text, predicted_speedup_text
from tpsim.calib.compare_measure import workload_of
from tpsim.calib.compare_result import comparison_to_dict

def write_report(result: dict, out_dir: Path) -> list[Path]:
    """compare.json, report.md and its PNG plots under out_dir, from run_compare's result (its
    points typed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compare.json", comparison_to_dict(result))
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
    for note in (interval_note(result), drift_note(result)):
        if note:
            md += ["", note]
    for png in pngs:
        md += ["", f"![{png.stem}]({png.name})"]
    for pt in result["points"]:
        md += ["", f"## {pt.model} TP{pt.tp} batch {pt.batch} prompt {pt.prompt_len} gen {pt.gen_len}",
               "", "| schedule | measured tok/s | predicted tok/s | err | measured speedup | predicted speedup | sign |",
               "|---|---|---|---|---|---|---|"]
        for s in pt.schedules:
            md.append(f"| {s.schedule} | {s.measured.tokens_per_s:.1f} | {s.predicted.tokens_per_s:.1f} | "
                      f"{s.err.tokens_per_s:+.1%} | {measured_speedup_text(s)} | "
                      f"{predicted_speedup_text(s)} | {s.sign} |")
        std = pt.schedules[0]
        md += ["", "Largest per-op contributors to the standard schedule's error (predicted - measured, "
               "x1 prefill, x(gen-1) decode). Streams: compute = the op's kernel; comm = measured from "
               "issue to completion (waiting for peers included), simulated from the last rank's arrival "
               "to the end; wait = time the compute stream was blocked on that collective. Measured "
               "records come from one recorded prefill and a few decode steps per rank (median over ranks and steps):", "", "| phase | op | stream | measured ms | predicted ms | contribution ms |",
               "|---|---|---|---|---|---|"]
        for o in std.ops[:8]:
            md.append(f"| {o.phase} | {o.op} | {o.stream} | {o.measured_s * 1e3:.3f} | "
                      f"{o.predicted_s * 1e3:.3f} | {o.contribution_s * 1e3:+.2f} |")
    for pt in result["points"]:
        if pt.missing_schedules:
            md += ["", f"**Not measured** for {pt.model} TP{pt.tp} batch {pt.batch}: "
                   f"{', '.join(pt.missing_schedules)}"]
        for n in pt.notes:
            md += ["", f"**Not priced as run** for {pt.model} TP{pt.tp} batch {pt.batch}: {n}"]
    for f in result["failed"]:
        md += ["", f"**Failed point** {f['point']}: {f['error']}"]
    path = out_dir / "report.md"
    write_text_atomic(path, "\n".join(md) + "\n")
    return [out_dir / "compare.json", path, *pngs]


def _plots(result: dict, out_dir: Path) -> list[Path]:
    try:
        import matplotlib                # lazy: optional (the [plot] extra; no plots without it), ~0.5 s to import
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: (matplotlib, as above)
    except ImportError:
        return []
    pts = result["points"]
    if not pts:
        return []
    out = []
    # predicted vs measured tokens/s
    fig, ax = plt.subplots(figsize=(5, 4.5))
    specs = list(dict.fromkeys(s.schedule for p in pts for s in p.schedules))
    allv = []
    for spec in specs:
        xs = [s.measured.tokens_per_s for p in pts for s in p.schedules if s.schedule == spec]
        ys = [s.predicted.tokens_per_s for p in pts for s in p.schedules if s.schedule == spec]
        ax.scatter(xs, ys, label=spec)
        allv += xs + ys
    lo, hi = min(allv) * 0.8, max(allv) * 1.2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="grey", alpha=0.15, label="±15%")
    ax.set(xscale="log", yscale="log", xlabel="measured tokens/s", ylabel="predicted tokens/s",
           title="tokens/s: predicted vs measured")
    ax.legend(fontsize=7)
    out.append(out_dir / "scatter.png")
    save_figure(fig, out[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    # speedup bars per point and schedule
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(pts) * (len(specs) - 1)), 3.8))
    labels, meas, pred = [], [], []
    for p in pts:
        for s in p.schedules[1:]:
            labels.append(f"{p.model}\nTP{p.tp} b{p.batch}\n{s.schedule}")
            meas.append(s.measured.speedup)
            pred.append(s.predicted.speedup)
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], meas, 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], pred, 0.4, label="predicted")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(x), labels, fontsize=6)
    ax.set(ylabel="speedup over standard", title="speedup over standard: measured vs predicted")
    ax.legend(fontsize=7)
    out.append(out_dir / "speedup.png")
    save_figure(fig, out[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    # one decode step, side by side: measured (rank 0) and simulated, for the first non-standard schedule
    p = pts[0]
    s = next((s for s in p.schedules if s.schedule == "ladder"), p.schedules[-1])
    timeline = result.get("timelines", {}).get(f"{p.model}|{p.tp}|{p.batch}|{s.schedule}")
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
        ax.set(xlabel="ms", title=f"one decode step, rank 0: {p.model} TP{p.tp} {s.schedule}")
        out.append(out_dir / "timeline.png")
        save_figure(fig, out[-1], dpi=110, bbox_inches="tight")
        plt.close(fig)
    return out


def point_timeline(measured: dict, spec: str, pred: dict | None, profile) -> dict:
    """Rank-0 records of one decode step, measured and simulated."""
    rec = next((r.get("records", []) for r in measured["schedules"] if r["schedule"] == spec), [])
    meas = [r for r in rec if r["rank"] == 0 and r["phase"] == "decode" and r.get("pass", 0) == 0]
    sim = Simulator(workload_of(measured, profile), record=True)
    res = sim.step(spec, sim.w.decode_step(1)) if sim.w.gen_len > 1 else None
    return {"measured": meas, "simulated": [r.to_dict() for r in (res.records if res else []) if r.rank == 0]}


def write_point_trace(measured: dict, profile, out_dir: Path) -> Path:
    """traces/MODEL-tpN-bB-pP-gG.json: measured and simulated tracks side by side per rank and schedule."""
    w = workload_of(measured, profile)
    name = f"{w.model.name}-tp{w.tp}-b{w.batch}-p{w.prompt_len}-g{w.gen_len}".replace("/", "_").replace("[:", "-L")
    path = out_dir / "traces" / f"{name.rstrip(']')}.json"
    write_json_atomic(path, side_by_side_trace(measured, w))
    return path


def drift_note(result: dict) -> str:
    """The machine's speed during each point's measurement against calibration (hw.probe)."""
    got = [(pt.label, pt.machine_drift["ratio"]) for pt in result["points"] if pt.machine_drift]
    if not got:
        return ""
    return ("machine speed (a fixed matmul probe, measurement time / calibration time): "
            + ", ".join(f"{k} x{r:.2f}" for k, r in got)
            + ". A prediction is no closer to a measurement than the machine's own drift between the two.")
