"""A Hugging Face checkpoint (config.json + safetensors, one file or shards listed in
model.safetensors.index.json) as the harness's weights.

`rank_weights(ckpt, placement, ...)` returns one rank's shard in exactly the layout
hw.model.build_weights draws (keys of sim.memory.local_param_shapes: L{i}.wqkv = [q | k | v]
rows of the rank's heads, L{i}.w13 = [gate | up] rows of its FFN columns, L{i}.wo / L{i}.w2 the
matching columns of o_proj / down_proj, a padded vocab shard of the head, and of the input embedding,
when vocab-parallel);
`full_weights(ckpt, ...)` the unsharded ones in hw.model.full_weights' layout (check's
reference). Each tensor is memory-mapped (safetensors safe_open) and only the rank's rows or
columns are read (get_slice), then cast to the run's dtype: no rank ever materializes the full model.

Names are mapped once, in NAMES. `open_checkpoint` refuses, with one line (CheckpointError, a
ValueError), anything that would load silently wrong: a missing shard or tensor, a tensor whose
shape or dtype does not match the config, a tensor it does not know (MoE experts, biases the
config does not declare), a quantized dtype. It reads only the safetensors headers, so the
launcher calls it before any rank process starts (commands.bench).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import safe_open

from tpsim.fileio.policy import MAX_CONFIG_BYTES, parse_json, read_input_text
from tpsim.sim.model.hf.config import load_hf_config
from tpsim.fileio.shape import short as _short
from tpsim.sim.memory import Placement
from tpsim.sim.model.presets import ModelSpec

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# safetensors dtype names -> torch; anything else (I8, U8, F8_E5M2, ...: quantized) is refused. F8_E4M3 only
# for the layer linears of an FP8 checkpoint (its config's quantization_config: sim/model/hf/quant.py)
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
E4M3 = "F8_E4M3"
# the linears an FP8 checkpoint stores in e4m3, each with `.weight_scale` (per tensor [] / [1], or per
# channel [out, 1]) and, with static input scales, `.input_scale` ([] / [1]): vLLM Fp8LinearMethod /
# compressed-tensors CompressedTensorsW8A8Fp8 parameter names
FP8_LINEARS = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")
# config.json's torch_dtype (hub) or dtype (transformers 5.x) -> the safetensors name
CONFIG_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}

# harness name (per layer "L{i}." + key) -> HF tensor name; {i} the layer
NAMES = {
    "embed": "model.embed_tokens.weight",
    "final_norm": "model.norm.weight",
    "head": "lm_head.weight",                           # absent when tie_word_embeddings
    "wq": "model.layers.{i}.self_attn.q_proj.weight",
    "wk": "model.layers.{i}.self_attn.k_proj.weight",
    "wv": "model.layers.{i}.self_attn.v_proj.weight",
    "wo": "model.layers.{i}.self_attn.o_proj.weight",
    "bq": "model.layers.{i}.self_attn.q_proj.bias",     # Qwen2
    "bk": "model.layers.{i}.self_attn.k_proj.bias",
    "bv": "model.layers.{i}.self_attn.v_proj.bias",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight",   # Qwen3
    "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
    "w1": "model.layers.{i}.mlp.gate_proj.weight",
    "w3": "model.layers.{i}.mlp.up_proj.weight",
    "w2": "model.layers.{i}.mlp.down_proj.weight",
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
}
# tensors a checkpoint may carry that the forward does not read (old RoPE caches; an FP8 checkpoint's KV
# cache scales, self_attn.k_scale / v_scale: the harness's e4m3 cache runs with scale 1, vLLM's default)
_IGNORED = ("rotary_emb.inv_freq", "self_attn.k_scale", "self_attn.v_scale")


class CheckpointError(ValueError):
    """A checkpoint the harness cannot load as its config says; the message is one line."""


@dataclass(frozen=True)
class Checkpoint:
    """An opened checkpoint: its model, and which file holds each tensor (headers checked)."""

    path: Path
    model: ModelSpec
    files: dict[str, Path]           # HF tensor name -> the safetensors file holding it
    dtype: str                       # safetensors dtype of every tensor (F32, F16, BF16)

    def truncated(self, layers: int | None) -> "Checkpoint":
        if not layers:
            return self
        return Checkpoint(self.path, self.model.truncated(layers), self.files, self.dtype)


def open_for(path: str | Path, model: ModelSpec) -> Checkpoint:
    """The checkpoint at `path`, cut to `model`'s layers; CheckpointError when `model` (what the
    run's config says, e.g. NAME[:K]) is not the checkpoint's own model."""
    ckpt = open_checkpoint(path)
    layers = model.layers if model.layers != ckpt.model.layers else None
    if layers and layers > ckpt.model.layers:
        raise CheckpointError(f"{path}: {layers} layers asked, the checkpoint has {ckpt.model.layers}")
    ckpt = ckpt.truncated(layers)
    if replace(ckpt.model, name=model.name, description=model.description) != model:
        raise CheckpointError(f"{path}: the checkpoint is a {ckpt.model.name}, not the run's model {model.name}")
    return ckpt


def expected_shapes(m: ModelSpec) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> the shape the config implies ([out, in] for projections)."""
    h, q, kv = m.hidden, m.q_dim, m.kv_dim
    out = {NAMES["embed"]: (m.vocab, h), NAMES["final_norm"]: (h,)}
    if not m.tied_embeddings:
        out[NAMES["head"]] = (m.vocab, h)
    per = {"wq": (q, h), "wk": (kv, h), "wv": (kv, h), "wo": (h, q), "w1": (m.ffn, h), "w3": (m.ffn, h),
           "w2": (h, m.ffn), "attn_norm": (h,), "mlp_norm": (h,)}
    if m.qkv_bias:
        per |= {"bq": (q,), "bk": (kv,), "bv": (kv,)}
    if m.qk_norm:
        per |= {"q_norm": (m.head_dim,), "k_norm": (m.head_dim,)}
    for i in range(m.layers):
        out |= {NAMES[k].format(i=i): s for k, s in per.items()}
    return out


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Read config.json and every safetensors header of the snapshot at `path`; CheckpointError
    (one line) when a file, a tensor, a shape or a dtype is not what the config says."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"--checkpoint {root}: not a folder (give a Hugging Face snapshot: config.json + "
                              f"*.safetensors)")
    try:
        model = load_hf_config(root)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    where = str(root)
    if (root / INDEX).is_file():
        files = _shard_files(root)
        for f in sorted(set(files.values())):
            if not f.is_file():
                raise CheckpointError(f"{where}: shard {f.name} listed in {INDEX} is missing")
    elif (root / SINGLE).is_file():
        files = None
    else:
        bins = sorted(p.name for p in root.glob("*.bin"))
        hint = f" (found {bins[0]}: convert pytorch_model.bin to safetensors)" if bins else ""
        raise CheckpointError(f"{where}: no {SINGLE} or {INDEX}{hint}")
    headers: dict[str, tuple[Path, list[int], str]] = {}
    for f in sorted(set(files.values())) if files else [root / SINGLE]:
        try:
            with safe_open(str(f), framework="pt") as st:
                for name in st.keys():
                    s = st.get_slice(name)
                    headers[name] = (f, list(s.get_shape()), s.get_dtype())
        except Exception as e:                              # a truncated or foreign file
            raise CheckpointError(f"{where}: cannot read {f.name} as safetensors ({e})") from None
    if files:
        for name, f in files.items():
            if name in headers and headers[name][0] != f:
                raise CheckpointError(f"{where}: {name} is in {headers[name][0].name}, not in {f.name} as "
                                      f"{INDEX} says")
    return Checkpoint(root, model, {n: v[0] for n, v in headers.items()}, _check(model, headers, where, root))


