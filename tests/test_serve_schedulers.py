"""The serving engines' schedulers on toy integer step times, every interval written out by hand
(sim/serve/scheduler/: vLLM V1, SGLang, TensorRT-LLM; sim/serve/engine.py; issue 46)."""
import dataclasses

import numpy as np
import pytest

from tpsim.sim.serve.cluster import simulate
from tpsim.sim.serve.metrics import summarize
from tpsim.sim.serve.scheduler import Setup
from tpsim.sim.serve.traffic import Traffic


def setup(engine="vllm", budget=100, max_seqs=100, block=1, slots=1000, max_len=10_000, max_prefill=0):
    return Setup(engine, budget, max_seqs, block, slots, slots, 1, max_len, "round-robin", max_prefill=max_prefill)


def serve(s, reqs, price, replicas=1, router=None):
    """reqs: (arrival_s, prompt, output) -> the run's requests by id, and the run."""
    a, p, o = (np.array(x) for x in zip(*reqs))
    run = simulate(Traffic(a.astype(float), p, o), s, price, replicas, router, record=True)
    return {r.rid: r for r in run.requests}, run


def times(r):
    return (r.first_s - r.arrival_s, r.done_s - r.arrival_s)


def per_4_prefill_tokens(dec, kv, tokens, area, chunks, sq):
    """1 s per iteration + 1 s per 4 prefill tokens (decodes free)."""
    return 1 + tokens // 4


def test_vllm_queueing_on_integer_steps():
    """A (t 0, prompt 8, out 3), B (t 0.5, prompt 4, out 2), C (t 10, prompt 4, out 1):
      [0, 3]   A's prompt (8 tokens: 1 + 2 s)             -> A token 1 at 3       (TTFT 3)
      [3, 5]   A decodes + B's prompt (4: 1 + 1 s)          -> A token 2, B token 1 at 5 (B TTFT 4.5)
      [5, 6]   A, B decode                                  -> A token 3 (done), B token 2 (done) at 6
      idle     6 .. 10
      [10, 12] C's prompt                                   -> C's only token at 12 (TTFT = E2E = 2)
    TPOT: A (6 - 3) / 2 = 1.5, B (6 - 5) / 1 = 1; ITL gaps: A 2 and 1, B 1."""
    by, run = serve(setup(), [(0, 8, 3), (0.5, 4, 2), (10, 4, 1)], per_4_prefill_tokens)
    assert [times(by[i]) for i in range(3)] == [(3, 6), (4.5, 5.5), (2, 2)]
    s = summarize(run)
    assert s.tpot.tolist() == [1.5, 1.0]
    assert sorted(g for g, n in run.engines[0].itl for _ in range(n)) == [1, 1, 2]
    assert s.iterations == 4 and s.duration_s == 12
    assert s.pct["ttft"][50] == 3 and s.pct["e2e"][99] == pytest.approx(5.5 + 0.98 * 0.5)


def test_vllm_chunked_prefill_under_the_token_budget():
    """Budget 4 tokens an iteration. A (t 0, prompt 10, out 2), B (t 0, prompt 2, out 2):
      [0, 2]  A's tokens 0..3 (budget spent: B waits)                  1 + 4/4 s
      [2, 4]  A's tokens 4..7 (A runs first, takes all 4)
      [4, 6]  A's last 2 tokens + B's 2 (the budget left)             -> A and B token 1 at 6
      [6, 7]  A, B decode                                              -> both done at 7
    No partial chunk emits a token: A's TTFT is 6, not 2."""
    by, run = serve(setup(budget=4, max_seqs=4), [(0, 10, 2), (0, 2, 2)], per_4_prefill_tokens)
    assert [times(by[i]) for i in range(2)] == [(6, 7), (6, 7)]
    assert [(st, en, dec, tok) for st, en, dec, tok, *_ in run.engines[0].steps] == \
        [(0, 2, 0, 4), (2, 4, 0, 4), (4, 6, 0, 4), (6, 7, 2, 0)]


