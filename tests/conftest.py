"""Fixtures shared by more than one test file."""
import json

import pytest


@pytest.fixture
def no_nic_profile(tmp_path) -> str:
    """Path of h100-sxm with the topology's NICs removed: one box that cannot span nodes."""
    from tpsim.sim.profile import read_raw
    data, _ = read_raw("h100-sxm")
    for k in ("nic_gbps", "nics_per_node"):
        data["topology"].pop(k)
    p = tmp_path / "one-box.json"
    p.write_text(json.dumps(data))
    return str(p)
