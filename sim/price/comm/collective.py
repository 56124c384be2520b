"""Collectives -> seconds, from a Profile.

A measured latency-vs-bytes table for the (collective, group, scope, mode, impl), interpolated in
log-log; beyond its largest size, extended as the other mode's table of the same kernel grows, and
beyond every measured size at the derived model's bandwidth; without a table,
derived from the profile's topology graph (sim/hardware/topology.py: ring / tree / NVLS / two-level over
the bottleneck links), or, for a profile without a topology section, the NCCL-style protocol
model base + steps * hop + bytes / algbw (docs/sources.md §4).
"""
from __future__ import annotations

import bisect
import math

from tpsim.sim.price.comm import async_tp, fused_allreduce
from tpsim.sim.price.comm import custom_allreduce as car
from tpsim.sim.stack.impls import engine_collective
from tpsim.sim.schedule.ir import Op
from tpsim.sim.hardware.profile import CollectiveTable, LinkModel, Profile
from tpsim.sim.stack.spec import DTYPE_BYTES
from tpsim.sim.price.comm.topology import TopologyModel


def message_bytes(op: Op) -> int:
    """The bytes a collective op sends, as its price reads them: rows x width of its dtype; an
    all-gather counts the gathered output (nccl-tests' convention)."""
    a = dict(op.attrs)
    nbytes = DTYPE_BYTES[op.dtype] * a["rows"] * a["width"]
    return nbytes * a["group"] if op.kind == "all_gather" else nbytes


