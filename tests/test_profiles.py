"""Built-in profiles: schema, provenance on every number, extends/partial profiles, error messages."""
import json

import pytest

from tpsim.sim.price.cost import CostModel
from tpsim.sim.hardware.profile import ProfileError, builtin_names, describe, load_profile, read_raw
from tpsim.sim.stack.spec import Stack

REQUIRED = {"h100-sxm", "h100-sxm-p2p-off", "h200-sxm", "a100-sxm", "a100-sxm-p2p-off", "l40s-pcie"}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_builtin_is_listed_loads_and_validates(name):
    assert name in builtin_names()
    p = load_profile(name)
    assert p.name == name
    assert p.topology is not None
    assert p.gpus_per_node == 8
    assert p.peak_flops["fp16"] > 0 and p.mem_bytes_per_s > 0
    assert p.launch_s["eager"] > p.launch_s["graph"] > 0
    # overlap interference comes from measurements (docs/sources.md §7) or, on a GPU with sourced SM and
    # NCCL channel counts, from co-scheduling each kernel (overlap.gpu, sim/price/coschedule.py); never a silent 1.0
    assert p.coschedule is not None or (p.compute_slowdown > 1.0 and p.comm_slowdown > 1.0)


def test_profile_format_doc_names_every_builtin_and_the_coscheduled_ones():
    """docs/profile-format.md's table has a row naming every built-in profile, and its sentence on
    `overlap.gpu` names exactly the profiles that have one (it named h100-sxm, h200-sxm and
    h100-sxm-p2p-off, which keep the flat factors; the -coschedule twins were not in the table)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "profile-format.md").read_text()
    rows = {name for line in text.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([\w.-]+)`", line.split(" | ")[0])}
    assert set(builtin_names()) <= rows, set(builtin_names()) - rows
    sentence = re.search(r"except on (.*?), whose\s+`overlap\.gpu`", text, re.S).group(1)
    assert set(re.findall(r"`([\w.-]+)`", sentence)) == {n for n in builtin_names() if load_profile(n).coschedule}


def _unsourced_numbers(node, path="", sourced=False):
    """Numbers with no 'source' on them or on any object above them."""
    out = []
    if isinstance(node, dict):
        here = sourced or bool(node.get("source"))
        for k, v in node.items():
            if path == "" and k == "version":
                continue
            out += _unsourced_numbers(v, f"{path}.{k}" if path else k, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _unsourced_numbers(v, f"{path}[{i}]", sourced)
    elif isinstance(node, (int, float)) and not isinstance(node, bool) and not sourced:
        out.append(path)
    return out


def _all_sources(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "source":
                yield v
            else:
                yield from _all_sources(v)
    elif isinstance(node, list):
        for v in node:
            yield from _all_sources(v)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_number_has_a_source(name):
    data, _ = read_raw(name)
    assert _unsourced_numbers(data) == []
    srcs = list(_all_sources(data))
    assert srcs and all(isinstance(s, str) and s.strip() for s in srcs)
    assert not [s for s in srcs if "placeholder" in s.lower()]


def test_no_constant_from_end_to_end_results():
    """Ladder / SPD tokens/s are validation data only: no source may cite them."""
    for name in REQUIRED:
        data, _ = read_raw(name)
        for s in _all_sources(data):
            low = s.lower()
            assert "tokens/s" not in low and "ladder" not in low and "sync-point" not in low, (name, s)


def test_p2p_off_twins_extend_and_drop_p2p_measurements():
    for base in ("h100-sxm", "a100-sxm"):
        on, off = load_profile(base), load_profile(f"{base}-p2p-off")
        assert off.topology.p2p is False and on.topology.p2p is True
        assert off.collective_tables == ()              # P2P-on tables must not leak into the twin
        assert off.peak_flops == on.peak_flops          # compute inherited
        assert off.topology.nvlink_gbps == on.topology.nvlink_gbps


def test_describe_lists_field_value_source():
    rows = describe("h100-sxm")
    assert all(len(r) == 3 for r in rows)
    fields = {f: (v, s) for f, v, s in rows}
    assert fields["compute.memory_gbps"][0] == "3350"
    assert "datasheet" in fields["compute.memory_gbps"][1]
    assert "topology.nvlink_gbps" in fields and "nccl#1455" in fields["topology.nvlink_gbps"][1]
    assert any(f.startswith("collectives.tables[") for f in fields)
    twin = {f: (v, s) for f, v, s in describe("h100-sxm-p2p-off")}
    assert twin["topology.p2p"][0] == "False" and "NCCL_P2P_DISABLE" in twin["topology.p2p"][1]
    assert "compute.memory_gbps" in twin                # merged from the base


def test_describe_accepts_a_path(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(_partial()))
    rows = describe(str(p))
    assert rows[0][1] == "mine"


# ------------------------------------------------------------------ user files

def _partial(**collectives):
    return {"format": "tpsim-profile", "version": 1, "extends": "h100-sxm", "name": "mine",
            "collectives": {"tables": [{"collective": "all_reduce", "group": 8, "scope": "node", "mode": "graph",
                                        "impl": "nccl", "bytes": [1024, 1048576], "time_us": [10.0, 20.0],
                                        "source": "my nccl-tests run"}], **collectives}}


def _write(tmp_path, data, name="p.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


def test_partial_profile_completed_from_base(tmp_path):
    prof = load_profile(_write(tmp_path, _partial()))
    assert prof.name == "mine"
    assert prof.mem_bytes_per_s == load_profile("h100-sxm").mem_bytes_per_s
    # the user's table is first, so it wins over the base's (plus the base's in-graph overheads: the
    # functional collective's copy and NCCL's graph-mixing record node)
    c = CostModel(prof, Stack())
    assert c.collective_s("all_reduce", 1024, 8, "graph") == pytest.approx(10e-6 + prof.graph_extra_s + prof.graph_nccl_node_s)
    # sizes the user did not measure in other groups still come from the base / topology
    assert c.collective_s("all_reduce", 1024, 4, "graph") == CostModel(load_profile("h100-sxm"), Stack()) \
        .collective_s("all_reduce", 1024, 4, "graph")


def test_full_profile_without_topology_uses_protocol_model(tmp_path):
    data, _ = read_raw("h100-sxm")
    data.pop("topology")
    data["collectives"] = {"model": {"node": {"ring_ll": {"base_us": 6.6, "hop_us": 0.6, "busbw_gbps": 141,
                                                          "source": "NCCL tuning.cc"}}}}
    prof = load_profile(_write(tmp_path, data))
    assert prof.topology is None
    t = CostModel(prof, Stack()).collective_s("all_reduce", 1024, 8, "graph")
    assert t == pytest.approx((6.6 + 14 * 0.6) * 1e-6 + 1024 / (141e9 * 8 / 14))


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("memory_gib"), "memory_gib"),
    (lambda d: d["compute"].pop("memory_gbps"), "compute.memory_gbps"),
    (lambda d: d["compute"]["memory_gbps"].pop("source"), "compute.memory_gbps"),
    (lambda d: d["compute"]["memory_gbps"].update(value="fast"), "compute.memory_gbps"),
    (lambda d: d["compute"]["launch_us"].pop("graph"), "compute.launch_us.graph"),
    (lambda d: d["overlap"]["compute_slowdown"].update(value=0.5), "overlap.compute_slowdown"),
    (lambda d: d["topology"].pop("pcie_gbps"), "topology.pcie_gbps"),
    (lambda d: d["topology"]["intra"].update(value="carrier-pigeon"), "topology.intra"),
    (lambda d: d["topology"]["p2p"].update(value="yes"), "topology.p2p"),
    (lambda d: d["topology"].pop("nvlink_gbps"), "topology.nvlink_gbps"),
    (lambda d: d["topology"]["nccl"]["hop_us"]["pci"].pop("ll"), "topology.nccl.hop_us.pci.ll"),
    (lambda d: d["topology"]["nccl"].pop("source"), "topology.nccl"),
    (lambda d: d["topology"].pop("nics_per_node"), "topology.nics_per_node"),
    (lambda d: d["collectives"]["tables"][0].pop("source"), "collectives.tables[0].source"),
    (lambda d: d["collectives"]["tables"][0].update(mode="warp"), "collectives.tables[0].mode"),
    (lambda d: d["collectives"]["tables"][0].update(bytes=[4, 2] + [8] * (len(d["collectives"]["tables"][0]
                                                                              ["bytes"]) - 2)),
     "collectives.tables[0].bytes"),
    (lambda d: d.pop("topology"), "collectives.model"),
])
def test_bad_full_profile_names_field_and_file(tmp_path, mutate, field):
    data, _ = read_raw("h100-sxm")
    mutate(data)
    path = _write(tmp_path, data, "broken.json")
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert "broken.json" in msg and f"'{field}'" in msg, msg


@pytest.mark.parametrize("patch, field", [
    ({"topology": {"pcie_gbps": {"value": -1, "source": "x"}}}, "topology.pcie_gbps"),
    ({"compute": {"launch_us": {"eager": 5}}}, None),       # bare numbers are accepted (user files)
    ({"collectives": {"tables": [{"collective": "all_reduce", "group": 8}]}}, "collectives.tables[0].scope"),
])
def test_bad_partial_profile_names_field_file_and_base(tmp_path, patch, field):
    data = {"format": "tpsim-profile", "version": 1, "extends": "h100-sxm", "name": "mine", **patch}
    path = _write(tmp_path, data, "partial.json")
    if field is None:
        assert load_profile(path).launch_s["eager"] == pytest.approx(5e-6)
        return
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert "partial.json" in msg and "extends h100-sxm" in msg and f"'{field}'" in msg, msg


def test_a_name_that_is_no_built_in_but_a_file_or_folder(tmp_path, monkeypatch):
    """Issue 48 item 6: `--profile DIR` and an `extends` naming a file without `.json` both said
    'unknown profile'. A file of that name is read (as --stack reads one), a folder is refused as one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ProfileError, match="^profile dir is a directory; give a profile's JSON file or a built-in name"):
        load_profile("dir")
    (tmp_path / "base").write_text((builtin_dir_file("a100-sxm")).read_text())
    _write(tmp_path, {"format": "tpsim-profile", "version": 1, "name": "x", "extends": "base"}, "x.json")
    assert load_profile("x.json").name == "x" and load_profile("base").name == "a100-sxm"
    with pytest.raises(ProfileError, match="unknown profile 'nob': no built-in profile and no file of that name in "
                                           "its folder"):
        load_profile(_write(tmp_path, {"format": "tpsim-profile", "version": 1, "extends": "nob"}, "y.json"))