def test_vllm_decodes_ahead_of_a_partial_prefill_take_budget_first():
    """Budget 4. D (t 0, prompt 1, out 4) decodes when A (t 0.5, prompt 9, out 2) arrives; running
    requests go first in admission order, so D's decode takes 1 token and A's chunks 3:
      [0, 1]  D's prompt (1 token: 1 + 1 // 4 s)           -> D token 1 at 1
      [1, 2]  D decodes (1) + A's tokens 0..2 (3)          -> D token 2
      [2, 3]  D (1) + A 3..5 (3)                           -> D token 3
      [3, 4]  D (1) + A 6..8 (3)                           -> D token 4 (done), A token 1 at 4
      [4, 5]  A decodes                                    -> A done at 5 (TTFT 3.5, E2E 4.5)"""
    by, run = serve(setup(budget=4, max_seqs=4), [(0, 1, 4), (0.5, 9, 2)], per_4_prefill_tokens)
    assert times(by[0]) == (1, 4) and times(by[1]) == (3.5, 4.5)
    assert [(dec, tok) for _, _, dec, tok, *_ in run.engines[0].steps] == [(0, 1), (1, 3), (1, 3), (1, 3), (1, 0)]


def test_vllm_preempts_the_last_admitted_and_recomputes_it():
    """KV blocks of 2 tokens, 4 blocks in all; 1 s an iteration. A and B (t 0, prompt 3, out 4):
      [0, 1]  A's prompt (2 blocks), B's prompt (2 blocks): free 0  -> tokens 1 at 1
      [1, 2]  A, B decode token 3 into their second block           -> tokens 2 at 2
      [2, 3]  both need a third block for token 4, none free: B (last admitted) is preempted, its 2
              blocks freed; A takes one                             -> A token 3 at 3
      [3, 4]  A decodes (token 5 in its third block); B's recompute needs 3 blocks, 1 free: waits
                                                                    -> A token 4 at 4: done, 3 blocks freed
      [4, 5]  B recomputes prompt + 2 outputs (5 tokens, 3 blocks)  -> B token 3 at 5 (a 3 s gap)
      [5, 6]  B decodes                                             -> B token 4 at 6: done"""
    by, run = serve(setup(block=2, slots=4), [(0, 3, 4), (0, 3, 4)], lambda *a: 1)
    a, b = by[0], by[1]
    assert times(a) == (1, 4) and times(b) == (1, 6)
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert [tok for _, _, _, tok, *_ in run.engines[0].steps] == [6, 0, 0, 0, 5, 0]
    assert sorted(g for g, n in run.engines[0].itl for _ in range(n)) == [1, 1, 1, 1, 1, 3]
    assert [p for _, p in b.events] == ["queued", "prefill", "decode", "preempted", "prefill", "decode", "done"]


def test_sglang_runs_prefill_first_and_decodes_wait():
    """SGLang's prefill-first loop (no mixed batches). A (t 0, prompt 4, out 3), B (t 1.5, prompt 4, out 2):
      [0, 2]  EXTEND A                                   -> A token 1 at 2
      [2, 4]  EXTEND B (B waits in the queue: prefill goes first; A's decode waits)  -> B token 1 at 4
      [4, 5]  DECODE A, B                                 -> A token 2 (a 3 s gap), B token 2: done
      [5, 6]  DECODE A                                    -> A done at 6
    vLLM would have run A's decode beside B's prompt at [2, 4]."""
    s = setup("sglang", budget=100, max_seqs=100, block=1, slots=1000, max_prefill=100)
    by, run = serve(s, [(0, 4, 3), (1.5, 4, 2)], per_4_prefill_tokens)
    assert times(by[0]) == (2, 6) and times(by[1]) == (2.5, 3.5)
    assert sorted(g for g, n in run.engines[0].itl for _ in range(n)) == [1, 1, 3]
    by_v, _ = serve(setup(), [(0, 4, 3), (1.5, 4, 2)], per_4_prefill_tokens)
    assert times(by_v[0]) == (2, 5)                  # [2, 4] A decodes with B's prompt, [4, 5] again


