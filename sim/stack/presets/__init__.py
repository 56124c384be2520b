"""`--stack NAME`: serving-engine presets, and the user's own stack files.

A preset is a named set of Stack choices (sim.stack.spec) plus its host lane (sim.stack.host_lane.HostStep), each
value beside its source: engine source at a version, or a public profiler measurement of host time.
End-to-end engine results never set a value. One small module per preset holds its data:

    NAME = "vllm"
    ENGINE = "vLLM 0.11 (V1 engine)"
    STACK = {"attention": ("flash", "vllm/platforms/cuda.py ..."), ...}      # Stack field -> (value, source)
    HOST = {"overlap": (False, "vllm/config/scheduler.py ..."), ...}         # HostStep field -> (value, source)

A stack file (JSON, what `tpsim profiles import-engine-bench` writes) names a preset it extends and
overrides some values, each with its source:

    {"format": "tpsim-stack", "name": "my-vllm", "extends": "vllm",
     "stack": {"kv": "filled"}, "host": {"handoff_per_rank_s": 4e-05},
     "sources": {"host.handoff_per_rank_s": "fitted from ... by tpsim"}}

A value without a source in a stack file is sourced "stack file PATH". Precedence (sim.stack.spec.make_stack):
an explicit flag > the preset or file > the profile's stack_defaults > Stack's defaults.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from tpsim.fileio.policy import MAX_CONFIG_BYTES, parse_json, read_input_text
from tpsim.fileio.shape import short
from tpsim.sim.bounds import check_time
from tpsim.sim.stack.host_lane import HostStep
from tpsim.sim.stack.spec import Stack, make_stack
from tpsim.sim.stack.presets import eager, reference, sglang, trtllm, vllm

STACK_FORMAT = "tpsim-stack"


@dataclass(frozen=True)
class Preset:
    """A named stack: make_stack's `preset` values and where each one comes from."""

    name: str
    engine: str                      # the engine and version the values describe
    values: dict                     # Stack fields; "host": a dict of HostStep fields
    sources: dict                    # "attention" / "host.overlap" -> its source
    path: str = ""                   # the module or file it was read from
    files: tuple[str, ...] = ()      # the stack files read for it: its own, then each it extends (a preset: none)

    def to_dict(self) -> dict:
        return {"name": self.name, "engine": self.engine, "from": self.path, "sources": dict(self.sources)}


def _from_module(mod) -> Preset:
    values = {k: v for k, (v, _) in mod.STACK.items()}
    sources = {k: src for k, (_, src) in mod.STACK.items()}
    host = {k: v for k, (v, _) in mod.HOST.items()}
    sources |= {f"host.{k}": src for k, (_, src) in mod.HOST.items()}
    if host:
        values["host"] = host
    values["preset"] = mod.NAME
    return Preset(mod.NAME, mod.ENGINE, values, sources, f"sim/stack/presets/{mod.__name__.rsplit('.', 1)[-1]}.py")


# the registry: preset name -> its data (a plain dict; one module each)
PRESETS: dict[str, Preset] = {p.name: p for p in map(_from_module, (reference, eager, vllm, sglang, trtllm))}


def load_stack(name_or_path: str) -> Preset:
    """A built-in preset by name, or a stack file (JSON) by path. ValueError (one line) otherwise."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if not name_or_path:            # Path("") is ".": it would be read as the working directory
        raise ValueError(f"no stack named (an empty name); choose a preset ({', '.join(PRESETS)}) "
                         f"or a stack file (.json)")
    p = Path(name_or_path)
    if p.suffix.lower() != ".json" and not p.exists():
        raise ValueError(f"unknown stack {name_or_path!r}; choose a preset ({', '.join(PRESETS)}) "
                         f"or a stack file (.json)")
    return parse_stack(_read(p), str(p))


def _read(p: Path):
    """A stack file's JSON, read by the input policy (fileio/policy.py: a regular file of bounded size,
    UTF-8, strict JSON); a stack file is a few KiB, as a config.json is."""
    return parse_json(read_input_text(p, "stack file", MAX_CONFIG_BYTES), f"stack file {p}")


def parse_stack(doc, path: str = "<stack>", _depth: int = 0) -> Preset:
    """A stack file's document as a Preset over the one it extends."""
    if not isinstance(doc, dict) or doc.get("format") != STACK_FORMAT:
        raise ValueError(f"{path}: not a stack file (expected an object with \"format\": \"{STACK_FORMAT}\")")
    base_name = doc.get("extends", "reference")
    if _depth > 8:
        raise ValueError(f"{path}: 'extends' nests more than 8 stack files deep")
    if not isinstance(base_name, str):      # [1] or {} was a TypeError (unhashable) at the lookup below
        raise ValueError(f"{path}: 'extends' must be a preset name or a stack file path, got {short(base_name)}")
    if base_name in PRESETS:
        base = PRESETS[base_name]
    elif base_name:                                     # "" would resolve to the file's own folder
        bp = Path(base_name) if Path(base_name).is_absolute() else Path(path).parent / base_name
        try:
            doc_base = _read(bp)
        except ValueError as e:
            raise ValueError(f"{path}: 'extends' {base_name!r} is neither a preset ({', '.join(PRESETS)}) "
                             f"nor a readable stack file ({e})") from None
        base = parse_stack(doc_base, str(bp), _depth + 1)
    else:
        raise ValueError(f"{path}: 'extends' must be a preset name or a stack file path, got {short(base_name)}")
    stack, host, sources = doc.get("stack", {}), doc.get("host", {}), doc.get("sources", {})
    for key, v in (("stack", stack), ("host", host), ("sources", sources)):
        if not isinstance(v, dict):
            raise ValueError(f"{path}: '{key}' must be an object")
    stack_names = {f.name for f in fields(Stack)} - {"host", "preset"}
    host_names = {f.name for f in fields(HostStep)}
    for key, names, where in ((stack, stack_names, "stack"), (host, host_names, "host")):
        bad = sorted(set(key) - names)
        if bad:
            raise ValueError(f"{path}: unknown {where} field {bad[0]!r}; known: {', '.join(sorted(names))}")
    for k, v in host.items():
        if k != "overlap":               # the bounds table's span (sim/bounds.py), naming the file
            check_time("host_step", v, f"{path}: host.{k}")
    for key in ("name", "engine"):
        if key in doc and not isinstance(doc[key], str):
            raise ValueError(f"{path}: '{key}' must be a string, got {short(doc[key])}")
    bad = next((k for k, v in sources.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise ValueError(f"{path}: sources.{bad} must be a string, got {short(sources[bad])}")
    name = doc.get("name") or Path(path).stem
    values = {k: v for k, v in base.values.items() if k != "host"} | stack | {"preset": name}
    merged_host = dict(base.values.get("host", {})) | host
    if merged_host:
        values["host"] = merged_host
    try:                                 # every value of its type and among its choices, naming the file
        make_stack({}, preset=values)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    srcs = dict(base.sources)
    srcs |= {k: str(sources.get(k, f"stack file {path}")) for k in stack}
    srcs |= {f"host.{k}": str(sources.get(f"host.{k}", f"stack file {path}")) for k in host}
    engine = str(doc.get("engine", base.engine))
    return Preset(name, engine, values, srcs, path, (path, *base.files))
