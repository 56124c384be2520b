"""Orchestrate a calibration: measurement groups on every rank, resumable state, the final profile.

A calibration is a list of *groups* (device constants, one collective sweep per collective x
group size x mode x implementation, one compute case per workload shape, overlap). Ranks run
them in order; after each finished group rank 0 writes everything measured so far to
`<out>.state.json` atomically. A restarted calibration with the same `--out` (and the same
options) reads that file and skips the groups in it, so a killed run loses at most the group it
was in. When every group is done the points are fitted (calib.fit), the profile is written to
`--out`, validated with sim.profile.load_profile, and the state file deleted.

Launching. `calibrate()` starts `nproc` local ranks (hw.dist.launch), once per NCCL environment
setting (NCCL reads its environment at communicator init); under torchrun the process is one
rank itself (`run_here`). Workers load this module by name: `calib.run:worker`.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from sim.model import get_model, valid_tp
from sim.stack import DTYPE_BYTES, Stack

from calib.shapes import ShapeCase

PARTS = ("device", "collectives", "compute", "overlap")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
STOPPED = 3                      # worker exit code: stopped on purpose after --stop-after groups
STATE_FORMAT = "tpsim-calibration-state"


class CalibrationStopped(RuntimeError):
    """The calibration ended before its last group; the state file keeps what was measured."""


@dataclass(frozen=True)
class CalibConfig:
    """Everything the ranks need; JSON-serializable (sent to worker processes)."""

    out: str = "profile.json"
    backend: str = "gloo"
    device: str = "cpu"
    dtype: str = "fp32"
    models: tuple[str, ...] = ()
    tps: tuple[int, ...] = ()                 # () = every TP degree of each model up to the world size
    batches: tuple[int, ...] = (1,)
    prompt_lens: tuple[int, ...] = (1024,)
    gen_lens: tuple[int, ...] = (512,)
    kvs: tuple[str, ...] = ("static",)
    attentions: tuple[str, ...] = ("math",)
    heads: tuple[str, ...] = ("replicated",)
    prefill_logits: tuple[str, ...] = ("all",)
    quick: bool = False
    parts: tuple[str, ...] = PARTS
    collectives: tuple[str, ...] = ()          # () = all_reduce when quick, all three otherwise
    envs: tuple[str, ...] = ()                 # extra NCCL settings, each "K=V[,K=V]"; one launch each
    impl: str = ""                             # collective implementation tag ("" = the backend's)
    extends: str | None = None
    name: str | None = None
    seed: int = 0
    timeout_s: float = 300.0
    # set per launch by the orchestrator
    env_index: int = 0
    run_id: str = ""
    stop_after: int | None = None              # test hook: stop after this many newly measured groups

    def __post_init__(self) -> None:
        from hw.dist import check_backend_device
        check_backend_device(self.backend, self.device)
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPE_BYTES)}")
        for p in self.parts:
            if p not in PARTS:
                raise ValueError(f"unknown part {p!r}; choose from {', '.join(PARTS)}")
        for c in self.collectives:
            if c not in COLLECTIVES:
                raise ValueError(f"unknown collective {c!r}; choose from {', '.join(COLLECTIVES)}")
        if self.envs and self.backend != "nccl":
            raise ValueError("--nccl-env settings need --backend nccl")
        for e in self.envs:
            _parse_env(e)
        for m in self.models:
            get_model(m)
        for name in ("batches", "prompt_lens", "gen_lens"):
            if any(v < 1 for v in getattr(self, name)):
                raise ValueError(f"{name} must all be >= 1, got {getattr(self, name)}")
        for kv, att, head, pl in self._stack_choices():
            Stack(dtype=self.dtype, kv=kv, attention=att, head=head, prefill_logits=pl)
        if not self.extends:
            missing = [p for p in ("device", "collectives", "overlap") if p not in self.parts]
            if missing:
                raise ValueError(f"a complete profile needs the parts device, collectives and overlap "
                                 f"(missing {', '.join(missing)}); give --extends BASE to calibrate only some")

    # -- derived

    def _stack_choices(self):
        return [(kv, a, h, pl) for kv in self.kvs for a in self.attentions for h in self.heads
                for pl in self.prefill_logits]

    def stacks(self) -> list[Stack]:
        return [Stack(dtype=self.dtype, kv=kv, attention=a, head=h, prefill_logits=pl,
                      decode_graphs=False, collective=self.impl_of(0))
                for kv, a, h, pl in self._stack_choices()]

    def cases(self, world: int) -> list[ShapeCase]:
        out = []
        for name in self.models:
            m = get_model(name)
            tps = self.tps or tuple(t for t in valid_tp(m, world))
            for tp in tps:
                for st in self.stacks():
                    for b in self.batches:
                        for p in self.prompt_lens:
                            for g in self.gen_lens:
                                out.append(ShapeCase(m, tp, b, p, g, st))
        return out

    def impl_of(self, env_index: int) -> str:
        """The table tag of env setting `env_index` (0 = the launch environment as it is)."""
        if env_index == 0:
            return self.impl or self.backend
        return env_tag(self.backend, _parse_env(self.envs[env_index - 1]))

    def env_of(self, env_index: int) -> dict[str, str]:
        return {} if env_index == 0 else _parse_env(self.envs[env_index - 1])

    @property
    def state_path(self) -> str:
        return state_path(self.out)

    @property
    def trials(self) -> dict[str, int]:
        # overlap: the in-flight gain it measures on a CPU (a few % of a pass) is near the trial-to-trial
        # noise, so it takes the most trials: at 60 its comm factor moved 1.8-3.8 over 12 runs (on a
        # GPU a trial takes milliseconds, so the same counts cost little there)
        return ({"collectives": 15, "compute": 15, "overlap": 150} if self.quick else
                {"collectives": 50, "compute": 40, "overlap": 300})

    def collective_list(self) -> tuple[str, ...]:
        return self.collectives or (("all_reduce",) if self.quick else COLLECTIVES)

    def modes(self) -> tuple[str, ...]:
        return ("eager", "graph") if self.device == "cuda" else ("eager",)

    def pow2_range(self) -> tuple[int, int, int]:
        """(smallest, largest bytes, log2 step) of the power-of-two sweep."""
        if self.device == "cuda":
            return (8, 64 << 20, 2) if self.quick else (8, 1 << 30, 1)
        return (4, 4 << 20, 2) if self.quick else (4, 64 << 20, 1)

    def fingerprint(self) -> dict:
        """What must match for a state file to be resumed."""
        d = self.to_dict()
        for k in ("env_index", "run_id", "stop_after", "timeout_s", "out"):
            d.pop(k)
        d["code"] = code_version()     # groups measured by other harness code or torch are not resumed
        return d

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @staticmethod
    def from_dict(d: dict) -> "CalibConfig":
        known = {f.name: f for f in fields(CalibConfig)}
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        return CalibConfig(**kw)


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """tpsim and torch versions and a digest of the measuring code (hw/, calib/*.py): what a
    measured group depends on besides the options."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "none"
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for f in sorted([*here.glob("*.py"), *(here.parent / "hw").glob("*.py")]):
        h.update(f.name.encode() + f.read_bytes())
    return f"tpsim {ver('tpsim')}, torch {ver('torch')}, code {h.hexdigest()[:16]}"


def _parse_env(spec: str) -> dict[str, str]:
    out = {}
    for part in spec.split(","):
        k, eq, v = part.strip().partition("=")
        if not eq or not k.startswith("NCCL_") and not k.startswith("TORCH_NCCL_"):
            raise ValueError(f"bad --nccl-env {spec!r}; use e.g. NCCL_P2P_DISABLE=1 or NCCL_ALGO=Ring,NCCL_PROTO=LL")
        out[k] = v
    return out


def env_tag(backend: str, env: dict[str, str]) -> str:
    """nccl + NCCL_P2P_DISABLE=1 -> 'nccl-p2p-off'; NCCL_ALGO=Ring -> 'nccl-algo-ring'."""
    parts = [backend]
    for k, v in sorted(env.items()):
        short = k.removeprefix("TORCH_").removeprefix("NCCL_").lower().replace("_", "-")
        if short.endswith("-disable"):
            parts.append(f"{short.removesuffix('-disable')}-{'off' if v == '1' else 'on'}")
        else:
            parts.append(f"{short}-{v.lower()}")
    return "-".join(parts)


def state_path(out: str | os.PathLike) -> str:
    return f"{out}.state.json"


# ------------------------------------------------------------------ groups

@dataclass(frozen=True)
class Group:
    """One unit of measurement, finished (and saved) as a whole."""

    name: str
    kind: str                       # device | collectives | compute | overlap
    params: dict = field(default_factory=dict, compare=False)


def plan_groups(cfg: CalibConfig, world: int, env_index: int = 0) -> list[Group]:
    """The groups one launch runs, in order (only collective sweeps for extra env settings)."""
    impl = cfg.impl_of(env_index)
    cases = cfg.cases(world) if "compute" in cfg.parts or "collectives" in cfg.parts else []
    out: list[Group] = []
    if env_index == 0 and "device" in cfg.parts:
        out.append(Group("device", "device"))
    if "collectives" in cfg.parts:
        exact = _exact_sizes(cases, cfg.dtype)
        lo, hi, step = cfg.pow2_range()
        from calib.collectives import legal_size, pow2_sizes
        elem = DTYPE_BYTES[cfg.dtype]
        for coll in cfg.collective_list():
            # a lone rank measures its group of one (the path an emulated TP rank takes); else 2..world
            for n in (range(1, 2) if world == 1 else range(2, world + 1)):
                sizes = sorted({legal_size(coll, b, n, elem)
                                for b in pow2_sizes(lo, hi, step) + sorted(exact.get((coll, n), ()))})
                for mode in cfg.modes():
                    out.append(Group(f"collectives/{impl}/{coll}/{mode}/g{n}", "collectives",
                                     {"collective": coll, "group": n, "mode": mode, "sizes": sizes, "impl": impl}))
        if env_index == 0 and world > 1:      # the ranks' arrival spread: the profile's jitter
            out.append(Group(f"arrival/{impl}/g{world}", "arrival", {"group": world}))
    if env_index == 0 and "compute" in cfg.parts:
        for c in cases:
            out.append(Group(f"compute/{c.key}", "compute", {"case": c}))
    if env_index == 0 and "overlap" in cfg.parts and world > 1:
        wide = [c for c in cases if c.tp == world] or cases        # a case as wide as the group measured
        out.append(Group(f"overlap/{impl}", "overlap", {"cases": wide}))
    return out


def _exact_sizes(cases: list[ShapeCase], dtype: str) -> dict:
    from calib.collectives import model_bytes
    out: dict = {}
    for c in cases:
        for k, v in model_bytes(c.schedules(), dtype).items():
            out.setdefault(k, set()).update(v)
    return out


# ------------------------------------------------------------------ state file

def read_state(cfg: CalibConfig) -> dict:
    """The state of an interrupted calibration with these options, or a fresh one."""
    p = Path(cfg.state_path)
    fresh = {"format": STATE_FORMAT, "version": 1, "fingerprint": cfg.fingerprint(), "groups": {}}
    if not p.is_file():
        return fresh
    try:
        st = json.loads(p.read_text())
    except json.JSONDecodeError:
        raise ValueError(f"state file {p} is not valid JSON (a torn write?); delete it to start over") from None
    if st.get("format") != STATE_FORMAT:
        raise ValueError(f"{p} is not a tpsim calibration state file; delete it or choose another --out")
    if st.get("fingerprint") != cfg.fingerprint():
        diff = sorted(k for k in set(st.get("fingerprint", {})) | set(cfg.fingerprint())
                      if st.get("fingerprint", {}).get(k) != cfg.fingerprint().get(k))
        raise ValueError(f"state file {p} belongs to a calibration with other options (differs in: "
                         f"{', '.join(diff)}); rerun with the same options to resume, or delete it to start over")
    return st


def write_state(path: str, state: dict) -> None:
    from sim.trace import write_json_atomic
    write_json_atomic(path, state)


# ------------------------------------------------------------------ the ranks

def worker(config: dict) -> int:
    """Entry point of one rank (hw.dist launches it as `calib.run:worker`)."""
    from hw import dist as hwdist
    cfg = CalibConfig.from_dict(config)
    ctx = hwdist.init_from_env(cfg.backend, "cuda" if cfg.device == "cuda" else "cpu", cfg.timeout_s)
    try:
        return run_groups(cfg, ctx)
    finally:
        hwdist.shutdown()


def run_groups(cfg: CalibConfig, ctx, progress: Callable | None = None) -> int:
    """Run every group of this launch not in the state file; rank 0 saves after each group.
    Returns 0 when all are done, STOPPED when `stop_after` ended it early."""
    import torch.distributed as dist
    from hw.dist import cpu_group
    pg = cpu_group()

    def barrier():
        dist.barrier(group=pg)
    box = [read_state(cfg) if ctx.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=pg)
    state = box[0]
    groups = plan_groups(cfg, ctx.world, cfg.env_index)
    new = 0
    from hw.dist import fault_point
    for i, g in enumerate(groups):
        if g.name in state["groups"]:
            continue
        fault_point(ctx.rank, "group")      # a progress mark per group (names a hung rank); test hook
        t0 = time.monotonic()
        result = measure_group(g, cfg, ctx, barrier, pg)
        if ctx.rank == 0:
            state["groups"][g.name] = {"kind": g.kind, "run_id": cfg.run_id, "world": ctx.world,
                                       "finished_at": _now(), "wall_s": round(time.monotonic() - t0, 3), **result}
            write_state(cfg.state_path, state)
            if progress:
                progress(g.name)
        barrier()
        new += 1
        if cfg.stop_after and new >= cfg.stop_after and any(h.name not in state["groups"] for h in groups[i + 1:]):
            return STOPPED
    return 0


def measure_group(g: Group, cfg: CalibConfig, ctx, barrier, pg) -> dict:
    """Run group `g` on every rank; the gathered result (meaningful on rank 0)."""
    import torch.distributed as dist
    dev = ctx.device
    if g.kind == "device":
        local = _device_constants(cfg, dev) | {"cores": list(ctx.cores) if ctx.cores is not None else None}
    elif g.kind == "collectives":
        from calib.collectives import sweep
        p = g.params
        local = sweep(p["collective"], p["sizes"], p["group"], mode=p["mode"], dtype=cfg.dtype, device=dev,
                      trials=cfg.trials["collectives"], world_barrier=barrier)
    elif g.kind == "arrival":
        from calib.collectives import arrival_waits
        import socket
        local = {"waits": arrival_waits(g.params["group"], dtype=cfg.dtype, device=dev, world_barrier=barrier),
                 "host": socket.gethostname()}
    elif g.kind == "compute":
        from calib import compute
        from hw.probe import probe_s
        probe = probe_s(dev)                        # the machine's speed as these points are taken
        samples = compute.capture(g.params["case"], dev, cfg.dtype, seed=cfg.seed)     # each signature's op
        if dev.startswith("cuda"):
            local = compute.time_samples(samples, device=dev, trials=cfg.trials["compute"], barrier=barrier)
        else:
            local = compute.time_in_passes(g.params["case"], dev, cfg.dtype, trials=cfg.trials["compute"],
                                           seed=cfg.seed, barrier=barrier)
        local = {"times": local, "probe_s": probe}
    elif g.kind == "overlap":
        local = _overlap_local(cfg, g.params["cases"], dev, barrier)
    else:
        raise ValueError(f"unknown group kind {g.kind}")
    gathered = [None] * ctx.world
    dist.all_gather_object(gathered, local, group=pg)
    if ctx.rank != 0:
        return {}
    if g.kind == "device":
        return _merge_device(gathered)
    if g.kind == "collectives":
        from calib.collectives import max_over_ranks, nccl_env, points
        p = g.params
        return {"points": points(p["collective"], p["group"], p["mode"], p["impl"], max_over_ranks(gathered)),
                "env": nccl_env() if cfg.backend == "nccl" else {"backend": "gloo"},
                "trials": cfg.trials["collectives"], "ranks": ctx.world}
    if g.kind == "arrival":
        from calib.collectives import arrival_summary
        scope = "node" if len({r["host"] for r in gathered}) == 1 else "net"
        return {**arrival_summary([r["waits"] for r in gathered]), "scope": scope, "ranks": ctx.world}
    if g.kind == "compute":
        from calib import compute
        import statistics
        return {"points": compute.points(samples, [r["times"] for r in gathered]),
                "probe_s": statistics.median(r["probe_s"] for r in gathered),
                "trials": cfg.trials["compute"], "ranks": ctx.world}
    from calib.overlap_summary import summarize, summarize_passes
    if "cases" in gathered[0]:                      # measured inside the models' passes (CPU)
        summary = summarize_passes([r["cases"] for r in gathered])
        what = "pooled over " + "; ".join(c["what"] for c in gathered[0]["cases"])
    else:
        summary, what = summarize(gathered), gathered[0]["what"]
    return {"summary": summary, "trials": cfg.trials["overlap"], "ranks": ctx.world, "what": what}


def _device_constants(cfg: CalibConfig, dev: str) -> dict:
    from calib import compute
    cuda = dev.startswith("cuda")
    mm = (2048, 4096, 8192) if cuda else ((256, 512, 1024) if cfg.quick else (256, 512, 1024, 2048))
    copies = ([1 << 20, 16 << 20, 256 << 20, 1 << 30] if cuda else
              [64 << 10, 1 << 20, 16 << 20, 64 << 20] + ([] if cfg.quick else [256 << 20]))
    out = {"launch_s": compute.launch_overhead_s(dev, cfg.dtype),
           "matmul": {n: compute.peak_flops(dev, cfg.dtype, (n,)) for n in mm},
           "copy": {b: compute.mem_bandwidth(dev, b) for b in copies}}
    out["graph_launch_s"] = compute.graph_launch_s(dev, cfg.dtype) if cuda else None
    if cuda:
        import torch
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        out["device_name"], out["device_mem_bytes"] = props.name, props.total_memory
    return out


def _merge_device(per_rank: list[dict]) -> dict:
    import statistics as s
    med = s.median
    r0 = per_rank[0]
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "launch_s": med(r["launch_s"] for r in per_rank),
        "graph_launch_s": med(r["graph_launch_s"] for r in per_rank) if r0["graph_launch_s"] is not None else None,
        "matmul_flops": {str(n): med(r["matmul"][n] for r in per_rank) for n in r0["matmul"]},
        "copy_bytes_per_s": {str(b): med(r["copy"][b] for r in per_rank) for b in r0["copy"]},
        "device_name": r0.get("device_name") or _cpu_name(),
        "device_mem_bytes": r0.get("device_mem_bytes"),
        "host": socket.gethostname(), "host_ram_bytes": ram, "cpu_count": os.cpu_count(),
        "ranks": len(per_rank),
        # CPU ranks pinned to these cores (hw.dist.pin_cores); measured values depend on it
        "rank_cores": [r.get("cores") for r in per_rank],
    }


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "cpu"


def _overlap_local(cfg: CalibConfig, cases: list[ShapeCase], dev: str, barrier) -> dict:
    """This rank's overlap trials. CPU: inside the standard decode passes of each case as wide as
    the group with gen >= 2 (`calib.overlap.measure_in_passes`), pooled when summarized. GPU, or no such case: the MLP
    up-projection gemm of the first case's prefill ([rows, hidden] @ [hidden, 2*ffn/tp], rows cut
    until it lasts about as long as the collective) against an all-reduce of the prefill activation
    [batch*prompt, hidden]; without a case, [256, 1024] @ [1024, 1024] against 1 MiB."""
    import torch
    import torch.nn.functional as F
    from calib.overlap import measure, measure_in_passes
    from hw.model import torch_dtype
    import torch.distributed as dist
    # in passes: cases as wide as the group (their all-reduces span it) with a decode step to run
    in_pass = [c for c in cases if c.tp == dist.get_world_size() and c.gen_len >= 2]
    if in_pass and not dev.startswith("cuda"):
        return {"cases": [measure_in_passes(c, dev, cfg.dtype, trials=cfg.trials["overlap"], seed=cfg.seed,
                                            barrier=barrier) for c in in_pass]}
    case = cases[0] if cases else None
    td = torch_dtype(cfg.dtype)
    if case is None:
        m, k, n = 256, 1024, 1024
        nbytes = 1 << 20
    else:
        s = case.model.shard(case.tp)
        m, k, n = case.batch * case.prompt_len, s.hidden, 2 * s.ffn
        nbytes = m * s.hidden * DTYPE_BYTES[cfg.dtype]
    x = torch.randn(m, k, device=dev).to(td)                   # [rows, hidden]
    w = torch.randn(n, k, device=dev).to(td) / k ** 0.5         # [2*ffn/tp, hidden] (F.linear layout)

    def make(rows: int):
        xr = x[:rows].contiguous()
        return lambda: F.linear(xr, w)
    with torch.no_grad():
        r = measure(make, m, nbytes, dtype=td, device=dev, trials=cfg.trials["overlap"], barrier=barrier)
    r["what"] = (f"gemm [{r['rows']}, {k}] @ [{k}, {n}] x{r['reps']} vs all_reduce of {nbytes} B, alone and "
                 f"concurrently (async_op=True)")
    return r


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------ orchestration

def calibrate(backend: str = "gloo", nproc: int = 2, models=(), tps=(), batches=(1,), prompt_len=(1024,),
              gen_len=(512,), quick: bool = False, out: str | os.PathLike = "profile.json",
              extends: str | None = None, progress: Callable | None = None, **options) -> Path:
    """Measure this machine with `nproc` local ranks and write a profile to `out`; returns its path.

    `prompt_len`/`gen_len` take an int or a list. `progress(done, total, group_name)` is called as
    groups finish. Extra `options` are CalibConfig fields (dtype, kvs, parts, envs, stop_after, ...).
    A rerun with the same `out` and options resumes from `<out>.state.json`.
    Raises CalibrationStopped when `stop_after` ended it early (the state file is kept)."""
    from hw.dist import WorkerFailed, launch
    as_tuple = (lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,))
    device = options.pop("device", "cuda" if backend == "nccl" else "cpu")
    options.setdefault("dtype", "fp16" if device == "cuda" else "fp32")
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    cfg = CalibConfig(out=str(Path(out).resolve()), backend=backend, device=device, models=as_tuple(models),
                      tps=as_tuple(tps), batches=as_tuple(batches), prompt_lens=as_tuple(prompt_len),
                      gen_lens=as_tuple(gen_len), quick=quick, extends=extends,
                      run_id=uuid.uuid4().hex[:12], **options)
    _check_world(cfg, nproc)
    check_extends(cfg.extends)
    from sim.lock import check_writable, output_lock
    # one calibration per --out: the ranks inherit the lock, so it lasts until the last of them is gone
    with output_lock(cfg.out, "calibration") as lock_fd:
        check_writable(cfg.out)
        state = read_state(cfg)                   # fail early on a foreign state file
        plans = [plan_groups(cfg, nproc, i) for i in range(len(cfg.envs) + 1)]
        total = sum(len(p) for p in plans)
        names = {g.name for p in plans for g in p}
        for i, plan in enumerate(plans):
            if all(g.name in state["groups"] for g in plan):
                continue
            run_cfg = replace(cfg, env_index=i)
            _launch_watched(launch, run_cfg, nproc, total, names, progress, WorkerFailed, keep_fds=(lock_fd,))
            state = read_state(cfg)
        return finish(cfg, state, nproc)


def check_extends(extends: str | None) -> None:
    """A --extends base that does not resolve fails now, not after the whole measurement."""
    if extends:
        from sim.profile import ProfileError, load_profile
        try:
            load_profile(extends)
        except ProfileError as e:
            raise ValueError(f"--extends: {e}") from None


def _check_world(cfg: CalibConfig, world: int) -> None:
    if world < 2 and "collectives" in cfg.parts and not cfg.extends:
        raise ValueError("measuring collectives needs at least 2 ranks (--nproc 2); "
                         "for compute only, give --parts compute --parts device --extends BASE")
    cfg.cases(world)                          # ValueError naming the valid TP degrees of a model


def _launch_watched(launch, cfg: CalibConfig, nproc: int, total: int, names: set, progress, worker_failed,
                    keep_fds: tuple[int, ...] = ()) -> None:
    """hw.dist.launch in a thread; the state file is polled to report finished groups."""
    err: list[BaseException] = []
    env = cfg.env_of(cfg.env_index)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)                     # the ranks inherit it (NCCL reads it at init)

    cancel = threading.Event()

    def target():
        try:
            launch("calib.run:worker", cfg.to_dict(), nproc, timeout_s=cfg.timeout_s, cancel=cancel,
                   keep_fds=keep_fds)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            err.append(e)
    th = threading.Thread(target=target, daemon=True)
    from hw.dist import _install_signal_handlers, _restore_signal_handlers
    handlers = _install_signal_handlers()        # SIGTERM/SIGHUP unwind through the except below
    th.start()
    seen = -1
    try:
        while th.is_alive():
            th.join(0.3)
            if progress:
                done = _done_names(cfg.state_path) & names
                if len(done) != seen:
                    seen = len(done)
                    progress(seen, total, "")
    except BaseException:
        # Ctrl-C (or SIGTERM) lands in this thread: have the launch thread kill the ranks and wait
        # for it, so none outlives this process (the ranks' pipe watchdog is the backstop)
        cancel.set()
        th.join(10.0)
        raise
    finally:
        _restore_signal_handlers(handlers)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if err:
        e = err[0]
        if isinstance(e, worker_failed) and f"exited with code {STOPPED}" in str(e):
            raise CalibrationStopped(f"calibration stopped after {cfg.stop_after} group(s) as asked; "
                                     f"partial results kept in {cfg.state_path}") from None
        if isinstance(e, worker_failed):
            done = _done_names(cfg.state_path) & names
            kept = (f"{len(done)} finished group(s) are kept in {cfg.state_path}: rerun the same command to "
                    f"continue" if done else "no group had finished; nothing was kept")
            raise worker_failed(f"calibration failed: {e}\n{kept}") from None
        raise e


def _done_names(path: str) -> set[str]:
    try:
        return set(json.loads(Path(path).read_text())["groups"])
    except (OSError, ValueError, KeyError):
        return set()


def run_here(cfg: CalibConfig) -> Path | None:
    """torchrun mode: this process is one rank; rank 0 writes the profile. Extra env settings
    cannot be applied here (NCCL reads the environment before we run): set them on torchrun."""
    import torch.distributed as dist
    from hw import dist as hwdist
    if cfg.envs:
        raise ValueError("--nccl-env needs the launcher (--nproc); under torchrun set NCCL_* yourself "
                         "and tag the tables with --impl")
    lock = None
    if int(os.environ.get("RANK", "0")) == 0:
        from sim.lock import acquire, check_writable
        check_extends(cfg.extends)
        lock = acquire(cfg.out, "calibration")     # rank 0 writes --out: one such run at a time
        check_writable(cfg.out)
    ctx = hwdist.init_from_env(cfg.backend, "cuda" if cfg.device == "cuda" else "cpu", cfg.timeout_s)
    try:
        _check_world(cfg, ctx.world)
        box = [uuid.uuid4().hex[:12]]
        dist.broadcast_object_list(box, src=0, group=hwdist.cpu_group())
        cfg = replace(cfg, run_id=box[0])
        rc = run_groups(cfg, ctx)
        if rc == STOPPED:
            raise CalibrationStopped(f"calibration stopped early; partial results kept in {cfg.state_path}")
        return finish(cfg, read_state(cfg), ctx.world) if ctx.rank == 0 else None
    finally:
        hwdist.shutdown()
        if lock is not None:
            from sim.lock import release
            release(lock)


def finish(cfg: CalibConfig, state: dict, world: int) -> Path:
    """Fit, write the profile atomically, validate it, delete the state file."""
    from calib.fit import build_profile, refit_overlap
    from sim.profile import load_profile
    from sim.trace import write_json_atomic
    names = {g.name for i in range(len(cfg.envs) + 1) for g in plan_groups(cfg, world, i)}
    missing = sorted(names - set(state["groups"]))
    if missing:
        raise CalibrationStopped(f"{len(missing)} measurement group(s) unfinished ({missing[0]}, ...); "
                                 f"rerun to continue from {cfg.state_path}")
    groups = {k: v for k, v in state["groups"].items() if k in names}
    prof = build_profile(cfg, groups, world)
    out = Path(cfg.out)
    # the overlap refit simulates with the profile itself (base merged): load it from a side file
    # first, so an interrupted refit never leaves an unfitted profile at --out
    # (a name of our own: a user's `<stem>.unfitted.json` beside --out is none of our business)
    import tempfile
    fd, side_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}.", suffix=".unfitted.json")
    os.close(fd)
    side = Path(side_name)
    try:
        write_json_atomic(side, prof)
        loaded = load_profile(str(side))       # raises ProfileError naming the field if we wrote nonsense
        refit_overlap(prof, loaded)            # CPU in-pass overlap: fitted by simulating the passes
    finally:
        side.unlink(missing_ok=True)
    write_json_atomic(out, prof)
    load_profile(str(out))
    Path(cfg.state_path).unlink(missing_ok=True)
    return out
