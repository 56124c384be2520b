"""Trace FakeTensor views the way torch.compile sees them.

tpsim's kernel-table derivations (hw/derive/inductor_gpu.py, hw/derive/inductor_overlap.py) trace the reference's
decode step with make_fx on FakeTensors, then lower it with compile_fx. matmul decides during that
trace, from the strides of its input, whether it can fold a 3-D input into one mm (`should_fold`:
each leading stride equals the next stride x the next size).

gpt-fast's attention output y = o.transpose(1, 2).contiguous().view(b, 1, H*D) (o [b, H, 1, D]
contiguous) is where the two traces part:
* torch.compile (Dynamo, then AOTAutograd) folds it on every torch checked: on 2.13 its forward
  graph calls aten.mm for wo (tests/test_fake_views.py), although Dynamo's own FakeTensor for y has
  strides (H*D, D, 1). AOTAutograd retraces functionalized, and its view outputs carry eager's
  strides (H*D, H*D, 1), at::detail::computeStride's. torch 2.5, which the reference ran, gave every
  FakeTensor view the C++ meta kernel's strides anyway (`_meta_registrations.activate_meta`: "All
  view ops have meta kernels in C++ today").
* A plain make_fx under FakeTensorMode on torch 2.9+ (2.13 here) views through the fake impl
  registered for view / _unsafe_view (`fake_impls._view_meta`, pytorch#158406), i.e.
  torch._refs._reshape_view_helper, which keeps the size-1 dim's old stride: (H*D, D, 1). matmul
  cannot fold that, so F.linear becomes a bmm over the weight expanded b times, and under
  coordinate_descent_tuning Inductor makes it a generated reduction reading the weight once per
  batch row. No torch.compile run does this; until this module, tpsim's GPU table did.

`eager_view_strides()` lifts that fake impl during a derivation's trace, so the C++ meta kernel
gives each view its strides, as torch.compile ends up with.
"""
from __future__ import annotations

import contextlib
from unittest import mock

import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensorMode

_VIEW_OPS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


@contextlib.contextmanager
def eager_view_strides():
    """FakeTensor views get the C++ meta kernel's strides (eager's) inside. FakeTensorMode's dispatch
    cache is class-wide, so it is cleared on the way in and out: a view cached under the other rule
    must not answer."""
    FakeTensorMode.cache.clear()
    try:
        with mock.patch.dict(fake_impls.op_implementations_dict):
            for op in _VIEW_OPS:
                fake_impls.op_implementations_dict.pop(op, None)
            yield
    finally:
        FakeTensorMode.cache.clear()