def builtin_dir_file(name: str):
    from tpsim.sim.hardware.profile import builtin_dir
    return builtin_dir() / f"{name}.json"


def test_file_level_errors(tmp_path):
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(_write(tmp_path, "{nope", "bad.json"))
    with pytest.raises(ProfileError, match="'version'"):
        load_profile(_write(tmp_path, {"format": "tpsim-profile", "version": 99}, "v.json"))
    with pytest.raises(ProfileError, match="unknown profile 'nosuch'"):
        load_profile(_write(tmp_path, {"format": "tpsim-profile", "version": 1, "extends": "nosuch"}, "e.json"))
    with pytest.raises(ProfileError, match="not found"):
        load_profile(str(tmp_path / "missing.json"))
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "extends": str(b)}))
    b.write_text(json.dumps({"format": "tpsim-profile", "version": 1, "extends": str(a)}))
    with pytest.raises(ProfileError, match="cycle"):
        load_profile(str(a))


def test_replace_marker_replaces_instead_of_merging(tmp_path):
    data = {"format": "tpsim-profile", "version": 1, "extends": "h100-sxm", "name": "r",
            "collectives": {"replace": True, "tables": [], "eager_extra_us": {"value": 1, "source": "mine"}}}
    prof = load_profile(_write(tmp_path, data))
    assert prof.collective_tables == () and prof.eager_extra_s == pytest.approx(1e-6)


