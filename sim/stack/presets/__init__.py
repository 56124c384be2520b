"""`--stack NAME`: serving-engine presets, and the user's own stack files.

A preset is a named set of Stack choices (sim.stack.spec) plus its host lane (sim.stack.host_lane.HostStep), each
value beside its source: engine source at a version, a profiler measurement of host time, or a measurement
of the engine's own code path (bench/engine_host_path.py). End-to-end engine results never set a value.
One small module per preset holds its data:

    NAME, LINE = "vllm", "0.11"                 # the engine and the version line whose code the values read
    CURRENT = True                              # `--stack vllm` names this line (else only vllm@0.11 does)
    ENGINE = "vLLM 0.11 (V1 engine)"
    STACK = {"attention": ("flash", "vllm/platforms/cuda.py ..."),           # Stack field -> (value, source)
             "layer_host_s": (5.56e-5, "measured ...", (4.45e-5, 1.136e-4))}  # ... or (value, source, (lo, hi))
    HOST = {"overlap": (False, "vllm/config/scheduler.py ..."),              # HostStep field -> (value, source)
            "prepare_s": (5.4e-4, "measured ...", (1.2e-4, 1.14e-3))}       # ... or (value, source, (lo, hi))

A number its source cannot pin carries the interval the evidence supports as (lo, hi), a host number or
one of the stack's own (sim.stack.spec.RANGEABLE; Stack.ranges, with DEFAULT_RANGES where no preset
sets one): the prediction keeps the value and sim/sensitivity.py reruns it at the ends. A zero that the code proves (no such work
in that version) says so with a source that starts "code:" (sim/silent_zeros.py).

Names: NAME@LINE for every engine preset (`vllm@0.6`), and NAME alone for the line marked CURRENT
(`vllm` = `vllm@0.11`); `tpsim stacks` lists them.

A stack file (JSON, what `tpsim profiles import-engine-bench` writes) names a preset it extends and
overrides some values, each with its source; a number may carry its range as the presets do:

    {"format": "tpsim-stack", "name": "my-vllm", "extends": "vllm",
     "stack": {"kv": "filled", "layer_host_s": {"value": 5e-5, "range": [4e-5, 9e-5], "source": "..."}},
     "host": {"handoff_per_rank_s": 4e-05,
                                         "prepare_s": {"value": 3e-4, "range": [2e-4, 5e-4], "source": "..."}},
     "sources": {"host.handoff_per_rank_s": "fitted from ... by tpsim"}}

A value the file sets replaces the base's value and its range (a fitted number has none unless the file
gives one). A value without a source in a stack file is sourced "stack file PATH". Precedence
(sim.stack.spec.make_stack): an explicit flag > the preset or file > the profile's stack_defaults > Stack's defaults.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from tpsim.fileio.policy import MAX_CONFIG_BYTES, parse_json, read_input_text
from tpsim.fileio.shape import finite, short
from tpsim.sim.bounds import check_time
from tpsim.sim.stack.host_lane import COUNTS, FLAGS, HostStep
from tpsim.sim.stack.impls import normalize_knobs
from tpsim.sim.stack.spec import RANGEABLE, Stack, make_stack
from tpsim.sim.stack.presets import eager, reference, sglang, trtllm, trtllm_trt, vllm, vllm_v0

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
    line: str = ""                   # the engine's version line its values were read from ("" for no engine)
    # the fused all-reduce + add + RMSNorm this engine line ships but leaves off (sim.stack.ar_fusion; the
    # module's AR_FUSION = (name, source)): a flag away, so sim.baseline counts standard with it on as a way to
    # run the same model; "none" where the line has none
    ar_fusion: str = "none"

    @property
    def ranges(self) -> dict:
        """"host.FIELD" / "stack.FIELD" -> (lo, hi): the interval each ranged number's evidence supports
        (the stack's own: those the preset or file sets; a Stack made from it adds DEFAULT_RANGES)."""
        return ({f"host.{k}": v for k, v in self.values.get("host_ranges", {}).items()}
                | {f"stack.{k}": v for k, v in self.values.get("ranges", {}).items()})

    def to_dict(self) -> dict:
        return {"name": self.name, "engine": self.engine, "from": self.path, "sources": dict(self.sources),
                "ranges": {k: list(v) for k, v in self.ranges.items()}}


def _entry(mod, key: str, entry) -> tuple:
    """A module's (value, source) or (value, source, (lo, hi)) as (value, source, range or None)."""
    if not isinstance(entry, tuple) or len(entry) not in (2, 3):
        raise ValueError(f"{mod.__name__} {key}: give (value, source) or (value, source, (lo, hi))")
    return entry if len(entry) == 3 else (*entry, None)


def _from_module(mod) -> Preset:
    values, sources, own = {}, {}, {}
    for k, entry in mod.STACK.items():
        values[k], sources[k], span = _entry(mod, k, entry)
        if span is not None:
            own[k] = _check_stack_range(f"{mod.__name__} {k}", k, values[k], span)
    if own:
        values["ranges"] = own
    if "attention_knobs" in values:     # the form Stack holds, so a stack's value compares equal to its preset's
        values["attention_knobs"] = normalize_knobs(values["attention_knobs"])
    host, ranges = {}, {}
    for k, entry in mod.HOST.items():
        v, src, span = _entry(mod, k, entry)
        host[k], sources[f"host.{k}"] = v, src
        if span is not None:
            ranges[k] = _check_range(f"{mod.__name__} host.{k}", k, v, span)
    if host:
        values["host"] = host
    if ranges:
        values["host_ranges"] = ranges
    name = preset_name(mod)
    values["preset"] = name
    return Preset(name, mod.ENGINE, values, sources, f"sim/stack/presets/{mod.__name__.rsplit('.', 1)[-1]}.py",
                  line=getattr(mod, "LINE", ""), ar_fusion=getattr(mod, "AR_FUSION", ("none", ""))[0])


def _check_range(where: str, field: str, value, span) -> tuple[float, float]:
    """A host number's (lo, hi): two finite seconds >= 0 around its value, lo < hi; none on a switch or a count."""
    if field in FLAGS or field in COUNTS:
        raise ValueError(f"{where}: a range is for a number of seconds; {field} is a "
                         f"{'switch' if field in FLAGS else 'count'}")
    return _span(where, value, span)


def _check_stack_range(where: str, field: str, value, span) -> tuple[float, float]:
    """A stack number's (lo, hi), as a host number's; only the numbers RANGEABLE names take one."""
    if field not in RANGEABLE:
        raise ValueError(f"{where}: a range is for one of the stack's numbers ({', '.join(RANGEABLE)}), not {field}")
    return _span(where, value, span)


def _span(where: str, value, span) -> tuple[float, float]:
    if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(finite(x) and x >= 0 for x in span)):
        raise ValueError(f"{where}.range must be [lo, hi], two finite numbers of seconds >= 0, got {span!r}")
    lo, hi = float(span[0]), float(span[1])
    if not (lo <= value <= hi and lo < hi):
        raise ValueError(f"{where}.range must hold the value ({value:g}) with lo < hi, got [{lo:g}, {hi:g}]")
    return lo, hi


