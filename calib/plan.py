"""A calibration's plan and its resumable state.

A calibration is a list of *groups* (device constants, one collective sweep per collective x
group size x mode x implementation, one compute case per workload shape, overlap), planned from a
`CalibConfig`. Ranks run them in order (calib/rank.py); after each finished group rank 0 writes
everything measured so far to `<out>.state.json` atomically. A restarted calibration with the
same `--out` (and the same options) reads that file and skips the groups in it, so a killed run
loses at most the group it was in. calib/run.py launches the ranks and writes the profile.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from tpsim.fileio.policy import MAX_CHECKPOINT_BYTES, read_input_text
from tpsim.fileio.shape import check_shape, finite, is_, short
from tpsim.sim.model.presets import get_model, valid_tp
from tpsim.sim.stack.spec import DTYPE_BYTES, Stack, make_stack
from tpsim.sim.price.work import op_work
from tpsim.fileio.policy import write_json_atomic

from tpsim.hw.run_config import check_backend_device

from tpsim.calib.shapes import ShapeCase

PARTS = ("device", "collectives", "compute", "overlap")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
STOPPED = 3                      # worker exit code: stopped on purpose after --stop-after groups
STATE_FORMAT = "tpsim-calibration-state"


class CalibrationStopped(RuntimeError):
    """The calibration ended before its last group; the state file keeps what was measured."""


class CalibrationInterrupted(KeyboardInterrupt):
    """Ctrl-C ended the calibration; the message says what the state file keeps (and where the
    interrupted launch's rank logs are, if they say anything)."""


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
            make_stack(dict(dtype=self.dtype, kv=kv, attention=att, head=head, prefill_logits=pl))
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
        return [make_stack(dict(dtype=self.dtype, kv=kv, attention=a, head=h, prefill_logits=pl,
                                decode_graphs=False, collective=self.impl_of(0)))
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
    """The torch version and a digest of the measuring code (hw/, calib/*.py): what a measured
    group depends on besides the options. The digest, not tpsim's installed version, names the
    code: package metadata is visible or not depending on the working directory (a build leaves
    an egg-info in the checkout) and on `python -I`, so the launcher and its ranks could disagree."""
    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "none"
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for f in sorted([*here.rglob("*.py"), *(here.parent / "hw").rglob("*.py")]):
        h.update(f.relative_to(here.parent).as_posix().encode() + f.read_bytes())
    return f"torch {ver('torch')}, code {h.hexdigest()[:16]}"


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
    out: dict = {}
    for c in cases:
        for k, v in model_bytes(c.schedules(), dtype).items():
            out.setdefault(k, set()).update(v)
    return out


# ------------------------------------------------------------------ message sizes

def pow2_sizes(lo_bytes: int, hi_bytes: int, step: int = 1) -> list[int]:
    """lo, lo*2^step, ... <= hi (powers of two)."""
    out, b = [], lo_bytes
    while b <= hi_bytes:
        out.append(b)
        b <<= step
    return out


def legal_size(collective: str, nbytes: int, group: int, elem: int) -> int:
    """Round up so every rank's buffer holds whole elements (and splits evenly over the group)."""
    unit = elem * (group if collective in ("all_gather", "reduce_scatter") else 1)
    return max(unit, -(-int(nbytes) // unit) * unit)


def model_bytes(schedules, dtype: str) -> dict[tuple[str, int], set[int]]:
    """(collective, group) -> the exact message sizes (nccl-tests convention) the schedules' comm
    ops move: rows * width * dtype bytes, all-gather counted as its gathered output."""
    out: dict[tuple[str, int], set[int]] = {}
    e = DTYPE_BYTES[dtype]
    for sched in schedules:
        for op in sched.collectives:
            a = dict(op.attrs)
            kind = "all_gather" if op.kind == "shift" else op.kind     # a ring step: priced from the all-gather
            b = e * a["rows"] * a["width"] * (a["group"] if kind == "all_gather" else 1)
            out.setdefault((kind, a["group"]), set()).add(b)
    return out


# ------------------------------------------------------------------ state file

def read_state(cfg: CalibConfig) -> dict:
    """The state of an interrupted calibration with these options, or a fresh one."""
    p = Path(cfg.state_path)
    fresh = {"format": STATE_FORMAT, "version": 1, "fingerprint": cfg.fingerprint(), "groups": {}}
    if not os.path.lexists(p):
        return fresh
    try:                                   # the input policy: a regular file, bounded (fileio/policy.py)
        st = json.loads(read_input_text(p, "state file", MAX_CHECKPOINT_BYTES))
    except json.JSONDecodeError:
        raise ValueError(f"state file {p} is not valid JSON (a torn write?); delete it to start over") from None
    if not isinstance(st, dict) or st.get("format") != STATE_FORMAT:
        raise ValueError(f"{p} is not a tpsim calibration state file; delete it or choose another --out")
    if st.get("fingerprint") != cfg.fingerprint():
        theirs = st["fingerprint"] if isinstance(st.get("fingerprint"), dict) else {}
        diff = sorted(k for k in set(theirs) | set(cfg.fingerprint()) if theirs.get(k) != cfg.fingerprint().get(k))
        raise ValueError(f"state file {p} belongs to a calibration with other options (differs in: "
                         f"{', '.join(diff)}); rerun with the same options to resume, or delete it to start over")
    try:
        check_groups(st.get("groups"))
    except ValueError as e:
        raise ValueError(f"state file {p} is damaged ({e}); delete it to start over") from None
    return st


# What the fit (calib/fit.py, calib/overlap_fit.py) reads of each finished group, by kind, as
# calib/rank.py writes it (a fileio/shape.py spec). The state file is ours, but a torn copy or a hand
# edit must be refused, naming the field, before any rank starts -- not found by a KeyError in the fit
# after the last group.
_TRIAL_ROWS = ("alone", "first", "blocking", "overlapped", "overlapped_wait")   # calib.overlap_summary's per_trial_s


def _priced_op(p: dict) -> str | None:
    """A measured compute point is an op the fit can price: calib.fit.point_op's work (sim.price.work.op_work)
    in numbers of flops and bytes (a string where a count goes would repeat, not multiply)."""
    from tpsim.calib.fit import point_op         # lazy: the fit's scipy loads only where a state file is read
    try:
        works = op_work(point_op(p), fused=False)
    except (KeyError, TypeError, ValueError) as e:
        return f"is not an op the fit can price ({type(e).__name__}: {e})"
    if not all(finite(w.flops) and w.flops >= 0 and finite(w.bytes) and w.bytes >= 0 for w in works):
        return "is not an op the fit can price (its attrs give no number of flops or bytes)"
    return None


def _overlap_case(case) -> str | None:
    """An in-pass overlap case's descriptor rebuilds the decode pass it ran (calib.overlap_fit)."""
    from tpsim.calib.overlap_fit import decode_schedule      # lazy: scipy, only where a state file is read
    try:
        decode_schedule(case)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        return f"is not a case the overlap fit can rebuild ({type(e).__name__}: {e})"
    return None


def _trials(v) -> str | None:
    """per_trial_s: the trials' paired values (redrawn together), one list per row, each as long."""
    rows = [v.get(k) for k in _TRIAL_ROWS] if isinstance(v, dict) else [None]
    if not all(isinstance(r, list) and r and all(finite(x) and x >= 0 for x in r) for r in rows):
        return f"must hold lists of numbers {', '.join(_TRIAL_ROWS)}, got {short(v)}"
    if len({len(r) for r in rows}) > 1 or not all(rows[_TRIAL_ROWS.index("overlapped")]):
        return f"must hold lists of one length, the overlapped times > 0, got {short(v)}"
    return None


_RATES = is_(lambda v: isinstance(v, dict) and v and all(k.isdigit() and finite(x) and x > 0 for k, x in v.items()),
             "a non-empty object of sizes to rates > 0")   # size (bytes or matrix side) -> rate
_CORES = is_(lambda v: v is None or isinstance(v, list) and all(
    c is None or isinstance(c, list) and all(finite(i) and i >= 0 and i == int(i) for i in c) for c in v),
    "a list of per-rank core lists")
_ATTRS = is_(lambda v: isinstance(v, dict) and all(isinstance(x, str) or finite(x) and x >= 0 and x == int(x)
                                                   for x in v.values()), "an object of whole numbers and strings")


def _one_of(*names: str):
    return is_(lambda v: v in names, " or ".join(repr(n) for n in names))


_GROUP_FIELDS = {
    "device": {"launch_s": "number", "graph_launch_s": "number or null", "matmul_flops": _RATES,
               "copy_bytes_per_s": _RATES, "device_name": "text", "host": "text",
               "rank_cores?": _CORES, "device_mem_bytes?": "number or null",
               "compute_capability?": "number or null", "host_ram_bytes?": "number or null"},
    "collectives": {"points": ("non-empty list", [{
        "collective": _one_of(*COLLECTIVES), "group": "positive count", "mode": _one_of("eager", "graph"),
        "impl": "text", "bytes": "positive count", "time_us": "positive"}])},
    "arrival": {"scope": _one_of("node", "net"), "ranks": "count", "calls": "count", "lags": "count",
                "mean_us": "number", "spread_p50_us": "number", "spread_p90_us": "number"},
    "compute": {"points": ("non-empty list", [({"kind": "text", "attrs": _ATTRS, "dtype": "text", "time_s": "positive",
                                                "mode?": _one_of("any", "eager", "graph")}, _priced_op)]),
                "probe_s?": "number"},
    "overlap": {"trials": "count", "what?": "text",
                "summary": {"compute_slowdown": "number", "comm_slowdown": "number",
                            "compute_slowdown_raw?": "number", "comm_slowdown_raw?": "number",
                            "done_early?": "number", "method?": "text",
                            "cases?": ("non-empty list", [{"what": "text", "case": _overlap_case,
                                                           "all_reduces": "count", "per_trial_s": _trials}])}},
}


def check_groups(groups) -> None:
    """ValueError naming the group and the field when a state file's finished groups are not what
    calib/rank.py writes (`_GROUP_FIELDS`)."""
    if not isinstance(groups, dict):
        raise ValueError(f"'groups' must be an object, got {short(groups)}")
    for name, g in groups.items():
        if not isinstance(g, dict):
            raise ValueError(f"group {name!r} must be an object, got {short(g)}")
        kind = g.get("kind")
        # plan_groups names a group after its kind: 'device', 'compute/...'
        if not isinstance(kind, str) or kind not in _GROUP_FIELDS or name.split("/")[0] != kind:
            raise ValueError(f"group {name!r} has kind {short(kind)}, not one of {', '.join(_GROUP_FIELDS)} "
                             f"matching its name")
        check_shape(g, {"finished_at": "text", **_GROUP_FIELDS[kind]}, f"group {name!r}: field", f"group {name!r}")


def write_state(path: str, state: dict) -> None:
    write_json_atomic(path, state)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def done_names(path: str) -> set[str]:
    try:
        return set(json.loads(Path(path).read_text())["groups"])
    except (OSError, ValueError, KeyError):
        return set()
