"""An iteration's time: the step model (sim.predict.Simulator.step_time, host lane included) of the mixed
batch it holds, through tables interpolated over the four numbers that price it:

  dec   decoding sequences                    (their tokens join the GEMMs' rows; one attention op)
  L     their mean KV length (context + 1)    (decode attention reads sum(KV) = dec x L: linear in it)
  T     prefill tokens, all chunks together   (the GEMMs' other rows)
  C     where one chunk of T tokens would start to do the attention work of the real chunks. A chunk of
        q tokens from start s attends to s + q keys. Math SDPA computes every score: q x (s + q), so
        C = sum(q x (s + q)) / T - T. A flash kernel under the causal mask computes the key tiles up to
        each row block's diagonal (sim/price/flash_prefill.py): ~q x s + q^2 / 2, so
        C = (sum(q x (s + q)) - sum(q^2) / 2) / T - T / 2 (`causal`). One chunk: its start; several:
        less (each attends to itself only), below 0 when they start at 0 -- the table extrapolates
        there, work being linear in C

A node is the exact step of `dec` decodes at L and one chunk of T tokens at C, priced when an iteration
first needs it (memoized); an iteration takes the multilinear interpolation over the nodes around it.
Two tables: decode-only iterations (most of them) over (dec, L), dec nodes ~1.25x apart (dense at small
batches, where GEMMs are memory-bound); and iterations with a chunk over (dec, L, T, C): dec and L 2x
apart (0 to 1 decode adds an attention op: a step, not a slope, so 1 is a node), T ~1.25x, C 4x (the
work is linear in C). Between nodes the step is nearly linear, but it bends where a host-bound step
turns GPU-bound (the engine's CPU work against the GPU's, whichever is longer) and where GEMM
efficiency still grows with rows: the nodes are as dense as keeps those bends within the bound of
tests/test_serve_steptime.py, and a run prices a few hundred nodes. Past the last node it
extrapolates from the last two.

The step also jumps at some batch sizes: an engine's all-reduce switching algorithm at a message
size (rows x hidden), its CUDA graphs ending at a capture size. Interpolating across a jump would
spread it over the interval, so the table finds them (find_jumps) when it is built: on the decode
line, a jump's two sides become dec nodes; with a chunk the rows are dec + T, a diagonal of the
(dec, T) grid, so the jumps of one chunk alone are taken out of every node's seconds and added back
at the iteration's own rows.

Each chunk after the first is an attention op of its own (sim.schedule.builder.Builder._mix_parts:
its kernels and launches, the step's logits one row more) that one chunk of the same work lacks: the
table adds, per extra chunk, what the step model charges for splitting a chunk of the mean pair's
size 2T/chunks in two (`extra_s`: two chunks against the one chunk of their work, at the node's
decodes), interpolated over (dec, that size). tests/test_serve_steptime.py bounds the error against
the exact step of real mixed batches.
"""
from __future__ import annotations

import bisect
from typing import Callable

from tpsim.sim.stack.spec import Step

# decode-only iterations
DEC_NODES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256,
             320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096)
LEN_NODES = (1, 16, 64, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
             98304, 131072, 196608, 262144, 524288, 1048576)
