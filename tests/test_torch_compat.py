"""hw/torch_compat.py: the bridges that let the kernel-table derivations run on the installed torch
and on the reference's 2.5.1, checked here against the installed torch's own versions of them."""
from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

import torch._inductor.config as icfg  # noqa: E402
from torch._inductor import scheduler as S  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
import torch.fx.traceback as fx_traceback  # noqa: E402

from tpsim.hw import torch_compat  # noqa: E402

pytestmark = pytest.mark.hw


def _custom_of(annotate) -> dict[str, dict | None]:
    """node name -> its meta["custom"] for f traced with `annotate` around two ops, nested."""
    def f(x):
        with annotate({"tpsim_op": "outer"}):
            y = x * 2
            with annotate({"extra": 1}):
                z = y + 1
        return z - 3

    with fx_traceback.preserve_node_meta():
        gm = make_fx(f)(torch.ones(4))
    return {n.name: n.meta.get("custom") for n in gm.graph.nodes if n.op == "call_function"}


def test_the_annotate_fallback_marks_traced_nodes_as_torchs_own():
    """The fallback (for a torch without fx.traceback.annotate, 2.5) gives every traced node the
    same meta["custom"] as torch's own, nested annotations merged and restored on the way out."""
    mine = _custom_of(torch_compat._annotate)
    assert mine == {"mul": {"tpsim_op": "outer"}, "add": {"tpsim_op": "outer", "extra": 1}, "sub": None}
    if hasattr(fx_traceback, "annotate"):
        assert _custom_of(fx_traceback.annotate) == mine
    assert "custom" not in fx_traceback.current_meta


@pytest.mark.skipif(not hasattr(S.BaseSchedulerNode, "get_read_write_buffer_accesses"),
                    reason="the port is checked against torch's own per-buffer estimate (torch >= 2.6)")
def test_the_per_buffer_estimate_port_equals_inductors_own():
    """torch 2.5 has only the summed byte estimate; the port keeps it per buffer. On a torch with
    its own per-buffer method the two agree on every scheduled node of a compiled norm + matmul +
    softmax + in-place scatter (plain and fused nodes)."""
    checked = []
    orig = S.Scheduler.codegen

    def codegen(sched):
        for n in sched.nodes:
            for r, w in ((True, False), (False, True), (True, True)):
                assert torch_compat._buffer_accesses_port(n, r, w) == \
                    n.get_read_write_buffer_accesses(include_reads=r, include_writes=w), (type(n).__name__, r, w)
            checked.append("fused" if isinstance(n, S.FusedSchedulerNode) else type(n).__name__)
        raise _Stop()

    class _Stop(Exception):
        pass

    def f(x, w, cache, pos):
        h = torch.nn.functional.rms_norm(x, (x.shape[-1],)) @ w
        cache.index_put_((pos,), h[:1])
        return torch.softmax(h, -1) + cache.sum()

    fn = torch.compile(f, fullgraph=True, dynamic=False)
    torch._dynamo.reset()
    S.Scheduler.codegen = codegen
    try:
        # no FX graph cache: a cached graph never reaches the scheduler
        with icfg.patch({"fx_graph_cache": False, "force_disable_caches": True}), contextlib.suppress(_Stop):
            try:
                fn(torch.randn(8, 64), torch.randn(64, 32), torch.zeros(16, 32), torch.tensor([3]))
            except Exception as e:      # noqa: BLE001 - Dynamo wraps our _Stop
                if not checked:
                    raise
                del e
    finally:
        S.Scheduler.codegen = orig
        torch._dynamo.reset()
    assert "fused" in checked and "SchedulerNode" in checked, checked
