"""Which strides a FakeTensor `view` gets, and tracing with the reference's.

torch.compile traces on FakeTensors, and matmul decides from those strides whether it can fold a
3-D input into one mm (`should_fold`: each leading stride equals the next stride x the next size).
The reference ran torch 2.5, whose FakeTensor ran view ops' C++ meta kernels
(`_meta_registrations.activate_meta` registers no Python meta for a view op: "All view ops have
meta kernels in C++ today"): a view's strides were eager's (at::detail::computeStride), where a
size-1 dim takes the stride of the dims inside it. torch 2.9+ registers a fake impl for view and
_unsafe_view (`fake_impls._view_meta`, pytorch#158406) that goes through
torch._refs._reshape_view_helper, which keeps a size-1 dim's old stride.

For gpt-fast's attention output y = o.transpose(1, 2).contiguous().view(b, 1, H*D) (o [b, H, 1, D]
contiguous) that is (H*D, H*D, 1) under eager's rule and (H*D, D, 1) under the helper's: only
the first folds, so on torch 2.9+ the reference's wo is a bmm over the weight expanded b times
(sim Stack.wo_bmm; docs/compiled-stack.md).
"""
from __future__ import annotations

import contextlib
from unittest import mock

import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensorMode

VIEW_STRIDES = ("eager", "fake")       # a FakeTensor view's strides: the C++ meta's, or this torch's fake impl
_VIEW_OPS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


@contextlib.contextmanager
def view_strides(mode: str):
    """Trace FakeTensor views with eager's strides ("eager": the fake impl torch 2.9+ registers for
    view / _unsafe_view is lifted, so the C++ meta kernel runs, as in the reference's torch 2.5) or
    with this torch's own ("fake"). FakeTensorMode's dispatch cache is class-wide, so it is cleared
    on the way in and out: a view cached under the other mode must not answer."""
    if mode not in VIEW_STRIDES:
        raise ValueError(f"unknown view strides {mode!r}; choose from: {', '.join(VIEW_STRIDES)}")
    FakeTensorMode.cache.clear()
    try:
        with mock.patch.dict(fake_impls.op_implementations_dict):
            if mode == "eager":
                for op in _VIEW_OPS:
                    fake_impls.op_implementations_dict.pop(op, None)
            yield
    finally:
        FakeTensorMode.cache.clear()


def folds_attention_output() -> bool:
    """Whether this torch's FakeTensor view of gpt-fast's attention output ([2, 3, 1, 4] transposed
    to [2, 1, 3, 4], viewed as [2, 1, 12]) has strides matmul folds: True on torch 2.5 (eager's
    (12, 12, 1)), False on torch 2.9-2.13 ((12, 4, 1))."""
    FakeTensorMode.cache.clear()
    try:
        with FakeTensorMode():
            y = torch.empty(2, 3, 1, 4).transpose(1, 2).contiguous().view(2, 1, 12)
            return y.stride(0) == y.stride(1) * y.size(1)
    finally:
        FakeTensorMode.cache.clear()