# iterations with a prefill chunk (dec 0: no decodes)
CHUNK_DEC_NODES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
CHUNK_LEN_NODES = (1, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
TOKEN_NODES = (1, 2, 16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536, 2048, 2560,
               3072, 4096, 5120, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536)
START_NODES = (0, 1024, 4096, 16384, 65536, 262144, 1048576)
JUMP_TOL = 0.003        # one token more moving the step by more than this fraction: a jump (find_jumps)
JUMP_PROBES = 160       # the most exact steps one line's search for jumps spends
JUMP_FROM = 16          # the chunk line's jumps are searched from 16 tokens (below: a 1-token chunk is a
                        # decode step, Step.mixed, a jump in T, not in rows; the nodes hold it)


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


def find_jumps(f: Callable[[int], float], nodes: tuple[int, ...], tol: float = JUMP_TOL,
               budget: int = JUMP_PROBES) -> tuple[list[tuple[int, float]], dict[int, float]]:
    """([(x, jump)] where f, from x - 1 to x, moves by more than `tol` of its value beyond its slope of the
    step before (f(x - 1) - f(x - 2)), {x: f(x)} of every x probed), over the intervals between `nodes`:
    an interval whose midpoint lies off the chord of its ends by more than `tol` is halved, down to one
    step. A smooth bend stops after a few halvings (the chord's error falls ~4x a halving); a jump keeps
    its half failing down to one step (a jump under ~2 tol may go unfound: its interpolation error is
    under that)."""
    seen: dict[int, float] = {}
    jumps: list[tuple[int, float]] = []

    def val(x: int) -> float:
        if x not in seen:
            seen[x] = f(x)
        return seen[x]

    def halve(a: int, b: int) -> None:
        fa, fb = val(a), val(b)
        if b - a == 1:
            if a - 1 >= nodes[0]:
                jump = fb - fa - (fa - val(a - 1))
                if abs(jump) > tol * fa:
                    jumps.append((b, jump))
            return
        if len(seen) >= budget:
            return
        m = (a + b) // 2
        chord = fa + (fb - fa) * (m - a) / (b - a)
        if abs(val(m) - chord) > tol * chord:
            halve(a, m)
            halve(m, b)

    for a, b in zip(nodes, nodes[1:]):
        halve(a, b)
    return sorted(jumps), seen


class StepTable:
    """Seconds of one iteration of one schedule, interpolated over exact steps (the module doc).
    `step_s(step)` is the exact step model (Simulator.step_time(spec, step)[0]); `causal`: the stack's
    prefill attention computes only the tiles up to the causal diagonal (sim.workload.Workload.causal_prefill)."""

    def __init__(self, step_s: Callable[[Step], float], stack, max_dec: int, max_len: int, max_tokens: int,
                 causal: bool = False):
        self.step_s, self.stack, self.causal = step_s, stack, causal
        self.dec_nodes = _nodes(DEC_NODES, max(max_dec, 1))
        self.len_nodes = _nodes(LEN_NODES, max(max_len, 2))         # at least two: an interval
        self.cdec_nodes = _nodes(CHUNK_DEC_NODES, max(max_dec, 1))
        self.clen_nodes = _nodes(CHUNK_LEN_NODES, max(max_len, 2))
        self.token_nodes = _nodes(TOKEN_NODES, max(max_tokens, 1))
        self.start_nodes = _nodes(START_NODES, max(max_len, 1))
        # (i, j) decode-only -> seconds; (i, j, k, m) with a chunk -> seconds less the rows' jumps (rows_jump_s)
        self.memo: dict[tuple, float] = {}
        self.extra: dict[tuple, float] = {}      # (i, k) -> seconds of a chunk after the first (extra_s)
        self._decs: dict[int, tuple] = {}       # dec -> its bracket (a batch keeps its size for many iterations)
        self._j = 0                             # the L interval of the last decode-only iteration
        self.probes = 0                         # exact steps the search for jumps priced off the nodes
        self._find_jumps(max_dec, max_tokens)

    def _find_jumps(self, max_dec: int, max_tokens: int) -> None:
        """The step jumps at some batch sizes (an engine's collective switching algorithm at a message size,
        its CUDA graphs ending at a capture size): interpolating across one would spread it over the
        interval. Decode-only: a jump's two sides become dec nodes (searched at L = 1024). With a chunk the
        rows are dec + T, off the (dec, T) grid: the jumps of a chunk alone (from JUMP_FROM tokens up to
        max_dec + max_tokens rows) are taken out of every node's seconds and added back at the iteration's
        rows (rows_jump_s), so only the smooth rest is interpolated."""
        length = min(1024, self.len_nodes[-1])
        jumps, seen = find_jumps(lambda d: self.exact(d, length, 0, 0), self.dec_nodes)
        self.dec_nodes = tuple(sorted(set(self.dec_nodes) | {x for b, _ in jumps for x in (b - 1, b)}))
        j = self.len_nodes.index(length)
        self.memo.update({(i, j): seen[d] for i, d in enumerate(self.dec_nodes) if d in seen})
        self.probes += sum(1 for d in seen if d not in self.dec_nodes)
        rows = _nodes(tuple(x for x in TOKEN_NODES if x >= JUMP_FROM), max(max_tokens + max_dec, JUMP_FROM + 1))
        jumps, seen = find_jumps(lambda r: self.exact(0, 1, r, 0), rows)
        self.jump_rows = tuple(b for b, _ in jumps)
        self.jump_sums = tuple(sum(d for _, d in jumps[:n]) for n in range(len(jumps) + 1))
        self.memo.update({(0, 0, k, 0): seen[x] - self.rows_jump_s(x) for k, x in enumerate(self.token_nodes)
                          if x in seen})
        self.probes += sum(1 for x in seen if x not in self.token_nodes)

    def rows_jump_s(self, rows: float) -> float:
        """The chunk line's jumps at or below `rows` tokens, summed (seconds)."""
        return self.jump_sums[bisect.bisect_right(self.jump_rows, rows)]

    @property
    def evaluated(self) -> int:
        """Exact steps priced so far (nodes visited, an extra-chunk term's two, the search's probes)."""
        return len(self.memo) + 2 * len(self.extra) + self.probes

    def start(self, tokens: int, area: float, sq: float) -> float:
        """C of `tokens` prefill tokens in chunks of sum(q x (s + q)) = `area` and sum(q^2) = `sq` (the
        module doc): where one chunk of `tokens` would start to do their attention work."""
        if self.causal:
            return (area - sq / 2) / tokens - tokens / 2
        return area / tokens - tokens

    def exact(self, dec: int, length: int, tokens: int, start: int) -> float:
        """The step model's seconds for `dec` decodes at KV length `length` and one chunk of `tokens`
        tokens starting at `start`."""
        groups = ([(dec, 1, length)] if dec else []) + ([(1, tokens, start + tokens)] if tokens else [])
        return self.step_s(Step.mixed(groups, self.stack))

    def mixed(self, dec: int, kv: int, tokens: int, area: int, sq: int | None = None) -> float:
        """The exact step at an iteration's four numbers (rounded to whole tokens; one chunk): what
        the table interpolates, for tests."""
        c = round(self.start(tokens, area, tokens * tokens if sq is None else sq)) if tokens else 0
        return self.exact(dec, round(kv / dec) if dec else 1, tokens, c)

    def extra_s(self, i: int, k: int) -> float:
        """Seconds a chunk after the first adds at dec node i: two chunks of q = T_k / 2 tokens (two
        requests at start q) against the one chunk of 2q tokens doing their attention work (at start
        q / 2 under the causal mask, 0 without), the decodes at KV length 1024."""
        key = (i, k)
        t = self.extra.get(key)
        if t is None:
            q, dec = max(1, self.token_nodes[k] // 2), self.cdec_nodes[i]
            decodes = [(dec, 1, 1024)] if dec else []
            two = self.step_s(Step.mixed(decodes + [(2, q, 2 * q)], self.stack))
            one = self.exact(dec, 1024, 2 * q, round(self.start(2 * q, 2 * q * 2 * q, 2 * q * q)))
            t = self.extra[key] = two - one
        return t

    def _node(self, key: tuple) -> float:
        if len(key) == 2:
            t = self.exact(self.dec_nodes[key[0]], self.len_nodes[key[1]], 0, 0)
        else:
            i, j, k, m = key
            dec, tokens = self.cdec_nodes[i], self.token_nodes[k]
            t = self.exact(dec, self.clen_nodes[j], tokens, self.start_nodes[m]) - self.rows_jump_s(dec + tokens)
        self.memo[key] = t
        return t

    def __call__(self, dec: int, kv: int, tokens: int, area: int, chunks: int = 1, sq: int | None = None) -> float:
        """Seconds of an iteration of `dec` decodes reading `kv` keys in all and `chunks` prefill chunks of
        `tokens` tokens, sum(q x (s + q)) = `area` and sum(q^2) = `sq` (one chunk: tokens^2)."""
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
        cs = _bracket(self.start_nodes, self.start(tokens, area, tokens * tokens if sq is None else sq))
        for i, wi in ds:
            for j, wj in (ls if self.cdec_nodes[i] else ((0, 1.0),)):     # no decodes: no L
                for k, wk in ts:
                    w = wi * wj * wk
                    for m, wm in cs:
                        key = (i, j, k, m)
                        v = memo.get(key)
                        t += w * wm * (v if v is not None else self._node(key))
        t += self.rows_jump_s(dec + tokens)
        if chunks > 1:                          # the extra chunks' own ops, at the mean pair's size
            ks = _bracket(self.token_nodes, 2 * tokens / chunks)
            t += (chunks - 1) * sum(wi * wk * self.extra_s(i, k) for i, wi in ds for k, wk in ks)
        return t
