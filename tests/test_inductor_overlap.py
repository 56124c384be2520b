"""Where Inductor (PyTorch 2.5's comm-reordering passes) leaves the reference ladder's all-reduce
waits, against tpsim's ladder plan (hw/derive/inductor_overlap.py; docs/compiled-stack.md).

The derivation lowers the transcribed GPTLadder / GPTParallel decode step (hw/derive/reference_ladder.py,
the residual add a user-defined Triton kernel) for the fake H100, three layers at the probe's
prime shapes, in a fresh interpreter (the fake device patches Inductor's device queries)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.hw, pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason="needs torch and triton (pip install triton) to generate Triton code")]

_DERIVE = """
import json
from unittest import mock
from torch._inductor import comms
from torch._inductor.utils import contains_collective
from tpsim.hw import inductor_overlap as O
s = O.probe_shapes()
heavy = lambda sn: 1e6 if contains_collective(sn) else 1.0   # every collective outlasts any compute
first = []                                                    # the order after the first pass, per run
orig = comms.reorder_compute_for_overlap
def record(nodes):
    out = orig(nodes)
    first.append([O.node_ops(n) for n in out])
    return out
with mock.patch.object(comms, "reorder_compute_for_overlap", record):
    ladder, heavy_comm = O.derive("ladder", s), O.derive("ladder", s, estimator=heavy)
print(json.dumps({
    "ladder": ladder,
    "ladder-no-passes": O.derive("ladder", s, passes=False),
    "ladder-heavy-comm": heavy_comm,
    "first-pass-moved": first[0] != first[1],
    "parallel": O.derive("parallel", s),
    "producers": {label: O.all_reduce_producers(O.compile_order(m, O.probe_shapes(batch=b)).code)
                  for label, m, b in (("dense", "dense", 7), ("dense-b1", "dense", 1), ("ladder", "ladder", 7),
                                      ("parallel", "parallel", 7))},
}))
"""


@pytest.fixture(scope="module")
def derived() -> dict:
    out = subprocess.run([sys.executable, "-c", _DERIVE], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_ladder_windows_are_tpsims_plan_but_the_last_add(derived):
    from tpsim.hw.derive import inductor_overlap as O
    w = derived["ladder"]
    # layer 1, in full: AR(attn_1) overlaps the previous layer's MLP add and layer 1's MLP; AR(mlp_1)
    # overlaps layer 1's attention add and layer 2's attention (tpsim's ladder.py plan)
    assert O.compute_only(w["L1.attn.allreduce"]) == ["L0.mlp.add", "L1.mlp.norm", "L1.mlp.up", "L1.mlp.act",
                                                      "L1.mlp.down"]
    assert O.compute_only(w["L1.mlp.allreduce"]) == ["L1.attn.add", "L2.attn.norm", "L2.attn.qkv", "L2.attn.sdpa",
                                                     "L2.attn.out"]
    # block 0 adds the zeros the model starts from (not in tpsim's plan, which starts without them)
    assert O.compute_only(w["L0.attn.allreduce"])[0] == "L0.zero.mlp.add"
    # the one difference: GPTLadder's final `x + prev_attn + prev_mlp` is generated code, fused with
    # the final norm after both waits, so the last MLP all-reduce overlaps nothing (tpsim: the last
    # attention add)
    assert O.compare("ladder", w) == {"L2.mlp.allreduce": ([], ["L2.attn.add"])}


def test_each_wait_comes_before_the_next_issue(derived):
    """In the emulation (the installed torch's passes, 2.5's locality rule) each collective is pulled
    down to its wait, and the comms' global order (WeakDeps on the previous collective's buffer, which
    its wait mutates) then makes the next all-reduce depend on the previous wait: one all-reduce in
    flight at a time. torch 2.5.1 itself issues AR(mlp_i) before it waits for AR(attn_i), tpsim's plan
    order, with the same compute in every window (docs/compiled-stack.md); on a stream that runs
    collectives in order (sim/engine/simpy_engine.py's comm stream) both are the same timeline."""
    for ar, w in derived["ladder"].items():
        assert not [o for o in w if o.startswith("issue:")], (ar, w)


def test_without_the_pass_list_the_ladder_overlaps_nothing(derived):
    """reorder_for_compute_comm_overlap with an empty pass list (torch 2.13's default): 2.5's
    locality pass leaves each wait right after its all-reduce."""
    assert all(w == [] for w in derived["ladder-no-passes"].values())
    assert len(derived["ladder-no-passes"]) == 6


def test_the_windows_do_not_depend_on_runtime_estimates(derived):
    """With estimates, reorder_compute_for_overlap reorders (it pulls ready compute behind each
    collective), but raise_comms runs last and reschedules by collective ancestry and position only."""
    assert derived["first-pass-moved"]
    assert derived["ladder-heavy-comm"] == derived["ladder"]


def test_parallel_all_reduce_overlaps_nothing_as_in_tpsim(derived):
    from tpsim.hw.derive import inductor_overlap as O
    assert set(derived["parallel"]) == {"L0.allreduce", "L1.allreduce", "L2.allreduce"}
    assert all(O.compute_only(w) == [] for w in derived["parallel"].values())
    assert O.compare("parallel", derived["parallel"]) == {}


def test_no_copy_kernel_before_an_all_reduce(derived):
    """Inductor lowers the functional all-reduce as clone + in-place all_reduce_, and the clone
    launches nothing: each all_reduce_ comes right after the kernel that wrote its buffer -- wo's /
    w2's extern mm (batch 7), the batch-1 GEMV reduction, parallel's sum of the two partials -- so a
    compiled graph step pays no copy per all-reduce (the profiles' collectives.graph_extra_us is 0)."""
    p = derived["producers"]
    assert {k: len(v) for k, v in p.items()} == {"dense": 6, "dense-b1": 6, "ladder": 6, "parallel": 3}
    assert all(wrote for v in p.values() for _, wrote in v), p
    assert {name for name, _ in p["dense"] + p["ladder"]} == {"extern_kernels.mm"}
    assert all(name.startswith("triton_") and "mm" in name for name, _ in p["dense-b1"]), p["dense-b1"]
    assert all(name.startswith("triton_") and "add" in name for name, _ in p["parallel"]), p["parallel"]
