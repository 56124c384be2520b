"""dbo: two micro-batches of sequences, each one's TP all-reduce overlapping the other's compute --
vLLM's dual-batch overlap as vllm-project/vllm#44677 ("DBO ++: Overlap TP all-reduce with compute")
runs it on a dense model. Keeps the model: the outputs are standard's.

vLLM's shipped DBO (--enable-dbo; vllm/v1/worker/ubatching.py) splits a step's tokens into two ubatches
run by two CPU threads that hand the GPU to each other at yield points inside FusedMoEModularKernel only
(docs/design/dbo.md: "This system currently only targets DP+EP deployments"): on a dense Llama there is no
yield point, the ubatches run back to back with blocking all-reduces, pure cost. SGLang's two-batch
overlap (--enable-two-batch-overlap) has operation strategies for MoE decoder layers only
(operations_strategy.py init_new_tbo: NotImplementedError for others): not available for Llama. So this
schedule is the overlapped form #44677 proposes, which token-split:2 already builds, with vLLM's rules:
  * the split is along sequences in both phases (create_ubatch_slices at the token midpoint; with equal
    sequences that is half the sequences each; an odd batch puts one sequence more in the first);
  * a step splits only from vLLM's thresholds (vllm/config/parallel.py): dbo_decode_token_threshold 32
    tokens in decode, dbo_prefill_token_threshold 512 in prefill; below, the step runs standard (noted);
  * batch 1 has one sequence: nothing to split, refused (token-split splits a prompt's tokens).
The two ubatch threads' CPU time (UBatchContext, vllm/v1/worker/ubatching.py _cpu_yield; their start in
gpu_ubatch_wrapper.py _run_ubatches) is the stack's (Stack.ubatch_switch_s at each micro-batch all-reduce,
after which a thread hands over; Stack.ubatch_start_s once a step), on the launch chain of an eager phase;
a step replayed from a full CUDA graph runs neither (UBatchWrapper.__call__ replays the captured ubatches).
"""
from __future__ import annotations

from tpsim.sim.schedule.builder import Builder, MicroBatch, micro_batches
from tpsim.sim.stack.spec import Step
from tpsim.sim.schedule.schedules import token_split
from tpsim.sim.schedule.schedules._def import LayerKind, ScheduleDef, each
from tpsim.sim.schedule.schedules.standard import layer as standard_layer

DECODE_MIN_TOKENS = 32
PREFILL_MIN_TOKENS = 512


def split(step: Step) -> list[MicroBatch] | None:
    """The two micro-batches of sequences of `step`, or None where vLLM's thresholds keep it whole (the
    pricing of compiled layers reads it too: sim/price/fusion.py)."""
    least = DECODE_MIN_TOKENS if step.phase == "decode" else PREFILL_MIN_TOKENS
    if step.batch < 2 or step.tokens < least:
        return None
    return micro_batches(step, 2, "batch")


def layers(b: Builder, first: int, end: int, x: str) -> str:
    st = b.step
    if st.batch < 2:
        raise ValueError("dbo splits a step's sequences into two micro-batches; batch 1 has one sequence (give "
                         "--batch 2 or more, or token-split, which splits a prompt's tokens)")
    least = DECODE_MIN_TOKENS if st.phase == "decode" else PREFILL_MIN_TOKENS
    if split(st) is None:
        b.note(f"{st.phase} of {st.tokens} tokens is under vLLM's DBO threshold ({least} tokens, "
               f"dbo_{st.phase}_token_threshold): runs standard")
        return each(standard_layer)(b, first, end, x)
    return token_split.layers(b, first, end, x, 2, mbs=split(st), threads=True)


def plan(n: int) -> tuple[str, ...]:
    return ("dbo",) * n


KIND = LayerKind("dbo", layers,
                 analytic="Inductor's kernel tables were derived for token-split's micro-batches (prompt tokens in "
                          "prefill); dbo's micro-batches of sequences are priced by the analytic fused model")
DEF = ScheduleDef("dbo", "dbo (two micro-batches of sequences, vLLM DBO)", "none", plan, (KIND,),
                  summary="two micro-batches of sequences, each one's all-reduce overlapping the other's compute (vLLM DBO)",
                  numerics_reference="standard")
