"""compute.l2 in the profile (sim/hardware/l2_section.py, sim/price/l2_traffic.py): the L2 rate and sweep curve are a
property of the GPU, read from the profile, not looked up by the profile's name. Before, a profile
named anything but a built-in prefix ("my-cluster" extending h100-sxm, a calibration on an H100)
silently lost the L2 terms: its 70B TP8 batch-64 upper-bound decode step cost 12,171.1 us against
h100-sxm's 13,148.7 us (the GQA K/V re-reads unpriced; with the GPU table derived on torch 2.13).
With the table derived on the reference's torch 2.5.1 the pair is 12,364.9 / 13,346.1 us."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.calib.fit import build_profile
from tpsim.sim.price import fusion
from tpsim.sim.price.cost import CostModel
from tpsim.sim.price.work import Work, roofline_s
from tpsim.sim.hardware.schema import L2Spec
from tpsim.sim.price.l2_traffic import l2_hit_fraction
from tpsim.sim.model.presets import get_model
from tpsim.sim.predict import Simulator, Workload
from tpsim.sim.hardware.profile import load_document, load_profile, read_raw

# The constants sim/price/l2_traffic.py held before they moved into the profiles (L2_BYTES_PER_S,
# SWEEP_CURVES): te42kyfo/gpu-benches gpu-l2-cache h200.txt and a100_80.txt, commit 1c36d509.
_H200 = ((40448, 9666.0), (44032, 9105.3), (48128, 7542.5), (52736, 6467.1), (57856, 5053.8),
         (63488, 4463.9), (69632, 4201.3), (76288, 4017.5), (83456, 3946.8), (91648, 3916.1))
_A100_80 = ((28160, 5170.5), (30720, 3999.5), (33792, 3621.8), (36864, 3004.0), (40448, 2462.0),
            (44032, 2188.0), (48128, 2026.5), (52736, 1945.5), (57856, 1915.4), (63488, 1894.6))
OLD = {"h100-sxm": L2Spec(10.03e12, _H200, 3887.9), "h200-sxm": L2Spec(10.03e12, _H200, 3887.9),
       "a100-sxm": L2Spec(5.33e12, _A100_80, 1865.3)}
NOTE = "has no compute.l2 (L2 bandwidth)"


def _write(tmp_path, name: str, doc: dict) -> str:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": name, **doc}))
    return str(p)


def _decode_step_s(profile_ref: str, batch: int = 64) -> tuple[float, Simulator]:
    w = Workload(get_model("llama-3.1-70b"), 8, load_profile(profile_ref), batch=batch)
    sim = Simulator(w)
    return sim.step_time("upper-bound", w.decode_step(1))[0], sim


def test_the_builtins_derived_l2_equals_the_old_constants():
    """tools/derive_profiles/l2.py wrote the same numbers the name-keyed tables held, and every
    twin has them through `extends`. L40S takes the L40's file (the same AD102 configuration), the
    first sweep whose DRAM plateau is GDDR6's: 5.21 TB/s from L2, 850.5 GB/s from DRAM."""
    for name in ("h100-sxm", "h100-sxm-p2p-off", "h100-sxm-coschedule", "h100-sxm-p2p-off-coschedule",
                 "h200-sxm", "h200-sxm-coschedule", "a100-sxm", "a100-sxm-p2p-off"):
        assert load_profile(name).l2 == OLD[name[:8]], name
    l40s = load_profile("l40s-pcie").l2
    assert (l40s.bytes_per_s, l40s.sweep[0], l40s.sweep_dram_gbps) == (5210e9, (91648, 5242.8), 850.5)
    assert "l40.txt" in read_raw("l40s-pcie")[0]["compute"]["l2"]["gbps"]["source"]
    src = read_raw("h100-sxm")[0]["compute"]["l2"]
    assert "1c36d509" in src["gbps"]["source"] and "h200.txt" in src["sweep"]["source"]


def test_a_renamed_profile_prices_the_decode_step_as_its_base(tmp_path):
    """`my-cluster` extends h100-sxm and changes nothing: its decode step is h100-sxm's to the bit,
    13,335.5 us at batch 64 (when the L2 terms were keyed by the profile's name, a renamed one lost
    them and priced the step as the profile without compute.l2 below)."""
    mine = _write(tmp_path, "my-cluster", {"extends": "h100-sxm"})
    base_s, base_sim = _decode_step_s("h100-sxm")
    mine_s, mine_sim = _decode_step_s(mine)
    assert mine_s == base_s
    assert mine_s == pytest.approx(13_335.475e-6, rel=1e-6)
    assert not any(NOTE in n for n in mine_sim.cost.notes + base_sim.cost.notes)


