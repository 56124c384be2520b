"""tokenweave (TokenWeave, arXiv 2505.11329, MLSys 2026; microsoft/tokenweave@f483d1c, a vLLM 0.8.5 fork):
a prefill's tokens in two halves, each half's all-reduce + residual add + RMSNorm one fused multimem
kernel on a few CTAs, overlapping the other half's attention or MLP. Keeps the model.

As its code runs Llama (tokenweave_utils.tokenweave_overlap, LlamaModel.forward; docs/AddTokenWeave.md):
  * only from MIN_TOKENS = 1024 tokens; the tokens are padded to a multiple of 256 and split at
    round_up(T, 256) / 2 + SPLIT_OFFSET(T) (tokenweave_configs/llama_config_8.json, the nearest token
    count; 0 up to 4096 tokens, 256 from 8192), the halves' rows as micro-batches (one sequence: its
    tokens; several: every sequence's tokens split in the same proportion, where TokenWeave splits the
    flattened token stream, noted);
  * each half's all-reduce + add + RMSNorm is fused_rs_ln_ag_cta on the comm stream (a high-priority
    copy_stream) with attention_ctas / mlp_ctas CTAs from the same config (CTAS), priced by
    sim/price/comm/fused_allreduce.py from TokenWeave's own CTA sweep; compute stays on the other half;
  * below 1024 tokens (every decode step at the batch sizes here): the "fuse-only" path, standard layers
    whose all-reduce + add + RMSNorm is that kernel on min(16, tokens per rank) CTAs (MAX_CTAS).
Its configs were tuned for Llama-3.3-70B at TP 8 on 8x H100; other models and TP degrees take the same
table (noted). The padding rows (up to 255) are not priced (noted when there are any).
"""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder, MicroBatch
from tpsim.sim.stack.spec import Step
from tpsim.sim.schedule.schedules import token_split
from tpsim.sim.schedule.schedules._def import LayerKind, ScheduleDef

MIN_TOKENS = 1024
PAD = 256
FUSE_ONLY_CTAS = 16
_CFG = "microsoft/tokenweave@f483d1c tokenweave_configs/llama_config_8.json"
# tokens -> (SPLIT_OFFSET, attention CTAs, MLP CTAs) of _CFG
CONFIG = {1024: (0, 4, 4), 2048: (0, 8, 8), 4096: (0, 4, 4), 8192: (256, 8, 4), 16384: (256, 8, 8),
          32768: (256, 8, 4), 65536: (256, 4, 4)}


def config(tokens: int) -> tuple[int, int, int]:
    """(split offset, attention CTAs, MLP CTAs) for a step of `tokens` (the nearest configured count)."""
    return CONFIG[min(CONFIG, key=lambda k: (abs(k - tokens), k))]


def split_point(tokens: int) -> int:
    """Where TokenWeave cuts a step of `tokens` (padded to PAD): round_up(T, 256) / 2 + its offset."""
    offset, _, _ = config(tokens)
    return min(-(-tokens // PAD) * PAD // 2 + offset, tokens - 1)


def split(step: Step) -> list[MicroBatch] | None:
    """TokenWeave's two halves of `step` as micro-batches (one sequence: its tokens; several: every
    sequence's tokens in the same proportion), or None below MIN_TOKENS (fuse-only). The pricing of
    compiled layers reads it too (sim/price/fusion.py)."""
    if step.tokens < MIN_TOKENS or step.q_len < 2:
        return None
    cut = split_point(step.tokens)
    n0 = cut if step.batch == 1 else max(1, min(step.q_len - 1, round(step.q_len * cut / step.tokens)))
    return [MicroBatch(0, 0, step.batch, 0, n0), MicroBatch(1, 0, step.batch, n0, step.q_len - n0)]


def _fused(ctas: int) -> list:
    return [("fuse", "add_norm"), ("kernel", "multimem"), ("ctas", ctas)]


def layers(b: Builder, first: int, end: int, x: str) -> str:
    st = b.step
    if b.model.hidden != 8192 or b.tp != 8:
        b.note("tokenweave's split offsets and CTA counts were tuned for Llama-3.3-70B at TP 8: taken as they are")
    if split(st) is None:
        ctas = max(1, min(FUSE_ONLY_CTAS, -(-st.tokens // b.tp)))
        b.note(f"{st.phase} of {st.tokens} token{'s' * (st.tokens != 1)} is under tokenweave's {MIN_TOKENS}: "
               f"fuse-only (the fused multimem all-reduce + RMSNorm on {ctas} CTA{'s' * (ctas != 1)}, no split); "
               f"the harness runs it unfused")
        for i in range(first, end):
            x = _fuse_only(b, i, x, ctas)
        return x
    if st.tokens % PAD:
        b.note(f"tokenweave pads {st.tokens} tokens to {-(-st.tokens // PAD) * PAD}; the padding rows are not priced")
    _, attn_ctas, mlp_ctas = config(st.tokens)
    mbs = split(st)
    if st.batch > 1:
        b.note(f"tokenweave splits the flattened tokens at {split_point(st.tokens)}; tpsim splits every sequence's "
               f"tokens in that proportion ({mbs[0].nq} of {st.q_len})")
    b.note(f"each half's all-reduce + add + RMSNorm is one multimem kernel ({attn_ctas}/{mlp_ctas} CTAs "
           f"after attention/MLP); the harness runs it unfused")
    return token_split.layers(b, first, end, x, 2, mbs=mbs,
                              fuse=lambda half: _fused(attn_ctas if half == "attn" else mlp_ctas))


def _fuse_only(b: Builder, i: int, x: str, ctas: int) -> str:
    """A standard layer whose two all-reduces are the fused multimem kernel on `ctas` CTAs."""
    p = b.all_reduce(f"L{i}.attn.allreduce", b.attn(i, x), i, fuse=_fused(ctas))
    h = b.add(f"L{i}.attn.add", x, p, f"L{i}.h", i)
    z = b.all_reduce(f"L{i}.mlp.allreduce", b.mlp(i, h), i, fuse=_fused(ctas))
    return b.add(f"L{i}.mlp.add", h, z, f"L{i}.x", i)


def plan(n: int) -> tuple[str, ...]:
    return ("tokenweave",) * n


KIND = LayerKind("tokenweave", layers,
                 analytic="a fused multimem all-reduce + RMSNorm kernel outside Inductor's codegen, and halves "
                          "at TokenWeave's split point: priced by the analytic fused model")
DEF = ScheduleDef("tokenweave", "tokenweave (token halves + fused multimem all-reduce + RMSNorm)", "none", plan,
                  (KIND,),
                  summary="TokenWeave: token halves with a fused multimem all-reduce + RMSNorm on a few CTAs",
                  numerics_reference="standard")
