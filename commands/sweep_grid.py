"""What-if grids from the simulator alone: models x TP x batch x profile x link scaling.

Each grid point runs `predict` for the listed schedules (standard always included) and yields
one row per schedule. Points are independent, so they fan out over processes (`jobs`); finished
points are appended to a checkpoint file as they complete (one JSON line each), so a killed sweep
restarted with the same output continues where it stopped; the final CSV is written atomically.
A checkpointed point is reused only when the digest of its inputs (profile contents, the
simulator source) still matches; `jobs` is capped at the cores. The workers die with
the sweep however it ends (SIGKILL included: fileio.proc_tie), and at once when it fails.

Link scaling answers "what if the interconnect were k times faster/slower": every collective's
time t(bytes) is split into its zero-byte latency t0 and the rest, and becomes
lat_scale * t0 + (t - t0) / bw_scale.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from tpsim.fileio.checkpoint import read_checkpoint
from tpsim.fileio.policy import (MAX_CHECKPOINT_BYTES, open_append, read_input_bytes,
                                 save_figure)
from tpsim.sim.grid import Point
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload, predict
from tpsim.fileio.proc_tie import ParentTie, set_parent_death_signal, tie_pool_worker
from tpsim.fileio.shape import finite
from tpsim.sim.hardware.profile import load_profile, read_raw
from tpsim.sim.schedule.language import model_change
from tpsim.sim import baseline
from tpsim.sim.fp8 import model_given
from tpsim.sim.sensitivity import check as sensitivity
from tpsim.sim.stack.spec import make_stack

# Points of one sweep share a few profiles: parse each once per process (bounded, so memory stays flat).
# Keyed by the profile's input digest too: a profile edited between two sweeps in one process is reread.
@functools.lru_cache(maxsize=64)
def _load_profile(name: str, digest: str = ""):
    return load_profile(name)

COLUMNS = ["model", "tp", "batch", "prompt_len", "gen_len", "profile", "bw_scale", "lat_scale", "schedule",
           "prefill_s", "decode_s", "tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi", "speedup", "speedup_lo",
           "speedup_hi", "interval_dominant", "exposed_comm_s", "model_change", "stack", "error",
           "best_free", "best_free_tokens_per_s", "gain_over_best_free"]


def run_point(point: Point, schedules: tuple[str, ...], given: dict | None = None, digest: str = "",
              preset: dict | None = None) -> list[dict]:
    """Rows for one grid point; a point that cannot run (say TP not dividing the heads) gives
    one row with its error, so the rest of the grid still completes. `given`: the stack flags the
    user set (make_stack's `given`; None = not given), which win even where they equal Stack's
    defaults; `preset`: a --stack preset's values (sim.stack.presets.Preset.values); the point's profile
    stack_defaults fill the rest, as in predict."""
    base = asdict(point)
    try:
        prof = _load_profile(point.profile, digest)
        model = get_model(point.model)
        stack = make_stack(model_given(model, dict(given or {})), prof.stack_defaults, preset=preset)
        w = Workload(model, point.tp, prof, point.batch,
                     point.prompt_len, point.gen_len, stack, comm_bw_scale=point.bw_scale,
                     comm_lat_scale=point.lat_scale)
        preds = predict(w, list(schedules), record=False)
        # both ends of the interval the profile's and the stack's ranges give (sim/sensitivity.py, as predict)
        sens = sensitivity(w, list(schedules), preds)
        # what a user weighs against retraining: the best way to run the model unchanged (sim/baseline.py),
        # where a schedule that changes it was swept
        best = (baseline.best_free(Simulator(w, record=False), {p.schedule: p for p in preds})
                if any(p.model_change in ("retrain", "drops syncs") for p in preds) else None)
    except ValueError as e:
        # one line per row: a multi-line message (the memory gate's table) keeps its headline
        return [base | {"schedule": "", "error": str(e).splitlines()[0].rstrip(":")}]
    # each row says what it priced: the stack (predict's `stack:` line, which names a --stack preset)
    # beside what the schedule asks of the model (model_change)
    free = {} if best is None else {"best_free": best.name, "best_free_tokens_per_s": best.tokens_per_s}
    return [base | p.to_dict() | {"stack": stack.describe(), "error": ""} | _ends(p, sens) | free
            | ({"gain_over_best_free": g} if best is not None and (g := baseline.gain(p, best)) is not None else {})
            for p in preds]


def _ends(p, sens) -> dict:
    """A row's interval: tokens/s and speedup at the ranges' ends (its own values where nothing is ranged)."""
    iv = sens.intervals.get(p.schedule)
    (tlo, thi), (slo, shi) = (iv["tokens_per_s"], iv["speedup"]) if iv else ((p.tokens_per_s,) * 2, (p.speedup,) * 2)
    return {"tokens_per_s_lo": tlo, "tokens_per_s_hi": thi, "speedup_lo": slo, "speedup_hi": shi,
            "interval_dominant": sens.dominant() or ""}


# a row's fields that hold seconds, rates and ratios: finite and >= 0 in every row the simulator writes
NUMBERS = ("prefill_s", "decode_s", "tokens_per_s", "speedup", "exposed_comm_s")
TEXTS = ("model_change", "stack", "error")


def resumable(rows, point: Point, schedules: tuple[str, ...]) -> bool:
    """Whether a checkpoint's rows are what run_point gives for `point`: every row holds the point's
    own fields, and they are either one error row or one row per schedule, in order, whose numbers
    are finite and >= 0. A hand-edited or foreign line (rows of another point or model, NaN or
    negative times, `[]`, `[{"foo": 1}]`) is computed again instead of copied into the result."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return False
    own = asdict(point)
    if any(r.get(k) != v or type(r.get(k)) is not type(v) for r in rows for k, v in own.items()):
        return False
    if len(rows) == 1 and rows[0].get("schedule") == "" and isinstance(rows[0].get("error"), str) \
            and rows[0]["error"]:
        return True                               # the point could not run: its one error row
    return [r.get("schedule") for r in rows] == list(schedules) and all(
        r.get("error") == "" and all(isinstance(r.get(k), str) for k in TEXTS)
        and all(finite(r.get(k)) and r[k] >= 0 for k in NUMBERS) for r in rows)


def point_key(point: Point, schedules: tuple[str, ...], given: dict | None = None, inputs: str = "",
              preset: dict | None = None) -> str:
    """What a finished point in a checkpoint stands for: the point, the schedules, the stack flags
    given, the --stack preset's values and `inputs`, the digest of everything else its rows depend
    on (`input_digest`)."""
    flags = {k: v for k, v in (given or {}).items() if v is not None}
    return json.dumps({**asdict(point), "schedules": list(schedules), "stack": flags, "preset": preset or {},
                       "inputs": inputs}, sort_keys=True, default=str)


def input_digest(profile: str) -> str:
    """sha256 over the profile's contents (its `extends` chain merged in, so an edited base counts
    too) and the simulator's own source. A resumed sweep recomputes every
    checkpointed point whose digest differs: rows from an edited profile or another simulator
    are never mixed into the result. A profile that cannot be read digests to its error (the point
    reruns and reports it)."""
    h = hashlib.sha256()
    try:
        data, _ = read_raw(profile)
        h.update(json.dumps(data, sort_keys=True, allow_nan=True).encode())
    except ValueError as e:
        h.update(f"error: {e}".encode())
    h.update(_code_digest().encode())
    return h.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """The simulator's source, digested (not tpsim's installed version: whether its metadata is
    visible depends on the working directory, calib.plan.code_version says why)."""
    h = hashlib.sha256()
    sim = Path(__file__).resolve().parent.parent / "sim"
    for f in sorted(sim.rglob("*.py")):
        h.update(f.relative_to(sim).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def max_jobs() -> int:
    """Worker processes a sweep may start: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _pool(jobs: int) -> tuple[ProcessPoolExecutor, ParentTie | None]:
    """A pool whose workers die with this process, however it dies (fileio.proc_tie): forked
    workers (Linux's default) get the parent-death signal and a watchdog on the returned tie's
    pipe; closing the tie (`cut`) ends them at once. Under spawn/forkserver (no inherited pipe)
    they get the parent-death signal only (a forkserver exits with its parent, and its children
    then get theirs)."""
    ctx = multiprocessing.get_context()
    if ctx.get_start_method() == "fork":
        tie = ParentTie()
        return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=tie_pool_worker,
                                   initargs=tie.pool_initargs()), tie
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=set_parent_death_signal), None


def _run_chunk(points: list[Point], schedules: tuple[str, ...], given: dict | None,
               keys: list[str], preset: dict | None = None) -> list[tuple[str, list[dict]]]:
    return [(k, run_point(p, schedules, given, json.loads(k)["inputs"], preset)) for p, k in zip(points, keys)]


def sweep(points: list[Point], schedules: tuple[str, ...], given: dict | None = None, jobs: int = 1,
          checkpoint: str | os.PathLike | None = None,
          progress: Callable[[int, int], None] | None = None, preset: dict | None = None,
          discarded: list | None = None) -> list[dict]:
    """All rows of the grid, in grid order. With `checkpoint`, finished points are read back
    from it and skipped (each checked by `resumable`: the key of each one that fails is appended to
    `discarded`, and it is computed again), and every newly finished point is appended to it at once. `given` (the
    stack flags the user set) and `preset` (the --stack preset's values) go to run_point and into
    each point's key."""
    done: dict[str, list[dict]] = read_checkpoint(checkpoint) if checkpoint else {}
    digests = {prof: input_digest(prof) for prof in dict.fromkeys(p.profile for p in points)}
    keys = {p: point_key(p, schedules, given, digests[p.profile], preset) for p in points}
    for p in points:                  # a line under a point's key must hold that point's rows (resumable)
        if keys[p] in done and not resumable(done[keys[p]], p, schedules):
            del done[keys[p]]
            if discarded is not None:
                discarded.append(keys[p])
    todo = [p for p in points if keys[p] not in done]
    total, finished = len(points), len(points) - len(todo)
    if progress:
        progress(finished, total)
    if checkpoint:
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
    sink = open_append(checkpoint) if checkpoint else None    # O_NOFOLLOW: a planted link is refused
    if sink and sink.tell() and not read_input_bytes(checkpoint, "checkpoint", MAX_CHECKPOINT_BYTES).endswith(b"\n"):
        sink.write("\n")                     # seal a torn last line before appending
    try:
        def record(key: str, rows: list[dict]) -> None:
            nonlocal finished
            done[key] = rows
            finished += 1
            if sink:
                sink.write(json.dumps({"key": key, "rows": rows}) + "\n")
                sink.flush()
            if progress:
                progress(finished, total)

        if jobs <= 1 or len(todo) < 2:
            for p in todo:
                record(keys[p], run_point(p, schedules, given, digests[p.profile], preset))
        else:
            # chunks amortize process start-up; several per worker keep the progress bar moving
            jobs = min(jobs, max_jobs(), len(todo))        # never more processes than cores or points
            size = max(1, min(64, len(todo) // (jobs * 4)))
            chunks = [todo[i:i + size] for i in range(0, len(todo), size)]
            ex, tie = _pool(jobs)
            try:
                with ex:
                    try:
                        futs = [ex.submit(_run_chunk, c, schedules, given, [keys[p] for p in c], preset) for c in chunks]
                        for f in as_completed(futs):
                            for key, rows in f.result():
                                record(key, rows)
                    except BaseException:
                        # Ctrl-C, a failed chunk: end the workers now (mid-chunk) rather than let the
                        # pool's exit wait for every queued chunk; finished points are checkpointed
                        if tie:
                            tie.cut()
                        ex.shutdown(wait=False, cancel_futures=True)
                        raise
            finally:
                if tie:
                    tie.cut()
    finally:
        if sink:
            sink.close()
    return [row for p in points for row in done[keys[p]]]


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in COLUMNS})
    return buf.getvalue()


def iter_rows(rows: list[dict], **match) -> Iterator[dict]:
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            yield r


PLOT_VIEWS = ("speedup", "no-retraining")


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib                    # lazy: matplotlib (the [plot] extra) takes ~0.5 s to import; only --plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt      # lazy: (matplotlib, as above)
    return plt


def plot(rows: list[dict], path: str | os.PathLike, view: str = "speedup") -> None:
    """Speedup over standard: heatmaps (model x TP) per schedule and profile, one batch per
    figure row when batches vary; line plots over the link scale when one was swept (bandwidth,
    else latency; with both swept, a line per latency scale).
    view "no-retraining": per batch size, the best schedule that keeps the model against the
    ones that change it (plot_no_retraining)."""
    if view not in PLOT_VIEWS:
        raise ValueError(f"unknown plot view {view!r}; choose from {', '.join(PLOT_VIEWS)}")
    if view == "no-retraining":
        return plot_no_retraining(rows, path)
    plt = _pyplot()

    ok = [r for r in rows if not r.get("error") and r["schedule"] != "standard"]
    if not ok:
        raise ValueError("nothing to plot: every grid point failed or only standard was swept")
    scheds = list(dict.fromkeys(r["schedule"] for r in ok))
    profiles = list(dict.fromkeys(r["profile"] for r in ok))
    bws = sorted({r["bw_scale"] for r in ok})
    lats = sorted({r["lat_scale"] for r in ok})
    if len(bws) > 1 or len(lats) > 1:
        # lines over the swept link scale (bandwidth when swept, else latency), one per schedule,
        # model, TP, batch and value of the other scale
        x, other = ("bw_scale", "lat_scale") if len(bws) > 1 else ("lat_scale", "bw_scale")
        xlabel = {"bw_scale": "interconnect bandwidth scale", "lat_scale": "collective latency scale"}[x]
        keys = list(dict.fromkeys((r["model"], r["tp"], r["batch"], r[other]) for r in ok))
        scales = bws if x == "bw_scale" else lats
        fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 4.2), squeeze=False, sharey=True)
        labels: dict[str, object] = {}
        for ax, prof in zip(axes[0], profiles):
            for n, s in enumerate(scheds):
                for k, (m, tp, b, o) in enumerate(keys):
                    pts = sorted((r[x], r["speedup"]) for r in iter_rows(ok, schedule=s, profile=prof, model=m,
                                                                         tp=tp, batch=b, **{other: o}))
                    if pts:
                        tag = f" {'bw' if other == 'bw_scale' else 'lat'}x{o:g}" if len(bws) > 1 and len(lats) > 1 else ""
                        # a colour per model/TP/batch, a line style per schedule: the same in every panel
                        line, = ax.plot(*zip(*pts), marker="o", color=f"C{k % 10}", ls=("-", "--", ":", "-.")[n % 4],
                                        label=f"{s} {m} TP{tp} b{b}{tag}")
                        labels.setdefault(line.get_label(), line)
            ax.set_xscale("log")
            # a tick at each requested scale, labelled as given (the log axis labelled only 10^k), slanted when
            # many would touch; no minor ticks between them
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xticks(scales, [f"{v:g}" for v in scales], rotation=45 if len(scales) > 5 else 0, fontsize=8)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(title=prof, xlabel=xlabel, ylabel="speedup over standard")
        # one legend for every panel, under them: inside an axes it covered lines
        fig.legend(list(labels.values()), list(labels), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
                   fontsize=7, frameon=False)
    else:
        models = list(dict.fromkeys(r["model"] for r in ok))
        tps = sorted({r["tp"] for r in ok})
        batches = sorted({r["batch"] for r in ok})
        panels = [(s, p, b) for b in batches for s in scheds for p in profiles]
        ncol = len(scheds) * len(profiles)
        fig, axes = plt.subplots(len(batches), ncol, figsize=(2.6 * ncol + 2.5, (0.4 * len(models) + 1.2) * len(batches)),
                                 squeeze=False, gridspec_kw={"hspace": 0.5, "wspace": 0.08})
        vmax = max(r["speedup"] for r in ok)
        for n, (ax, (s, p, b)) in enumerate(zip(axes.flat, panels)):
            z = np.full((len(models), len(tps)), np.nan)
            for r in iter_rows(ok, schedule=s, profile=p, batch=b):
                z[models.index(r["model"]), tps.index(r["tp"])] = r["speedup"]
            im = ax.imshow(z, cmap="viridis", vmin=1.0, vmax=vmax, aspect="auto")
            for (i, j), v in np.ndenumerate(z):
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if v < (1 + vmax) / 2 else "black")
            ax.set_xticks(range(len(tps)), [f"TP{t}" for t in tps], fontsize=7)
            ax.set_yticks(range(len(models)), models if n % ncol == 0 else [], fontsize=7)
            ax.set_title(f"{s} | {p} | batch {b}", fontsize=8)
        fig.colorbar(im, ax=axes, shrink=0.8, label="speedup over standard")
    fig.suptitle("tpsim sweep: predicted speedup over standard TP", fontsize=10, y=1.02)   # above the panel titles
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def best_no_retraining(rows: list[dict]) -> dict[tuple, dict]:
    """(model, tp, profile, bw_scale, lat_scale, batch) -> the fastest way to run the point without
    changing the model. Where the rows carry run_point's best_free columns (sim/baseline.py: every
    schedule that keeps the model, per phase, simulated whether swept or not), that; else, from the
    rows themselves, the prefill and the decode steps each with the fastest swept schedule whose
    model_change is none -- a serving stack may pick the schedule per phase, as they keep the same
    model and outputs. The result is a row with schedule "P" when one schedule wins both phases,
    else "P / D" (prefill / decode), its tokens_per_s and speedup over standard (which must be among
    the rows)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("error") or model_change(r["schedule"]) != "none":
            continue
        k = (r["model"], r["tp"], r["profile"], r["bw_scale"], r["lat_scale"], r["batch"])
        groups.setdefault(k, []).append(r)
    best: dict[tuple, dict] = {}
    for k, rs in groups.items():
        std = next((r for r in rs if r["schedule"] == "standard"), None)
        if std is None:
            continue
        if std.get("best_free"):
            name = std["best_free"]
            pre_s, _, dec_s = name.partition(" / ")
            best[k] = {"schedule": name, "prefill_schedule": pre_s, "decode_schedule": dec_s or pre_s,
                       "tokens_per_s": std["best_free_tokens_per_s"],
                       "speedup": std["best_free_tokens_per_s"] / std["tokens_per_s"]}
            continue
        pre = min(rs, key=lambda r: r["prefill_s"])
        dec = min(rs, key=lambda r: r["decode_s"])
        tps = std["batch"] * std["gen_len"] / (pre["prefill_s"] + dec["decode_s"])
        name = pre["schedule"] if pre is dec or pre["schedule"] == dec["schedule"] else \
            f"{pre['schedule']} / {dec['schedule']}"
        best[k] = {"schedule": name, "prefill_schedule": pre["schedule"], "decode_schedule": dec["schedule"],
                   "prefill_s": pre["prefill_s"], "decode_s": dec["decode_s"], "tokens_per_s": tps,
                   "speedup": tps / std["tokens_per_s"]}
    return best


def plot_no_retraining(rows: list[dict], path: str | os.PathLike) -> None:
    """Panels across TP (columns) and (model, profile, link scaling) (rows): speedup over standard against
    batch size, for the best schedule that keeps the model (each point labelled with the one that wins,
    prefill / decode) and for every schedule that changes it (ladder, parallel, spd), whose legend gives
    its gain over that best at the largest batch."""
    plt = _pyplot()

    best = best_no_retraining(rows)
    if not best:
        raise ValueError("nothing to plot: no grid point ran a schedule that keeps the model")
    lines = list(dict.fromkeys((k[0], k[2], k[3], k[4]) for k in best))
    tps = sorted({k[1] for k in best})
    changing = list(dict.fromkeys(r["schedule"] for r in rows if not r.get("error")
                                  and model_change(r["schedule"]) in ("retrain", "drops syncs")))
    fig, axes = plt.subplots(len(lines), len(tps), figsize=(5.2 * len(tps), 4.0 * len(lines)), squeeze=False,
                             sharey=True)
    for (li, (m, prof, bw, lat)), (ti, tp) in ((a, b) for a in enumerate(lines) for b in enumerate(tps)):
        ax, key = axes[li][ti], (m, tp, prof, bw, lat)
        pts = sorted((k[5], r) for k, r in best.items() if k[:5] == key)
        if not pts:
            ax.set_visible(False)
            continue
        xs = [b for b, _ in pts]
        ax.plot(xs, [r["speedup"] for _, r in pts], marker="o", lw=2, color="black",
                label="best keeping the model (prefill / decode schedule)")
        for b, r in pts:
            ax.annotate(r["schedule"].replace(" / ", "/\n"), (b, r["speedup"]), textcoords="offset points",
                        xytext=(0, -18), ha="center", fontsize=6)
        for s in changing:
            got = sorted((r["batch"], r) for r in iter_rows(rows, schedule=s, model=m, tp=tp, profile=prof,
                                                            bw_scale=bw, lat_scale=lat) if not r.get("error"))
            if got:
                g = got[-1][1].get("gain_over_best_free")
                tag = f", {g - 1:+.0%} over the best free at b{got[-1][0]}" if isinstance(g, float) else ""
                ax.plot([b for b, _ in got], [r["speedup"] for _, r in got], marker="s", ls="--",
                        label=f"{s} ({model_change(s)}{tag})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(b) for b in xs])
        ax.axhline(1.0, color="grey", lw=0.8)
        scale = "" if (bw, lat) == (1.0, 1.0) else f" bw x{bw} lat x{lat}"
        ax.set(title=f"{m} TP{tp} | {prof}{scale}", xlabel="batch size", ylabel="speedup over standard TP")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, frameon=False)
    fig.suptitle("tpsim sweep: the best schedule that keeps the model vs. those that change it", fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)
