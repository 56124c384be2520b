"""Launch a calibration: start the ranks, watch the state file for progress, fit and write the profile.

`calibrate()` starts `nproc` local ranks (hw.dist.launch), once per NCCL environment setting
(NCCL reads its environment at communicator init); under torchrun the process is one rank itself
(`run_here`). The ranks run calib/rank.py over the plan of calib/plan.py. When every group is
done the points are fitted (calib.fit) and the profile is written to `--out` through
sim.hardware.profile.write_profile (validated first), and the state file deleted.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch.distributed as dist

from tpsim.fileio.lock import acquire, check_writable, output_lock, release
from tpsim.sim.hardware.profile import ProfileError, load_document, load_profile, write_profile

from tpsim.hw import rank as hwrank
from tpsim.hw.dist import WorkerFailed, install_signal_handlers, restore_signal_handlers, launch

from tpsim.calib.fit import build_profile, refit_overlap
from tpsim.calib.plan import (STOPPED, CalibConfig, CalibrationInterrupted, CalibrationStopped, done_names, plan_groups,
                              read_state)
from tpsim.calib.rank import run_groups

# ------------------------------------------------------------------ orchestration

def calibrate(backend: str = "gloo", nproc: int = 2, models=(), tps=(), batches=(1,), prompt_len=(1024,),
              gen_len=(512,), quick: bool = False, out: str | os.PathLike = "profile.json",
              extends: str | None = None, progress: Callable | None = None, **options) -> Path:
    """Measure this machine with `nproc` local ranks and write a profile to `out`; returns its path.

    `prompt_len`/`gen_len` take an int or a list. `progress(done, total, group_name)` is called as
    groups finish. Extra `options` are CalibConfig fields (dtype, kvs, parts, envs, stop_after, ...).
    A rerun with the same `out` and options resumes from `<out>.state.json`.
    Raises CalibrationStopped when `stop_after` ended it early (the state file is kept), and
    CalibrationInterrupted (a KeyboardInterrupt) on Ctrl-C, saying what was kept."""
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
    # one calibration per --out: the ranks inherit the lock, so it lasts until the last of them is gone
    with output_lock(cfg.out, "calibration") as lock_fd:
        check_writable(cfg.out)
        check_writable(cfg.state_path, "--out's state file")   # a regular file or none (never a planted link)
        state = read_state(cfg)                   # fail early on a foreign state file
        plans = [plan_groups(cfg, nproc, i) for i in range(len(cfg.envs) + 1)]
        total = sum(len(p) for p in plans)
        names = {g.name for p in plans for g in p}
        try:
            for i, plan in enumerate(plans):
                if all(g.name in state["groups"] for g in plan):
                    continue
                run_cfg = replace(cfg, env_index=i)
                _launch_watched(launch, run_cfg, nproc, total, names, progress, WorkerFailed, keep_fds=(lock_fd,))
                state = read_state(cfg)
            return finish(cfg, state, nproc)
        except KeyboardInterrupt:          # Ctrl-C: say what a rerun continues from (the ranks are gone)
            logs = _interrupted_logs(cfg.run_id)
            where = f"\nrank logs: {logs}/rank*.log" if logs else ""
            raise CalibrationInterrupted(_kept(cfg, names) + where) from None


def check_extends(extends: str | None) -> None:
    """A --extends base that does not resolve fails now, not after the whole measurement."""
    if extends:
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
            launch("tpsim.calib.rank:worker", cfg.to_dict(), nproc, timeout_s=cfg.timeout_s, cancel=cancel,
                   keep_fds=keep_fds)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            err.append(e)
    th = threading.Thread(target=target, daemon=True)
    handlers = install_signal_handlers()        # SIGTERM/SIGHUP unwind through the except below
    th.start()
    seen = -1
    try:
        while th.is_alive():
            th.join(0.3)
            if progress:
                done = done_names(cfg.state_path) & names
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
        restore_signal_handlers(handlers)
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
            raise worker_failed(f"calibration failed: {e}\n{_kept(cfg, names)}") from None
        raise e


def _kept(cfg: CalibConfig, names: set) -> str:
    """What a calibration that ended early leaves for a rerun."""
    done = done_names(cfg.state_path) & names
    return (f"{len(done)} finished group(s) are kept in {cfg.state_path}: rerun the same command to continue"
            if done else "no group had finished; nothing was kept")


def _interrupted_logs(run_id: str) -> str | None:
    """The rank-log folder (/tmp/tpsim-run-*) an interrupted launch of this calibration left: hw.dist.launch
    keeps it after an interrupt only where a rank reported something ([tpsim] lines), and says where in the
    launch thread's exception, not this one's; its config.json carries our run_id. Removed, and None, when
    no rank wrote a line (a Ctrl-C usually kills them silently)."""
    for d in Path(tempfile.gettempdir()).glob("tpsim-run-*"):
        try:
            ours = json.loads((d / "config.json").read_text()).get("run_id") == run_id
            said = ours and any(log.stat().st_size for log in d.glob("rank*.log"))
        except (OSError, ValueError, AttributeError):        # another user's folder, a torn or foreign file
            continue
        if said:
            return str(d)
        if ours:
            shutil.rmtree(d, ignore_errors=True)
    return None


def run_here(cfg: CalibConfig) -> Path | None:
    """torchrun mode: this process is one rank; rank 0 writes the profile. Extra env settings
    cannot be applied here (NCCL reads the environment before we run): set them on torchrun."""
    if cfg.envs:
        raise ValueError("--nccl-env needs the launcher (--nproc); under torchrun set NCCL_* yourself "
                         "and tag the tables with --impl")
    lock = None
    if int(os.environ.get("RANK", "0")) == 0:
        check_extends(cfg.extends)
        lock = acquire(cfg.out, "calibration")     # rank 0 writes --out: one such run at a time
        check_writable(cfg.out)
        check_writable(cfg.state_path, "--out's state file")
    ctx = hwrank.init_from_env(cfg.backend, "cuda" if cfg.device == "cuda" else "cpu", cfg.timeout_s)
    try:
        _check_world(cfg, ctx.world)
        box = [uuid.uuid4().hex[:12]]
        dist.broadcast_object_list(box, src=0, group=hwrank.cpu_group())
        cfg = replace(cfg, run_id=box[0])
        rc = run_groups(cfg, ctx)
        if rc == STOPPED:
            raise CalibrationStopped(f"calibration stopped early; partial results kept in {cfg.state_path}")
        return finish(cfg, read_state(cfg), ctx.world) if ctx.rank == 0 else None
    finally:
        hwrank.shutdown()
        if lock is not None:
            release(lock)


def finish(cfg: CalibConfig, state: dict, world: int) -> Path:
    """Fit, write the profile atomically, validate it, delete the state file."""
    names = {g.name for i in range(len(cfg.envs) + 1) for g in plan_groups(cfg, world, i)}
    missing = sorted(names - set(state["groups"]))
    if missing:
        raise CalibrationStopped(f"{len(missing)} measurement group(s) unfinished ({missing[0]}, ...); "
                                 f"rerun to continue from {cfg.state_path}")
    groups = {k: v for k, v in state["groups"].items() if k in names}
    prof = build_profile(cfg, groups, world)
    out = Path(cfg.out)
    # the overlap refit simulates with the profile itself (base merged), loaded before anything is
    # written, so an interrupted refit never leaves an unfitted profile at --out
    loaded = load_document(prof, near=out)      # raises ProfileError naming the field if we wrote nonsense
    refit_overlap(prof, loaded)                 # CPU in-pass overlap: fitted by simulating the passes
    write_profile(out, prof)
    Path(cfg.state_path).unlink(missing_ok=True)
    return out