def test_without_compute_l2_the_dram_term_prices_it_and_predict_says_so(tmp_path):
    """h100-sxm with compute.l2 deleted: every generated kernel of the decode step costs its DRAM
    roofline (the GQA re-reads add nothing), the step is cheaper than h100-sxm's, one note says why.
    `"l2": null` under `extends` drops the base's section the same way."""
    doc = read_raw("h100-sxm")[0]
    del doc["compute"]["l2"]
    doc["name"] = "h100-no-l2"
    plain = tmp_path / "h100-no-l2.json"
    plain.write_text(json.dumps(doc))
    dropped = _write(tmp_path, "h100-dropped", {"extends": "h100-sxm", "compute": {"l2": None}})
    assert load_profile(str(plain)).l2 is None and load_profile(dropped).l2 is None

    no_l2_s, sim = _decode_step_s(str(plain))
    assert no_l2_s == _decode_step_s(dropped)[0]
    assert no_l2_s < _decode_step_s("h100-sxm")[0]
    assert no_l2_s == pytest.approx(12_159.702e-6, rel=1e-6)          # the old name-lookup miss
    s = sim.w.schedule("upper-bound", sim.w.decode_step(1))
    op = next(o for o in s.ops if o.name == "L1.attn.sdpa")
    cm = CostModel(load_profile(str(plain)), sim.w.stack)
    terms = cm.kernel_terms(op, fusion.kernels(fusion.lookup(s, op, "cuda")), s, True)
    reread = [t for t in terms if t["l2_bytes"] > t["dram_bytes"]]
    assert reread                                                     # q@k^T and p@v re-read K / V
    for t in reread:
        dram_s = roofline_s(cm.profile, [Work(0.0, t["dram_bytes"], 1)], op.dtype)
        assert t["s"] == max(dram_s, cm.profile.launch_s["graph"])
    assert [n for n in cm.notes if NOTE in n] == [
        "profile h100-no-l2 has no compute.l2 (L2 bandwidth): the GQA K/V re-reads and weight re-sweeps "
        "are priced at the DRAM bytes only"]

    args = ["predict", "--model", "llama-3.1-70b", "--tp", "8", "--batch", "4", "--gen", "4",
            "--schedule", "upper-bound", "--profile"]
    r = CliRunner().invoke(cli.main, args + [str(plain)])
    assert r.exit_code == 0, r.output
    assert sum(NOTE in line for line in r.output.splitlines()) == 1
    r = CliRunner().invoke(cli.main, args + ["h100-sxm"])
    assert r.exit_code == 0 and NOTE not in r.output


def _one_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in r.output, r.output
    return lines[0]


_SWEEP = {"kb": [100, 200], "gbps": [900.0, 500.0], "dram_gbps": 400.0, "source": "toy"}


@pytest.mark.parametrize("l2, field, says", [
    ([1, 2], "compute.l2", "must be an object"),
    ({}, "compute.l2.gbps", "is missing"),
    ({"gbps": {"value": 1000}}, "compute.l2.gbps", "has no 'source'"),
    ({"gbps": -5}, "compute.l2.gbps", "must be positive"),
    ({"gbps": "fast"}, "compute.l2.gbps", "must be a number"),
    ({"gbps": 1e12}, "compute.l2.gbps", "must be at most"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "source": ""}}, "compute.l2.sweep", "has no 'source'"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "gbps": [900.0]}}, "compute.l2.sweep", "equal-length"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "kb": [200, 100]}}, "compute.l2.sweep.kb", "strictly increasing"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "kb": [0, 100]}}, "compute.l2.sweep.kb", "positive"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "gbps": [900.0, "x"]}}, "compute.l2.sweep.gbps", "GB/s"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "gbps": [900.0, 0.0]}}, "compute.l2.sweep.gbps", "GB/s"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "gbps": [900.0, True]}}, "compute.l2.sweep.gbps", "GB/s"),
    ({"gbps": 1000, "sweep": {k: v for k, v in _SWEEP.items() if k != "dram_gbps"}},
     "compute.l2.sweep.dram_gbps", "is missing"),
    ({"gbps": 1000, "sweep": {**_SWEEP, "dram_gbps": 1000.0}}, "compute.l2.sweep.dram_gbps", "must be below"),
])
def test_a_malformed_compute_l2_is_one_line_exit_2(tmp_path, l2, field, says):
    bad = tmp_path / "bad.json"
    # "replace": the base's compute.l2 is not merged in (a missing key stays missing)
    l2 = {"replace": True, **l2} if isinstance(l2, dict) else l2
    bad.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "bad", "extends": "h100-sxm",
                               "compute": {"l2": l2}}))
    line = _one_line_exit_2(CliRunner().invoke(cli.main, ["profiles", "show", str(bad)]))
    assert f"field '{field}'" in line and says in line, line


def test_a_toy_sweep_curve_prices_the_resweeps_from_the_profile(tmp_path):
    """A profile's own compute.l2 is what prices: toy L2 1000 GB/s, the sweep holding in L2 to 100 kB
    and DRAM-bound (400 GB/s plateau) from 200 kB; at 150 kB, halfway between 900 and 500 GB/s,
    it runs 700 GB/s: f = (1/700 - 1/400) / (1/1000 - 1/400) = 0.7143."""
    toy = _write(tmp_path, "toy-gpu", {"extends": "h100-sxm", "compute": {"l2": {"gbps": {"value": 1000, "source": "toy"},
                                                                                 "sweep": _SWEEP}}})
    l2 = load_profile(toy).l2
    assert l2 == L2Spec(1e12, ((100.0, 900.0), (200.0, 500.0)), 400.0)
    assert l2_hit_fraction(l2, 100 * 1024) == 1.0 and l2_hit_fraction(l2, 200 * 1024) == 0.0
    assert l2_hit_fraction(l2, 150 * 1024) == pytest.approx((1 / 700 - 1 / 400) / (1 / 1000 - 1 / 400))
    assert l2_hit_fraction(l2, 150 * 1024) == pytest.approx(0.7143, abs=1e-4)


