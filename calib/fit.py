"""Raw calibration points -> profile pieces (format "tpsim-profile", version 1).

Fits happen here, once, when a calibration finishes; the simulator only reads the results.
  * collective tables: median time per (collective, group, mode, impl, bytes), kept as measured
    points (cost.py interpolates them log-log);
  * the NCCL-style model per size regime (docs/sources.md §4): t = base + steps(n) * hop + bytes / algbw(n),
    two regimes (small: latency-bound, large: bandwidth-bound) fitted by scipy least squares on
    log residuals to the per-group medians; the simulator takes the faster regime, as NCCL takes
    its fastest protocol, so the fitted model is min(small, large) and is refined as such;
  * efficiency curves: achieved / peak FLOP/s of gemm points vs flops, achieved / peak bandwidth
    of memory-bound points vs bytes, medians per half-decade.
Every fit carries its residuals. Pure numpy/scipy (no torch).
"""
from __future__ import annotations

import math
import os
import socket
import statistics
from dataclasses import dataclass
from pathlib import Path

from tpsim.sim.price.work import op_work
from tpsim.sim.hardware.profile import new_profile, read_raw, sourced
from tpsim.sim.schedule.language import Op

from tpsim.calib.fit_collectives import model_section, tables
from tpsim.calib.nccl_import import default_base
from tpsim.calib.overlap_fit import fit_profile_overlap
from tpsim.calib.overlap_summary import FACTOR_CAP, noise_note, profile_factors


# ------------------------------------------------------------------ compute efficiency

def efficiency_curve(xs: list[float], effs: list[float], per_decade: int = 2) -> tuple[list[float], list[float]]:
    """Median efficiency per 1/per_decade decade of x; x at the bin's geometric centre; in (0, 1]."""
    bins: dict[int, list[tuple[float, float]]] = {}
    for x, e in zip(xs, effs):
        if x > 0 and e > 0 and math.isfinite(e):
            bins.setdefault(math.floor(math.log10(x) * per_decade), []).append((x, e))
    cx, cy = [], []
    for b in sorted(bins):
        vals = bins[b]
        cx.append(float(f"{math.exp(statistics.mean(math.log(x) for x, _ in vals)):.4g}"))
        cy.append(round(min(1.0, max(1e-6, statistics.median(e for _, e in vals))), 6))
    return cx, cy


def point_op(p: dict) -> Op:
    """The op a measured compute point (calib.compute.points) timed."""
    return Op("p", p["kind"], (), ("o",), tuple(sorted(p["attrs"].items())), p["dtype"])


def compute_efficiencies(points: list[dict], peak_flops: float, mem_bytes_per_s: float,
                         launch_s: float) -> tuple[tuple[list, list], tuple[list, list]]:
    """(flops, gemm efficiency), (bytes, memory efficiency) from compute points. Each point's time
    minus the per-op call overhead is its device time (the overhead is priced separately)."""
    gx, gy, mx, my = [], [], [], []
    for p in points:
        works = op_work(point_op(p), fused=False)
        dev_s = max(p["time_s"] - launch_s * sum(w.kernels for w in works), 0.1 * p["time_s"])
        flops, nbytes = sum(w.flops for w in works), sum(w.bytes for w in works)
        if p["kind"] == "gemm" and flops / peak_flops >= nbytes / mem_bytes_per_s:
            gx.append(flops)
            gy.append(flops / dev_s / peak_flops)
        elif p["kind"] in ("gemm", "rmsnorm", "add", "swiglu", "embed"):
            mx.append(nbytes)
            my.append(nbytes / dev_s / mem_bytes_per_s)
    return efficiency_curve(gx, gy), efficiency_curve(mx, my)


# ------------------------------------------------------------------ the profile

@dataclass(frozen=True)
class Provenance:
    """Where every measured value of one calibration came from: the host, the day, the backend."""

    host: str
    date: str
    backend: str             # "gloo, 2 ranks pinned to cores 0/1"

    def src(self, what: str, n: int | None = None) -> str:
        med = f", median of {n}" if n else ""
        return f"measured by tpsim calibrate on {self.host} {self.date} ({self.backend}{med}): {what}"


