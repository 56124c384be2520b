"""What `tpsim serve` prints and draws: the latency table per schedule and rate, the rate sweep's table,
the JSON document, and the plot of latency against load (matplotlib, the [plot] extra)."""
from __future__ import annotations

import os

from tpsim.fileio.policy import save_figure
from tpsim.sim.serve.metrics import PERCENTILES
from tpsim.sim.serve.slo import describe, meets, value_at

from tpsim.commands.console import compact_table


def latency_table(points, slo: dict, percentile: float):
    """One row per schedule (of one rate): TTFT, TPOT and E2E at p50/p90/p99, requests/s, goodput."""
    t = compact_table()
    t.add_column("schedule", justify="left", min_width=max(len(p.schedule) for p in points))
    for m in ("TTFT", "TPOT", "E2E"):
        for q in PERCENTILES:
            t.add_column(f"{m}\np{q}", justify="right")
    t.add_column("done\nreq/s", justify="right")
    if slo:
        t.add_column("good\nreq/s", justify="right")
    for p in points:
        s = p.summary
        row = [p.schedule]
        for m, scale in (("ttft", 1e3), ("tpot", 1e3), ("e2e", 1.0)):
            row += [_fmt(s.pct[m][q] * scale) for q in PERCENTILES]
        row.append(f"{s.request_rate:.2f}")
        if slo:
            row.append(f"{s.goodput(slo):.2f}" + ("" if meets(s, slo, percentile) else "*"))
        t.add_row(*row)
    return t


def _fmt(v: float) -> str:
    return "-" if v != v else f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def sweep_table(results, slo: dict, percentile: float):
    """One row per schedule: the highest rate meeting the SLO, its gain over standard, the latencies there."""
    t = compact_table()
    base = next(r for r in results if r["schedule"] == "standard")["max_rate"]
    for col in ("schedule", "max\nreq/s", "gain", *[f"p{percentile:g} {k.upper()}\nms" for k in slo], "rates\nrun"):
        t.add_column(col, justify="left" if col == "schedule" else "right")
    for r in results:
        at = r["at_max"]
        t.add_row(r["schedule"], f"{r['max_rate']:#.3g}", f"{r['max_rate'] / base:.3f}x",
                  *[f"{at[k] * 1e3:.1f}" for k in slo], str(len(r["rates"])))
    return t


def slo_line(slo: dict, percentile: float) -> str:
    return f"SLO: {describe(slo, percentile)}"


def plot(points_by_schedule: dict, slo: dict, percentile: float, path: str | os.PathLike, title: str,
         max_rates: dict | None = None) -> None:
    """p99 TTFT and p99 TPOT (the SLO's percentile) against the request rate, a line per schedule;
    the SLO's bounds dashed, each schedule's highest rate meeting it marked."""
    import matplotlib                    # lazy: matplotlib (the [plot] extra) takes ~0.5 s to import; only --plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt      # lazy: (matplotlib, as above)
    import matplotlib.ticker             # lazy: (matplotlib, as above)
    q = percentile if slo else 99.0
    metrics = [("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (m, label) in zip(axes, metrics):
        for i, (spec, pts) in enumerate(points_by_schedule.items()):
            pts = sorted(pts, key=lambda p: p.rate)
            xs = [p.rate for p in pts]
            ys = [value_at(p.summary, m, q) * (1e3 if m != "e2e" else 1.0) for p in pts]
            ax.plot(xs, ys, marker="o", ms=3, label=spec, color=f"C{i}")
            if max_rates and spec in max_rates:
                ax.axvline(max_rates[spec], color=f"C{i}", ls=":", lw=1)
        if m in slo:
            ax.axhline(slo[m] * (1e3 if m != "e2e" else 1.0), color="k", ls="--", lw=1, label="SLO")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(f"p{q:g} {label} ({'ms' if m != 'e2e' else 's'})")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)
