"""A config.json's `quantization_config` -> ModelSpec.quant: FP8 linears are priced, anything else is
refused in one line.

Accepted, as the serving engines read them:
  * quant_method "fp8" (vLLM's own format, also what TensorRT-Model-Optimizer and HF's FP8 export
    write): vllm/model_executor/layers/quantization/fp8.py Fp8Config.from_config reads quant_method,
    activation_scheme ("dynamic" | "static": a per-tensor input_scale in the checkpoint),
    ignored_layers / modules_to_not_convert and weight_block_size. e4m3 weights with a per-tensor
    scale per shard (Fp8LinearMethod: PerTensorScaleParameter). 128x128 block scales
    (weight_block_size, DeepSeek's layout) run other kernels (block-scaled GEMMs, per-group input
    quantization) that tpsim does not price: refused.
  * quant_method "compressed-tensors" with format "float-quantized" (RedHatAI / Neural Magic
    `*-FP8` and `*-FP8-dynamic` checkpoints, llm-compressor's FP8 and FP8_DYNAMIC presets:
    compressed_tensors/quantization/quant_scheme.py): every config group's weights 8-bit "float"
    (strategy "tensor" or "channel") and input_activations 8-bit "float" (strategy "tensor" static, or
    "token" dynamic). Weight-only FP8 (no input_activations: W8A16) runs Marlin-style kernels in the
    engines: refused, as are integer and 4-bit schemes.
Anything else (gptq, awq, bitsandbytes, int8, nvfp4, ...) is refused naming its method.
"""
from __future__ import annotations

from tpsim.fileio.shape import short as _short

ACCEPTED = "FP8 (quant_method fp8, or compressed-tensors float-quantized 8-bit)"


def quant_of(cfg: dict, where: str) -> str:
    """ModelSpec.quant of a config dict: "" without quantization_config, "fp8-dynamic" / "fp8-static"
    for an FP8 checkpoint; ValueError (one line naming `where`) for any other quantization."""
    q = cfg.get("quantization_config")
    if q is None or q == {}:
        return ""
    if not isinstance(q, dict):
        raise ValueError(f"{where}: quantization_config must be an object, got {_short(q)}")
    method = q.get("quant_method")
    if method == "fp8":
        return _vllm_fp8(q, where)
    if method == "compressed-tensors":
        return _compressed_tensors(q, where)
    raise ValueError(f"{where}: a quantized checkpoint ({method if isinstance(method, str) else _short(method)}): "
                     f"tpsim prices 16-bit and {ACCEPTED} "
                     f"linears; drop quantization_config to price the unquantized model")


def _vllm_fp8(q: dict, where: str) -> str:
    if q.get("weight_block_size") is not None:
        raise ValueError(f"{where}: FP8 with weight_block_size {_short(q['weight_block_size'])} (block-scaled "
                         f"weights): tpsim prices per-tensor/per-channel FP8 GEMMs (CUTLASS scaled-mm), not the "
                         f"block-scaled kernels")
    scheme = q.get("activation_scheme", "dynamic")
    if scheme not in ("dynamic", "static"):
        raise ValueError(f"{where}: quantization_config.activation_scheme must be dynamic or static, got "
                         f"{_short(scheme)}")
    return f"fp8-{scheme}"


def _compressed_tensors(q: dict, where: str) -> str:
    fmt = q.get("format")
    groups = q.get("config_groups")
    if fmt != "float-quantized" or not isinstance(groups, dict) or not groups:
        raise ValueError(f"{where}: compressed-tensors format {_short(fmt)}: tpsim prices its FP8 "
                         f"(float-quantized) checkpoints only")
    schemes = set()
    for name, g in groups.items():
        w = g.get("weights") if isinstance(g, dict) else None
        a = g.get("input_activations") if isinstance(g, dict) else None
        if not _fp8_args(w) or w.get("strategy") not in ("tensor", "channel"):
            raise ValueError(f"{where}: compressed-tensors group {name!r}: weights {_short(w)} are not 8-bit float "
                             f"per tensor or per channel (the FP8 schemes tpsim prices)")
        if not _fp8_args(a):
            raise ValueError(f"{where}: compressed-tensors group {name!r}: input_activations {_short(a)}: "
                             f"weight-only FP8 (W8A16) runs the engines' Marlin-style kernels, which tpsim does "
                             f"not price; it prices W8A8 FP8")
        dynamic = a.get("dynamic", False) is True or a.get("strategy") == "token"
        schemes.add("fp8-dynamic" if dynamic else "fp8-static")
    if len(schemes) > 1:
        raise ValueError(f"{where}: compressed-tensors groups mix dynamic and static input scales; tpsim prices "
                         f"one scheme per model")
    return schemes.pop()


def _fp8_args(a) -> bool:
    """A compressed-tensors QuantizationArgs of 8-bit floats (e4m3)."""
    return isinstance(a, dict) and a.get("num_bits") == 8 and a.get("type") == "float"