def build_profile(cfg, groups: dict, world: int) -> dict:
    """Finished measurement groups (run.py's state) -> a profile dict, raw points kept in 'raw'.

    Without cfg.extends the profile is complete; with it, only what was measured is written and
    'extends' names the base (collectives.model.node then replaces the base's node protocols).
    One builder per section below, each reading the groups it summarizes."""
    dev = next((g for g in groups.values() if g["kind"] == "device"), None)
    backend = f"{cfg.backend}, {world} ranks"
    cores = (dev or {}).get("rank_cores") or []
    if cores and all(cores):
        backend += " pinned to cores " + "/".join(",".join(map(str, c)) for c in cores)
    pv = Provenance(dev["host"] if dev else _hostname(),
                    min((g["finished_at"] for g in groups.values()), default="")[:10], backend)
    label = dev["device_name"] if dev else "this machine"
    prof = new_profile(cfg.name or Path(cfg.out).stem,
                       f"{label}, {world} ranks over {cfg.backend}, {cfg.dtype}; measured by tpsim calibrate "
                       f"({'quick' if cfg.quick else 'full'}) on {pv.host} {pv.date}", extends=cfg.extends)
    if not cfg.extends:
        prof.update(_machine_section(cfg, dev, world, label, pv))
    compute = _compute_section(cfg, dev, groups, pv)
    l2 = _builtin_l2(cfg, dev)
    if l2:
        compute["l2"] = l2
    if compute:
        prof["compute"] = compute
    coll, fit = _collectives_section(cfg, groups, pv)
    if coll:
        prof["collectives"] = coll
    overlap = _overlap_section(cfg, groups, pv)
    if overlap:
        prof["overlap"] = overlap
    # what the measured points assume, for a CLI that defaults its stack from the profile
    prof["stack_defaults"] = {"dtype": cfg.dtype, "collective": cfg.impl_of(0),
                              **({"decode_graphs": False, "prefill_graphs": False, "compile_prefill": False,
                                   "compile_decode": False} if cfg.device == "cpu" else {})}
    jitter = _jitter_section(cfg, groups, pv)
    if jitter:
        prof["jitter"] = jitter
    prof["raw"] = {"groups": {k: {"source": pv.src(f"raw measurement group {k}"), **v} for k, v in sorted(groups.items())},
                   "config": cfg.fingerprint()}
    if coll and fit is not None:
        prof["raw"]["collective_fit"] = _fit_residuals(fit, coll["tables"], cfg.impl_of(0), pv)
    return prof


def _machine_section(cfg, dev: dict | None, world: int, label: str, pv: Provenance) -> dict:
    """device, gpus_per_node, memory_gib and (on a GPU) compute_capability of a complete (not extending)
    profile."""
    out = {"device": cfg.device,
           "gpus_per_node": sourced(world, pv.src(f"world size of the calibration ({world} ranks on one node)"))}
    if cfg.device == "cuda" and dev and dev.get("compute_capability"):
        out["compute_capability"] = sourced(dev["compute_capability"],
                                            pv.src(f"torch.cuda.get_device_properties major.minor of {label}"))
    if cfg.device == "cuda" and dev and dev.get("device_mem_bytes"):
        gib = dev["device_mem_bytes"] / 2 ** 30
        out["memory_gib"] = sourced(round(gib, 2), pv.src(f"torch.cuda total_memory of {label}"))
    else:
        ram = (dev or {}).get("host_ram_bytes") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        out["memory_gib"] = sourced(round(ram / 2 ** 30 / world, 2),
                                    pv.src(f"host RAM {ram / 2 ** 30:.1f} GiB shared by {world} ranks"))
    return out