# ------------------------------------------------------------------ the acceptance numbers

def test_costmodel_collective_acceptance():
    on = CostModel(load_profile("h100-sxm"), Stack())
    off = CostModel(load_profile("h100-sxm-p2p-off"), Stack())
    t_on = on.collective_s("all_reduce", 16384, 8, "graph")
    t_off = off.collective_s("all_reduce", 16384, 8, "graph")
    assert 10e-6 < t_on < 30e-6
    assert t_off > t_on
    assert on.collective_s("all_reduce", 16384, 16, "graph") > t_on
    assert off.collective_s("all_reduce", 16384, 16, "graph") > t_off


def test_custom_allreduce_tables_and_fallback():
    prof = load_profile("h100-sxm")
    custom = CostModel(prof, Stack(collective="custom"))
    nccl = CostModel(prof, Stack())
    # one-shot custom all-reduce beats NCCL at decode sizes in a node (aiconfigurator vLLM tables)
    assert custom.collective_s("all_reduce", 16384, 8, "graph") < nccl.collective_s("all_reduce", 16384, 8, "graph")
    # across nodes there is no custom kernel: priced as NCCL
    assert custom.collective_s("all_reduce", 16384, 16, "graph") == nccl.collective_s("all_reduce", 16384, 16, "graph")
