"""An H100 that is not there: enough of torch.cuda and Triton's driver for Inductor to lower and
generate Triton code for FakeTensor inputs on device "cuda" with no GPU: on a CPU-only torch build, or a
CUDA build (the reference's torch 2.5.1) on a machine without a driver.

Nothing runs on a device: tensors are FakeTensors (shapes, strides, dtypes), Inductor stops after
writing its output code (hw/derive/inductor_gpu.py hooks GraphLowering.codegen). What is faked and why:

* torch.cuda device queries answer as one H100 SXM: 132 SMs, compute capability 9.0, 80 GB, warp 32,
  64 Ki registers and 2048 threads per SM, 228 KB shared memory per block opt-in, 50 MB L2 (NVIDIA
  H100 datasheet / CUDA occupancy tables for cc 9.0). Inductor reads them for `DeviceProperties`
  (triton_meta: SM count feeds its reduction split and persistent-reduction heuristics), for
  `is_big_gpu` (templates) and for the Triton target.
* Triton's active driver reports target cuda:90 (its own driver needs libcuda).
* The CUDA RNG state and device exchange, which AOTAutograd and Inductor save and restore around
  compilation, are no-ops.
* Inductor's uniform-value constant folding evaluates each `full` as a 1-element tensor on the
  graph's device: on the CPU instead (the pass reads only its value).
* Tensor.copy_ (AOTAutograd's write-back of a mutated input, the KV cache) and x[index_tensor]
  (the embedding decomposition's weight[indices]) go through the dispatcher: their Python bindings
  take a CUDA device guard, which a CPU build has not got and a CUDA build without a driver cannot give.
* A CUDA build's FakeTensorMode allocates one real CUDA tensor on its first "cuda" FakeTensor
  (fake_tensor.init_gpu_context): skipped.
* Inductor's joint-graph pattern initialisation (`fx_passes.joint_graph.lazy_init`: pad_mm, the SDPA
  pattern rewrite `fuse_attention._sfdp_init`, misc patterns) traces example tensors on the device
  itself, which a CPU build cannot allocate; it is skipped. What that leaves out: pad_mm pads matmul
  dims that are not multiples of 8 (the reference models' are), the SDPA rewrite replaces a
  matmul-softmax-matmul pattern by `scaled_dot_product_attention`, which re-dispatches under the
  harness's math-only backend flags to the same math decomposition, and the misc patterns
  (randperm + index_add) do not occur in a decode graph.
"""
from __future__ import annotations

import collections
import contextlib
from unittest import mock

import torch
from torch._inductor.fx_passes import joint_graph
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

from tpsim.hw.torch_compat import set_triton_active_driver, triton_active_driver

Props = collections.namedtuple(
    "Props", "name major minor total_memory multi_processor_count warp_size regs_per_multiprocessor "
             "max_threads_per_multi_processor L2_cache_size shared_memory_per_block_optin "
             "shared_memory_per_multiprocessor gcnArchName uuid")
H100 = Props("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, 132, 32, 65536, 2048, 50 * 2**20, 232448, 233472, "", "0")


class FakeDriver:
    """Triton's active driver for the fake H100: target sm_90, device 0, stream 0."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget     # lazy: triton is optional
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, *a):
        return 0

    def set_current_device(self, *a):
        pass

    def get_device_interface(self):
        return torch.cuda

    def get_active_torch_device(self):
        return torch.device("cuda", 0)

    def is_active(self):
        return True


def _copy_(self, src, non_blocking=False):
    """Tensor.copy_ through the dispatcher: the Python binding takes a device guard a CPU build has
    not got for "cuda" (AOTAutograd writes a mutated graph input back with copy_)."""
    return torch.ops.aten.copy_.default(self, src, non_blocking)


def _getitem(self, index):
    """x[indices] with one index tensor as aten.index (the embedding decomposition's weight[indices]):
    Python indexing takes a device guard, which a CUDA build without a driver cannot give."""
    if isinstance(index, torch.Tensor):
        return torch.ops.aten.index.Tensor(self, [index])
    return torch.Tensor.__getitem__(self, index)


def _deduce_on_cpu(orig):
    """Inductor's uniform-value constant folding builds small real tensors (a 1-element one per
    `full`, scalar_tensor, ...) to propagate constant values: built on the CPU (the pass reads
    their values, not their device)."""
    def deduce(self, node):
        dev = node.kwargs.get("device") if node.op == "call_function" else None
        if dev is None or not str(dev).startswith("cuda"):
            return orig(self, node)
        kw = node.kwargs
        node.kwargs = dict(kw, device=torch.device("cpu"))
        try:
            return orig(self, node)
        finally:
            node.kwargs = kw
    return deduce


def _rng():
    return torch.zeros(16, dtype=torch.uint8)


@contextlib.contextmanager
def fake_h100():
    """Within: torch.cuda and Triton answer as one H100 (see module doc). Needs triton installed."""
    from triton.runtime.driver import driver            # lazy: raises ImportError without triton
    c = torch.cuda
    patches = [
        mock.patch.object(c, "is_available", lambda: True),
        mock.patch.object(c, "device_count", lambda: 1),
        mock.patch.object(c, "current_device", lambda: 0),
        mock.patch.object(c, "get_device_properties", lambda *a, **k: H100),
        mock.patch.object(c, "_get_device_properties", lambda *a, **k: H100, create=True),
        mock.patch.object(c, "get_device_capability", lambda *a, **k: (9, 0)),
        mock.patch.object(c, "is_initialized", lambda: True),
        mock.patch.object(c, "_lazy_init", lambda: None),
        mock.patch.object(c, "set_device", lambda *a: None),
        mock.patch.object(c, "_exchange_device", lambda i: 0),
        mock.patch.object(c, "_maybe_exchange_device", lambda i: 0),
        mock.patch.object(c, "get_rng_state", lambda *a, **k: _rng()),
        mock.patch.object(c, "set_rng_state", lambda *a, **k: None),
        mock.patch("torch.cuda.random.get_rng_state", lambda *a, **k: _rng()),
        mock.patch("torch.cuda.random.set_rng_state", lambda *a, **k: None),
        mock.patch.object(torch.version, "cuda", "12.8"),
        mock.patch.object(torch._C, "_cuda_getDevice", lambda: 0, create=True),
        mock.patch.object(torch._C, "_cuda_getDeviceCount", lambda: 1, create=True),
        mock.patch("torch._inductor.fx_passes.joint_graph.lazy_init", lambda *a, **k: None),
    ]
    patches.append(mock.patch.object(joint_graph.UniformValueConstantFolder, "_deduce_value",
                                     _deduce_on_cpu(joint_graph.UniformValueConstantFolder._deduce_value)))
    patches += [mock.patch.object(cls, "copy_", _copy_, create=True) for cls in (FakeTensor, FunctionalTensor)]
    if hasattr(fake_tensor, "init_gpu_context"):
        # a CUDA build of torch (the reference's 2.5.1 is one) allocates a real CUDA tensor on the first
        # FakeTensor on "cuda": no driver here
        patches.append(mock.patch.object(fake_tensor, "init_gpu_context", lambda *a, **k: None))
    patches += [mock.patch.object(cls, "__getitem__", _getitem, create=True) for cls in (FakeTensor, FunctionalTensor)]
    old = triton_active_driver(driver)
    driver.set_active(FakeDriver())
    try:
        with contextlib.ExitStack() as st:
            for p in patches:
                st.enter_context(p)
            yield
    finally:
        set_triton_active_driver(driver, old)