def _shard_files(root: Path) -> dict[str, Path]:
    """HF tensor name -> its shard, from the snapshot's index (read by the input policy: a torn
    file says so, with its line). Every shard must lie inside the snapshot folder: an index is
    downloaded with the weights, and `../../etc/passwd` in it must not make the launcher open it."""
    index = root / INDEX
    try:
        doc = parse_json(read_input_text(index, "safetensors index", MAX_CONFIG_BYTES), str(index))
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: not a safetensors index (no 'weight_map' object)")
    base = Path(os.path.abspath(root))
    files = {}
    for name, shard in weight_map.items():
        # lexical (abspath), not realpath: a Hugging Face cache's shards are symlinks to blobs outside
        # the snapshot, and they are fine; a name that climbs out (.., an absolute path) is not
        path = Path(os.path.abspath(base / shard)) if isinstance(shard, str) and shard else None
        if path is None or path == base or not path.is_relative_to(base):
            raise CheckpointError(f"{index}: weight_map entry {name!r} names {_short(shard)}, not a file in the "
                                  f"snapshot folder; fix or re-download the index")
        files[name] = root / path.relative_to(base)
    return files


def _check(model: ModelSpec, headers: dict, where: str, root: Path) -> str:
    """Names, shapes and one dtype against the config; returns that dtype."""
    want = expected_shapes(model)
    scales = {f"{n.removesuffix('.weight')}.{k}" for n in fp8_names(model) for k in ("weight_scale", "input_scale")}
    extra = [n for n in headers if n not in want and n not in scales and not n.endswith(_IGNORED)
             and not (model.tied_embeddings and n == NAMES["head"])]
    if any(".experts." in n or ".gate.weight" in n for n in extra):
        raise CheckpointError(f"{where}: a mixture-of-experts checkpoint ({next(n for n in extra if 'expert' in n or '.gate.' in n)}): "
                              f"the harness runs dense decoders")
    if extra:
        raise CheckpointError(f"{where}: tensor {extra[0]} is not one the {model.name} config describes "
                              f"({len(extra)} unknown in all)")
    missing = [n for n in want if n not in headers]
    if missing:
        raise CheckpointError(f"{where}: tensor {missing[0]} is missing ({len(missing)} of {len(want)} missing)")
    for n, shape in want.items():
        if tuple(headers[n][1]) != shape:
            raise CheckpointError(f"{where}: {n} has shape {headers[n][1]}, the config says {list(shape)}")
    fp8 = fp8_names(model)
    if fp8:
        _check_fp8(model, headers, fp8, where)
    elif any(h[2] == E4M3 for h in headers.values()):
        raise CheckpointError(f"{where}: e4m3 tensors, but config.json declares no FP8 quantization_config")
    dtypes = sorted({headers[n][2] for n in want if n not in fp8})
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise CheckpointError(f"{where}: tensors of dtype {bad[0]} (quantized?): the harness loads "
                              f"{', '.join(DTYPES)} weights")
    if len(dtypes) > 1:
        raise CheckpointError(f"{where}: tensors of several dtypes ({', '.join(dtypes)}); a checkpoint holds one")
    cfg = json.loads((root / "config.json").read_text())
    said = cfg.get("dtype") or cfg.get("torch_dtype")
    if isinstance(said, str) and said in CONFIG_DTYPES and CONFIG_DTYPES[said] != dtypes[0]:
        raise CheckpointError(f"{where}: config.json says {said} but the tensors are {dtypes[0]}")
    return dtypes[0]


