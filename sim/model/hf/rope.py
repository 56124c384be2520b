"""RoPE of a Hugging Face config.json -> RopeSpec, from either layout transformers writes.

  hub layout (transformers <= 4.x, most checkpoints on the Hub): top-level `rope_theta` and
      `rope_scaling` {"rope_type" (or the older "type"): ..., its parameters} or null;
  transformers 5.x layout: `rope_parameters` {"rope_type", "rope_theta", its parameters}.

Both give the same RopeSpec (transformers' RotaryEmbeddingConfigMixin.standardize_rope_params
does the same merge): theta defaults to 10000 (PreTrainedConfig.default_theta) when absent,
`original_max_position_embeddings` of llama3 / yarn defaults to `max_position_embeddings`, and
yarn's missing factor is max_position_embeddings / original_max_position_embeddings. What tpsim
cannot honour is refused in one line (ValueError naming the file), never defaulted: a rope type
outside sim.model.spec.ROPE_TYPES (longrope, proportional, mrope ...), per-layer-type rope
dicts, a key the type does not take, conflicting theta or scaling between the two layouts.
"""
from __future__ import annotations

import math

from tpsim.sim.model.spec import ROPE_TYPES, RopeSpec
from tpsim.fileio.shape import finite

DEFAULT_THETA = 10_000.0        # transformers PreTrainedConfig.default_theta
_LAYOUT_KEYS = ("rope_type", "type", "rope_theta")


def rope_of(cfg: dict, where: str) -> RopeSpec:
    """The RopeSpec of config dict `cfg`; ValueError (one line naming `where`) when it cannot be honoured."""
    params, scaling, top_theta = cfg.get("rope_parameters"), cfg.get("rope_scaling"), cfg.get("rope_theta")
    for key, v in (("rope_parameters", params), ("rope_scaling", scaling)):
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"{where}: {key} must be an object or null, got {v!r}")
    if params is not None:                                   # transformers 5.x
        if any(isinstance(v, dict) for v in params.values()):
            raise ValueError(f"{where}: rope_parameters per layer type ({', '.join(params)}): tpsim runs one "
                             f"rope for every layer")
        if scaling and _strip(scaling) != _strip(params):
            raise ValueError(f"{where}: rope_parameters and rope_scaling disagree; keep one of them")
        src = dict(params)
        if top_theta is not None and "rope_theta" in src and _num(top_theta) != _num(src["rope_theta"]):
            raise ValueError(f"{where}: rope_theta {top_theta} and rope_parameters.rope_theta "
                             f"{src['rope_theta']} disagree; keep one of them")
    else:                                                    # hub layout
        src = dict(scaling or {})
        if top_theta is not None and "rope_theta" in src and _num(top_theta) != _num(src["rope_theta"]):
            raise ValueError(f"{where}: rope_theta {top_theta} and rope_scaling.rope_theta "
                             f"{src['rope_theta']} disagree; keep one of them")
    theta = src.pop("rope_theta", None)
    theta = top_theta if theta is None else theta
    theta = DEFAULT_THETA if theta is None else theta
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (math.isfinite(theta) and theta > 1):
        raise ValueError(f"{where}: rope_theta must be a number > 1, got {theta!r}")
    kind = src.pop("rope_type", None) or src.pop("type", None) or "default"
    src.pop("type", None)
    if not isinstance(kind, str):            # ["llama3"] was a TypeError (unhashable) at the lookup below
        raise ValueError(f"{where}: rope_type must be a string, got {kind!r:.60}")
    if kind == "mrope" or src.get("mrope_section"):
        raise ValueError(f"{where}: multimodal rope ({kind}) belongs to a vision-language model; "
                         f"tpsim prices text decoders")
    prf = src.pop("partial_rotary_factor", None)
    if prf not in (None, 1, 1.0):
        raise ValueError(f"{where}: partial_rotary_factor {prf}: tpsim rotates the whole head")
    if kind not in ROPE_TYPES:
        raise ValueError(f"{where}: rope type {kind!r} is not one tpsim computes (supported: "
                         f"{', '.join(ROPE_TYPES)}); running it as another would give wrong logits")
    max_pos = cfg.get("max_position_embeddings")
    if kind in ("llama3", "yarn") and "original_max_position_embeddings" not in src and max_pos is not None:
        src["original_max_position_embeddings"] = max_pos
    if kind == "yarn" and src.get("factor") is None and max_pos and src.get("original_max_position_embeddings"):
        src["factor"] = max_pos / src["original_max_position_embeddings"]
    if kind == "dynamic" and max_pos is not None:
        src["max_position_embeddings"] = max_pos
    if kind == "default" and src.get("factor", 0) in (None, 1, 1.0):
        del src["factor"]                                    # a no-op factor some configs spell out
    for k, v in src.items():
        if k != "truncate" and not finite(v):
            raise ValueError(f"{where}: rope parameter {k} must be a number, got {v!r}")
    if "factor" in src and src["factor"] < 1:
        raise ValueError(f"{where}: rope factor must be >= 1, got {src['factor']}")
    try:
        return RopeSpec(float(theta), kind, tuple(sorted(src.items())))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _strip(d: dict) -> dict:
    """A rope dict without the keys both layouts spell differently (type / rope_type) or hold elsewhere."""
    out = {k: v for k, v in d.items() if k not in _LAYOUT_KEYS}
    out["rope_type"] = d.get("rope_type") or d.get("type") or "default"
    return out


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