def _compute_section(cfg, dev: dict | None, groups: dict, pv: Provenance) -> dict:
    """compute: peaks, launch overheads and efficiency curves from the device group; the measured
    op tables from the compute groups."""
    src = pv.src
    compute: dict = {}
    cpoints = _dedupe([p for g in groups.values() if g["kind"] == "compute" for p in g["points"]])
    if dev:
        peak = max(dev["matmul_flops"].values())
        bw = max(dev["copy_bytes_per_s"].values())
        launch = dev["launch_s"]
        sizes = ", ".join(f"{n}^3" for n in dev["matmul_flops"])
        compute["matmul_tflops"] = {cfg.dtype: sourced(round(peak / 1e12, 6),
                                                       src(f"best {cfg.dtype} torch.matmul FLOP/s over square sizes "
                                                           f"{sizes}, every rank at once, median over ranks"))}
        compute["memory_gbps"] = sourced(round(bw / 1e9, 3),
                                         src("best copy bandwidth (read + write bytes) over "
                                             f"{len(dev['copy_bytes_per_s'])} sizes, every rank at once"))
        graph_s = dev.get("graph_launch_s")
        compute["launch_us"] = {
            "eager": sourced(round(launch * 1e6, 4),
                             src("per-op overhead of the harness call path: hw.kernels KERNELS['add'] on "
                                 "1-element tensors, back to back (Python + dispatch + a trivial kernel); "
                                 "measured compute points already include it")),
            "graph": (sourced(round(graph_s * 1e6, 4), src("CUDA graph of 200 tiny kernels replayed, per kernel"))
                      if graph_s is not None else
                      sourced(round(launch * 1e6, 4),
                              src("no CUDA graphs on a CPU device: the eager per-op overhead")))}
        # efficiency curves: the device sweeps themselves plus every measured compute point
        gx = [2.0 * int(n) ** 3 for n in dev["matmul_flops"]]
        gy = [f / peak for f in dev["matmul_flops"].values()]
        mx = [2.0 * int(b) for b in dev["copy_bytes_per_s"]]
        my = [v / bw for v in dev["copy_bytes_per_s"].values()]
        (cgx, cgy), (cmx, cmy) = compute_efficiencies(cpoints, peak, bw, launch) if cpoints else (([], []), ([], []))
        gcx, gcy = efficiency_curve(gx + cgx, gy + cgy)
        mcx, mcy = efficiency_curve(mx + cmx, my + cmy)
        compute["gemm_efficiency"] = {"flops": gcx, "efficiency": gcy,
                                      "source": src(f"achieved / peak FLOP/s of the peak sweep and of {len(cgx)} "
                                                    "compute-bound measured gemms (time minus per-op overhead), "
                                                    "median per half-decade of flops")}
        compute["memory_efficiency"] = {"bytes": mcx, "efficiency": mcy,
                                        "source": src(f"achieved / peak bytes/s of the copy sweep and of {len(cmx)} "
                                                      "memory-bound measured ops (bytes as sim.price.work.op_work counts "
                                                      "them, time minus per-op overhead), median per half-decade")}
    if cpoints:
        cases = ", ".join(sorted({g_name.split('/', 1)[1] for g_name, g in groups.items() if g['kind'] == 'compute'}))
        compute["tables"] = [{"source": src(f"each op timed with hw.kernels KERNELS on its real input tensors "
                                            f"(cases {cases}; on CPU inside the cases' passes); the slowest "
                                            f"rank's median, since a TP pass moves at its pace; CPU times include "
                                            f"the per-op call overhead", cfg.trials["compute"]),
                              "points": [{k: p[k] for k in ("kind", "attrs", "dtype", "time_s", "mode") if k in p}
                                         for p in cpoints]}]
    return compute


def _builtin_l2(cfg, dev: dict | None) -> dict | None:
    """compute.l2 (L2 rate and sweep curve, sim/price/l2_traffic.py) of the built-in profile of the GPU
    measured (calib.nccl_import.default_base on its device name, e.g. "NVIDIA H100 80GB HBM3" ->
    h100-sxm), every source saying so: tpsim calibrate does not measure L2. None on a CPU, with
    `extends` (the base's section is inherited), or for a GPU whose built-in has none (or no built-in)."""
    if cfg.device != "cuda" or cfg.extends or not (dev or {}).get("device_name"):
        return None
    try:
        base = default_base([dev["device_name"]])
    except ValueError:
        return None
    l2 = read_raw(base)[0].get("compute", {}).get("l2")
    why = (f"taken from built-in {base} for device name {dev['device_name']!r} (tpsim calibrate does not "
           f"measure L2): ")

    def resourced(v):
        if isinstance(v, dict):
            return {k: why + x if k == "source" else resourced(x) for k, x in v.items()}
        return v
    return resourced(l2) if l2 else None


