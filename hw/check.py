"""Numerics of each schedule on the current backend, against single-process references.

The reference is a plain-torch Llama forward on the *full* weights (hw.model.full_weights, the
same tensors every TP degree shards), written independently of hw.runner and of the schedule
IR: its own attention (einsum over all heads, reads only the filled cache), its own MLP, and each
*layer kind*'s dataflow straight from docs/design.md ("The schedules"). A schedule is checked
layer by layer as its plan (sim.schedule.language.plan_of) says, so a hybrid plan (ladder above, SPD
below) is checked with no code of its own; a layer kind without a reference here is only run:

  standard  h = x + attn(norm(x));  x' = h + mlp(norm(h))                 (== TP standard)
  parallel  x' = x + attn(norm(x)) + mlp(norm(x))
  ladder    R += a_{i-1}; a_i = attn(norm R); R += m_{i-1}; m_i = mlp(norm R); ...; R += a_L + m_L
  spd       per TP rank r: P_r = attention heads of r through wo's columns of r;
            Z_r = mlp over FFN columns of r applied to norm(x + P_r); x' = x + sum_r (P_r + Z_r)
            (SPD's output depends on the TP degree by definition, so its reference takes tp)
  token-split, seq-parallel, async-tp, dbo, tokenweave  the standard reference: they reorder and
               reshape the same math (the registry says so: a schedule that keeps the model names its
               numerics_reference, so a new one needs no entry here)
  upper-bound  only checked to run (its outputs are meaningless by design)

Compared: prefill logits and every decode step's logits with the KV cache, teacher-forced (the
same random tokens for both), error = max|tp - ref| / max(1, max|ref|).
"""
from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from collections.abc import Iterator, Mapping

from tpsim.sim.model.presets import ModelSpec
from tpsim.sim.schedule.language import build, kind_base, plan_of, runs
from tpsim.sim.schedule.schedules.registry import layer_kinds, numerics_reference
from tpsim.hw import rank as hwrank
from tpsim.hw.run_config import RunConfig
from tpsim.hw.report import format_check
from tpsim.hw.checkpoint import full_weights as checkpoint_full_weights, open_for, tensor_name
from tpsim.hw.inductor_flags import compile_functional_pass, current_inductor_flags
from tpsim.hw.model import build_rank_model, full_weights, rope_inv_freq
from tpsim.hw.runner import Runner
from tpsim.hw.symm_mem import make_all_reduce

TOLERANCE = {"fp32": 1e-4, "fp16": 3e-2, "bf16": 1e-1}
# An FP8 run (e4m3 linears and inputs, or an e4m3 KV cache: hw/fp8.py) against the reference of the same
# weights unquantized (an FP8 checkpoint's dequantized): e4m3 keeps 3 mantissa bits, so each operand of a
# linear is off by up to 2^-4 relative (round to nearest); what reaches the logits, summed over k terms and
# the layers, stays some percent of their largest value (tiny model, gloo TP2: 0.055-0.095). 0.25 flags a
# wrong scale or shard (off by factors), not rounding.
FP8_TOLERANCE = 0.25