def _calib_cfg(extends=None):
    return SimpleNamespace(impl_of=lambda r: "nccl", backend="nccl", name="mine", out="mine.json", quick=True,
                           extends=extends, trials={"collectives": 3, "compute": 3, "overlap": 3}, device="cuda",
                           dtype="fp16", fingerprint=lambda: {})


def _calib_groups(device_name: str) -> dict:
    """Recorded raw points of a 2-GPU calibration: the device group calib/rank.py writes and one
    collective group (toy times)."""
    pts = [{"collective": "all_reduce", "group": 2, "mode": m, "impl": "nccl", "bytes": b, "time_us": t}
           for m in ("graph", "eager") for b, t in ((1024, 10.0), (1 << 20, 40.0), (16 << 20, 200.0))]
    dev = {"kind": "device", "finished_at": "2026-12-01T00:00", "host": "gpu7", "device_name": device_name,
           "device_mem_bytes": 85e9, "matmul_flops": {"8192": 7e14}, "copy_bytes_per_s": {"1073741824": 3e12},
           "launch_s": 5e-6, "graph_launch_s": 2.5e-6, "rank_cores": [None, None]}
    return {"c": {"kind": "collectives", "points": pts, "finished_at": "2026-11-30T00:00"}, "device": dev}


def test_a_calibration_on_an_h100_takes_h100_sxms_l2_and_says_so(tmp_path):
    """calibrate does not measure L2: on a GPU whose built-in has compute.l2 (the device name
    calib/rank.py records, matched as import-nccl-tests matches it) the fit copies that section,
    each source naming the built-in and the device (an L40S l40s-pcie's, the L40's file); a GPU
    without a built-in gets none (DRAM only, noted)."""
    prof = build_profile(_calib_cfg(), _calib_groups("NVIDIA H100 80GB HBM3"), 2)
    l2 = prof["compute"]["l2"]
    assert l2["gbps"]["source"].startswith("taken from built-in h100-sxm for device name 'NVIDIA H100 80GB HBM3' "
                                           "(tpsim calibrate does not measure L2): te42kyfo/gpu-benches")
    assert l2["sweep"]["source"].startswith("taken from built-in h100-sxm")
    assert load_document(prof, near=tmp_path / "mine.json").l2 == OLD["h100-sxm"]
    doc = build_profile(_calib_cfg(), _calib_groups("NVIDIA H100 PCIe"), 2)          # no built-in
    assert "l2" not in doc["compute"] and load_document(doc, near=tmp_path / "o.json").l2 is None
    l40s = build_profile(_calib_cfg(), _calib_groups("NVIDIA L40S"), 2)["compute"]["l2"]
    assert l40s["gbps"]["value"] == 5210 and l40s["gbps"]["source"].startswith("taken from built-in l40s-pcie")
    # extending a base: nothing written, the base's section is inherited
    ext = build_profile(_calib_cfg(extends="h100-sxm"), _calib_groups("NVIDIA H100 80GB HBM3"), 2)
    assert "l2" not in ext.get("compute", {})
    assert load_document(ext, near=tmp_path / "e.json").l2 == OLD["h100-sxm"]


def test_compute_capability_is_calibrated_stated_and_checked(tmp_path):
    """calibrate records the GPU's major.minor (calib/rank.py) and the fit writes it with its source;
    a raw device group without it writes none (unstated: fa3 is then kept, sim/flash_decode.kernel_on);
    a profile's value must be a sourced number."""
    groups = _calib_groups("NVIDIA A100-SXM4-80GB")
    groups["device"]["compute_capability"] = 8.0
    doc = build_profile(_calib_cfg(), groups, 2)
    assert doc["compute_capability"]["value"] == 8.0
    assert "torch.cuda.get_device_properties major.minor" in doc["compute_capability"]["source"]
    assert load_document(doc, near=tmp_path / "a.json").compute_capability == 8.0
    old = build_profile(_calib_cfg(), _calib_groups("NVIDIA A100-SXM4-80GB"), 2)
    assert "compute_capability" not in old and load_document(old, near=tmp_path / "o.json").compute_capability is None
    for value, says in (({"value": 8.0}, "has no 'source'"), ("8.0", "must be a number"), (0.5, "must be >= 1")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "name": "bad", "extends": "a100-sxm",
                                   "compute_capability": value}))
        line = _one_line_exit_2(CliRunner().invoke(cli.main, ["profiles", "show", str(bad)]))
        assert "field 'compute_capability'" in line and says in line, line