def fp8_names(model: ModelSpec) -> set[str]:
    """The HF names of an FP8 checkpoint's e4m3 linears (empty for a 16-bit model)."""
    if not model.quant:
        return set()
    return {NAMES[k].format(i=i) for i in range(model.layers) for k in FP8_LINEARS}


def _check_fp8(model: ModelSpec, headers: dict, fp8: set[str], where: str) -> None:
    """Every FP8 linear is e4m3 with a weight_scale of a per-tensor or per-channel shape (and an
    input_scale where the checkpoint's input scales are static); scales are floats."""
    for n in sorted(fp8):
        base = n.removesuffix(".weight")
        if headers[n][2] != E4M3:
            raise CheckpointError(f"{where}: {n} is {headers[n][2]}, but config.json declares FP8 linears (e4m3)")
        out = headers[n][1][0]
        need = [("weight_scale", ((), (1,), (out, 1), (out,)))]
        if model.quant == "fp8-static":
            need.append(("input_scale", ((), (1,))))
        for key, shapes in need:
            h = headers.get(f"{base}.{key}")
            if h is None:
                raise CheckpointError(f"{where}: {base}.{key} is missing ({model.quant} linears carry one)")
            if tuple(h[1]) not in shapes or h[2] not in DTYPES:
                raise CheckpointError(f"{where}: {base}.{key} is {h[2]} {h[1]}: a float scale per tensor or per "
                                      f"output row was expected")


