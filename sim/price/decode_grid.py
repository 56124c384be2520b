"""Decode attention's grid: how many CTAs stream the KV cache and how much each streams.

At batch 1-4 one decode step (q_len 1) has little parallel work: a few KV heads per rank, one query token
per sequence. Whether the kernel reaches memory bandwidth depends on how it splits each sequence's KV
across CTAs. Each rule below is the split rule of one kernel, read from its code (file and function in
the rule), with the knobs an engine or version line calls it with (sim/stack/impls.py ATTENTION_KNOBS,
set by a stack's attention_knobs, each sourced in its preset). A rule returns the Grid it launches:
CTAs per (sequence, KV head or GQA group, split), the splits, and the most KV tokens one CTA streams.

TensorRT-LLM's XQA is reached through its dispatcher, which falls back to masked MHA (mmha) where it
expects no gain: the TensorRT-engine line (0.9-0.12, multi-block off by default) at small batch. What a
grid costs is sim/price/decode_price.py's.

Shapes (per rank): b sequences, hq query and hkv KV heads (hq = hkv when the stack expands GQA), head
dim d, L the KV length the op reads; one KV token of one head is 2 d dtype bytes (K and V).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tpsim.sim.price import flash_decode
from tpsim.sim.stack.impls import ATTENTION_KNOBS
from tpsim.sim.stack.spec import DTYPE_BYTES


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Shape:
    """One decode attention op's shape on one rank (hkv: the heads the kernel reads, after any expand)."""

    batch: int
    heads: int
    kv_heads: int
    kv_len: int
    head_dim: int
    dtype_bytes: int

    @property
    def token_bytes(self) -> int:
        """KV bytes of one token of one head (K and V)."""
        return 2 * self.head_dim * self.dtype_bytes


# the kernels whose CTAs each serve one query head (no GQA sharing): their splits are per (sequence, query head)
PER_QUERY_HEAD = ("mmha", "vllm-paged")


@dataclass(frozen=True)
class Grid:
    """What a decode kernel launches for one step: `ctas` in the grid (`active` of them with KV to
    stream), `splits` of each (sequence, KV head) at the longest sequence (`splits_launched` in the grid),
    the most KV `tokens` one CTA streams, and its combine: "kernel" (separate), "in-kernel" or ""."""

    kernel: str
    ctas: int
    active: int
    splits: int
    splits_launched: int
    tokens: int
    combine: str
    combine_bytes: float     # fp32 partials the combine reads (+ LSE), bytes
    extra_kernels: int       # kernels beside the main one: combine, memset, scheduler
    rule: str                # one line: the rule's choice and why

    def describe(self) -> str:
        unit = "query head" if self.kernel in PER_QUERY_HEAD else "KV head"
        head = (f"{self.kernel}: {self.active} of {self.ctas} CTAs stream KV, {self.splits} split"
                f"{'s' if self.splits != 1 else ''} per (sequence, {unit})")
        if self.splits_launched != self.splits:
            head += f" ({self.splits_launched} launched)"
        comb = {"kernel": ", + combine kernel", "in-kernel": ", combined in-kernel", "": ""}[self.combine]
        return f"{head}, <= {self.tokens} tokens per CTA{comb}; {self.rule}"


def _split_over(kv_len: int, block: int, splits: int) -> tuple[int, int]:
    """(splits that get KV, the most tokens one takes) when `splits` ranges of cdiv(n_blocks, splits)
    blocks of `block` tokens cover kv_len (a split past the end returns at once)."""
    n = cdiv(kv_len, block)
    per = cdiv(n, max(splits, 1))
    return cdiv(n, per), min(per * block, kv_len)


# -- FlashAttention-2 (Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp; PyTorch's copy in
#    aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp, SDPA's flash backend)

