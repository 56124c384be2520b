"""Fit the collective measurements: the median tables per (collective, group, mode, impl), made
non-decreasing, and NCCL's protocol model (base + steps * hop + bytes / algbw) fitted to them."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares


def ring_terms(collective: str, n: int) -> tuple[int, float]:
    """(steps, algbw/busbw) of a ring over n ranks, as sim.price.comm.collective.ring_s prices it."""
    if n <= 1:
        return 0, 1.0
    if collective == "all_reduce":
        return 2 * (n - 1), n / (2 * (n - 1))
    return n - 1, n / (n - 1)


@dataclass(frozen=True)
class Protocol:
    name: str
    base_us: float
    hop_us: float
    busbw_gbps: float

    def time_us(self, collective: str, n: int, nbytes: float) -> float:
        steps, f = ring_terms(collective, n)
        return self.base_us + steps * self.hop_us + nbytes / (self.busbw_gbps * 1e3 * f)


@dataclass(frozen=True)
class ProtocolFit:
    protocols: tuple[Protocol, ...]
    residual_rms_pct: float         # rms of (model / measured - 1) over the points, in %
    residual_max_pct: float
    points: int
    hop_identified: bool            # False with a single group size: latency is all in base_us

    def time_us(self, collective: str, n: int, nbytes: float) -> float:
        return min(p.time_us(collective, n, nbytes) for p in self.protocols)


def fit_protocols(points: list[tuple[int, float, float]], collective: str = "all_reduce",
                  regimes: int = 2) -> ProtocolFit:
    """Fit the NCCL-style model to (group, bytes, time_us) points (medians, one per size/group).

    With one group size, base and hop cannot be told apart: hop is fixed to 0. With fewer than
    six distinct sizes, one regime only."""
    pts = [(int(n), float(b), float(t)) for n, b, t in points if n > 1 and b > 0 and t > 0]
    if len(pts) < 2:
        raise ValueError(f"need at least 2 collective points over groups > 1 to fit, got {len(pts)}")
    groups = sorted({n for n, _, _ in pts})
    hop_ok = len(groups) > 1
    sizes = sorted({b for _, b, _ in pts})
    k = regimes if len(sizes) >= 3 * regimes else 1
    n_arr = np.array([p[0] for p in pts], float)
    b_arr = np.array([p[1] for p in pts])
    t_arr = np.array([p[2] for p in pts])
    terms = [ring_terms(collective, int(n)) for n in n_arr]
    steps = np.array([s for s, _ in terms], float)
    inv_f = np.array([1.0 / f for _, f in terms])

    def model(x, sel=slice(None)):
        out = None
        for j in range(len(x) // 3):
            base, hop, inv_bw = x[3 * j:3 * j + 3]
            t = base + steps[sel] * hop + b_arr[sel] * inv_f[sel] * inv_bw / 1e3
            out = t if out is None else np.minimum(out, t)
        return out

    def fit(x0, sel=slice(None)):
        lo = [0.0, 0.0, 1e-9] * (len(x0) // 3)
        hi = [np.inf, np.inf if hop_ok else 1e-12, np.inf] * (len(x0) // 3)
        x0 = np.clip(x0, lo, [h if np.isfinite(h) else v for h, v in zip(hi, x0)])
        r = least_squares(lambda x: np.log(model(x, sel)) - np.log(t_arr[sel]), x0, bounds=(lo, hi),
                          x_scale="jac", method="trf", max_nfev=5000)
        return r.x, float(np.sum(r.fun ** 2))

    def guess(sel) -> np.ndarray:
        tb, bb = t_arr[sel], b_arr[sel] * inv_f[sel]
        slope = max((tb.max() - tb.min()) / max(bb.max() - bb.min(), 1.0), 1e-9)   # us per byte
        return np.array([max(tb.min(), 1e-3), 0.0, slope * 1e3])

    x1, cost = fit(guess(slice(None)))
    best = x1
    if k == 2:
        for cut in sizes[2:-2]:               # each side needs >= 2 sizes
            small, large = b_arr < cut, b_arr >= cut
            xs, _ = fit(guess(small), small)
            xl, _ = fit(guess(large), large)
            x, c = fit(np.concatenate([xs, xl]))
            if c < cost:
                best, cost = x, c
    protos = []
    names = ["small", "large"] if len(best) == 6 else ["all"]
    for j, name in enumerate(names):
        base, hop, inv_bw = best[3 * j:3 * j + 3]
        protos.append(Protocol(name, float(base), float(hop) if hop_ok else 0.0, float(1.0 / inv_bw)))
    protos.sort(key=lambda p: p.busbw_gbps)
    if len(protos) == 2:
        protos = [Protocol("small", *_vals(protos[0])), Protocol("large", *_vals(protos[1]))]
    rel = model(best) / t_arr - 1
    return ProtocolFit(tuple(protos), float(np.sqrt(np.mean(rel ** 2)) * 100), float(np.max(np.abs(rel)) * 100),
                       len(pts), hop_ok)


def _vals(p: Protocol) -> tuple[float, float, float]:
    return p.base_us, p.hop_us, p.busbw_gbps


def tables(points: list[dict], source: str) -> list[dict]:
    """Raw collective points [{collective, group, mode, impl, bytes, time_us}] -> profile tables
    (median per size, made non-decreasing in size; one table per collective/group/mode/impl).

    Moving more bytes never takes less time, so a dip in the medians is noise; on a noisy host
    (a 2-core CPU box) one such dip at exactly a model's message size would otherwise decide the
    prediction. Adjacent violators are pooled (isotonic regression, weighted by samples); the raw
    points stay in the profile's `raw` section."""
    by: dict[tuple, dict[int, list[float]]] = {}
    for p in points:
        key = (p["collective"], int(p["group"]), p["mode"], p["impl"])
        by.setdefault(key, {}).setdefault(int(p["bytes"]), []).append(float(p["time_us"]))
    out = []
    for (coll, group, mode, impl), sizes in sorted(by.items()):
        bs = sorted(sizes)
        mono = isotonic([statistics.median(sizes[b]) for b in bs], [len(sizes[b]) for b in bs])
        out.append({"collective": coll, "group": group, "scope": "node", "mode": mode, "impl": impl,
                    "bytes": bs, "time_us": [round(v, 3) for v in mono],
                    "source": source + "; medians per size made non-decreasing (isotonic regression)"})
    return out


