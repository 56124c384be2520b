"""hw/derive/fake_views.py: the derivations trace views as torch.compile sees them. On this torch a plain
make_fx under FakeTensorMode makes gpt-fast's wo a bmm over the expanded weight; torch.compile folds it
into one mm; eager_view_strides() gives the make_fx trace torch.compile's answer."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tpsim.hw.derive.fake_views import eager_view_strides  # noqa: E402

pytestmark = pytest.mark.hw


def _wo(o, w):
    """gpt_fast utils.py Attention's tail: o [b, H, 1, D] -> y [b, 1, H*D] -> wo."""
    y = o.transpose(1, 2).contiguous().view(4, 1, 1024)
    return F.linear(y, w)


def _ops(gm) -> list[str]:
    return [str(n.target).split(".")[1] for n in gm.graph.nodes if n.op == "call_function"]


def _make_fx_ops() -> list[str]:
    fm = FakeTensorMode()
    with fm:
        o, w = torch.empty(4, 8, 1, 128), torch.empty(8192, 1024)
        return _ops(make_fx(_wo)(o, w))


def test_torch_compile_folds_wo_and_the_derivations_trace_does_too():
    """torch.compile's forward graph (Dynamo + AOTAutograd, what the reference and the harness run)
    calls mm for wo. A plain make_fx trace on FakeTensors calls bmm on torch 2.9+ (its fake view keeps
    the size-1 dim's stride); under eager_view_strides() it calls mm, as torch.compile. The dispatch
    cache is class-wide, so each trace is asked after the other."""
    graphs = []

    def backend(gm, example_inputs):
        return aot_autograd(fw_compiler=lambda g, _: graphs.append(_ops(g)) or g.forward)(gm, example_inputs)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_wo, backend=backend, fullgraph=True, dynamic=False)(torch.randn(4, 8, 1, 128),
                                                                          torch.randn(8192, 1024))
    assert "mm" in graphs[0] and "bmm" not in graphs[0], graphs
    plain = _make_fx_ops()
    with eager_view_strides():
        eager = _make_fx_ops()
    again = _make_fx_ops()                                   # the eager answer was not left cached
    assert "mm" in eager and "bmm" not in eager, eager
    assert again == plain
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) >= (2, 9):
        assert "bmm" in plain and "expand" in plain, plain   # the pinned 2.13: make_fx alone would not fold