def test_sglang_chunks_one_request_at_a_time():
    """chunked_prefill_size 4: A (t 0, prompt 6, out 2) is cut into 4 + 2 and becomes the chunked
    request, so B (t 0, prompt 2, out 2) waits behind it, then fits beside A's last 2 tokens:
      [0, 2]  EXTEND A 0..3                                 (1 + 4 // 4 s)
      [2, 4]  EXTEND A 4..5 and B 0..1 (4 tokens)          -> A and B token 1 at 4
      [4, 5]  DECODE A, B                                   -> both done at 5"""
    s = setup("sglang", budget=4, max_seqs=100, block=1, slots=1000, max_prefill=16)
    by, run = serve(s, [(0, 6, 2), (0, 2, 2)], per_4_prefill_tokens)
    assert [(st, en, tok) for st, en, _, tok, *_ in run.engines[0].steps] == [(0, 2, 4), (2, 4, 4), (4, 5, 0)]
    assert times(by[0]) == (4, 5) and times(by[1]) == (4, 5)


def test_sglang_admits_against_the_new_token_ratio_then_retracts():
    """21 token slots, 1 s an iteration. A (t 0) and B (t 0.5), prompt 2, out 10 each:
      [0, 1]   EXTEND A: 2 + 10 < 21                                   free 19 -> A token 1
      [1, 2]   EXTEND B: A's 9 remaining outputs are reserved at ratio 0.7 only: 19 - 6.3 = 12.7 > 2 + 10
                                                                       free 17 -> B token 1
      [2, 10]  8 DECODEs of A and B, 2 slots each                      free 1  -> tokens 9 at 10
      [10, 11] DECODE needs 2 slots, 1 free: retract. Both have 9 outputs and prompt 2: the sort keeps
               running order and the last, B, goes (its 10 slots freed, to the queue's tail); A decodes
                                                                       -> A token 10 at 11: done
      [11, 12] EXTEND B: prompt + 9 outputs recomputed (11 tokens)     -> B token 10 at 12: done
    B's last gap is 12 - 10 = 2 s."""
    s = setup("sglang", budget=100, max_seqs=100, block=1, slots=21, max_prefill=100)
    by, run = serve(s, [(0, 2, 10), (0.5, 2, 10)], lambda *a: 1)
    a, b = by[0], by[1]
    assert times(a) == (1, 11) and times(b) == (1.5, 11.5)
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert [(st, dec, tok) for st, _, dec, tok, *_ in run.engines[0].steps][-3:] == [(9, 2, 0), (10, 1, 0), (11, 0, 11)]
    assert max(g for g, _ in run.engines[0].itl) == 2
    assert run.engines[0].sched.ratio == 1.0          # min(1, (9 + 20 x 1) / 10) after the retraction


def test_trtllm_admits_by_the_whole_lifetime_and_never_preempts():
    """Blocks of 1 token, 20 in all; 1 s an iteration. A and B (t 0, prompt 4, out 8): each reserves
    4 + 8 = 12 blocks at admission, so B waits until A has finished, though A never holds more than
    11 tokens of KV:
      [0, 1]  A's prompt                    -> A token 1 at 1
      [1, 8]  A decodes (7 iterations)      -> A done at 8, its 12 blocks back
      [8, 9]  B's prompt; [9, 16] B decodes -> B done at 16"""
    s = setup("trtllm", budget=100, max_seqs=100, block=1, slots=20)
    by, run = serve(s, [(0, 4, 8), (0, 4, 8)], lambda *a: 1)
    assert times(by[0]) == (1, 8) and times(by[1]) == (9, 16)
    assert run.engines[0].preempted == 0


def test_trtllm_contexts_stop_at_the_token_budget():
    """max_num_tokens 6: A and B (t 0, prompt 4, out 2) cannot share an iteration's context (4 + 4 > 6):
      [0, 2]  A's prompt (1 + 1 s)           -> A token 1 at 2
      [2, 4]  A decodes (1 token) + B's prompt (4): 5 <= 6 -> A done, B token 1 at 4
      [4, 5]  B decodes                      -> B done at 5"""
    s = setup("trtllm", budget=6, max_seqs=100, block=1, slots=100)
    by, _ = serve(s, [(0, 4, 2), (0, 4, 2)], per_4_prefill_tokens)
    assert times(by[0]) == (2, 4) and times(by[1]) == (4, 5)


