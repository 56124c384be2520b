"""An iteration's time: the step model (sim.predict.Simulator.step_time, host lane included) of the mixed
batch it holds, through tables interpolated over the four numbers that price it:

  dec   decoding sequences                    (their tokens join the GEMMs' rows; one attention op)
  L     their mean KV length (context + 1)    (decode attention reads sum(KV) = dec x L: linear in it)
  T     prefill tokens, all chunks together   (the GEMMs' other rows)
  C     where one chunk of T tokens would start to attend as much as the real chunks do: a chunk of
        q tokens from start s attends to s + q keys (work ~ q x (s + q), the step model's count), so
        C = sum(q x (s + q)) / T - T; one chunk: its start; several: less (each attends to itself
        only), below 0 when they start at 0 -- the table extrapolates there, work being linear in C

A node is the exact step of `dec` decodes at L and one chunk of T tokens at C, priced when an iteration
first needs it (memoized); an iteration takes the multilinear interpolation over the nodes around it.
Two tables: decode-only iterations (most of them) over (dec, L) with nodes dense where step time bends
(small batches, where GEMMs are memory-bound) and ~1.5x apart beyond, where it is nearly linear; and
iterations with a chunk over (dec, L, T, C) on nodes 2-4x apart -- there the decodes add rows to a GEMM
already past its memory-bound bend (time ~linear in rows) and attention work bilinear in (dec, L) and
(T, C), which multilinear interpolation reproduces -- so a run prices tens of chunked nodes, not hundreds.
Past the last node it extrapolates from the last two. What the tables leave out: a batch of several
chunks prices its logits and sampler for one chunk (rows dec + 1, not dec + chunks: one LM-head row per
extra chunk). tests/test_serve_steptime.py bounds the error against the exact step of real mixed batches.
"""
from __future__ import annotations

import bisect
from typing import Callable

from tpsim.sim.stack.spec import Step

# decode-only iterations
DEC_NODES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
             4096)
LEN_NODES = (1, 16, 64, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
             98304, 131072, 196608, 262144, 524288, 1048576)
# iterations with a prefill chunk (dec 0: no decodes)
CHUNK_DEC_NODES = (0, 4, 16, 64, 256, 1024, 4096)
CHUNK_LEN_NODES = (1, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
TOKEN_NODES = (1, 16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
START_NODES = (0, 1024, 4096, 16384, 65536, 262144, 1048576)


def _nodes(grid: tuple[int, ...], top: int) -> tuple[int, ...]:
    """The grid's nodes up to `top`, with `top` itself as the last (where the engine's cap binds)."""
    return tuple(x for x in grid if x < top) + (top,)


def _bracket(nodes: tuple[int, ...], x: float) -> tuple[tuple[int, float], ...]:
    """[(node index, weight)] of linear interpolation at x (one node when x is on it; past an end, the
    two nodes there, extrapolating)."""
    i = bisect.bisect_left(nodes, x)
    if i < len(nodes) and nodes[i] == x:
        return ((i, 1.0),)
    if len(nodes) == 1:
        return ((0, 1.0),)
    i = min(max(i, 1), len(nodes) - 1)          # past either end: the two nodes there, extrapolating
    w = (x - nodes[i - 1]) / (nodes[i] - nodes[i - 1])
    return ((i - 1, 1.0 - w), (i, w))


class StepTable:
    """Seconds of one iteration of one schedule, interpolated over exact steps (the module doc).
    `step_s(step)` is the exact step model (Simulator.step_time(spec, step)[0])."""

    def __init__(self, step_s: Callable[[Step], float], stack, max_dec: int, max_len: int, max_tokens: int):
        self.step_s, self.stack = step_s, stack
        self.dec_nodes = _nodes(DEC_NODES, max(max_dec, 1))
        self.len_nodes = _nodes(LEN_NODES, max(max_len, 2))         # at least two: an interval
        self.cdec_nodes = _nodes(CHUNK_DEC_NODES, max(max_dec, 1))
        self.clen_nodes = _nodes(CHUNK_LEN_NODES, max(max_len, 2))
        self.token_nodes = _nodes(TOKEN_NODES, max(max_tokens, 1))
        self.start_nodes = _nodes(START_NODES, max(max_len, 1))
        self.memo: dict[tuple, float] = {}       # (i, j) decode-only, (i, j, k, m) with a chunk -> seconds
        self._decs: dict[int, tuple] = {}       # dec -> its bracket (a batch keeps its size for many iterations)
        self._j = 0                             # the L interval of the last decode-only iteration

    @property
    def evaluated(self) -> int:
        """Exact steps priced so far (nodes visited)."""
        return len(self.memo)

    def exact(self, dec: int, length: int, tokens: int, start: int) -> float:
        """The step model's seconds for `dec` decodes at KV length `length` and one chunk of `tokens`
        tokens starting at `start`."""
        groups = ([(dec, 1, length)] if dec else []) + ([(1, tokens, start + tokens)] if tokens else [])
        return self.step_s(Step.mixed(groups, self.stack))

    def mixed(self, dec: int, kv: int, tokens: int, area: int) -> float:
        """The exact step at an iteration's four numbers (rounded to whole tokens; one chunk): what
        the table interpolates, for tests."""
        return self.exact(dec, round(kv / dec) if dec else 1, tokens, round(area / tokens) - tokens if tokens else 0)

    def _node(self, key: tuple) -> float:
        if len(key) == 2:
            t = self.exact(self.dec_nodes[key[0]], self.len_nodes[key[1]], 0, 0)
        else:
            i, j, k, m = key
            t = self.exact(self.cdec_nodes[i], self.clen_nodes[j], self.token_nodes[k], self.start_nodes[m])
        self.memo[key] = t
        return t

    def __call__(self, dec: int, kv: int, tokens: int, area: int, chunks: int = 1) -> float:
        memo, t = self.memo, 0.0
        if not tokens:                          # decodes only (most iterations): over (dec, L)
            ds = self._decs.get(dec)
            if ds is None:
                ds = self._decs[dec] = _bracket(self.dec_nodes, dec)
            nodes, j, length = self.len_nodes, self._j, kv / dec
            if not nodes[j] <= length < nodes[j + 1]:      # L moved out of the last interval (it grows slowly)
                j = self._j = min(max(bisect.bisect_right(nodes, length) - 1, 0), len(nodes) - 2)
            w = (length - nodes[j]) / (nodes[j + 1] - nodes[j])
            for i, wi in ds:
                a = memo.get((i, j))
                if a is None:
                    a = self._node((i, j))
                if w:
                    b = memo.get((i, j + 1))
                    a += w * ((b if b is not None else self._node((i, j + 1))) - a)
                t += wi * a
            return t
        ds = _bracket(self.cdec_nodes, dec)
        ls = _bracket(self.clen_nodes, kv / dec) if dec else ((0, 1.0),)
        ts = _bracket(self.token_nodes, tokens)
        cs = _bracket(self.start_nodes, area / tokens - tokens)
        for i, wi in ds:
            for j, wj in (ls if self.cdec_nodes[i] else ((0, 1.0),)):     # no decodes: no L
                for k, wk in ts:
                    w = wi * wj * wk
                    for m, wm in cs:
                        key = (i, j, k, m)
                        v = memo.get(key)
                        t += w * wm * (v if v is not None else self._node(key))
        return t