class Reference:
    """Single-process forward of a layer plan's definition on full weights (fp32)."""

    def __init__(self, model: ModelSpec, w: dict[str, torch.Tensor], plan: tuple[str, ...], tp: int, batch: int,
                 max_seq: int):
        self.m, self.w, self.tp = model, w, tp
        if isinstance(plan, str):
            raise TypeError(f"plan must be one layer kind per layer (sim.schedule.language.plan_of), got the string {plan!r}")
        missing = sorted({kind_base(k) for k in plan} - set(REFERENCES))
        if missing:
            raise ValueError(f"no reference for layer kind(s) {', '.join(missing)}")
        self.plan = tuple(plan)
        dev = w["embed"].device
        shape = (model.layers, batch, max_seq, model.kv_heads, model.head_dim)
        self.k_cache = torch.zeros(shape, device=dev)
        self.v_cache = torch.zeros(shape, device=dev)
        # the frequencies are the one table the reference shares with the harness (rope_inv_freq,
        # held to transformers' ROPE_INIT_FUNCTIONS by tests/test_rope.py); the rotation is its own
        model.rope.check_positions(max_seq)
        inv, scale = rope_inv_freq(model.rope, model.head_dim, dev)                 # [hd/2], cos/sin scale
        ang = torch.arange(max_seq, device=dev).float()[:, None] * inv[None, :]      # [S, hd/2]
        self.cos, self.sin = ang.cos() * scale, ang.sin() * scale

    # -- pieces

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.m.norm_eps) * self.w[name]

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x [B, S, h, D]; rotate pairs (i, i + D/2) by position * freq_i."""
        S, half = x.shape[1], x.shape[-1] // 2
        cos = self.cos[start:start + S][None, :, None, :]
        sin = self.sin[start:start + S][None, :, None, :]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def _heads(self, i: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Per-head attention outputs of layer i, before wo: [B, S, heads, D]."""
        m, w = self.m, self.w
        B, S, _ = x.shape
        n = self._norm(x, f"L{i}.attn_norm")
        q = (n @ w[f"L{i}.wq"].T).view(B, S, m.heads, m.head_dim)
        k = (n @ w[f"L{i}.wk"].T).view(B, S, m.kv_heads, m.head_dim)
        v = (n @ w[f"L{i}.wv"].T).view(B, S, m.kv_heads, m.head_dim)
        if m.qkv_bias:                                   # Qwen2: bias on q, k, v (full vectors)
            q = q + w[f"L{i}.bq"].view(m.heads, m.head_dim)
            k = k + w[f"L{i}.bk"].view(m.kv_heads, m.head_dim)
            v = v + w[f"L{i}.bv"].view(m.kv_heads, m.head_dim)
        if m.qk_norm:                                    # Qwen3: RMSNorm over head_dim, then RoPE
            q, k = self._norm(q, f"L{i}.q_norm"), self._norm(k, f"L{i}.k_norm")
        q, k = self._rope(q, start), self._rope(k, start)
        self.k_cache[i, :, start:start + S] = k
        self.v_cache[i, :, start:start + S] = v
        end = start + S
        group = m.heads // m.kv_heads
        K = self.k_cache[i, :, :end].repeat_interleave(group, dim=2)         # [B, end, heads, D]
        V = self.v_cache[i, :, :end].repeat_interleave(group, dim=2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, K) / math.sqrt(m.head_dim)
        qpos = torch.arange(start, end, device=x.device)[:, None]
        s = s.masked_fill(torch.arange(end, device=x.device)[None, :] > qpos, float("-inf"))
        return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), V)

    def _attn_partial(self, o: torch.Tensor, i: int, r: int | None = None) -> torch.Tensor:
        """o [B, S, heads, D] -> through wo: all heads, or only rank r's heads (P_r)."""
        B, S, H, D = o.shape
        wo = self.w[f"L{i}.wo"]                                     # [hidden, heads*D]
        if r is None:
            return o.reshape(B, S, H * D) @ wo.T
        n = H // self.tp
        return o[:, :, r * n:(r + 1) * n].reshape(B, S, n * D) @ wo[:, r * n * D:(r + 1) * n * D].T

    def _mlp(self, i: int, x: torch.Tensor, r: int | None = None) -> torch.Tensor:
        """SwiGLU MLP of layer i on residual x: all FFN columns, or only rank r's (Z_r)."""
        w, f = self.w, self.m.ffn
        cols = slice(None) if r is None else slice(r * f // self.tp, (r + 1) * f // self.tp)
        n = self._norm(x, f"L{i}.mlp_norm")
        return (F.silu(n @ w[f"L{i}.w1"][cols].T) * (n @ w[f"L{i}.w3"][cols].T)) @ w[f"L{i}.w2"][:, cols].T

    # -- layers per schedule definition

    def _standard(self, i, x, start):
        h = x + self._attn_partial(self._heads(i, x, start), i)
        return h + self._mlp(i, h)

    def _parallel(self, i, x, start):
        # attn and mlp both read norm(x) with attn_norm: this schedule has no separate mlp_norm
        o = self._heads(i, x, start)
        w = self.w
        n = self._norm(x, f"L{i}.attn_norm")
        z = (F.silu(n @ w[f"L{i}.w1"].T) * (n @ w[f"L{i}.w3"].T)) @ w[f"L{i}.w2"].T
        return x + (self._attn_partial(o, i) + z)

    def _spd(self, i, x, start):
        o = self._heads(i, x, start)
        total = torch.zeros_like(x)
        for r in range(self.tp):
            p = self._attn_partial(o, i, r)
            total = total + (p + self._mlp(i, x + p, r))
        return x + total

    def _ladder(self, first, end, x, start):
        """Layers first..end-1: module m reads R lacking module m-1; both pending sums added at the end."""
        a = z = None
        for i in range(first, end):
            if a is not None:
                x = x + a
            a_new = self._attn_partial(self._heads(i, x, start), i)
            if z is not None:
                x = x + z
            z = self._mlp(i, x)
            a = a_new
        return (x + a) + z

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """tokens [B, S] at positions start.. -> logits [B*S, vocab]."""
        x = self.w["embed"][tokens]                                  # [B, S, hidden]
        for kind, first, end in runs(self.plan):
            x = REFERENCES[kind_base(kind)](self, first, end, x, start)
        logits = self._norm(x, "final_norm") @ self.w["head"].T
        return logits.reshape(-1, self.m.vocab)


def _each(layer):
    """A layer kind referenced one layer at a time."""
    def run(ref: Reference, first: int, end: int, x: torch.Tensor, start: int) -> torch.Tensor:
        for i in range(first, end):
            x = layer(ref, i, x, start)
        return x
    return run


# The reference of a run of layers of each distinct math, by layer kind (sim/schedule/schedules: LayerKind.name).
OWN = {
    "standard": _each(Reference._standard),
    "ladder": Reference._ladder,
    "spd": _each(Reference._spd),
    "parallel": _each(Reference._parallel),
}


class _References(Mapping):
    """Layer kind -> reference of a run of such layers: its own (OWN), or the one its schedule names
    (ScheduleDef.numerics_reference: token-split and seq-parallel keep the model, so they name
    standard), read from the registry as it is when looked up. Every kind has one here or a reason in
    UNCHECKED (tests/test_schedule_registry.py walks the registry)."""

    def __getitem__(self, kind: str):
        return OWN[numerics_reference(kind)]

    def __iter__(self) -> Iterator[str]:
        return iter([k for k in dict.fromkeys([*OWN, *layer_kinds()]) if numerics_reference(k) in OWN])

    def __len__(self) -> int:
        return len(list(iter(self)))


REFERENCES = _References()
UNCHECKED = {"upper-bound": "outputs meaningless by design"}      # why a layer kind has no reference


def unchecked_reasons(plan: tuple[str, ...]) -> list[str]:
    """Why each layer kind of `plan` that has no reference runs unchecked ([]: every kind has one)."""
    return [UNCHECKED.get(k, f"no reference for layer kind {k!r}")
            for k in dict.fromkeys(map(kind_base, plan)) if k not in REFERENCES]


def _compare(tp_logits: torch.Tensor, ref: torch.Tensor, batch: int, vocab: int) -> float:
    got = tp_logits.float()[:, :vocab]                     # drop vocab-parallel padding
    if got.shape[0] != ref.shape[0]:                        # prefill_logits="last"
        ref = ref.view(batch, -1, vocab)[:, -1]
    return ((got - ref).abs().max() / ref.abs().max().clamp(min=1.0)).item()


def run_check(cfg: RunConfig, ctx: hwrank.DistContext) -> list[dict]:
    """Every schedule: TP run vs its reference; returns rows {schedule, prefill_err, decode_err, ok}."""
    model, stack = cfg.model_spec(), cfg.stack()
    tp = ctx.world
    if cfg.tp != tp:
        raise ValueError(f"--tp {cfg.tp} but {tp} processes were started")
    max_seq = cfg.prompt_len + cfg.gen_len
    rm = build_rank_model(model, tp, ctx.rank, batch=cfg.batch, max_seq=max_seq, dtype=cfg.dtype,
                          device=ctx.device, seed=cfg.seed, head=cfg.head, embed=cfg.embed,
                          checkpoint=cfg.checkpoint, fp8=stack.fp8, kv_fp8=stack.kv_dtype == "fp8")
    pre_step, dec_step = cfg.steps()
    plans = {spec: (build(spec, model, tp, pre_step, stack), build(spec, model, tp, dec_step, stack) if dec_step
                    else None) for spec in cfg.schedules}
    all_reduce = make_all_reduce(cfg.collective, dist.group.WORLD, ctx.device, cfg.dtype,
                                 [s for pair in plans.values() for s in pair])
    runner = Runner(rm, dist.group.WORLD, rank=ctx.rank, all_reduce=all_reduce)
    if cfg.checkpoint:          # the reference holds the whole model: check is for models that fit one rank
        full = checkpoint_full_weights(open_for(cfg.checkpoint, model), dtype=torch.float32, device=ctx.device)
    else:
        full = full_weights(model, seed=cfg.seed, dtype=torch.float32, device=ctx.device)
    # a weight holding NaN or Inf makes every output NaN: a FAIL says so, naming the tensor
    bad_weight = next((n for n, t in full.items() if not bool(torch.isfinite(t).all())), None)
    bad_weight = tensor_name(bad_weight) if bad_weight and cfg.checkpoint else bad_weight
    g = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, model.vocab, (cfg.batch, max_seq - 1), generator=g).to(ctx.device)
    tol = FP8_TOLERANCE if (stack.fp8 or stack.kv_dtype == "fp8") else TOLERANCE[cfg.dtype]
    rows = []
    run = _compiled(runner, cfg, ctx.rank) if cfg.compile else (lambda s, t, p: runner.forward(s, t, p).logits)
    for spec, (pre, dec) in plans.items():
        rm.reset_cache()
        outs = [run(pre, tokens[:, :cfg.prompt_len], 0)]
        for j in range(1, cfg.gen_len):                        # teacher-forced decode steps
            pos = cfg.prompt_len + j - 1
            outs.append(run(dec, tokens[:, pos:pos + 1], pos))
        finite = all(bool(torch.isfinite(o).all()) for o in outs)
        not_finite = [] if finite else ["its output holds NaN or Inf" + (
            f": the weights are not finite ({bad_weight} holds NaN or Inf)" if bad_weight else "")]
        plan = plan_of(spec, model.layers)
        unchecked = unchecked_reasons(plan)
        if unchecked:
            why = "; ".join(unchecked)
            rows.append({"schedule": spec, "prefill_err": None, "decode_err": None, "decode_steps": len(outs) - 1,
                         "ok": finite, "note": "; ".join([f"run only ({why})", *not_finite])})
            continue
        ref = Reference(model, full, plan, tp, cfg.batch, max_seq)
        errs = [_compare(outs[0], ref.forward(tokens[:, :cfg.prompt_len], 0), cfg.batch, model.vocab)]
        for j in range(1, cfg.gen_len):
            pos = cfg.prompt_len + j - 1
            errs.append(_compare(outs[j], ref.forward(tokens[:, pos:pos + 1], pos), cfg.batch, model.vocab))
        dec_err = max(errs[1:]) if len(errs) > 1 else None       # --gen 1: no decode step, nothing measured
        # e.g. a token-split fallback; a symm-mem all-reduce that ran NCCL (hw.symm_mem)
        notes = not_finite + list(dict.fromkeys(pre.notes + (dec.notes if dec else ()) + tuple(all_reduce.notes)))
        rows.append({"schedule": spec, "prefill_err": errs[0], "decode_err": dec_err,
                     "decode_steps": len(errs) - 1, "ok": finite and max(errs) <= tol, "tolerance": tol}
                    | ({"note": "; ".join(notes)} if notes else {}))
    return rows