class _Reader:
    """Open safetensors files on demand (memory-mapped by safe_open), read slices cast to `dtype`."""

    def __init__(self, ckpt: Checkpoint, dtype: torch.dtype, device: torch.device | str):
        self.ckpt, self.dtype, self.device = ckpt, dtype, torch.device(device)
        self._open: dict[Path, object] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in self._open.values():
            f.__exit__(None, None, None)
        self._open.clear()

    def _slice(self, name: str):
        path = self.ckpt.files[name]
        if path not in self._open:
            self._open[path] = safe_open(str(path), framework="pt").__enter__()
        return self._open[path].get_slice(name)

    def rows(self, name: str, lo: int | None = None, hi: int | None = None, raw: bool = False) -> torch.Tensor:
        """Rows [lo, hi) of tensor `name` (all rows by default); rows past its end are zero. `raw`: in the
        file's dtype (an FP8 linear's e4m3), not cast to the run's."""
        s = self._slice(name)
        full = s.get_shape()[0]
        lo, hi = (0, full) if lo is None else (lo, hi)
        t = s[lo:min(hi, full)]
        if hi > full:                                       # vocab-parallel head padding
            t = torch.cat([t, torch.zeros((hi - full, *t.shape[1:]), dtype=t.dtype)])
        return t.to(device=self.device) if raw else t.to(device=self.device, dtype=self.dtype)

    def cols(self, name: str, lo: int, hi: int, raw: bool = False) -> torch.Tensor:
        """Columns [lo, hi) of the 2-D tensor `name`, contiguous (`raw`: in the file's dtype)."""
        t = self._slice(name)[:, lo:hi]
        return (t.to(device=self.device) if raw else t.to(device=self.device, dtype=self.dtype)).contiguous()

    def scale(self, linear: str, key: str = "weight_scale") -> torch.Tensor:
        """An FP8 linear's scale, fp32: a per-tensor scale as a scalar, a per-channel one as [out]."""
        name = linear.removesuffix(".weight") + "." + key
        self._slice(name)                                   # opens its file
        t = self._open[self.ckpt.files[name]].get_tensor(name).float().to(self.device)     # 0-d: no slice
        return t.reshape(-1) if t.numel() > 1 else t.reshape(())

    def fp8_rows(self, name: str, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [lo, hi) of an FP8 linear, e4m3, and their fp32 scales [hi - lo]."""
        s = self.scale(name)
        return self.rows(name, lo, hi, raw=True), (s[lo:hi] if s.dim() else s.expand(hi - lo)).clone()

    def fp8_cols(self, name: str, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Columns [lo, hi) of an FP8 linear [out, in], e4m3, and the scales of its out rows [out]."""
        t = self.cols(name, lo, hi, raw=True)
        s = self.scale(name)
        return t, (s if s.dim() else s.expand(t.shape[0])).clone()

    def input_scale(self, names: list[str]) -> torch.Tensor:
        """The static input scale of linears that read one input (q, k, v; gate, up): their largest, as vLLM
        requantizes a fused layer to one max scale (Fp8LinearMethod.process_weights_after_loading)."""
        return torch.stack([self.scale(n, "input_scale") for n in names]).max()


def _name(key: str, i: int | None = None) -> str:
    return NAMES[key].format(i=i)


def tensor_name(key: str) -> str:
    """The checkpoint's own name of a full_weights key ("L1.w2" -> "model.layers.1.mlp.down_proj.weight")."""
    layer, _, k = key.partition(".")
    return _name(k, int(layer[1:])) if k else _name(key)


def rank_weights(ckpt: Checkpoint, p: Placement, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The local shard of placement `p`, keyed and laid out as hw.model.build_weights."""
    m, hd = p.model, p.model.head_dim
    q = (p.heads.start * hd, p.heads.stop * hd)
    kv = (p.kv_heads.start * hd, p.kv_heads.stop * hd)
    f = (p.ffn.start, p.ffn.stop)
    w: dict[str, torch.Tensor] = {}
    with _Reader(ckpt, dtype, device) as r:
        e = p.embed_vocab                                       # all rows, or the rank's vocab shard
        w["embed"] = r.rows(_name("embed"), e.start, e.stop)
        head = _name("embed") if m.tied_embeddings else _name("head")
        if p.tied_shared:
            w["head"] = w["embed"]                              # tied, the same rows: the same tensor
        else:
            w["head"] = r.rows(head, p.vocab.start, p.vocab.stop)
        w["final_norm"] = r.rows(_name("final_norm"))
        for i in range(m.layers):
            L = f"L{i}"
            if m.quant:             # e4m3 linears with one fp32 scale per local row (hw/fp8.py's layout)
                _fp8_layer(r, w, L, i, q, kv, f, m.quant == "fp8-static")
            else:
                w[f"{L}.wqkv"] = torch.cat([r.rows(_name("wq", i), *q), r.rows(_name("wk", i), *kv),
                                            r.rows(_name("wv", i), *kv)])           # [q_r + 2 kv_r, hidden]
                w[f"{L}.wo"] = r.cols(_name("wo", i), *q)                          # [hidden, q_r]
                w[f"{L}.w13"] = torch.cat([r.rows(_name("w1", i), *f), r.rows(_name("w3", i), *f)])  # [2 f_r, hidden]
                w[f"{L}.w2"] = r.cols(_name("w2", i), *f)                          # [hidden, f_r]
            w[f"{L}.attn_norm"] = r.rows(_name("attn_norm", i))
            w[f"{L}.mlp_norm"] = r.rows(_name("mlp_norm", i))
            if m.qkv_bias:
                w[f"{L}.wqkv.bias"] = torch.cat([r.rows(_name("bq", i), *q), r.rows(_name("bk", i), *kv),
                                                 r.rows(_name("bv", i), *kv)])
            if m.qk_norm:
                w[f"{L}.q_norm"] = r.rows(_name("q_norm", i))
                w[f"{L}.k_norm"] = r.rows(_name("k_norm", i))
    return w


def _fp8_layer(r: _Reader, w: dict, L: str, i: int, q: tuple, kv: tuple, f: tuple, static: bool) -> None:
    """Layer i's FP8 linears of the rank: the fused wqkv / w13 row blocks and the wo / w2 column blocks, e4m3,
    each with NAME.scale [local out rows] (and NAME.input_scale for static input scales)."""
    parts = {"wqkv": [("wq", q), ("wk", kv), ("wv", kv)], "w13": [("w1", f), ("w3", f)]}
    for fused, ps in parts.items():
        got = [r.fp8_rows(_name(k, i), *span) for k, span in ps]
        w[f"{L}.{fused}"] = torch.cat([t for t, _ in got])
        w[f"{L}.{fused}.scale"] = torch.cat([s for _, s in got])
        if static:
            w[f"{L}.{fused}.input_scale"] = r.input_scale([_name(k, i) for k, _ in ps])
    for name, key, span in (("wo", "wo", q), ("w2", "w2", f)):
        w[f"{L}.{name}"], w[f"{L}.{name}.scale"] = r.fp8_cols(_name(key, i), *span)
        if static:
            w[f"{L}.{name}.input_scale"] = r.input_scale([_name(key, i)])


def full_weights(ckpt: Checkpoint, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Unsharded weights in hw.model.full_weights' layout (separate wq/wk/wv/w1/w3, bq/bk/bv),
    for check's single-process reference."""
    m = ckpt.model
    w: dict[str, torch.Tensor] = {}
    with _Reader(ckpt, dtype, device) as r:
        w["embed"] = r.rows(_name("embed"))
        w["final_norm"] = r.rows(_name("final_norm"))
        w["head"] = w["embed"] if m.tied_embeddings else r.rows(_name("head"))
        per = ["wq", "wk", "wv", "wo", "w1", "w3", "w2", "attn_norm", "mlp_norm"]
        per += ["bq", "bk", "bv"] if m.qkv_bias else []
        per += ["q_norm", "k_norm"] if m.qk_norm else []
        for i in range(m.layers):
            for k in per:
                if m.quant and k in FP8_LINEARS:        # an FP8 checkpoint's linear, dequantized
                    t = r.rows(_name(k, i), raw=True).float()
                    sc = r.scale(_name(k, i))
                    w[f"L{i}.{k}"] = (t * (sc.reshape(-1, 1) if sc.dim() else sc)).to(dtype)
                else:
                    w[f"L{i}.{k}"] = r.rows(_name(k, i))
    return w
