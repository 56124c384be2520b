"""Validation of profile JSON: the field-by-field parse into a `Profile`, where every failure names
the file and the field, with real lower bounds (no denormal rates, no negative extras) and counts
from the one bounds table (sim/bounds.py). The file-level read is sim/hardware/read.py."""
from __future__ import annotations

import difflib
from dataclasses import replace

from tpsim.sim.bounds import BOUNDS, SECONDS
from tpsim.sim.hardware.schema import (ArrivalJitter, COLLECTIVES, CollectiveTable, ComputePoint, Curve,
                                       JITTER_DISTS, LinkModel, MAX_TABLE_POINTS, MIN_TIME_S, MODES, Profile,
                                       ProfileError, SCOPES, finite, has_source, short)
from tpsim.sim.hardware.schema import GpuSpec
from tpsim.sim.hardware.gpc import PLACEMENTS
from tpsim.sim.hardware.gemm_grids import GEMM_GRIDS
from tpsim.sim.hardware.fields import RATE_FLOOR, Fields
from tpsim.sim.hardware.gemm_tables import parse_gemm_tables
from tpsim.sim.hardware.l2_section import parse_l2
from tpsim.sim.hardware.decode_attention_section import parse_decode_attention
from tpsim.sim.stack.spec import Stack
from tpsim.sim.hardware.topology import INTRA_KINDS, LINK_CLASSES, NcclLatency, TopologySpec

EFFICIENCY_FLOOR = 1e-6      # achieved/peak: a launch-bound tiny kernel on a CPU still reaches ~1e-4


# the top-level fields a profile may hold (its `extends` chain merged in): one misspelt ("gpu_per_node")
# would otherwise load without a word and leave the profile's own value in force
TOP_LEVEL = ("format", "version", "name", "description", "extends", "device", "gpus_per_node", "memory_gib",
             "compute_capability", "compute", "collectives", "topology", "jitter", "overlap", "stack_defaults",
             "raw")


def parse(data: dict, where: str = "<profile>") -> Profile:
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        near = difflib.get_close_matches(unknown[0], TOP_LEVEL, n=1)
        raise ProfileError(f"profile {where}: unknown field {unknown[0]!r}"
                           + (f" (did you mean {near[0]!r}?)" if near else "")
                           + f"; a profile's fields are: {', '.join(TOP_LEVEL)}")
    g = _Getter(data, where)
    name = g.str_("name")
    peak = {dt: g.num(f"compute.matmul_tflops.{dt}", positive=True) * 1e12 for dt in g.obj("compute.matmul_tflops")}
    if not peak:
        raise ProfileError(f"profile {where}: field 'compute.matmul_tflops' needs at least one dtype")
    topology = g.topology(g.count("gpus_per_node", "gpus_per_node")) if "topology" in data else None
    links = {}
    if topology is None and "model" not in g.obj("collectives"):
        g.fail("collectives.model", "is missing (a profile needs a 'topology' section or a "
                                    "'collectives.model' to price collectives it has no table for)")
    for scope in (g.obj("collectives.model") if topology is None or "model" in g.obj("collectives") else {}):
        if scope not in SCOPES:
            raise ProfileError(f"profile {where}: field 'collectives.model.{scope}': scope must be one of {SCOPES}")
        links[scope] = tuple(g.protocol(f"collectives.model.{scope}.{name}", name)
                             for name in g.obj(f"collectives.model.{scope}"))
        if not links[scope]:
            raise ProfileError(f"profile {where}: field 'collectives.model.{scope}' lists no protocol")
    if "node" not in links and topology is None:
        raise ProfileError(f"profile {where}: field 'collectives.model.node' is missing "
                           f"(or give a 'topology' section to derive collective costs from)")
    device = g.str_("device", default="cuda")
    if device not in ("cuda", "cpu"):
        raise ProfileError(f"profile {where}: field 'device' must be cuda or cpu, got {short(device)}")
    return Profile(
        name=name,
        description=g.str_("description", default=""),
        gpus_per_node=g.count("gpus_per_node", "gpus_per_node"),
        memory_gib=g.num("memory_gib", positive=True),
        device=device,
        peak_flops=peak,
        mem_bytes_per_s=g.num("compute.memory_gbps", positive=True) * 1e9,
        gemm_efficiency=g.curve("compute.gemm_efficiency", "flops"),
        memory_efficiency=g.curve("compute.memory_efficiency", "bytes"),
        launch_s={m: g.num(f"compute.launch_us.{m}", min_=0.0) * 1e-6 for m in MODES},
        compute_points=(pts := g.compute_points()),
        gemm_tables=parse_gemm_tables(g, already=len(pts)),
        l2=parse_l2(g),
        decode_attention=parse_decode_attention(g),
        compute_capability=(g.num("compute_capability", min_=1.0, max_=99.0) if "compute_capability" in data
                            else None),
        collective_tables=g.collective_tables(),
        link_models=links,
        eager_extra_s=g.num("collectives.eager_extra_us", default=0.0, min_=0.0) * 1e-6,
        graph_extra_s=g.num("collectives.graph_extra_us", default=0.0, min_=0.0) * 1e-6,
        graph_nccl_node_s=g.num("collectives.graph_nccl_node_us", default=0.0, min_=0.0) * 1e-6,
        graph_net_host_s=g.num("collectives.graph_net_host_us", default=0.0, min_=0.0) * 1e-6,
        default_impl=g.str_("collectives.default_impl", default="nccl"),
        stack_defaults=g.stack_defaults(),
        compute_slowdown=g.num("overlap.compute_slowdown", min_=1.0, max_=100.0),
        comm_slowdown=g.num("overlap.comm_slowdown", min_=1.0, max_=100.0),
        jitter_s=g.num("jitter.launch_us", default=0.0, min_=0.0) * 1e-6,
        wake_s=g.num("overlap.wake_us", default=0.0, min_=0.0) * 1e-6,
        arrival_jitter=g.arrival_jitter(),
        source_path=where,
        raw=data,
        topology=topology,
        coschedule=g.coschedule(),
        ranges=g.ranges,
    )


