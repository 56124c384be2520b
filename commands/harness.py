"""What the commands that run ranks share (bench, check, spd-plan, calibrate): the checks made before
any process starts (a GPU for --device cuda, a writable --out, the memory gate, a checkpoint's headers)
and the launcher/rank-mode switch, `run_ranks`.

Each such command runs in one of two modes:
  * launcher (default): starts --nproc local rank processes itself (hw.dist.launch), watches
    them (a rank exiting nonzero stops the rest; --timeout-s bounds every collective) and
    returns rank 0's result;
  * rank (under torchrun, detected by RANK/WORLD_SIZE in the environment): this process *is*
    one rank. torchrun starts the same command line as the launcher, through the one tpsim entry
    point: `torchrun --nproc-per-node 8 --no-python tpsim bench --device cuda --backend nccl ...`
    (or `torchrun ... -m tpsim bench ...`; from a source checkout that is not installed,
    `torchrun ... cli.py bench ...`, which runs that checkout as tpsim). No module here has a `__main__`
    block, so no file is ever imported twice (once as `__main__`, once by its name).

This module imports no torch: it reaches the torch side (torch, hw.dist, hw.checkpoint, hw.run_config)
through `hw.harness` only.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace

import click

from tpsim.fileio.lock import check_writable
from tpsim.hw import harness
from tpsim.sim.model.presets import get_model


def check_cuda(n: int = 1, command: str = "bench") -> None:
    """`--device cuda` needs torch to see `n` GPUs: one clear line instead of an assertion deep in torch."""
    if not cuda_available(command):
        raise ValueError("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False); "
                         "use --device cpu --backend gloo")
    torch = harness("torch", command)
    if torch.cuda.device_count() < n:
        raise ValueError(f"{n} ranks need {n} GPUs; torch sees {torch.cuda.device_count()}")


def check_out_path(path: str | None, option: str) -> None:
    """An output path given (None: not given) names a file that can be written, checked before any
    work: a long run never fails at its last step, and '' (which would write nothing, or the
    directory) is refused."""
    if path is None:
        return
    if not path.strip():
        raise ValueError(f"{option} needs a file path, got {path!r}")
    check_writable(path, option)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def model_and_checkpoint(kind: str, model: str | None, checkpoint: str | None) -> tuple[str, str | None]:
    """--model and --checkpoint -> (model, checkpoint path): the checkpoint's config is the model (a
    --model beside it may only take its first K layers, NAME[:K]); its headers are checked here, before
    any process starts (hw.checkpoint.open_for: names, shapes, dtypes, shards against the config)."""
    if not checkpoint:
        return model or "tiny", None
    path = os.path.abspath(checkpoint)
    if not os.path.isfile(os.path.join(path, "config.json")):      # else get_model's hint: 'give a preset name'
        what = "has no config.json" if os.path.isdir(path) else "is no folder"
        raise ValueError(f"--checkpoint {checkpoint} {what}: give a Hugging Face snapshot folder "
                         f"(config.json + *.safetensors)")
    if model and not (model.startswith("[:") or model.rstrip("/") in (checkpoint.rstrip("/"), path)):
        raise ValueError(f"--checkpoint {checkpoint} runs its own config; drop --model {model} (use --layers K "
                         f"for the first K layers)")
    name = path + (model if model and model.startswith("[:") else "")
    harness("tpsim.hw.checkpoint", kind).open_for(path, get_model(path))
    return name, path


def cuda_available(command: str) -> bool:
    return harness("torch", command).cuda.is_available()


def run_ranks(target: str, cfg, deadline_s: float | None, command: str, extra: dict | None = None,
              on_beat=None) -> dict | None:
    """Launcher or rank mode; returns rank 0's result dict (launcher mode) or None (rank mode).
    `extra` joins the RunConfig's fields in the config every rank gets (a command's own options);
    `on_beat` gets rank 0's progress marks a few times a second (hw.dist.launch: a progress bar)."""
    mod, _, fn = target.partition(":")
    if under_torchrun():
        rc = getattr(harness(mod, command), fn)(replace(cfg, print_result=True).to_dict() | (extra or {}))
        raise SystemExit(rc)
    out = cfg.out
    tmp = None
    if out is None:
        fd, tmp = tempfile.mkstemp(prefix="tpsim-", suffix=".json")
        os.close(fd)
        os.unlink(tmp)
        out = tmp
    dist = harness("tpsim.hw.dist", command)
    try:
        dist.launch(target, replace(cfg, out=os.path.abspath(out)).to_dict() | (extra or {}), cfg.tp,
                    timeout_s=cfg.timeout_s, deadline_s=deadline_s, on_beat=on_beat)
        with open(out) as f:
            return json.load(f)
    except dist.WorkerFailed as e:
        raise click.ClickException(str(e)) from None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def memory_gate(cfg, command: str) -> None:
    """Refuse before starting processes when the run cannot fit (hw.run_config.memory_gate, one line;
    check's ranks also hold its whole-model reference)."""
    harness("tpsim.hw.run_config", command).memory_gate(cfg, reference=command == "check")
