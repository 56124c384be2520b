"""TensorRT-LLM's in-flight batching, PyTorch backend (tensorrt_llm/_torch/pyexecutor/scheduler.py
SimpleScheduler: the capacity scheduler, then the micro-batch scheduler; the C++ they bind,
cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp GuaranteedNoEvictScheduler and
microBatchScheduler.cpp MicroBatchScheduler::operator(), is authoritative), one iteration:

  CAPACITY (GUARANTEED_NO_EVICT, the default capacity_scheduler_policy): every request in generation
  keeps running (never evicted); then the waiting requests in order (FCFS) while the KV blocks of their
  whole lifetime (prompt + max_new_tokens) fit beside what the running ones still need to completion
  -- with each running request's lifetime reserved, that is: lifetime <= total - sum of the running
  lifetimes -- stopping at the first that does not (no later request jumps ahead).
  MICRO-BATCH: generation requests one token each; each context request its whole prompt (context
  chunking is off: enable_chunked_prefill False), stopping at the first that would pass max_num_tokens;
  at most max_batch_size requests.

So TensorRT-LLM never preempts, and admits by the whole output each request will generate: a trace's
output length is its max_tokens, as a benchmark replaying it sets (and the overlap scheduler, on by
default, is priced as a host lane that hides the host's work, not as a one-iteration lag).
"""
from __future__ import annotations

from tpsim.sim.serve.engine import Batch, Engine


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TrtLlm:
    """TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler and micro-batch scheduler over one engine."""

    name = "trtllm"
    block = 1              # no per-token allocation to track: each request reserves its lifetime's blocks

    def __init__(self, max_tokens: int, max_batch: int, block_tokens: int):
        self.max_tokens, self.max_batch, self.block_tokens = max_tokens, max_batch, block_tokens

    def lifetime(self, r) -> int:
        return cdiv(r.prompt + r.output, self.block_tokens)

    def held(self, e: Engine, r) -> int:
        return self.lifetime(r)

    def finished(self, e: Engine, r) -> None:
        pass

    def schedule(self, e: Engine) -> Batch:
        b = Batch(e.n_dec, e.kv_sum + e.n_dec if e.n_dec else 0)
        tokens, count = e.n_dec, e.n_dec
        while e.waiting and count < self.max_batch:
            r = e.waiting[0]
            need = self.lifetime(r)
            if need > e.free or tokens + r.prompt > self.max_tokens:
                break
            e.waiting.popleft()
            e.admit(r)
            e.free -= need
            b.add(r, r.prompt, 0)
            r.computed = r.prompt
            tokens += r.prompt
            count += 1
        return b
