"""Fitting recovers known parameters from synthetic points; profile assembly validates."""
import math

import pytest

from tpsim.calib.fit import efficiency_curve
from tpsim.calib.fit_collectives import Protocol, fit_protocols, model_section, tables
from tpsim.sim.price.comm.collective import ring_s
from tpsim.sim.hardware.profile import LinkModel

SMALL = Protocol("small", 6.6, 0.6, 40.0)       # LL-like: low latency, low bandwidth
LARGE = Protocol("large", 14.0, 3.4, 360.0)     # Simple-like


def synth(groups, coll="all_reduce"):
    return [(n, float(2 ** e), min(SMALL.time_us(coll, n, 2 ** e), LARGE.time_us(coll, n, 2 ** e)))
            for n in groups for e in range(3, 31)]


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather"])
def test_two_regimes_recovered_across_group_sizes(coll):
    f = fit_protocols(synth((2, 4, 8), coll), coll)
    got = {p.name: p for p in f.protocols}
    for want in (SMALL, LARGE):
        p = got[want.name]
        assert p.base_us == pytest.approx(want.base_us, rel=0.03)
        assert p.hop_us == pytest.approx(want.hop_us, rel=0.03)
        assert p.busbw_gbps == pytest.approx(want.busbw_gbps, rel=0.03)
    assert f.residual_rms_pct < 0.5 and f.hop_identified


def test_noisy_points_within_a_few_percent():
    import random
    rng = random.Random(1)
    pts = [(n, b, t * math.exp(rng.gauss(0, 0.01))) for n, b, t in synth((2, 4, 8))]
    f = fit_protocols(pts)
    got = {p.name: p for p in f.protocols}
    assert got["large"].busbw_gbps == pytest.approx(LARGE.busbw_gbps, rel=0.05)
    assert got["small"].base_us + 14 * got["small"].hop_us == pytest.approx(6.6 + 14 * 0.6, rel=0.05)
    assert 0.3 < f.residual_rms_pct < 3


def test_single_group_puts_latency_in_base():
    f = fit_protocols(synth((2,)))
    got = {p.name: p for p in f.protocols}
    assert not f.hop_identified and got["small"].hop_us == 0
    assert got["small"].base_us == pytest.approx(6.6 + 2 * 0.6, rel=0.03)
    assert got["large"].busbw_gbps == pytest.approx(360, rel=0.03)


def test_fitted_section_prices_like_the_simulator():
    """The fit's model and sim.price.comm.collective.ring_s agree on every point (same steps / busbw convention)."""
    pts = synth((2, 4, 8))
    tabs = tables([{"collective": "all_reduce", "group": n, "mode": "eager", "impl": "gloo", "bytes": b,
                    "time_us": t} for n, b, t in pts], "synthetic")
    sec, f = model_section(tabs, "gloo", "synthetic")
    links = tuple(LinkModel(k, v["base_us"] * 1e-6, v["hop_us"] * 1e-6, v["busbw_gbps"]) for k, v in sec.items())
    for n, b, t in pts[::7]:
        assert ring_s(links, "all_reduce", b, n) * 1e6 == pytest.approx(t, rel=0.02)
    assert all("residual" in v["source"] for v in sec.values())


def test_tables_take_medians_per_size():
    raw = [{"collective": "all_reduce", "group": 2, "mode": "eager", "impl": "gloo", "bytes": 8, "time_us": t}
           for t in (10, 30, 12)]
    (t,) = tables(raw, "s")
    assert t["bytes"] == [8] and t["time_us"] == [12] and t["scope"] == "node"


def test_efficiency_curve_bins_and_clamps():
    x, y = efficiency_curve([1e3, 1.2e3, 1e6, 1e9], [0.1, 0.3, 0.5, 1.7])
    assert x == sorted(x) and len(x) == 3
    assert y[0] == pytest.approx(0.2) and y[-1] == 1.0