def _collectives_section(cfg, groups: dict, pv: Provenance):
    """(collectives section, the node model's fit) from the collectives groups; ({}, None) without."""
    coll_groups = [g for g in groups.values() if g["kind"] == "collectives"]
    if not coll_groups:
        return {}, None
    src, impl0 = pv.src, cfg.impl_of(0)
    pts = [p for g in coll_groups for p in g["points"]]
    ntr = cfg.trials["collectives"]
    tabs = tables(pts, src("latency per call, the slowest rank per trial, barrier before each trial", ntr))
    coll: dict = {"default_impl": impl0, "tables": tabs}
    extra = _eager_extra(tabs)
    coll["eager_extra_us"] = (sourced(round(extra, 3), src(
        "median over sizes of eager minus CUDA-graph all-reduce latency")) if extra is not None else
        sourced(0.0, src("not needed: every table was measured in eager mode, the only mode here")))
    if any(t["mode"] == "graph" and t["impl"] == "nccl" for t in tabs):
        # calib/collectives.py times graph mode as calls captured back to back in one CUDA graph, each
        # already paying NCCL's graph-mixing record node: a base's graph_nccl_node_us must not add it again
        coll["graph_nccl_node_us"] = sourced(0.0, src(
            "included in the graph-mode tables (calls captured back to back in one CUDA graph each pay "
            "NCCL's graph-mixing record node)"))
    model, fit = model_section(tabs, impl0, src("collective latency", ntr))
    if model:
        # over a base that has node protocols, ours replace them (mixing two fits' min() would be
        # wrong); where the base has none, a plain object (merge copies new keys as they are)
        coll["model"] = {"node": ({"replace": True, **model} if _base_has_node_model(cfg.extends) else model)}
    return coll, fit


def _overlap_section(cfg, groups: dict, pv: Provenance) -> dict:
    """overlap: the measured slowdown factors (closed form; refit_overlap may replace them), or 1.0
    for a single rank's complete profile; {} for an extending profile that measured none."""
    ov = next((g for g in groups.values() if g["kind"] == "overlap"), None)
    if not ov:
        return {} if cfg.extends else {k: sourced(1.0, pv.src("single rank: no collective to overlap"))
                                       for k in ("compute_slowdown", "comm_slowdown")}
    s = ov["summary"]
    how = {"compute_slowdown": "compute time while the collective runs / alone",
           "comm_slowdown": "collective time while compute runs / alone"}
    if s.get("method") == "passes":
        how = {"compute_slowdown": "compute after the first all-reduce, with all-reduces in flight / alone",
               "comm_slowdown": "that compute time / the all-reduce work done during it"}
    noisy = noise_note(s)
    if noisy:            # the profile says so beside the numbers, not only the run's output
        how = {k: v + f" ({noisy})" for k, v in how.items()}
    early = s.get("done_early", 0.0)
    if early > 0.2:      # the in-pass fit assumes each all-reduce outlasts the module it overlaps
        how = {k: v + f" ({early:.0%} of the all-reduces finished within their module, which the fit does "
               "not model: approximate)" for k, v in how.items()}
    value = profile_factors(s)
    out = {}
    for key, text in how.items():
        raw = s.get(key + "_raw", s[key])
        out[key] = sourced(value[key], pv.src(f"{text} = {raw:.3f}" + _clamped(raw) + f"; {_overlap_what(ov)}",
                                              ov["trials"]))
    # written, not left out: over a base with a fitted wake-up, that wake must not pair with these
    out["wake_us"] = sourced(0.0, pv.src("not part of this method's model (refit_overlap fits it where the passes allow)"))
    return out


def _jitter_section(cfg, groups: dict, pv: Provenance) -> dict:
    """jitter: the ranks' arrival spread at a barrier-free all-reduce (calib.collectives.arrival_waits);
    {} for an extending profile that measured none."""
    arr = next((g for g in groups.values() if g["kind"] == "arrival"), None)
    if not arr:
        return {} if cfg.extends else {"launch_us": sourced(0.0, "not measured by tpsim calibrate (no launch-skew model)")}
    what = (f"spread of arrival times across {arr['ranks']} ranks at {arr['calls']} barrier-free all-reduces "
            f"after equal compute (time inside each call: max over ranks - own); exponential mean by maximum "
            f"likelihood over {arr['lags']} lags behind the first arrival: {arr['mean_us']} us; spread p50 "
            f"{arr['spread_p50_us']} us, p90 {arr['spread_p90_us']} us")
    # on CPU the collective tables time calls the same barrier-free way, slowest rank counted, so
    # they already hold the mean skew of each group size: --exact must not add it a second time
    value = 0.0 if cfg.device == "cpu" else arr["mean_us"]
    if cfg.device == "cpu":
        what += ("; written as 0: the gloo collective tables above were timed the same barrier-free way "
                 "(slowest rank's time), so they already include this skew on average")
    return {"arrival": {arr["scope"]: {"dist": "exponential", "mean_us": sourced(value, pv.src(what))}}}