def preset_name(mod) -> str:
    """NAME@LINE for an engine line (NAME alone for no engine: reference, eager)."""
    return f"{mod.NAME}@{mod.LINE}" if getattr(mod, "LINE", "") else mod.NAME


class _Registry(dict):
    """Preset name -> Preset, iterating over the NAME@LINE names; a CURRENT line's NAME alone is
    found too (`PRESETS["vllm"]`, `"vllm" in PRESETS`), without being listed twice."""

    def __init__(self, presets, aliases: dict[str, str]):
        super().__init__((p.name, p) for p in presets)
        self.aliases = aliases

    def __missing__(self, key):
        if key in self.aliases:
            return self[self.aliases[key]]
        raise KeyError(key)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self.aliases

    def get(self, key, default=None):
        return self[key] if key in self else default


_MODULES = (reference, eager, vllm, vllm_v0, sglang, trtllm, trtllm_trt)
# the registry: one module each, NAME@LINE for an engine's line; NAME alone names its CURRENT line
# (`--stack vllm` = vllm@0.11)
ALIASES: dict[str, str] = {m.NAME: preset_name(m) for m in _MODULES if getattr(m, "CURRENT", False)}
PRESETS: dict[str, Preset] = _Registry(map(_from_module, _MODULES), ALIASES)


def names() -> list[str]:
    """Every name --stack takes for a preset, an engine's short name before its lines (help, errors)."""
    out: dict[str, None] = {}
    for m in _MODULES:
        if getattr(m, "CURRENT", False):
            out[m.NAME] = None
        out[preset_name(m)] = None
    return list(out)


def preset(name: str) -> Preset | None:
    """The built-in preset a name (NAME, NAME@LINE) means, or None."""
    return PRESETS.get(name) if isinstance(name, str) else None


