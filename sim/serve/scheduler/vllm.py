"""vLLM's V1 scheduler (vllm/v1/core/sched/scheduler.py Scheduler.schedule, v0.11.0; the same loop on
main today), one engine step:

  budget = max_num_batched_tokens
  RUNNING, in admission order, while budget > 0: each asks for the tokens it lacks (a decode 1, a
  partial prefill the rest of its prompt), capped by the budget (chunked prefill is always on in V1:
  vllm/engine/arg_utils.py _set_default_args) and by max_model_len - 1 - computed; its KV blocks are
  allocated (kv_cache_manager.allocate_slots: ceil(tokens / block_size) minus those held); when they
  do not fit, the LAST running request is preempted (FCFS policy: self.running.pop(); _preempt_request:
  blocks freed, num_computed_tokens = 0, prepended to the waiting queue) until they do, or until the
  request preempted itself (then no more running requests are scheduled).
  WAITING, only if nothing was preempted this step, while budget > 0 and running < max_num_seqs: the
  head's tokens (a resumed request: prompt + outputs so far), capped by the budget; if its blocks do not
  fit, stop (admission never preempts).

Prefix caching (on by default) is not modelled: random-token prompts share no blocks. One consequence
stated: a preempted request's recompute is priced in full, where vLLM may still find its own leading
blocks in the cache (kv_cache_manager.free releases a request's blocks tail first).

A partial prefill is always the last running request: it took the whole budget left when it ran
short, so nothing was admitted after it in that step, and it decodes from the step it completes. The
common step -- every running request decoding but that one -- is therefore O(1) on the engine's cohort
(engine.py): the decodes first, one token each, then the partial prefill, preempting from the back (the
prefill, then the last decodes) while the blocks do not fit. `_walk`, the loop above request by request,
prices any other order; tests/test_serve_schedulers.py holds the two to the same runs.
"""
from __future__ import annotations

from tpsim.sim.serve.engine import DECODE, Batch, Engine


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class VllmV1:
    """vLLM V1's scheduling loop over one engine's state."""

    name = "vllm"

    def __init__(self, budget: int, max_seqs: int, block: int, max_len: int, fast: bool = True):
        self.budget, self.max_seqs, self.block, self.max_len = budget, max_seqs, block, max_len
        self.fast = fast                # False: every step walks the running list (the tests' reference)

    def held(self, e: Engine, r) -> int:
        """Blocks a request holds: its computed tokens' (vLLM allocates exactly what it computes)."""
        return cdiv(e.computed(r), self.block)

    def finished(self, e: Engine, r) -> None:
        pass

    def schedule(self, e: Engine) -> Batch:
        b = Batch()
        budget = self.budget
        tail = e.running[next(reversed(e.running))] if e.running else None
        if self.fast and (not e.prefilling or (len(e.prefilling) == 1 and tail.state != DECODE)):
            # every running request decodes, one token each (n_dec <= max_num_seqs <= the budget), but
            # a trailing partial prefill, which then takes what the budget leaves
            prefill = tail if e.prefilling else None
            need = e.crossing()
            preempted = False
            if need > e.free and prefill is not None:
                e.preempt(prefill)                  # the last running request goes first
                prefill, preempted = None, True
            while need > e.free:
                victim = e.running[next(reversed(e.running))]
                need -= e.crosses(victim)
                e.preempt(victim)
                preempted = True
            e.free -= need
            b.dec, b.kv = e.n_dec, e.kv_sum + e.n_dec
            budget -= e.n_dec
            if prefill is not None and budget > 0:
                c = prefill.computed
                n = min(prefill.tokens - c, budget, self.max_len - 1 - c)
                need = cdiv(c + n, self.block) - cdiv(c, self.block)
                if need > e.free:
                    e.preempt(prefill)              # it preempts itself: nothing after it is scheduled
                    preempted = True
                elif n > 0:
                    e.free -= need
                    b.add(prefill, n, c)
                    prefill.computed = c + n
                    budget -= n
        else:
            budget, preempted = self._walk(e, b, budget)
        if not preempted:
            self._admit(e, b, budget)
        return b

    def _walk(self, e: Engine, b: Batch, budget: int) -> tuple[int, bool]:
        """The running requests in order, one by one (a partial prefill is running)."""
        B = self.block
        preempted, scheduled, stop = False, set(), False
        for r in list(e.running.values()):
            if budget <= 0 or stop:
                break
            if r.rid not in e.running:          # preempted from the back earlier in this walk
                continue
            c = e.computed(r)
            if r.state == DECODE:
                n, need = 1, int(c % B == 0)
            else:
                n = min(r.tokens - c, budget, self.max_len - 1 - c)
                if n <= 0:
                    continue
                need = cdiv(c + n, B) - cdiv(c, B)
            while need > e.free:
                victim = e.running[next(reversed(e.running))]
                e.preempt(victim)
                preempted = True
                if victim is r:
                    stop = True
                    break
            if stop:
                break
            e.free -= need
            if r.state == DECODE:
                b.dec += 1
                b.kv += c + 1
                scheduled.add(r.rid)
            else:
                b.add(r, n, c)
                r.computed = c + n
            budget -= n
        skipped = [r for r in e.running.values() if r.state == DECODE and r.rid not in scheduled]
        if skipped:
            e.skip(skipped)
        return budget, preempted

    def _admit(self, e: Engine, b: Batch, budget: int) -> None:
        """Waiting requests, head first, while their first chunk's blocks fit."""
        while e.waiting and budget > 0 and len(e.running) < self.max_seqs:
            r = e.waiting[0]
            n = min(r.tokens, budget)
            need = cdiv(n, self.block)
            if need > e.free:
                break
            e.waiting.popleft()
            e.admit(r)
            e.free -= need
            b.add(r, n, 0)
            r.computed = n
            budget -= n