def isotonic(ys: list[float], ws: list[float]) -> list[float]:
    """Weighted least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []            # [mean, weight, count]
    for y, w in zip(ys, ws):
        blocks.append([y, float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [m for m, _, n in blocks for _ in range(n)]


def model_section(tabs: list[dict], impl: str, source: str) -> tuple[dict, ProtocolFit | None]:
    """collectives.model.node from the all-reduce tables of `impl` (eager preferred)."""
    for mode in ("eager", "graph"):
        pts = [(t["group"], b, u) for t in tabs if t["collective"] == "all_reduce" and t["impl"] == impl
               and t["mode"] == mode and t["group"] > 1 for b, u in zip(t["bytes"], t["time_us"])]
        if len({p[1] for p in pts}) >= 2:          # (a lone rank's group of one has no ring to fit)
            f = fit_protocols(pts)
            sec = {}
            for p in f.protocols:
                sec[p.name] = {"base_us": round(p.base_us, 4), "hop_us": round(p.hop_us, 4),
                               "busbw_gbps": round(p.busbw_gbps, 6), "hop": "per_step",
                               "residual_rms_pct": round(f.residual_rms_pct, 2),
                               "residual_max_pct": round(f.residual_max_pct, 2),
                               "source": f"{source}; fitted (scipy least squares, log residuals) to {f.points} "
                                         f"{impl} all_reduce {mode} medians, regime '{p.name}' of "
                                         f"min(small, large); rms residual {f.residual_rms_pct:.1f}%, max "
                                         f"{f.residual_max_pct:.1f}%"
                                         + ("" if f.hop_identified else
                                            "; one group size measured, so hop_us is 0 and base_us holds "
                                            "the whole latency")}
            return sec, f
    return {}, None