def test_replicas_behind_the_routers():
    """Two replicas, 1 s an iteration; four requests (prompt 1, out 2) at t 0, 0.1, 0.2, 0.3.
    round-robin: 0 and 2 to replica 0, 1 and 3 to replica 1. least-loaded (waiting x 4 + running):
    request 0 -> replica 0 (tie: lowest index); 1 -> replica 1 (0 has 1 running); 2 -> replica 0?
    both have one running: tie -> 0; 3 -> replica 1."""
    for router in ("round-robin", "least-loaded"):
        by, run = serve(setup(), [(0, 1, 2), (0.1, 1, 2), (0.2, 1, 2), (0.3, 1, 2)], lambda *a: 1, 2, router)
        assert sorted(r.rid for r in run.engines[0].done) == [0, 2]
        assert sorted(r.rid for r in run.engines[1].done) == [1, 3]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_bookkeeping_holds_on_random_traffic(engine):
    """Random requests on a small KV cache and token budget (preemptions, skipped decodes, chunks):
    every request ends with all its tokens, every KV slot comes back, each of a request's output
    tokens after the first is one ITL gap, and no iteration holds more KV than the cache."""
    rng = np.random.default_rng(3)
    n = 120
    reqs = list(zip(np.sort(rng.uniform(0, 30, n)).tolist(), rng.integers(1, 40, n).tolist(),
                    rng.integers(1, 30, n).tolist()))
    kw = {"vllm": dict(budget=24, max_seqs=12, block=4, slots=40),
          "sglang": dict(budget=24, max_seqs=12, block=1, slots=160, max_prefill=48),
          "trtllm": dict(budget=48, max_seqs=12, block=1, slots=160)}[engine]
    by, run = serve(setup(engine, **kw), reqs, lambda dec, kv, tok, area, ch, sq: 0.05 + 0.01 * dec + 0.002 * tok)
    e = run.engines[0]
    assert all(r.generated == r.output and r.done_s >= r.first_s >= r.arrival_s for r in by.values())
    assert e.free == e.total and not e.running and not e.waiting and e.n_dec == 0 and e.kv_sum == 0
    assert sum(nn for _, nn in e.itl) == sum(o - 1 for _, _, o in reqs)
    assert min(e.total - kv for *_, kv in e.steps) >= 0
    if engine == "vllm":
        assert e.preempted > 0                      # the cache is small enough to preempt


class Walking(Setup):
    """vLLM's scheduler walking the running list request by request every step (no O(1) path)."""

    def scheduler(self, fast: bool = True):
        return super().scheduler(fast=False)


@pytest.mark.parametrize("budget,block,slots", [(24, 4, 20), (16, 2, 40), (64, 16, 6)])
def test_vllm_fast_path_is_the_walk(budget, block, slots):
    """The O(1) step (decodes, then a trailing partial prefill) and the request-by-request walk give the
    same run on random traffic with preemptions and chunks: every request's times, every iteration."""
    rng = np.random.default_rng(budget)
    n = 150
    reqs = list(zip(np.sort(rng.uniform(0, 20, n)).tolist(), rng.integers(1, 40, n).tolist(),
                    rng.integers(1, 30, n).tolist()))        # at most 70 tokens: any request fits alone
    price = lambda dec, kv, tok, area, ch, sq: 0.05 + 0.01 * dec + 0.001 * tok + 1e-6 * kv   # noqa: E731
    s = setup(budget=budget, max_seqs=12, block=block, slots=slots)
    a, ra = serve(s, reqs, price)
    b, rb = serve(Walking(**dataclasses.asdict(s)), reqs, price)
    assert [(r.first_s, r.done_s, r.preemptions) for r in a.values()] == \
        [(r.first_s, r.done_s, r.preemptions) for r in b.values()]
    assert ra.engines[0].steps == rb.engines[0].steps and ra.engines[0].preempted > 0