def _compiled(runner: Runner, cfg: RunConfig, rank: int):
    """--compile: each pass through torch.compile(Runner.functional_pass) (as hw.bench), positions
    as a device tensor so one decode graph serves every step; the reference's Inductor flags set
    first, process-wide (hw.inductor_flags.compile_functional_pass, as hw.bench.compile_passes)."""
    fn = compile_functional_pass(runner, cfg.mm_decompose_m1)
    pos_t = torch.tensor(0, device=runner.rm.device)
    if rank == 0:
        print("compiling each schedule's prefill and decode (Inductor; cached for reruns)...", file=sys.stderr,
              flush=True)

    def run(sched, tokens, pos):
        pos_t.fill_(pos)
        return fn(sched, tokens, pos_t)[0].clone()
    return run


def worker(config: dict) -> int:
    """Entry point of one rank; nonzero when printing and some schedule failed its check."""
    cfg, result = hwrank.run_rank(config, _checked, format_check)
    return 0 if (not cfg.print_result or result["ok"]) else 1


def _checked(cfg: RunConfig, ctx) -> dict:
    """Every rank's errors, merged (worst over ranks) into the result rank 0 reports."""
    torch.set_default_dtype(torch.float32)
    rows = run_check(cfg, ctx)
    every = [None] * ctx.world
    dist.all_gather_object(every, rows, group=hwrank.cpu_group())
    merged = _merge(every)
    return {"model": cfg.model_spec().name, "tp": ctx.world, "dtype": cfg.dtype, "precision": cfg.precision(), "backend": cfg.backend,
            "device": cfg.device, "batch": cfg.batch, "prompt_len": cfg.prompt_len, "gen_len": cfg.gen_len,
            "ok": all(r["ok"] for r in merged), "schedules": merged,
            # what ran (check runs no CUDA graphs): a --stack preset's mapping shows here, as in bench's result
            "stack": cfg.ran(graphs=False),
            # torch._inductor.config after compiling (hw.inductor_flags); None: eager run
            "inductor_flags": current_inductor_flags() if cfg.compile else None}


def _merge(per_rank: list[list[dict]]) -> list[dict]:
    """Worst error over ranks per schedule (every rank holds the full logits)."""
    out = []
    for rows in zip(*per_rank):
        r = dict(rows[0])
        for key in ("prefill_err", "decode_err"):
            vals = [x[key] for x in rows if x[key] is not None]
            r[key] = max(vals) if vals else None
        r["ok"] = all(x["ok"] for x in rows)
        out.append(r)
    return out