# ranged numbers (sim/sensitivity.py) that parse puts into the Profile as read, with no unit change and
# no check against another field (both ends of a range pass the value's own checks: Fields._range):
# path -> (Profile field, its field or None). Another value of one is set in place, with no re-parse.
AS_READ = {"overlap.compute_slowdown": ("compute_slowdown", None),
           "overlap.comm_slowdown": ("comm_slowdown", None),
           "overlap.gpu.hbm_per_bus_byte": ("coschedule", "hbm_per_bus_byte"),
           # a scope's mean, in us in the file, mean_s parsed; a scope the file leaves out takes the first's
           "jitter.arrival.node.mean_us": ("arrival_jitter", "node"),
           "jitter.arrival.net.mean_us": ("arrival_jitter", "net")}


def set_as_read(profile: Profile, setting: tuple[tuple[str, float], ...]) -> Profile | None:
    """The parsed profile with each (path, value) of `setting` in place, as parse would read it (its raw
    JSON too, copied along the path only); None when a path is not in AS_READ (then parse again)."""
    if any(path not in AS_READ for path, _ in setting):
        return None
    top, raw = {}, profile.raw
    for path, value in setting:
        name, sub = AS_READ[path]
        v = float(value)
        if name == "arrival_jitter":     # as arrival_jitter() reads it: the scopes the file gives, in order
            given = list(raw["jitter"]["arrival"])
            jit = dict(top.get(name, profile.arrival_jitter))
            for scope in jit:
                if scope == sub or (scope not in given and sub == given[0]):
                    jit[scope] = replace(jit[scope], mean_s=v * 1e-6)
            top[name] = jit
        else:
            top[name] = v if sub is None else replace(top.get(name, getattr(profile, name)), **{sub: v})
        raw = _with_leaf(raw, path.split("."), v)
    return replace(profile, raw=raw, **top)


def _with_leaf(data: dict, parts: list[str], value: float) -> dict:
    """`data` with the number at `parts` set to `value` (a bare number, or the "value" of its object)."""
    head, *rest = parts
    if rest:
        return {**data, head: _with_leaf(data[head], rest, value)}
    return {**data, head: {**data[head], "value": value} if isinstance(data[head], dict) else value}


