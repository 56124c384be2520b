"""The probe shapes hw/derive/inductor_kernels.py compiles (no torch): distinct primes per symbol, so every
buffer's element count factors back into a product of symbols (factor, monomial), and the probe
of each table kind and variant (probe_of). See hw/derive/inductor_kernels.py for how they are used."""
from __future__ import annotations

from dataclasses import dataclass

from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.schedule.schedules.registry import layer_kinds

# symbol -> probe value (distinct primes; "2" is the constant factor, e.g. head_dim = 2 * dh)
PROBE = {"G": 3, "G2": 5, "b": 7, "q": 11, "L": 13, "kvh": 17, "hidden": 19, "ffn": 23, "dh": 29,
         "vocab": 31}
# tp and rs (rows of a seq-parallel shard, ceil(b * q / tp)) exist in seq-parallel probes only
SYMBOL_ORDER = ("b", "q", "L", "kvh", "G", "G2", "hidden", "ffn", "dh", "vocab", "tp", "rs")

# table kind (a plan's layer kind) -> (schedule spec with every layer of that kind, layers compiled):
# every registered layer kind's probes (sim/schedule/schedules: LayerKind.probes)
KINDS = {p.key: (p.spec, p.layers) for kind in layer_kinds().values() for p in kind.probes}
PLAIN = tuple(p.key for kind in layer_kinds().values() for p in kind.probes if p.plain_sizes)  # at the plain PROBE
KEEP_LAYER = 1          # the layer whose kernels the table keeps (it has a neighbour on each side)

# Probes of the new kinds, where the plain probe's sizes cannot tell the symbols apart.
#  token-split:N  every micro-batch is the plain probe's size (decode: b = 7 sequences each, so the
#                 step has N * 7; prefill: q = 11 tokens each, N * 11 per sequence, so the static
#                 cache is L = 47 > 44); the table's b and q are the micro-batch's own (sim/price/fusion.py
#                 evaluates each micro-batch op at its own size). A buffer spanning the whole step
#                 (the whole KV cache, read by decode attention fused across micro-batches) reads
#                 N * b: exact for an even split.
#  seq-parallel   TP 37 on a fake process group (no communication: the shapes of a real 37-rank
#                 job), with b * q token rows padded to tp * rs, rs = 41 shard rows: prefill
#                 b = 137, q = 11 (1507 rows padded to 1517), decode b = 1511 (padded to 1517);
#                 decode-m1 has 1 row (rs = 1, padded to 37).
TS_L = 47
SP_TP, SP_RS = 37, 41
SP_BATCH = {"prefill": 137, "decode": 1511, "decode-m1": 1, "decode-cpu": 1511}

# variant -> (phase, batch, target): which Inductor path a step takes (sim.price.fusion.variant picks one)
VARIANTS = {
    "prefill": ("prefill", PROBE["b"], "cuda"),           # M = b * prompt > 1: extern mm / bmm
    "decode": ("decode", PROBE["b"], "cuda"),             # bmm M = 1 decomposed; mm M = b extern
    "decode-m1": ("decode", 1, "cuda"),                   # also mm M = 1 decomposed (batch 1)
    "decode-cpu": ("decode", PROBE["b"], "cpu"),          # the C++ backend: no M = 1 decomposition
}

DTYPE = "fp16"          # the reference's activation dtype; fp32 buffers stay fp32 in the table
DTYPE_TORCH = "float16"


def probe_model(layers: int, tp: int = 1) -> ModelSpec:
    """The probe model whose rank shard (of `tp`) has the probe's per-rank sizes."""
    p = PROBE
    return ModelSpec("inductor-probe", hidden=p["hidden"], layers=layers, heads=p["kvh"] * p["G"] * tp,
                     kv_heads=p["kvh"] * tp, head_dim=2 * p["dh"], ffn=p["ffn"] * tp, vocab=p["vocab"])


@dataclass(frozen=True)
class Probe:
    """One compile's shapes: TP degree, step batch, prompt, generated tokens, and the symbol ->
    prime map its element counts factor over (a symbol of value 1 is left out: it cannot show)."""

    tp: int
    batch: int
    prompt: int
    gen: int
    symbols: dict


def probe_of(kind: str, variant: str) -> Probe:
    phase, batch, _ = VARIANTS[variant]
    q, L = PROBE["q"], PROBE["L"]
    if kind.startswith("token-split:"):
        n = int(kind.split(":")[1])
        if phase == "prefill":
            return Probe(1, batch, n * q, TS_L - n * q, dict(PROBE, L=TS_L))
        return Probe(1, n * batch, q, L - q, dict(PROBE, b=batch))
    if kind == "seq-parallel":
        b = SP_BATCH[variant]
        rows = b * (q if phase == "prefill" else 1)
        if -(-rows // SP_TP) not in (1, SP_RS):
            raise ValueError(f"seq-parallel probe: {rows} rows do not shard into {SP_RS} per rank")
        return Probe(SP_TP, b, q, L - q, dict(PROBE, b=b, tp=SP_TP, rs=-(-rows // SP_TP)))
    return Probe(1, batch, q, L - q, dict(PROBE))


def factor(numel: int, probe: dict | None = None) -> dict[str, int]:
    """numel -> {symbol: power} over the probe primes; ValueError if something else remains."""
    probe = PROBE if probe is None else probe
    out: dict[str, int] = {}
    n = numel
    for sym, v in [("2", 2)] + [(s, probe[s]) for s in SYMBOL_ORDER if probe.get(s, 1) > 1]:
        while n % v == 0:
            out[sym] = out.get(sym, 0) + 1
            n //= v
    if n != 1:
        raise ValueError(f"{numel} elements do not factor over the probe dimensions (left {n})")
    return out


def monomial(powers: dict[str, int]) -> str:
    parts = []
    for sym in ("2",) + SYMBOL_ORDER:
        parts += [sym] * powers.get(sym, 0)
    return "*".join(parts) or "1"
