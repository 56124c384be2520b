"""Typed checks of a Hugging Face config.json before sim/model/hf/config.py reads it (issue #29).

The file is read by the input policy (fileio/policy.py: a regular file of at most 16 MiB, UTF-8 with
or without a BOM, no duplicate keys, NaN, Infinity, 20-digit integers or deep nesting). Then every
key the reader uses must have its type -- `"tie_word_embeddings": "false"` is a string, refused,
not read as true -- and every count must lie in the bounds table (sim/bounds.py): 10^9 layers
took 8 GB before anything was priced. Errors are one line naming the file and the key.
"""
from __future__ import annotations

from pathlib import Path

from tpsim.sim.bounds import check as check_bound
from tpsim.fileio.policy import MAX_CONFIG_BYTES, parse_json, read_input_text
from tpsim.fileio.shape import finite, short as _short

# config key -> bounds-table entry
COUNTS = {"num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
          "num_key_value_heads": "heads", "head_dim": "head_dim", "intermediate_size": "ffn",
          "vocab_size": "vocab", "sliding_window": "sliding_window", "max_position_embeddings": "tokens"}
BOOLS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")
STRINGS = ("model_type", "hidden_act", "hidden_activation")
# key -> (lowest, highest) of a real config: RMSNorm eps 1e-6..1e-5. The RoPE keys (rope_theta,
# rope_scaling, rope_parameters, in either layout) are checked where they are read: sim/model/hf/rope.py
FLOATS = {"rms_norm_eps": (1e-12, 1.0), "partial_rotary_factor": (1e-3, 1.0)}


def read_config(path: Path) -> dict:
    """The JSON object of one config.json (ValueError naming the file, and the line where known)."""
    cfg = parse_json(read_input_text(path, "model config", MAX_CONFIG_BYTES), str(path))
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: a config.json holds one JSON object")
    return cfg


def check_config(cfg: dict, where: str) -> None:
    """Every key hf_config reads has its JSON type and a real value; null is "not given"."""
    archs = cfg.get("architectures")
    if archs is not None and not isinstance(archs, str) and not (
            isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ValueError(f"{where}: 'architectures' must be a list of class names, got {_short(archs)}")
    for key in STRINGS:
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            raise ValueError(f"{where}: {key!r} must be a string, got {_short(cfg[key])}")
    for key in BOOLS:
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise ValueError(f"{where}: {key!r} must be true or false, got {_short(cfg[key])}")
    for key, bound in COUNTS.items():
        if cfg.get(key) is not None:
            check_bound(bound, cfg[key], f"{where}: {key!r}")
    for key, (lo, hi) in FLOATS.items():
        v = cfg.get(key)
        if v is None:
            continue
        if not finite(v) or not lo <= v <= hi:
            raise ValueError(f"{where}: {key!r} must be a number in [{lo:g}, {hi:g}], got {_short(v)}")