class CollectiveCost:
    """The collective half of sim.price.cost.CostModel: expects self.profile, self.stack,
    self.gpus_per_node and self._cache (set by CostModel.__init__)."""


    def scope(self, group: int) -> str:
        return "node" if group <= self.gpus_per_node else "net"

    def comm_s(self, op: Op, phase: str) -> float:
        mode = "graph" if self.stack.graphs(phase, op.name) else "eager"
        key = (op.signature, phase, mode)
        t = self._cache.get(key)
        if t is None:
            a = dict(op.attrs)
            if op.kind == "shift":                   # an async-TP ring step (sim/price/comm/async_tp.py)
                t = async_tp.shift_s(self, op, mode)
            elif a.get("fuse"):                      # a fused all-reduce + add + RMSNorm (fused_allreduce.py)
                t = fused_allreduce.fused_s(self, op, mode)
            else:
                t = self.collective_s(op.kind, message_bytes(op), a["group"], mode, width=a["width"])
            self._cache[key] = t
        return t

    def host_s(self, op: Op, phase: str) -> float:
        """Seconds of the host node NCCL adds to a captured CUDA graph for a collective that crosses
        the network (enqueue.cc: a plan with proxy ops launches hostStreamPlanCallback on NCCL's host
        stream and the kernel waits for it; NVIDIA/nccl#1805: skipped inside a node). The simulator
        chains these per rank (sim/engine/simpy_engine.py `host_s`); 0 in eager mode, inside a node, or while the
        profile leaves collectives.graph_net_host_us unset. "Inside a node" is NCCL's node: a P2P-off
        group that NCCL splits into several (nccl_nnodes > 1) has NET proxy ops, so it pays it too."""
        h = self.profile.graph_net_host_s
        if h <= 0 or not op.is_comm or not self.stack.graphs(phase, op.name):
            return 0.0
        return h if op.attr("group") > self.gpus_per_node or self.nccl_nnodes(op.attr("group")) > 1 else 0.0

    def nccl_nnodes(self, group: int) -> int:
        """NCCL's nNodes for a group: boxes spanned, or more where P2P off splits a box
        (TopologyModel.nccl_nnodes); without a topology section, the boxes spanned."""
        key = ("nccl_nnodes", group)            # once per group: host_s asks it at every collective simulated
        n = self._cache.get(key)
        if n is None:
            topo = self.topology()
            if topo is None or (group > self.gpus_per_node and not topo.spec.multi_node):
                n = -(-group // self.gpus_per_node)
            else:
                n = topo.nccl_nnodes(group, self.gpus_per_node)
            self._cache[key] = n
        return n

    def collective_s(self, collective: str, nbytes: float, group: int, mode: str, impl: str | None = None,
                     width: int | None = None) -> float:
        """Seconds for one collective of `nbytes` (nccl-tests size convention) over `group` ranks."""
        return self.price(collective, nbytes, group, mode, impl, width)[0]

    @property
    def notes(self) -> tuple[str, ...]:
        """What pricing had to say (an engine refusing its all-reduce kernel, in the engine's words), each
        once, in the order first said; predict prints them."""
        return tuple(getattr(self, "_notes", {}))

    def _note(self, text: str) -> None:
        """Add a note to `notes` (an empty text adds nothing)."""
        if text:
            self.__dict__.setdefault("_notes", {})[text] = None

    def note(self, text: str) -> None:
        """What a pricing module beside this one has to say (async_tp): added to `notes`."""
        self._note(text)

    def price(self, collective: str, nbytes: float, group: int, mode: str,
              impl: str | None = None, width: int | None = None) -> tuple[float, str]:
        """(seconds, path) for one collective as the running stack pays it.

        The device time comes, in order, from: (1) a measured table for (collective, group,
        scope, mode, impl); (2) the same table measured in the other mode (plus the profile's
        eager_extra when eager is asked and only graph data exists); (3) the topology model of the
        profile (sim/hardware/topology.py), plus eager_extra in eager mode; (4) without a topology, the NCCL
        protocol model `collectives.model`. An unmeasured group spanning nodes (topology with
        NICs) is its derived time plus the derived model's error on a measured one-node group (the
        smallest of at least the per-node size, else the largest). A non-NCCL impl (custom
        all-reduce) without a table for this group is priced as NCCL: that is what serving stacks
        fall back to where their kernel cannot run.

        In graph mode an NCCL collective also pays the profile's graph_extra: what the compiled
        functional collective adds inside a CUDA graph over the bare NCCL kernel the tables time
        (Inductor's clone of the input before the in-place all_reduce_, docs/sources.md §10), and
        graph_nccl_node: the event-record node NCCL's graph-mixing support puts after every captured
        NCCL kernel, which the next one waits on (docs/collectives-reference.md).

        `path` names where the number came from: "table", "table>table(graph)" (beyond the
        table's largest size, grown as the other mode's table of the same kernel grows),
        "table>derived" (beyond every table of it), "table(graph)+eager_extra", "topology:<algorithm/protocol>",
        "topology:<...>+node-correction(gN)" or "protocol-model", with "+graph_extra" and
        "+graph_nccl_node" appended when those were added.

        A serving engine's all-reduce (sim/stack/impls.py ENGINE_COLLECTIVES) is priced by its kernel's
        mechanism (sim/price/comm/custom_allreduce.py): path "<impl>:<kernel>"; where the engine refuses its
        kernel, NCCL's price with " (NCCL for <impl>)" appended and the engine's reason in `notes`.
        `width`: the tensor's last dimension (TensorRT-LLM picks its kernel by shape)."""
        scope = self.scope(group)
        if impl is None:
            impl = self.stack.collective if self.stack.collective != "auto" else self.profile.default_impl
        eng = engine_collective(impl)
        if eng is not None:
            return self._engine_price(eng, collective, nbytes, group, mode, width)
        t, path = self._device_price(collective, nbytes, group, mode, impl, scope)
        own_kernel = impl != "nccl" and path.startswith("table")     # a custom kernel's own table
        if mode == "graph" and not own_kernel and group > 1:
            t, path = self._graph_added(t, path)
        return t, path

    def _engine_price(self, eng, collective, nbytes, group, mode, width) -> tuple[float, str]:
        """An engine's all-reduce: its own kernel where the engine runs it, else the cluster's NCCL
        (the engines run all-gather / reduce-scatter on NCCL too)."""
        fallback = self.profile.default_impl
        if collective != "all_reduce" or group <= 1:
            return self.price(collective, nbytes, group, mode, fallback)
        p = self.engine_kernel(eng, nbytes, group, width)
        if p.kernel != "nccl":
            g = car.kernel_s(self.profile, eng.family, p.kernel, nbytes, group)
            path = f"{eng.name}:{p.kernel}"
            if mode == "eager":
                t, suffix = car.eager_s(self.profile, eng.family, p.kernel, g, nbytes, group)
                return t, path + suffix
            return g, path
        self._note(p.note)
        # the engine calls NCCL itself (vLLM / SGLang pynccl, TensorRT-LLM's NCCL op): out of place, no
        # functional-collective clone (graph_extra); a captured NCCL kernel still pays NCCL's record node
        t, path = self._device_price(collective, nbytes, group, mode, fallback, self.scope(group))
        if mode == "graph" and self.profile.graph_nccl_node_s > 0:
            t, path = t + self.profile.graph_nccl_node_s, path + "+graph_nccl_node"
        return t, f"{path} (NCCL for {eng.name})"

    def engine_kernel(self, eng, nbytes: float, group: int, width: int | None = None) -> car.Pick:
        """The kernel this model prices one all-reduce of an engine's implementation `eng` with (group
        > 1): the engine's rule on the profile's hardware (car.pick), or "nccl" with why, where the
        engine refuses its kernel or the profile holds no constants to price it (what `price` pays)."""
        p = car.pick(eng, nbytes, group, car.hardware(self.profile, group, self.gpus_per_node), width,
                     self.stack.dtype)
        if p.kernel != "nccl" and car.kernel_s(self.profile, eng.family, p.kernel, nbytes, group) is None:
            return car.Pick("nccl", f"{eng.name}: profile {self.profile.name} holds no measured {eng.family} "
                                    f"all-reduce constants for {group} ranks (collectives.custom_allreduce); "
                                    "priced as NCCL")
        return p

    def _graph_added(self, t: float, path: str) -> tuple[float, str]:
        """(t, path) plus what a captured NCCL collective pays in a compiled CUDA-graph step over the
        bare kernel: the functional collective's copy and NCCL's graph-mixing record node."""
        for s, label in ((self.profile.graph_extra_s, "+graph_extra"),
                         (self.profile.graph_nccl_node_s, "+graph_nccl_node")):
            if s > 0:
                t, path = t + s, path + label
        return t, path

    def _device_price(self, collective, nbytes, group, mode, impl, scope) -> tuple[float, str]:
        table = _find_table(self.profile, collective, group, scope, mode, impl)
        extra, label = 0.0, "table"
        if table is None:
            other = "graph" if mode == "eager" else "eager"
            table = _find_table(self.profile, collective, group, scope, other, impl)
            if table is not None:
                label = f"table({other})"
                if mode == "eager":
                    extra, label = self.profile.eager_extra_s, label + "+eager_extra"
        if table is not None:
            def beyond(b: float) -> float:
                return self.derived_s(collective, b, group)
            if nbytes > table.bytes[-1]:
                # Past the table's end, the same kernel measured further in the other mode gives the
                # growth (the modes differ by a per-call cost, not by bandwidth); past both, derived.
                longer = _find_table(self.profile, collective, group, scope, _OTHER_MODE[table.mode], impl)
                if longer is not None and longer.bytes[-1] > table.bytes[-1]:
                    def beyond(b: float, t=longer) -> float:
                        return _table_s(t, b, lambda x: self.derived_s(collective, x, group))
                    label = label.replace("table", f"table>table({longer.mode})", 1)
                else:
                    label = label.replace("table", "table>derived", 1)
            return extra + _table_s(table, nbytes, beyond), label
        if group == 1:
            return 0.0, "local"             # nothing to exchange; measured group-1 tables win above
        extra = self.profile.eager_extra_s if mode == "eager" else 0.0
        suffix = "+eager_extra" if mode == "eager" and extra else ""
        topo = self.topology()
        if group > self.gpus_per_node and topo is not None and topo.spec.multi_node:
            # Spanning nodes, unmeasured: the derived time, corrected by the model's error on a
            # measured one-node group of at least the per-node size (that size itself if measured).
            # Each node's GPUs move at least what a one-node all-reduce of the buffer moves, so a
            # derived cross-node time must not undercut a measured one-node time; the cluster's own
            # collectives cross nodes (a custom one-shot kernel does not), hence default_impl.
            nodes = -(-group // self.gpus_per_node)
            local = -(-group // nodes)                  # ranks fill nodes evenly (TopologyModel.placement)
            ref = self._measured_node_group(collective, local)
            if ref is not None:
                ref_s, _ = self._device_price(collective, nbytes, ref, mode, self.profile.default_impl,
                                              self.scope(ref))
                err = ref_s - self.derived_s(collective, nbytes, ref)
                name, t = self._derived(collective, nbytes, group)
                return max(t + err, 0.0), f"{name}+node-correction(g{ref})"
        name, t = self._derived(collective, nbytes, group)
        return extra + t, name + suffix

    def _derived(self, collective: str, nbytes: float, group: int) -> tuple[str, float]:
        """(path, seconds) of the unmeasured path: topology model if the profile has one that
        covers the group, else the protocol model (graph-mode device time, no eager overhead)."""
        if group <= 1:
            return "local", 0.0
        topo = self.topology()
        if topo is not None and (group <= self.gpus_per_node or topo.spec.multi_node):
            name, t = topo.pick(collective, nbytes, group, self.gpus_per_node)
            return f"topology:{name}", t
        scope = self.scope(group)
        if not self.profile.link_models:
            raise ValueError(f"profile {self.profile.name}: no measured table, no topology NICs and no "
                             f"collectives.model to price a {collective} over {group} ranks ({scope})")
        return "protocol-model", ring_s(self._link(scope), collective, nbytes, group)

    def _measured_node_group(self, collective: str, size: int) -> int | None:
        """The one-node group size (> 1) with a measured table of the cluster's own collectives
        (either mode): the smallest at least `size`, else the largest below it; None if none."""
        impl = self.profile.default_impl
        groups = {t.group for t in self.profile.collective_tables
                  if t.collective == collective and t.impl == impl and t.scope == "node" and 1 < t.group
                  <= self.gpus_per_node}
        above = [g for g in groups if g >= size]
        return min(above) if above else max(groups, default=None)

    def derived_s(self, collective: str, nbytes: float, group: int) -> float:
        """The unmeasured path's seconds (see _derived)."""
        return self._derived(collective, nbytes, group)[1]

    def topology(self):
        """The profile's TopologyModel (built once per CostModel), or None."""
        if self.profile.topology is None:
            return None
        if getattr(self, "_topology", None) is None:
            self._topology = TopologyModel(self.profile.topology)
        return self._topology

    def _link(self, scope: str) -> tuple[LinkModel, ...]:
        return self.profile.link_models.get(scope) or self.profile.link_models["node"]


def ring_s(protocols: tuple[LinkModel, ...], collective: str, nbytes: float, group: int) -> float:
    """NCCL's choice: the fastest enabled protocol for this size (docs/sources.md §4).

    Ring all-reduce: 2(n-1) steps at algbw = busbw * n / (2(n-1)); all-gather and
    reduce-scatter: n-1 steps at algbw = busbw * n / (n-1). A protocol whose hop is paid once
    (NVLS: the switch reduces) has latency base + hop whatever n."""
    n = group
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        steps, bw_factor = 2 * (n - 1), n / (2 * (n - 1))
    else:
        steps, bw_factor = n - 1, n / (n - 1)
    return min(p.base_s + (steps if p.per_step else 1) * p.hop_s + nbytes / (p.busbw_gbps * 1e9 * bw_factor)
               for p in protocols)


_OTHER_MODE = {"eager": "graph", "graph": "eager"}


def _find_table(profile: Profile, collective, group, scope, mode, impl) -> CollectiveTable | None:
    for t in profile.collective_tables:
        if (t.collective, t.group, t.scope, t.mode, t.impl) == (collective, group, scope, mode, impl):
            return t
    return None


def lower_envelope(times) -> tuple[float, ...]:
    """Each measured time replaced by the least time measured at its size or above (a running minimum
    from the largest size down). A collective of fewer bytes does no more work than one of more (NCCL
    keeps the bytes per channel and the ring's steps as the size grows: enqueue.cc getChannnelThreadInfo,
    tuning.cc), and timing noise only adds time (a clock dip, another kernel, the host), so a point
    above a larger size's time is noise and the larger size's time bounds it: aiconfigurator's h100_sxm
    NCCL 2.29.2 run put 7.27 us at 16 KiB over 7.08 at 32 KiB (2 GPUs)."""
    out, low = [], math.inf
    for x in reversed(times):
        low = min(low, x)
        out.append(low)
    return tuple(reversed(out))


def _table_s(t: CollectiveTable, nbytes: float, derived) -> float:
    """Log-log interpolation in a measured table's lower envelope (lower_envelope); beyond its largest
    size, the largest measured point plus what `beyond(bytes)` adds between that size and this one:
    the same collective's table in the other mode where it reaches further, else the derived model
    (its bandwidth, with the protocol it would pick at these sizes)."""
    xs, ts = t.bytes, lower_envelope(t.time_s)
    if nbytes <= xs[0]:
        return ts[0]                    # latency floor: below the smallest size nothing gets cheaper
    if nbytes >= xs[-1]:
        return ts[-1] + max(derived(nbytes) - derived(xs[-1]), 0.0)
    i = bisect.bisect_left(xs, nbytes)
    return loglog(nbytes, (xs[i - 1], ts[i - 1]), (xs[i], ts[i]))


def loglog(x: float, p0: tuple, p1: tuple) -> float:
    (x0, y0), (x1, y1) = p0, p1
    f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