def load_stack(name_or_path: str) -> Preset:
    """A built-in preset by name (NAME or NAME@LINE), or a stack file (JSON) by path. ValueError (one
    line) otherwise."""
    found = preset(name_or_path)
    if found is not None:
        return found
    choose = f"choose a preset ({', '.join(names())}; `tpsim stacks` lists them) or a stack file (.json)"
    if not name_or_path:            # Path("") is ".": it would be read as the working directory
        raise ValueError(f"no stack named (an empty name); {choose}")
    p = Path(name_or_path)
    if p.suffix.lower() != ".json" and not p.exists():
        engine, at, line = name_or_path.partition("@")
        lines = [n for n in PRESETS if n.partition("@")[0] == engine and "@" in n]
        if at and lines:
            raise ValueError(f"no preset for {engine} version line {line!r}; the lines tpsim describes: "
                             f"{', '.join(lines)} (`tpsim stacks` says which versions each covers), or a "
                             f"stack file (.json) that extends one")
        raise ValueError(f"unknown stack {name_or_path!r}; {choose}")
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
    if preset(base_name) is not None:
        base = preset(base_name)
    elif base_name:                                     # "" would resolve to the file's own folder
        bp = Path(base_name) if Path(base_name).is_absolute() else Path(path).parent / base_name
        try:
            doc_base = _read(bp)
        except ValueError as e:
            raise ValueError(f"{path}: 'extends' {base_name!r} is neither a preset ({', '.join(names())}) "
                             f"nor a readable stack file ({e})") from None
        base = parse_stack(doc_base, str(bp), _depth + 1)
    else:
        raise ValueError(f"{path}: 'extends' must be a preset name or a stack file path, got {short(base_name)}")
    stack, host, sources = doc.get("stack", {}), doc.get("host", {}), doc.get("sources", {})
    for key, v in (("stack", stack), ("host", host), ("sources", sources)):
        if not isinstance(v, dict):
            raise ValueError(f"{path}: '{key}' must be an object")
    stack_names = {f.name for f in fields(Stack)} - {"host", "preset", "host_ranges", "ranges"}
    host_names = {f.name for f in fields(HostStep)}
    for key, known, where in ((stack, stack_names, "stack"), (host, host_names, "host")):
        bad = sorted(set(key) - known)
        if bad:
            raise ValueError(f"{path}: unknown {where} field {bad[0]!r}; known: {', '.join(sorted(known))}")
    stack, own, sources = _entries(stack, "", sources, path)
    own = {k: _check_stack_range(f"{path}: stack.{k}", k, stack[k], v) for k, v in own.items()}
    host, spans, sources = _host_entries(host, sources, path)
    for key in ("name", "engine"):
        if key in doc and not isinstance(doc[key], str):
            raise ValueError(f"{path}: '{key}' must be a string, got {short(doc[key])}")
    bad = next((k for k, v in sources.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise ValueError(f"{path}: sources.{bad} must be a string, got {short(sources[bad])}")
    name = doc.get("name") or Path(path).stem
    values = {k: v for k, v in base.values.items() if k not in ("host", "host_ranges", "ranges")} | stack
    values["preset"] = name
    # as a host number's: a value the file sets replaces the base's range with its own (or none)
    own = {k: v for k, v in base.values.get("ranges", {}).items() if k not in stack} | own
    if own:
        values["ranges"] = own
    if "attention_knobs" in stack:      # a file's knobs over those of the stack it extends (kernel.knob by kernel.knob)
        values["attention_knobs"] = normalize_knobs(dict(base.values.get("attention_knobs", ()))
                                                    | dict(normalize_knobs(stack["attention_knobs"])))
    merged_host = dict(base.values.get("host", {})) | host
    if merged_host:
        values["host"] = merged_host
    # a value the file sets replaces the base's range with its own (or none: a fitted number)
    ranges = {k: v for k, v in base.values.get("host_ranges", {}).items() if k not in host} | spans
    if ranges:
        values["host_ranges"] = ranges
    try:                                 # every value of its type and among its choices, naming the file
        make_stack({}, preset=values)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    srcs = dict(base.sources)
    srcs |= {k: str(sources.get(k, f"stack file {path}")) for k in stack}
    srcs |= {f"host.{k}": str(sources.get(f"host.{k}", f"stack file {path}")) for k in host}
    engine = str(doc.get("engine", base.engine))
    return Preset(name, engine, values, srcs, path, (path, *base.files), base.line)


def _entries(section: dict, prefix: str, sources: dict, path: str) -> tuple[dict, dict, dict]:
    """A stack file's "stack" (prefix "") or "host" (prefix "host.") section: each field a bare value or
    {"value", "range", "source"} -> (values, {field: its range as given}, sources with each object's
    source added, keyed prefix + field)."""
    values, spans, sources = {}, {}, dict(sources)
    where = prefix or "stack."
    for k, v in section.items():
        if isinstance(v, dict) and "attention_knobs" != k:
            bad = sorted(set(v) - {"value", "range", "source"})
            if "value" not in v or bad:
                raise ValueError(f"{path}: {where}{k} as an object takes \"value\" with an optional \"range\" "
                                 f"[lo, hi] and \"source\"" + (f", not {bad[0]!r}" if bad else ""))
            if "source" in v:
                sources[prefix + k] = v["source"]
            if "range" in v:
                spans[k] = v["range"]
            v = v["value"]
        values[k] = v
    return values, spans, sources


def _host_entries(host: dict, sources: dict, path: str) -> tuple[dict, dict, dict]:
    """A stack file's host section (_entries), each value checked for its kind -> (values, ranges, sources)."""
    host, given, sources = _entries(host, "host.", sources, path)
    values, spans = {}, {}
    for k, v in host.items():
        span = given.get(k)
        if k in FLAGS:
            if not isinstance(v, bool):
                raise ValueError(f"{path}: host.{k} must be true or false, got {v!r}")
        elif k in COUNTS:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{path}: host.{k} must be a count (an integer >= 0), got {v!r}")
        else:                           # the bounds table's span of seconds (sim/bounds.py), naming the file
            check_time("host_step", v, f"{path}: host.{k}")
        values[k] = v
        if span is not None:
            spans[k] = _check_range(f"{path}: host.{k}", k, v, span)
    return values, spans, sources