class _Getter(Fields):
    """A profile's sections, each parsed into its dataclass through Fields' typed reads."""

    def coschedule(self) -> GpuSpec | None:
        """overlap.gpu: what co-scheduling a collective beside compute needs (None when absent)."""
        if self.get("overlap.gpu", None) is None:
            return None
        self.obj("overlap.gpu")
        g = "overlap.gpu"
        return GpuSpec(sms=int(self.num(f"{g}.sms", positive=True, max_=4096)),
                       high_priority=bool(self.sourced(f"{g}.nccl_high_priority", (bool,), default=False)),
                       coll_channels=int(self.num(f"{g}.coll_channels", positive=True, max_=64)),
                       nvls_channels=int(self.num(f"{g}.nvls_channels", positive=True, max_=64)),
                       hbm_per_bus_byte=self.num(f"{g}.hbm_per_bus_byte", min_=0.0, max_=16.0),
                       gemm_grids=self._gemm_grids(f"{g}.gemm_grids"),
                       sm_hbm_gbps=self.num(f"{g}.sm_hbm_gbps", default=0.0, min_=0.0, max_=1e5),
                       **self._gpcs(g))

    def _gpcs(self, g: str) -> dict:
        """overlap.gpu's GPC layout, idle-SM placement and NCCL cluster size (sim/hardware/gpc.py); optional."""
        sms = self.sourced(f"{g}.gpc_sms", (list,), default=[])
        place = self.sourced(f"{g}.idle_sm_placement", (str,), default="packed")
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sms) or (sms and sum(sms) != self.num(f"{g}.sms")):
            self.fail(f"{g}.gpc_sms", f"must list positive whole SM counts summing to {g}.sms, got {short(sms)}")
        if place not in PLACEMENTS:
            self.fail(f"{g}.idle_sm_placement", f"must be one of {PLACEMENTS}, got {short(place)}")
        if (cga := self.num(f"{g}.nccl_cluster_size", default=1, min_=1, max_=8)) != int(cga):
            self.fail(f"{g}.nccl_cluster_size", f"must be a whole number in 1..8, got {cga:g}")
        return {"gpc_sms": tuple(sms), "idle_sm_placement": place, "nccl_cluster_size": int(cga)}

    def _gemm_grids(self, path: str) -> str:
        name = self.sourced(path, (str,), default="rule")
        if name not in GEMM_GRIDS:
            self.fail(path, f"must be one of {sorted(GEMM_GRIDS)}, got {short(name)}")
        return name

    def topology(self, gpus_per_node: int) -> TopologySpec:
        t = "topology"
        self.obj(t)
        intra = self.sourced(f"{t}.intra", (str,))
        if intra not in INTRA_KINDS:
            self.fail(f"{t}.intra", f"must be one of {INTRA_KINDS}, got {short(intra)}")
        nv = self.num(f"{t}.nvlink_gbps", positive=True) if intra == "nvswitch" else \
            self.num(f"{t}.nvlink_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR)
        sockets = self.count(f"{t}.sockets", "sockets")
        nic = self.num(f"{t}.nic_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR)
        nics = self.count(f"{t}.nics_per_node", "nics_per_node", default=0.0)
        if (nic > 0) != (nics > 0):
            self.fail(f"{t}.nics_per_node" if nic > 0 else f"{t}.nic_gbps",
                      "must be given with the other of nic_gbps / nics_per_node (both or neither)")
        lat = self._nccl(f"{t}.nccl")
        try:
            return TopologySpec(
                gpus_per_node=gpus_per_node, intra=intra,
                p2p=self.sourced(f"{t}.p2p", (bool,)),
                nvlink_gbps=nv,
                nvls_busbw_gbps=self.num(f"{t}.nvls_busbw_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR),
                ll_busbw_cap_gbps=self.num(f"{t}.ll_busbw_cap_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR),
                ll_busbw_cap_multi_node_gbps=self.num(f"{t}.ll_busbw_cap_multi_node_gbps", default=0.0, min_=0.0,
                                                      floor=RATE_FLOOR),
                ll_payload=self.num(f"{t}.nccl.ll_payload", positive=True),
                ll128_payload=self.num(f"{t}.nccl.ll128_payload", positive=True),
                pcie_gbps=self.num(f"{t}.pcie_gbps", positive=True),
                gpus_per_pcie_switch=self.count(f"{t}.gpus_per_pcie_switch", "gpus_per_node", hi=gpus_per_node),
                sockets=sockets,
                host_mem_gbps=self.num(f"{t}.host_mem_gbps", positive=True),
                cpu_link_gbps=self.num(f"{t}.cpu_link_gbps", positive=True) if sockets > 1 else
                self.num(f"{t}.cpu_link_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR),
                nic_gbps=nic, nics_per_node=nics, latency=lat,
                # a fitted shift of every derived time: negative is real (the fit), but a ring's time
                # (its base latency plus at least one hop) must stay above zero, so the shift is at
                # least minus the smallest ring base latency
                latency_offset_us=self.num(f"{t}.latency_offset_us", default=0.0,
                                           min_=-min(lat.base_us[k] for k in ("ring_ll", "ring_ll128", "ring_simple"))),
                shm_hop_us={k: self.num(f"{t}.shm_hop_us.{k}", min_=0.0)
                            for k in (self.obj(f"{t}.shm_hop_us") if "shm_hop_us" in self.obj(t) else {})},
                shm_gbps=self.num(f"{t}.shm_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR),
                nccl_cpu_link_gbps=self.num(f"{t}.nccl_cpu_link_gbps", default=0.0, min_=0.0, floor=RATE_FLOOR),
                nccl_cpu_nodes=int(self.num(f"{t}.nccl_cpu_nodes", default=0.0, min_=0.0)),
                sources={k: v.get("source", "") for k, v in self.obj(t).items() if isinstance(v, dict)},
            )
        except ProfileError:
            raise                          # already names the file and field: not prefixed twice
        except ValueError as e:
            self.fail(t, str(e))

    def _nccl(self, path: str) -> NcclLatency:
        """NCCL's latency constants: base_us per (algorithm_protocol), hop_us per link class."""
        n = self.obj(path)
        if not has_source(n):
            self.fail(path, "has no 'source'")
        base = self.obj(f"{path}.base_us")
        for key in ("ring_ll", "ring_ll128", "ring_simple", "nvls"):
            if key not in base:
                self.fail(f"{path}.base_us.{key}", "is missing")
        hops = {}
        for cls in LINK_CLASSES:
            h = self.obj(f"{path}.hop_us.{cls}")
            for key in ("ll", "ll128", "simple"):
                if key not in h:
                    self.fail(f"{path}.hop_us.{cls}.{key}", "is missing")
            hops[cls] = {k: self.num(f"{path}.hop_us.{cls}.{k}", min_=0.0) for k in h}
        return NcclLatency({k: self.num(f"{path}.base_us.{k}", min_=0.0) for k in base}, hops)

    def arrival_jitter(self) -> dict:
        """jitter.arrival.{node,net}: {"dist": "exponential", "mean_us": sourced number}; a scope left
        out takes the other's; without `arrival`, the legacy jitter.launch_us applies to both."""
        arr = self.get("jitter.arrival", None)
        if arr is None:
            us = self.num("jitter.launch_us", default=0.0, min_=0.0)
            v = self.get("jitter.launch_us", None)
            src = v.get("source", "") if isinstance(v, dict) else "jitter.launch_us" if v is not None else \
                "no jitter section: none simulated"
            return {s: ArrivalJitter("exponential", us * 1e-6, src) for s in SCOPES}
        if not isinstance(arr, dict) or not arr or set(arr) - set(SCOPES):
            self.fail("jitter.arrival", f"must be an object with scopes from {SCOPES}")
        out = {}
        for scope in arr:
            p = f"jitter.arrival.{scope}"
            dist = self.str_(f"{p}.dist", default="exponential")
            if dist not in JITTER_DISTS:
                self.fail(f"{p}.dist", f"must be one of {JITTER_DISTS}, got {dist!r}")
            mean = self.num(f"{p}.mean_us", min_=0.0)
            v = self.get(f"{p}.mean_us")
            if not isinstance(v, dict):
                self.fail(f"{p}.mean_us", "must be {\"value\": ..., \"source\": ...} (say where the skew comes from)")
            out[scope] = ArrivalJitter(dist, mean * 1e-6, str(v["source"]))
        for scope in SCOPES:
            out.setdefault(scope, next(iter(out.values())))
        return out

    def stack_defaults(self) -> dict:
        d = self.get("stack_defaults", {})
        if not isinstance(d, dict):
            self.fail("stack_defaults", "must be an object")
        known = set(Stack.__dataclass_fields__)
        bad = sorted(set(d) - known)
        if bad:
            self.fail(f"stack_defaults.{bad[0]}", f"is not a stack field; known: {', '.join(sorted(known))}")
        for k, v in d.items():              # typed: "no" is not false, "yes" is not a key of anything
            kind = type(Stack.__dataclass_fields__[k].default)
            if type(v) is not kind:
                self.fail(f"stack_defaults.{k}", f"must be {'true or false' if kind is bool else 'a string'}, "
                                                 f"got {short(v)}")
        try:
            Stack(**d)
        except (TypeError, ValueError) as e:
            self.fail("stack_defaults", f"is invalid: {e}")
        return dict(d)

    def protocol(self, path: str, name: str) -> LinkModel:
        p = self.obj(path)
        if not has_source(p):
            self.fail(path, "has no 'source'")
        hop = p.get("hop", "per_step")
        if hop not in ("per_step", "once"):
            self.fail(f"{path}.hop", f"must be per_step or once, got {short(hop)}")
        return LinkModel(name, self.num(f"{path}.base_us", min_=0.0) * 1e-6, self.num(f"{path}.hop_us", min_=0.0) * 1e-6,
                         self.num(f"{path}.busbw_gbps", positive=True), hop == "per_step")

    def curve(self, path: str, xkey: str) -> Curve:
        c = self.obj(path)
        if not has_source(c):
            self.fail(path, "has no 'source'")
        xs, ys = c.get(xkey), c.get("efficiency")
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys) or not xs:
            self.fail(path, f"needs equal-length non-empty lists '{xkey}' and 'efficiency'")
        if len(xs) > MAX_TABLE_POINTS:
            self.fail(path, f"has {len(xs)} points; at most {MAX_TABLE_POINTS}")
        if any(not finite(v) or not 0 < v <= 1e30 for v in xs) or list(xs) != sorted(xs):
            self.fail(f"{path}.{xkey}", "must be positive finite numbers (<= 1e30), increasing")
        if any(not finite(v) or not EFFICIENCY_FLOOR <= v <= 1 for v in ys):
            self.fail(f"{path}.efficiency", f"values must be numbers in [{EFFICIENCY_FLOOR:g}, 1]")
        return Curve(tuple(map(float, xs)), tuple(map(float, ys)))

    def compute_points(self) -> tuple[ComputePoint, ...]:
        out = []
        for ti, t in enumerate(self.get("compute.tables", [])):
            p = f"compute.tables[{ti}]"
            if not isinstance(t, dict) or not has_source(t) or not isinstance(t.get("points"), list):
                self.fail(p, "must be an object with 'source' and a list 'points'")
            if len(out) + len(t["points"]) > BOUNDS["compute_points"].hi:
                self.fail(f"{p}.points", f"brings the profile to {len(out) + len(t['points'])} compute points; at most "
                                         f"{BOUNDS['compute_points'].hi} ({BOUNDS['compute_points'].why})")
            for pi, pt in enumerate(t["points"]):
                q = f"{p}.points[{pi}]"
                if not isinstance(pt, dict):
                    self.fail(q, "must be an object with 'kind', 'attrs', 'time_s'")
                for key in ("kind", "attrs", "time_s"):
                    if key not in pt:
                        self.fail(f"{q}.{key}", "is missing")
                if not isinstance(pt["kind"], str):
                    self.fail(f"{q}.kind", f"must be a string, got {short(pt['kind'])}")
                if not isinstance(pt["attrs"], dict):
                    self.fail(f"{q}.attrs", f"must be an object of integers and strings, got {short(pt['attrs'])}")
                for k, v in pt["attrs"].items():
                    if isinstance(v, bool) or not isinstance(v, (int, str)):
                        self.fail(f"{q}.attrs.{k}", f"must be an integer or a string, got {short(v)}")
                time_s = pt["time_s"]
                if not finite(time_s) or not MIN_TIME_S <= time_s <= 1e6:
                    self.fail(f"{q}.time_s", f"must be a number of seconds in [{MIN_TIME_S:g}, 1e6] (no kernel is "
                                             f"shorter than a nanosecond), got {short(time_s)}")
                mode, dtype = pt.get("mode", "any"), pt.get("dtype", "fp16")
                if mode not in ("any",) + MODES:
                    self.fail(f"{q}.mode", f"must be any, eager or graph, got {short(mode)}")
                if not isinstance(dtype, str):
                    self.fail(f"{q}.dtype", f"must be a string, got {short(dtype)}")
                attrs = tuple(sorted((str(k), v) for k, v in pt["attrs"].items()))
                out.append(ComputePoint(pt["kind"], attrs, dtype, float(time_s), mode))
        return tuple(out)

    def collective_tables(self) -> tuple[CollectiveTable, ...]:
        out = []
        tables = self.get("collectives.tables", [])
        if not isinstance(tables, list):
            self.fail("collectives.tables", "must be a list of tables")
        if len(tables) > BOUNDS["tables"].hi:
            self.fail("collectives.tables", f"has {len(tables)} tables; at most {BOUNDS['tables'].hi}")
        for ti, t in enumerate(tables):
            p = f"collectives.tables[{ti}]"
            if not isinstance(t, dict):
                self.fail(p, "must be an object")
            for key in ("collective", "group", "scope", "mode", "bytes", "time_us", "source"):
                if key not in t:
                    self.fail(f"{p}.{key}", "is missing")
            if t["collective"] not in COLLECTIVES:
                self.fail(f"{p}.collective", f"must be one of {COLLECTIVES}, got {short(t['collective'])}")
            if isinstance(t["group"], bool) or not isinstance(t["group"], int) or t["group"] < 1:
                self.fail(f"{p}.group", f"must be a positive integer (ranks in the group), got {short(t['group'])}")
            if t["scope"] not in SCOPES:
                self.fail(f"{p}.scope", f"must be one of {SCOPES}")
            if t["mode"] not in MODES:
                self.fail(f"{p}.mode", f"must be one of {MODES}")
            if t["group"] > BOUNDS["collective_group"].hi:
                self.fail(f"{p}.group", f"must be at most {BOUNDS['collective_group'].hi} ranks "
                                        f"({BOUNDS['collective_group'].why}), got {t['group']}")
            for key in ("impl", "source"):
                if key in t and (not isinstance(t[key], str) or (key == "source" and not t[key].strip())):
                    self.fail(f"{p}.{key}", f"must be a string, got {short(t[key])}")
            b, us = t["bytes"], t["time_us"]
            if not isinstance(b, list) or not isinstance(us, list) or len(b) != len(us) or not b:
                self.fail(p, "needs equal-length non-empty lists 'bytes' and 'time_us'")
            if len(b) > MAX_TABLE_POINTS:
                self.fail(f"{p}.bytes", f"has {len(b)} points; at most {MAX_TABLE_POINTS}")
            for key, vs, lo, hi in (("bytes", b, 1, float(BOUNDS["message_bytes"].hi)),
                                    ("time_us", us, SECONDS["measured_op"].lo * 1e6, SECONDS["measured_op"].hi * 1e6)):
                for i, v in enumerate(vs):
                    if not finite(v) or not lo <= v <= hi:
                        self.fail(f"{p}.{key}[{i}]", f"must be a finite number in [{lo:g}, {hi:g}], got {short(v)}")
            if list(b) != sorted(b):
                self.fail(f"{p}.bytes", "must be increasing")
            out.append(CollectiveTable(str(t["collective"]), int(t["group"]), t["scope"], t["mode"],
                                       str(t.get("impl", "nccl")), tuple(map(float, b)),
                                       tuple(v * 1e-6 for v in us), str(t["source"])))
        return tuple(out)
