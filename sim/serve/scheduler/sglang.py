"""SGLang's scheduler (python/sglang/srt/managers/scheduler.py get_next_batch_to_run, schedule_policy.py
PrefillAdder, schedule_batch.py retract_decode; v0.5.9), one iteration:

  Prefill first: if a request is mid-prefill (the one chunked_req) or requests wait and the batch is
  not full, build an EXTEND batch (get_new_batch_prefill) and run it alone -- the decoding requests
  wait this iteration (enable_mixed_chunk False by default, server_args.py).
    rem_total = free KV slots - sum over decoding requests of min(max_new - generated, 4096) x r
                (the new_token_ratio r reserves future decode KV: CLIP_MAX_NEW_TOKENS_ESTIMATION 4096)
    rem_input = max_prefill_tokens (16384), rem_chunk = chunked_prefill_size
    the chunked request first: its next min(rest, rem_chunk, rem_total) tokens (add_chunked_req; all
    of rem_chunk when rem_total <= 0);
    then the queue in order (fcfs): stop when the running count would pass max_running_requests or
    when prompt + min(max_new, 4096) >= rem_total (NO_TOKEN: the batch is full until a request
    leaves); a prompt that fits rem_chunk goes whole (reserving its output), a longer one is cut to
    rem_chunk and becomes the chunked request (no output reserved until its last chunk).
  Else a DECODE of every running request, one token each (page_size 1: one KV slot each). If the
  free slots do not cover it (check_decode_mem), retract: order by (tokens generated, -prompt)
  descending and pop from the end (fewest generated, then longest prompt) at least one and until the
  free slots cover SGLANG_RETRACT_DECODE_STEPS (20) decode steps of the rest; retracted requests lose
  their KV and rejoin the queue's tail; r = min(1, (sum generated + 20 x remaining) / sum max_new).
  Otherwise r decays by (0.7 - 0.098) / 600 per decode iteration down to 0.098 (environ.py
  SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
  SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600; scheduler.py init_new_token_ratio).

The radix prefix cache (on by default) is not modelled beyond its effect on free slots: a finished
request's KV stays in the tree as evictable, which SGLang counts as available (rem_total adds the
evictable size), so it is freed here; random-token prompts never hit it.
"""
from __future__ import annotations

from tpsim.sim.serve.engine import DECODE, Batch, Engine

CLIP = 4096                 # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
RETRACT_STEPS = 20          # SGLANG_RETRACT_DECODE_STEPS
RATIO_INIT = 0.7            # SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness 1.0
RATIO_MIN = RATIO_INIT * 0.14
RATIO_DECAY = (RATIO_INIT - RATIO_MIN) / 600


class SGLang:
    """SGLang's prefill-first loop over one engine's state (KV counted in token slots, page_size 1)."""

    name = "sglang"
    block = 1

    def __init__(self, chunk: int, max_prefill: int, max_running: int):
        self.chunk, self.max_prefill, self.max_running = chunk, max_prefill, max_running
        self.ratio = RATIO_INIT
        self.full = False               # running_batch.batch_is_full: no admission until a request leaves
        self.chunked = None             # the request mid-prefill

    def held(self, e: Engine, r) -> int:
        return e.computed(r)

    def finished(self, e: Engine, r) -> None:
        self.full = False

    def schedule(self, e: Engine) -> Batch:
        b = Batch()
        if self.chunked is not None or (e.waiting and not self.full):
            self._extend(e, b)
            if b.chunks:
                return b
        if not e.n_dec:
            return b
        if e.free < e.n_dec:
            self._retract(e)
        else:
            self.ratio = max(self.ratio - RATIO_DECAY, RATIO_MIN)
        e.free -= e.n_dec
        b.dec, b.kv = e.n_dec, e.kv_sum + e.n_dec
        return b

    def _reserve(self, e: Engine) -> float:
        """sum over decoding requests of min(max_new - generated, CLIP): each request's remaining output."""
        return sum(min(r.output - e.generated(r), CLIP) for r in e.running.values() if r.state == DECODE)

    def _extend(self, e: Engine, b: Batch) -> None:
        rem_total = e.free - self._reserve(e) * self.ratio
        rem_input, rem_chunk = self.max_prefill, self.chunk
        r = self.chunked
        if r is not None:
            # add_chunked_req: min(rem_chunk, rem_total), or rem_chunk when that is <= 0 (the chunked
            # request must go on); capped here by the free slots, where SGLang's allocator would fail
            rem = min(rem_chunk, int(rem_total))
            n = min(r.tokens - r.computed, rem if rem > 0 else rem_chunk, e.free)
            if n > 0:
                b.add(r, n, r.computed)
                e.free -= n
                r.computed += n
                rem_input -= n
                rem_chunk -= n
                rem_total -= n
                if r.computed == r.tokens:      # its last chunk: now its output is reserved
                    self.chunked = None
                    rem_total -= min(r.output - r.generated, CLIP)
        while e.waiting and rem_input > 0 and rem_chunk > 0 and self.chunked is None:
            if len(e.running) >= self.max_running:
                self.full = True
                break
            r = e.waiting[0]
            total = r.tokens + min(r.output - r.generated, CLIP)
            if total >= rem_total:
                self.full = True            # NO_TOKEN
                break
            if r.tokens >= rem_input and b.chunks:
                break
            e.waiting.popleft()
            e.admit(r)
            n = min(r.tokens, rem_chunk)
            b.add(r, n, 0)
            e.free -= n
            r.computed = n
            rem_input -= n
            rem_chunk -= n
            if n < r.tokens:
                self.chunked = r            # the one request mid-prefill
                break
            rem_total -= total

    def _retract(self, e: Engine) -> None:
        decoding = sorted((r for r in e.running.values() if r.state == DECODE),
                          key=lambda r: (e.generated(r), -r.prompt), reverse=True)
        first = True
        while len(decoding) > 1 and (first or e.free < RETRACT_STEPS * len(decoding)):
            first = False
            e.preempt(decoding.pop(), front=False)
        self.full = False
        gen = sum(e.generated(r) for r in decoding)
        self.ratio = min(1.0, (gen + RETRACT_STEPS * len(decoding)) / max(sum(r.output for r in decoding), 1))
