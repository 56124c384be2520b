"""What the kernel-table derivations need from torch, on the torch that is installed and on the one the
reference harness ran (torch 2.5.1 + triton 3.1.0: docs/sources.md §10, NCCL 2.21.5 in its logs).

The derivations (hw/derive/inductor_gpu.py, hw/derive/inductor_kernels.py) trace the reference's graph and stop
inside Inductor. A few of the hooks they use moved between those releases; each is bridged here,
in one place, by feature (never by version number):

* `annotate` (torch.fx.traceback.annotate, torch >= 2.9): FX nodes traced inside carry
  {"tpsim_op": ...} in node.meta["custom"]. Older torch copies meta["custom"] onto traced nodes
  too (fx/proxy.py _COPY_META_FIELDS), so the same context manager over current_meta does it.
* `buffer_accesses`: Inductor's per-buffer byte estimate of a scheduled node
  (BaseSchedulerNode.get_read_write_buffer_accesses, newer torch). torch 2.5 has only the summed
  get_read_write_buffers_sizes; its body is the same formula, kept here per buffer.
* `scheduler_nodes`: Scheduler._codegen's node list (an argument in newer torch; self.nodes in 2.5).
* `triton_active_driver` / `set_triton_active_driver`: triton's DriverConfig keeps the active
  driver in `_active` (3.4+) or `active` (3.1).
* `wrap_triton` (torch.library, 2.6+): a user-defined Triton kernel traced as one graph node; 2.5
  calls it torch._library.triton.capture_triton.
* `known_inductor_flags`: Inductor config keys this torch has (2.5 has no reorder_for_peak_memory).
"""
from __future__ import annotations

import collections
import contextlib
import copy

import torch.fx.traceback as fx_traceback
import torch.library


@contextlib.contextmanager
def _annotate(annotation: dict):
    """torch.fx.traceback.annotate for a torch without it: nodes traced inside carry `annotation`
    in node.meta["custom"] (merged into an enclosing annotation, restored on the way out)."""
    meta = fx_traceback.current_meta
    had = "custom" in meta
    old = copy.copy(meta.get("custom", {}))
    try:
        if not had:
            meta["custom"] = {}
        meta["custom"].update(annotation)
        yield
    finally:
        if had:
            meta["custom"] = old
        else:
            del meta["custom"]


annotate = getattr(fx_traceback, "annotate", _annotate)


def buffer_accesses(node, include_reads: bool, include_writes: bool) -> dict[str, int]:
    """Inductor's estimate of the bytes a scheduled node reads / writes, per buffer: for each
    buffer min(elements the node's loops touch x its accesses, the buffer's size) x dtype size;
    a FusedSchedulerNode counts each buffer whole (its loop size is not one number), and drops the
    buffers it writes that nothing outside it reads."""
    if hasattr(node, "get_read_write_buffer_accesses"):
        return node.get_read_write_buffer_accesses(include_reads=include_reads, include_writes=include_writes)
    return _buffer_accesses_port(node, include_reads, include_writes)


def _buffer_accesses_port(node, include_reads: bool, include_writes: bool) -> dict[str, int]:
    """torch 2.5's get_read_write_buffers_sizes (torch/_inductor/scheduler.py), per buffer."""
    from torch._inductor import ir                                   # lazy: Inductor, not for annotate's users (hw.runner)
    from torch._inductor import scheduler as S                       # lazy: as above
    from torch._inductor.utils import get_dtype_size, sympy_product  # lazy: as above
    from torch._inductor.virtualized import V                        # lazy: as above
    if isinstance(node, S.NopKernelSchedulerNode):
        return {}
    if isinstance(node, S.ExternKernelSchedulerNode) and isinstance(node.node, ir.MultiOutput):
        return {}

    sizevars = V.graph.sizevars
    size_hint = getattr(sizevars, "size_hint", None) or sizevars.optimization_hint    # renamed after 2.5

    def hint(expr) -> int:
        return size_hint(expr, fallback=0)

    node_numel = (hint(sympy_product(node.get_ranges()[0]) * sympy_product(node.get_ranges()[1]))
                  if isinstance(node, S.SchedulerNode) else int(1e9))
    accesses = collections.defaultdict(list)
    deps = ((node.read_writes.reads if include_reads else set()) | (node.read_writes.writes if include_writes else set()))
    for dep in deps:
        accesses[dep.name].append(dep)
    reads = {d.name for d in node.read_writes.reads} if include_reads else set()
    writes = {d.name for d in node.read_writes.writes} if include_writes else set()
    if isinstance(node, S.FusedSchedulerNode):
        inside = set(node.snodes)
        dropped = {w for w in writes if not ({u.node for u in node.scheduler.name_to_buf[w].users} - inside)}
        reads, writes = reads - dropped, writes - dropped

    def nbytes(buf, elems: int) -> int:
        if buf is None or isinstance(buf.layout, ir.MultiOutputLayout):
            return 0
        if isinstance(buf.layout, ir.NoneLayout):
            return sum(nbytes(V.graph.get_buffer(m), elems) for m in buf.get_mutation_names())
        return get_dtype_size(buf.get_dtype()) * min(elems, hint(sympy_product(buf.get_size())))

    out = {}
    for name in sorted(reads | writes):
        buf = V.graph.name_to_buffer.get(name) or V.graph.graph_inputs.get(name)
        if buf is not None:
            out[name] = nbytes(buf, node_numel * len(accesses[name]))
    return out


def scheduler_nodes(sched, args: tuple) -> list:
    """The nodes Scheduler._codegen generates code for: its argument (newer torch) or sched.nodes."""
    return list(args[0]) if args else list(sched.nodes)


def triton_active_driver(driver):
    """triton.runtime.driver's active driver (DriverConfig._active, or .active in triton 3.1)."""
    return driver._active if hasattr(driver, "_active") else driver.active


def set_triton_active_driver(driver, active) -> None:
    if hasattr(driver, "_active"):
        driver._active = active
    else:
        driver.active = active


def _wrap_triton():
    if hasattr(torch.library, "wrap_triton"):
        return torch.library.wrap_triton
    from torch._library.triton import capture_triton          # lazy: torch 2.5's name for it
    return capture_triton


wrap_triton = _wrap_triton()


def known_inductor_flags(flags: dict) -> dict:
    """`flags` less the keys torch._inductor.config does not have on this torch."""
    import torch._inductor.config as icfg                            # lazy: as _buffer_accesses_port
    return {k: v for k, v in flags.items() if hasattr(icfg, k.split(".")[0])}
