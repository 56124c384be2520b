"""One engine instance (a TP group): its requests' state, and the SimPy process that runs its iterations.

Each iteration the engine's scheduler (scheduler/, the stack preset's) picks a batch (`Batch`: decodes
and prefill chunks) from this state and reserves its KV; the iteration lasts what the step model prices
for that batch (`price`); at its end every sequence whose tokens are all computed emits one token
(vLLM V1 gpu_model_runner.py discards the samples of partial prefill chunks, so a prompt's first token
comes from the iteration that completes it), and a request that emitted its last token leaves, freeing
its KV. No iteration waits for anything but the previous one (no async scheduling: vLLM's default,
vllm/config/scheduler.py async_scheduling = False; SGLang's and TensorRT-LLM's overlap schedulers hide
their host time in the stack's host lane, sim/stack/host_lane.py, but are scheduled here on the current
state, not one iteration behind).

Decoding requests are kept as a cohort on the engine's `clock` (the decode iterations run so far):
every decode iteration advances all of them by one token, so a request's tokens are derived from the
clock (Request.base) and the engine touches a request only when it joins, is skipped, preempted or
finishes -- an hour of traffic is hundreds of thousands of iterations, each O(1) plus its events.
`bucket[k]` counts the decoding requests whose computed tokens are k past a multiple of the KV block
(modulo the clock), which is how many of them need a new block at this iteration (a request holding
ceil(c / B) blocks needs one more for token c exactly when c % B == 0: vLLM's allocate_slots).
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Callable

from tpsim.sim.serve.traffic import Request

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class Batch:
    """One iteration: `dec` decoding requests reading `kv` keys in all (their contexts + the new
    token), and prefill `chunks` (request, tokens, start: the tokens it had computed before), which
    add up to `tokens` tokens, an attention `area` of sum(tokens x keys) (keys = start + tokens:
    the chunk's own and everything before it) and `sq` = sum(tokens^2) (a causal kernel's diagonal)."""

    __slots__ = ("dec", "kv", "chunks", "tokens", "area", "sq")

    def __init__(self, dec: int = 0, kv: int = 0):
        self.dec, self.kv, self.chunks, self.tokens, self.area, self.sq = dec, kv, [], 0, 0, 0

    def add(self, r: Request, n: int, start: int) -> None:
        """A prefill chunk of `n` tokens of `r` from token `start`."""
        self.chunks.append((r, n, start))
        self.tokens += n
        self.area += n * (start + n)
        self.sq += n * n


Price = Callable[[int, int, int, int, int, int], float]  # (dec, kv, prefill tokens, area, chunks, sq) -> seconds


class Engine:
    """One replica: waiting queue, running requests in admission order, the decoding cohort, the KV
    pool (`free` of `total` blocks or slots, as the scheduler counts them) and what it records."""

    def __init__(self, env, index: int, scheduler, price: Price, total: int, block: int, record: bool = False):
        self.env, self.index, self.sched, self.price = env, index, scheduler, price
        self.total = self.free = total
        self.block = block
        self.record = record                    # keep each request's phase changes (the Perfetto trace)
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}   # rid -> request, in admission order
        self.prefilling: dict[int, Request] = {}    # running requests whose tokens are not all computed
        self.n_dec = 0                          # decoding requests
        self.kv_sum = 0                         # their computed tokens, summed
        self.bucket = [0] * block
        self.heap: list = []                    # (clock at which it finishes, order, ver, request)
        self.clock = 0                          # decode iterations so far
        self.emit_s = 0.0                       # when the cohort last emitted a token
        self.loners: list[Request] = []         # decoding requests whose last token was not the cohort's
        self.admitted = 0
        self.wake = None                        # the event an idle engine waits on
        self.done: list[Request] = []
        self.itl: list[tuple[float, int]] = []  # (gap seconds, how many requests had it): ITL pooled
        self.iterations = self.preempted = 0
        self.busy_s = 0.0
        self.steps: list | None = [] if record else None   # (start, end, dec, prefill tokens, running, waiting)
        self.listeners: list[Callable[[Request], None]] = []   # told of each finished request

    # -- what the router and the schedulers read

    def load(self) -> tuple[int, int]:
        """(waiting, running): what vLLM's data-parallel balancer scores (cluster.py)."""
        return len(self.waiting), len(self.running)

    def computed(self, r: Request) -> int:
        """Tokens whose KV `r` holds (a decoding request's follow the clock)."""
        return r.prompt + r.base + self.clock - 1 if r.state == DECODE else r.computed

    def generated(self, r: Request) -> int:
        return r.base + self.clock if r.state == DECODE else r.generated

    def crossing(self) -> int:
        """Decoding requests that need a new KV block for this iteration's token."""
        return self.bucket[-self.clock % self.block] if self.n_dec else 0

    def crosses(self, r: Request) -> bool:
        return r.state == DECODE and (r.key + self.clock) % self.block == 0

    # -- state changes the schedulers make

    def submit(self, r: Request) -> None:
        """A request arrives (the router chose this engine)."""
        r.mark(self.env.now, "queued")
        self.waiting.append(r)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def admit(self, r: Request) -> None:
        """The head of the queue starts running (its first chunk is scheduled this iteration)."""
        self.admitted += 1
        r.order, r.state = self.admitted, PREFILL
        self.running[r.rid] = r
        self.prefilling[r.rid] = r
        r.mark(self.env.now, "prefill")

    def preempt(self, r: Request, front: bool = True) -> None:
        """Stop `r` and free its KV; it recomputes prompt + output so far when it runs again (vLLM V1
        _preempt_request: num_computed_tokens = 0, back to the head of the queue; SGLang's retraction
        appends it to the tail: front False)."""
        self.free += self.sched.held(self, r)
        if r.state == DECODE and not r.alone:
            r.last_s = self.emit_s              # its last token was the cohort's last
        self._leave(r)
        r.generated, r.computed, r.state = self.generated(r), 0, WAITING
        r.preemptions += 1
        self.preempted += 1
        (self.waiting.appendleft if front else self.waiting.append)(r)
        r.mark(self.env.now, "preempted")

    def _leave(self, r: Request) -> None:
        """Take `r` out of the running set and, when decoding, out of the cohort."""
        del self.running[r.rid]
        if r.state == DECODE:
            r.generated = self.generated(r)
            self.n_dec -= 1
            self.kv_sum -= self.computed(r)
            self.bucket[r.key] -= 1
            r.ver += 1                          # its finish entry goes stale
        else:
            del self.prefilling[r.rid]

    def skip(self, skipped: list[Request]) -> None:
        """Decoding requests left out of this iteration (vLLM's token budget ran out before them):
        they keep their tokens while the clock advances."""
        for r in skipped:
            self.bucket[r.key] -= 1
            r.base -= 1
            r.key = (r.key - 1) % self.block      # key = (prompt + base - 1) mod block (first_token)
            self.bucket[r.key] += 1
            r.ver += 1
            heapq.heappush(self.heap, (r.output - r.base, r.order, r.ver, r))
            if not r.alone:                     # it shared the cohort's last token: now it waits alone
                r.last_s = self.emit_s
                self.loners.append(r)
            r.alone = 2                         # no token this iteration

    # -- the process

    def run(self):
        """The engine's SimPy process: iterations back to back while there is work, idle otherwise."""
        env = self.env
        while True:
            if not self.running and not self.waiting:
                self.wake = env.event()
                yield self.wake
                self.wake = None
            b = self.sched.schedule(self)
            if b is None or (not b.dec and not b.chunks):
                raise RuntimeError(f"engine {self.index}: nothing to run with {len(self.waiting)} waiting "
                                   f"and {len(self.running)} running (a request the KV cache cannot hold)")
            start = env.now
            dt = self.price(b.dec, b.kv, b.tokens, b.area, len(b.chunks), b.sq)
            yield env.timeout(dt)
            self.iterations += 1
            self.busy_s += dt
            self.complete(b)
            if self.steps is not None:
                self.steps.append((start, env.now, b.dec, b.tokens, len(self.running), len(self.waiting),
                                   self.total - self.free))

    def complete(self, b: Batch) -> None:
        """The iteration's tokens: every scheduled decoding request and every completed chunk emits one."""
        now = self.env.now
        if b.dec:
            self.clock += 1
            self.kv_sum += b.dec
            shared = b.dec
            kept = []
            for r in self.loners:               # their gap is their own (joined, or skipped before)
                if r.state != DECODE:
                    continue
                if r.alone == 2:                # skipped this iteration: still waiting for its token
                    r.alone = 1
                    kept.append(r)
                    continue
                self.itl.append((now - r.last_s, 1))
                r.alone = 0                     # from now on it emits with the cohort
                shared -= 1
            self.loners = kept
            if shared > 0:
                self.itl.append((now - self.emit_s, shared))
            self.emit_s = now
            heap = self.heap
            while heap and heap[0][0] <= self.clock:
                _, _, ver, r = heapq.heappop(heap)
                if ver == r.ver and r.state == DECODE:
                    self.finish(r, now)
        for r, _, _ in b.chunks:
            if r.state == PREFILL and r.computed == r.tokens:
                self.first_token(r, now)

    def first_token(self, r: Request, now: float) -> None:
        """`r`'s prompt (or its recompute) is all computed: it emits a token and decodes from now on."""
        del self.prefilling[r.rid]
        if r.first_s < 0:
            r.first_s = now
        else:                                   # resumed after a preemption: the gap since its last token
            self.itl.append((now - r.last_s, 1))
        r.generated += 1
        r.last_s = now
        if r.generated >= r.output:
            del self.running[r.rid]
            self.finish(r, now, decoding=False)
            return
        r.state, r.base = DECODE, r.generated - self.clock
        r.key = (r.prompt + r.base - 1) % self.block
        self.bucket[r.key] += 1
        self.n_dec += 1
        self.kv_sum += self.computed(r)
        r.alone = 1
        self.loners.append(r)
        r.ver += 1
        heapq.heappush(self.heap, (r.output - r.base, r.order, r.ver, r))
        r.mark(now, "decode")

    def finish(self, r: Request, now: float, decoding: bool = True) -> None:
        if decoding:
            self.free += self.sched.held(self, r)
            self._leave(r)
        else:
            self.free += self.sched.held(self, r)
        r.state, r.done_s = DONE, now
        self.sched.finished(self, r)
        r.mark(now, "done")
        self.done.append(r)
        for f in self.listeners:
            f(r)