def fa2_heuristic(bnm: int, sms: int, n_blocks: int, max_splits: int = 128) -> int:
    """num_splits_heuristic (flash_api.cpp, v2.8.3 and PyTorch's copy): 1 when batch x heads x m-blocks
    nearly fills the SMs; else the fewest splits whose wave efficiency is >= 85% of the best, skipping
    splits that give the same blocks per split as one fewer."""
    if bnm >= 0.8 * sms:
        return 1
    top = min(max_splits, sms, n_blocks)
    eligible = [s == 1 or cdiv(n_blocks, s) != cdiv(n_blocks, s - 1) for s in range(1, top + 1)]
    eff = [(bnm * s / sms) / math.ceil(bnm * s / sms) if ok else 0.0 for s, ok in zip(range(1, top + 1), eligible)]
    best = max(eff, default=0.0)
    return next((s for s, ok in zip(range(1, top + 1), eligible) if ok and eff[s - 1] >= 0.85 * best), 1)


def fa2(s: Shape, sms: int, k: dict, graphs: bool) -> Grid:
    """FA2 split-KV decode. mha_fwd / mha_varlen_fwd / mha_fwd_kvcache: q_len 1 with GQA (no window,
    alibi or dropout) is swapped to (b, g, hkv, d) (seqlenq_ngroups_swapped), so one CTA holds a KV head's
    whole group; set_params_splitkv: block_n 128 at d <= 128 (256 at d <= 64, 64 above), m-blocks of 64
    rows, num_splits_heuristic(b x h x m_blocks, multiProcessorCount x 2, n_blocks, 128); split grid
    (m_blocks, splits, b x h) (flash_fwd_launch_template.h), combine kernel when splits > 1. seqlen_k is
    the block table's width for a paged cache (mha_fwd_kvcache), which under vLLM V0's graphs is
    max_seq_len_to_capture (knob graph_table_kv_len)."""
    swap = s.heads > s.kv_heads
    h = s.kv_heads if swap else s.heads
    m_blocks = cdiv(s.heads // s.kv_heads if swap else 1, 64)
    block = 256 if s.head_dim <= 64 else 128 if s.head_dim <= 128 else 64
    table = k["graph_table_kv_len"] if graphs else 0
    seqlen_k = max(s.kv_len, table)
    splits = fa2_heuristic(s.batch * h * m_blocks, k["sm_factor"] * sms, cdiv(seqlen_k, block))
    per = cdiv(cdiv(seqlen_k, block), splits)
    active_splits, tokens = _split_over(s.kv_len, block, cdiv(cdiv(s.kv_len, block), per))
    rows = s.batch * s.heads
    why = (f"num_splits_heuristic({s.batch * h * m_blocks} CTAs, {k['sm_factor']} x {sms} SMs, "
           f"{cdiv(seqlen_k, block)} blocks of {block}{' of the block table' if seqlen_k > s.kv_len else ''})")
    return Grid("fa2", s.batch * h * m_blocks * splits, s.batch * h * m_blocks * active_splits, active_splits, splits,
                tokens, "kernel" if splits > 1 else "", _partials(rows, splits, s.head_dim),
                1 if splits > 1 else 0, why)


def _partials(rows: int, splits: int, d: int) -> float:
    """fp32 partial outputs and their log-sum-exp, [splits, rows, d] + [splits, rows]: what a combine reads."""
    return float(rows * splits * (4 * d + 4)) if splits > 1 else 0.0


# -- FlashAttention-3 (vllm-project/flash-attention @ee4d25bd, the GIT_TAG of vLLM 0.11.0's
#    cmake/external_projects/vllm_flash_attn.cmake; SGLang's sgl-kernel carries the same hopper/ code)

def fa3_heuristic(total_mblocks: int, sms: int, n_blocks: int, max_splits: int = 128) -> int:
    """hopper/heuristics.h num_splits_heuristic: 1 when the m-blocks nearly fill the SMs (its L2 rule for
    one KV head over 50 MB needs >= 2 x SMs m-blocks: never at decode) or when n_blocks <= 4 ('we never
    split for hdim = 128 and seqlen_k = 512'); else the fewest splits within 85% of the best wave
    efficiency (no eligibility filter, unlike FA2)."""
    if total_mblocks >= 0.8 * sms or n_blocks <= 4:
        return 1
    top = min(max_splits, sms, n_blocks)
    eff = [(total_mblocks * s / sms) / math.ceil(total_mblocks * s / sms) for s in range(1, top + 1)]
    return next((s for s in range(1, top + 1) if eff[s - 1] >= 0.85 * max(eff)), 1)


def fa3(s: Shape, sms: int, k: dict, graphs: bool) -> Grid:
    """FA3 decode, varlen (both engines). hopper/flash_api.cpp: get_num_splits runs the heuristic with
    batch taken as 1 ('pretend batch = 1': varlen uses the dynamic split) over hkv x cdiv(g, kBlockM)
    packed m-blocks (pack_gqa is forced when splitting) and n_blocks = cdiv(seqlen_k, 128) (kBlockN 128 for
    a paged cache without TMA, tile_size.h), unless the caller passes num_splits (vLLM's full graphs: knob
    graph_num_splits); seqlen_k is max_seqlen_k, or the page table's width when not given (SGLang: the
    model's context under graphs, knob graph_table_kv_len). Then per sequence, on device
    (flash_prepare_scheduler.cu prepare_varlen_num_blocks, batch <= 992): blocks_per_sm = ceil(total
    blocks x 1.1 x hkv / SMs), splits = clamp(cdiv(n_blocks, blocks_per_sm), 1, static). Combine kernel
    when static > 1; the prepare kernel runs inside each call when the engine passes no scheduler_metadata
    (knob prepare_per_call). The persistent scheduler launches num_sm CTAs that pull these tiles."""
    g = s.heads // s.kv_heads
    m_blocks = cdiv(g, k["block_m"])
    block = 128
    table = k["graph_table_kv_len"] if graphs else 0
    n_static = cdiv(max(s.kv_len, table), block)
    given = k["graph_num_splits"] if graphs else 0
    static = given or fa3_heuristic(s.kv_heads * m_blocks, sms, n_static)
    n = cdiv(s.kv_len, block)
    if static > 1 and s.batch <= 992:
        per_sm = math.ceil(s.batch * n * m_blocks * 1.1 * s.kv_heads / sms)
        splits = max(min(cdiv(n, per_sm), static), 1)
        how = f"dynamic split {splits} (<= {static})"
    else:
        splits, how = static, f"split {static}"
    active_splits, tokens = _split_over(s.kv_len, block, splits)
    tiles = s.batch * s.kv_heads * m_blocks
    src = (f"num_splits {given} passed under graphs" if given else
           f"heuristic over {n_static} blocks of 128{' of the page table' if n_static > n else ''}")
    extra = int(static > 1) + int(k["prepare_per_call"])
    return Grid("fa3", tiles * splits, tiles * active_splits, active_splits, splits, tokens,
                "kernel" if static > 1 else "", _partials(s.batch * s.heads, active_splits, s.head_dim), extra,
                f"{src}; {how}")


# -- FlashInfer batch decode (flashinfer-ai/flashinfer include/flashinfer/attention/scheduler.cuh)

def flashinfer(s: Shape, sms: int, k: dict, graphs: bool) -> Grid:
    """PartitionPagedKVCacheBinarySearchMinNumPagePerBatch: the smallest chunk (>= max(128 // page_size, 1)
    pages) whose chunks x hkv fit the grid bound (knob ctas_per_sm x SMs: the plan's 2 CTAs per SM,
    PrefillPlan num_blocks_per_sm, which SGLang's tensor-core decode for GQA >= 4 runs); no split when the
    requests alone fill it. One CTA per (chunk, KV head); VariableLengthMergeStates merges the chunks
    (cascade.cuh), and under CUDA graphs split_kv is always on."""
    page = k["page_size"]
    pages = cdiv(s.kv_len, page)
    bound = k["ctas_per_sm"] * sms
    if s.batch * s.kv_heads >= bound:
        chunk = pages
    else:
        lo, hi = max(128 // page, 1), max(pages, max(128 // page, 1))
        while lo < hi:
            mid = (lo + hi) // 2
            if s.batch * cdiv(pages, mid) * s.kv_heads > bound:
                lo = mid + 1
            else:
                hi = mid
        chunk = lo
    splits = cdiv(pages, chunk)
    merged = splits > 1 or graphs
    return Grid("flashinfer", s.batch * s.kv_heads * splits, s.batch * s.kv_heads * splits, splits, splits,
                min(chunk * page, s.kv_len), "kernel" if merged else "",
                _partials(s.batch * s.heads, splits, s.head_dim) if merged else 0.0, int(merged),
                f"chunks of {chunk * page} tokens within {k['ctas_per_sm']} x {sms} CTAs")


# -- TensorRT-LLM XQA (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
#    decoderXQAImplCommon.h computeMultiBlockCount; cpp/kernels/xqa/mha.cu)

XQA_TILE = 256          # mha.cu ctaTile.x: KV tokens per loop iteration of one CTA
XQA_MAX_SUB_SEQ = 6000  # kXQA_MAX_NUM_SUB_SEQ / getXqaMaxNumSubSeq: the multi-block workspace's sub-sequences


def xqa_ctas_per_head(batch: int, kv_heads: int, history: int, sms: int, heuristic: str = "sqrt") -> int:
    """computeMultiBlockCount: M = history // kMinHistoryTokensPerBlock (128), at most round(sqrt(8 M))
    ('otherwise the final reduction may dominate'), scaled down when batch x hkv x M exceeds
    kTargetWaveFactor (8) waves of SMs, at most 6000 // batch. The older runners ('cap8',
    decoderXQAImplPrecompiled / decoderXQARunner): history // 512, the same wave rule, at most
    kMaxNbCtaPerKVHeadFactor (8)."""
    m = max(history // (128 if heuristic == "sqrt" else 512), 1)
    if heuristic == "sqrt":
        m = max(min(m, round(math.sqrt(m * 8.0))), 1)
    waves = batch * kv_heads * m / sms
    if waves / 8 > 1:
        m = max(math.floor(m / (waves / 8)), 1)
    return max(min(m, XQA_MAX_SUB_SEQ // batch if heuristic == "sqrt" else 8), 1)


def xqa_has_gain(batch: int, kv_heads: int, history: int, sms: int, k: dict) -> tuple[bool, int]:
    """(whether the XQA dispatcher runs XQA, its CTA estimate): mayHavePerfGain (decoderXQAImplJIT.cpp in 1.x;
    the older runners' XQAKernelList, decoderXQARunner.cpp): block_count = KV heads x batch x M, M = 1 with
    multi-block off, else past length // kMinHistoryTokensPerBlock (1.x: at least 1 of 128-token blocks;
    'cap8' runners: 512, no floor); XQA only when block_count x kEnableMinBlockFactor (4.0) >= SMs, else
    the generation step falls back to masked MHA (mmha). TRTLLM_FORCE_XQA (not modelled) skips the test."""
    if not k["multi_block"]:
        m = 1
    elif k["heuristic"] == "sqrt":
        m = max(1, history // 128)
    else:
        m = history // 512
    blocks = kv_heads * batch * m
    return blocks * 4.0 >= sms, blocks


def xqa(s: Shape, sms: int, k: dict, graphs: bool) -> Grid:
    """XQA: grid (M, hkv, b), 256-token tiles, CTA i takes tiles i, i + M, ... (interleaved), the whole GQA
    group in one CTA; M from the past length (max_past_kv_length), which a CUDA graph fixes at capture
    (TRT-LLM 1.x captures each generation graph with one dummy request of max_seq_len - 1 tokens:
    _torch/pyexecutor/model_engine.py _create_cuda_graph_warmup_request; knob graph_capture_kv_len).
    Multi-block off (knob multi_block): one CTA per (sequence, KV head) streams the whole context. Where
    the dispatcher sees no gain (xqa_has_gain: few KV heads x sequences, multi-block off or a short past)
    masked MHA runs instead (mmha), decided at capture under a graph."""
    capture = k["graph_capture_kv_len"] if graphs else 0
    history = max(s.kv_len - 1, capture)
    gain, blocks = xqa_has_gain(s.batch, s.kv_heads, history, sms, k)
    if not gain:
        g = mmha(s, sms, k["multi_block"], history)
        return replace(g, rule=f"XQA dispatcher: {blocks} CTAs x 4 < {sms} SMs (mayHavePerfGain false) -> {g.rule}")
    m = xqa_ctas_per_head(s.batch, s.kv_heads, history, sms, k["heuristic"]) if k["multi_block"] else 1
    tiles = cdiv(s.kv_len, XQA_TILE)
    active = min(m, tiles)
    why = ("multi-block off" if not k["multi_block"] else
           f"computeMultiBlockCount({k['heuristic']}) at {'capture ' if capture else ''}past length {history}")
    return Grid("xqa", s.batch * s.kv_heads * m, s.batch * s.kv_heads * active, active, m,
                min(cdiv(tiles, m) * XQA_TILE, s.kv_len), "in-kernel" if m > 1 else "",
                _partials(s.batch * s.heads, active, s.head_dim) / max(s.batch * s.kv_heads, 1) if m > 1 else 0.0,
                int(m > 1), why)


# -- TensorRT-LLM masked multi-head attention, XQA's fallback (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
#    decoderMaskedMultiheadAttentionLaunch.h mmha_launch_kernel_ex and multi_block_grid_setup, read at
#    v0.11.0 = 05316d33, the tensorrt_llm submodule of triton-inference-server/tensorrtllm_backend v0.11.0)

MMHA_THREADS = 256          # mmha_launch_kernel_dispatch: THDS_PER_BLOCK 256
MMHA_WARPS_PER_SM = 32      # the launch's comment: 'The max number of warps we can launch per SM is 32 limited by registers'
MMHA_THREADS_PER_VALUE = 16  # threads_per_value<T>(dh_max(Dh)): 128 x 2 B / 16 B per load, bf16/fp16 at head_dim 128
MMHA_KV_LOOP_UNROLL = 8     # multi_block_grid_setup: 'each block at least processes one loop of kv (unroll size 8)'


def mmha_block_size(ctas: int, sms: int) -> int:
    """The dynamic block size: with batch x heads < 4 x SMs the launch grows the CTA to fill the SMs,
    min(256 x min(cdiv(SMs x blocks_per_sm, ctas), blocks_per_sm), 1024), rounded down to 256, 512 or 1024
    (blocks_per_sm: the occupancy query at 256 threads, 32 warps / 8 = 4 by the code's comment)."""
    per_sm = MMHA_WARPS_PER_SM * 32 // MMHA_THREADS
    size = min(MMHA_THREADS * min(cdiv(sms * per_sm, ctas), per_sm), 1024)
    return 256 if size < 512 else 512 if size < 1024 else 1024


def mmha(s: Shape, sms: int, multi_block: bool, timestep: int) -> Grid:
    """Masked MHA: grid (hq, b, seq_len_tile), one CTA per query head and sequence (no GQA sharing: each of
    a group's CTAs reads its KV head), RoPE and the cache write inside the kernel. Multi-block off: one
    CTA streams the whole context (timestep + 1 tokens), 256 threads, or up to 1024 when batch x heads <
    4 x SMs (mmha_block_size). Multi-block on: seq_len_tile = clamp(cdiv(SMs x resident CTAs, b x hq), 1,
    cdiv(timestep + 1, cdiv(block, 16) x 8)) (multi_block_grid_setup; the op's max_seq_len_tile, a bound
    set elsewhere, not modelled), the partials reduced in-kernel by each (head, sequence)'s last CTA
    (params.block_counter)."""
    ctas = s.batch * s.heads
    block = MMHA_THREADS if (not multi_block and ctas >= 4 * sms) else mmha_block_size(ctas, sms)
    tiles, length = 1, timestep + 1
    if multi_block:
        resident = MMHA_WARPS_PER_SM * 32 // block
        per_loop = cdiv(block, MMHA_THREADS_PER_VALUE) * MMHA_KV_LOOP_UNROLL
        tiles = max(min(cdiv(sms * resident, ctas), cdiv(length, per_loop)), 1)
    tokens = min(cdiv(length, tiles), s.kv_len)
    active = cdiv(s.kv_len, tokens)
    why = (f"masked MHA, {block} threads per CTA, " +
           (f"{tiles} blocks per sequence" if tiles > 1 else "one CTA per query head streams the whole context"))
    return Grid("mmha", ctas * tiles, ctas * active, active, tiles, tokens, "in-kernel" if tiles > 1 else "",
                _partials(ctas, active, s.head_dim) / ctas if tiles > 1 else 0.0, int(tiles > 1), why)


# -- vLLM paged attention v1/v2 (vllm/attention/ops/paged_attn.py, csrc/attention/attention_kernels.cu)

def vllm_paged(s: Shape, sms: int, k: dict, graphs: bool) -> Grid:
    """_PARTITION_SIZE 512; use_v1 = max_seq_len <= 8192 and (one partition or num_seqs x num_heads > 512):
    v1 grid (hq, b), one CTA per query head over the whole context; v2 grid (hq, b, partitions) and a
    reduce kernel grid (hq, b). No GQA sharing: each query head's CTA reads its KV head."""
    parts = cdiv(s.kv_len, 512)
    if s.kv_len <= 8192 and (parts == 1 or s.batch * s.heads > 512):
        return Grid("vllm-paged", s.batch * s.heads, s.batch * s.heads, 1, 1, s.kv_len, "", 0.0, 0,
                    "paged_attention_v1")
    return Grid("vllm-paged", s.batch * s.heads * parts, s.batch * s.heads * parts, parts, parts, min(512, s.kv_len),
                "kernel", _partials(s.batch * s.heads, parts, s.head_dim), 1,
                f"paged_attention_v2, {parts} partitions of 512")


RULES = {"fa2": fa2, "fa3": fa3, "flashinfer": flashinfer, "xqa": xqa, "vllm-paged": vllm_paged}
assert set(RULES) == set(ATTENTION_KNOBS)       # one knob table entry per rule


def kernel_of(impl: str, compute_capability: float | None, fallback: str) -> tuple[str | None, str]:
    """(the rule that prices `impl`'s decode on this GPU, a note): fa3 off Hopper runs as the stack's
    fallback (flash_decode.kernel_on), "flash" is PyTorch SDPA's FA2; None for math SDPA."""
    kernel, note = flash_decode.kernel_on(impl, compute_capability, fallback)
    kernel = kernel or (impl if impl in RULES else None)
    return kernel, note


def shape_of(op) -> Shape:
    """The decode attention op's per-rank shape (a stack that expands GQA reads hq KV heads)."""
    a = dict(op.attrs)
    hkv = a["heads"] if a["expand_gqa"] and a["kv_heads"] < a["heads"] else a["kv_heads"]
    return Shape(a["batch"], a["heads"], hkv, a["kv_len"], a["head_dim"], DTYPE_BYTES[op.dtype])


def grid_of(op, stack, sms: int, graphs: bool, compute_capability: float | None = None) -> Grid | None:
    """The grid `stack` launches for a decode-step attention op (q_len 1) on a GPU of `sms` SMs; None
    for anything else (prefill, math SDPA)."""
    if op.kind != "attention" or dict(op.attrs)["q_len"] != 1:
        return None
    kernel, _ = kernel_of(dict(op.attrs)["impl"], compute_capability, stack.attention_fallback)
    if kernel is None:
        return None
    return RULES[kernel](shape_of(op), sms, stack.knobs(kernel), graphs)