def _fit_residuals(fit, tabs: list[dict], impl0: str, pv: Provenance) -> dict:
    """raw.collective_fit: the node model's residuals against every all-reduce point it was fitted to."""
    mode = "eager" if any(x["mode"] == "eager" for x in tabs) else "graph"
    return {"source": pv.src("fit residuals of collectives.model.node"),
            "rms_pct": fit.residual_rms_pct, "max_pct": fit.residual_max_pct, "points": fit.points,
            "per_point": [{"group": t["group"], "bytes": b, "measured_us": u,
                           "model_us": round(fit.time_us("all_reduce", t["group"], b), 3)}
                          for t in tabs if t["collective"] == "all_reduce" and t["impl"] == impl0 and t["mode"] == mode
                          for b, u in zip(t["bytes"], t["time_us"])]}


def _base_has_node_model(base: str | None) -> bool:
    if not base:
        return False
    data, _ = read_raw(base)
    return isinstance(data.get("collectives", {}).get("model", {}).get("node"), dict)


def refit_overlap(prof: dict, loaded) -> bool:
    """Replace a CPU in-pass calibration's closed-form overlap factors by the ones under which the
    engine reproduces the measured passes (calib.overlap_fit), with the wake-up they need. The
    closed-form values stay in the raw group; the fit (values, per-case measured and fitted ratios,
    bootstrap samples) is kept beside them. Returns False when there is nothing to refit."""
    ov = next((g for g in prof.get("raw", {}).get("groups", {}).values() if g.get("kind") == "overlap"), None)
    if ov is None:
        return False
    got = fit_profile_overlap(loaded, ov["summary"])
    if got is None:
        return False
    ov["summary"]["fit"] = got
    head = ov["source"].split(": raw measurement group")[0]
    cases = "; ".join(f"{c['what'].split(' standard')[0]}: measured {c['measured'][0]:.3f}x / {c['measured'][1]:.0%} "
                      f"waiting, fitted {c['fitted'][0]:.3f}x / {c['fitted'][1]:.0%}" for c in got["cases"])
    why = (f"{head}: fitted so that the simulator, costing ops from this profile, reproduces each case's "
           f"blocking/overlapped decode pass time and the overlapped pass's share of waiting ({cases}); "
           f"{_overlap_what(ov)}; {len(got['samples'])} bootstrap refits kept in raw")
    if len(got["cases"]) < 2:
        why += ("; ONE model only: its two ratios do not pin three parameters, so the fit reproduces this "
                "model but extrapolates poorly; calibrate two models of different compute/collective balance "
                "(e.g. --models toy-512 --models toy-1024)")
    if noise_note(ov["summary"]):
        why += f"; {noise_note(ov['summary'])}"
    prof["overlap"] = {
        "compute_slowdown": sourced(got["compute_slowdown"], why),
        "comm_slowdown": sourced(got["comm_slowdown"], why),
        "wake_us": sourced(got["wake_us"], why + " (wake-up of a rank blocked on a collective)")}
    return True


def _clamped(x: float) -> str:
    if x >= FACTOR_CAP:    # a collective with no measurable progress under compute lands here too
        return f" (at or above the cap of {FACTOR_CAP:g}, written as {FACTOR_CAP:g})"
    return "" if x >= 1.0 else " (below 1 within noise: no measurable slowdown, written as 1)"


def _overlap_what(ov: dict) -> str:
    """What the overlap group measured; results saved by an older tpsim (resumed state) say it
    with the gemm shape and message size instead."""
    if "what" in ov:
        return ov["what"]
    op = ov.get("op", {})
    return (f"gemm [{op.get('m')}, {op.get('k')}] @ [{op.get('k')}, {op.get('n')}] vs all_reduce of "
            f"{ov.get('comm_bytes')} B, alone and concurrently (async_op=True)")


def _eager_extra(tabs: list[dict]) -> float | None:
    eager = {(t["collective"], t["group"], t["impl"]): dict(zip(t["bytes"], t["time_us"]))
             for t in tabs if t["mode"] == "eager"}
    diffs = []
    for t in tabs:
        if t["mode"] != "graph":
            continue
        e = eager.get((t["collective"], t["group"], t["impl"]), {})
        diffs += [max(0.0, e[b] - u) for b, u in zip(t["bytes"], t["time_us"]) if b in e]
    return statistics.median(diffs) if diffs else None


def _dedupe(points: list[dict]) -> list[dict]:
    """One point per (kind, attrs, dtype): the first measured (cases overlap in shapes)."""
    seen, out = set(), []
    for p in points:
        key = (p["kind"], tuple(sorted(p["attrs"].items())), p["dtype"])
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _hostname() -> str:
    return socket.gethostname()
