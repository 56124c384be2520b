"""The vocab-parallel input embedding in the harness (Stack.embed, `--embed vocab-parallel`): each rank
holds its padded vocab shard of the table (the head's rows), looks its ids up masked, and the
embed.allreduce sums the partial rows. In one process: the shards, the masked kernel, tied
embeddings; on 2 real gloo ranks: logits equal the replicated embedding's, eager and through the
compiled pass's functional collectives, for a vocab TP divides and one it does not."""
import dataclasses
import socket

import pytest

torch = pytest.importorskip("torch")

import tpsim.hw.model as hm  # noqa: E402
from tpsim.hw.kernels import KERNELS, KernelCtx  # noqa: E402
from tpsim.hw.runner import Runner  # noqa: E402
from tpsim.sim.memory import Placement, local_param_shapes  # noqa: E402
from tpsim.sim.model.presets import get_model  # noqa: E402
from tpsim.sim.schedule.language import build  # noqa: E402
from tpsim.sim.stack.spec import Stack, Step  # noqa: E402

pytestmark = pytest.mark.hw
TINY = get_model("tiny")                                  # vocab 256: shards [0, 128), [128, 256) at TP 2
ODD = dataclasses.replace(TINY, name="tiny-v251", vocab=251)   # shards [0, 126), [126, 252): row 251 padding
BATCH, PROMPT, GEN = 2, 6, 3


def _ids(m) -> torch.Tensor:
    """[BATCH, PROMPT + GEN - 1]: an id in each shard and both sides of every shard boundary."""
    s = -(-m.vocab // 2)
    edge = [0, s - 1, s, m.vocab - 1, 1, s + 1]
    rest = torch.randint(0, m.vocab, (BATCH * (PROMPT + GEN - 1) - len(edge),), generator=torch.Generator().manual_seed(3))
    return torch.cat([torch.tensor(edge), rest]).view(BATCH, -1)


def test_each_rank_holds_its_vocab_shard_of_the_embedding():
    full = hm.full_weights(ODD)
    for r in range(2):
        p = Placement(ODD, 2, r, "replicated", "vocab-parallel")
        w = hm.build_weights(p)                           # asserts the shapes local_param_shapes gives
        assert p.embed_vocab == range(126 * r, 126 * (r + 1)) and w["embed"].shape == (126, ODD.hidden)
        assert torch.equal(w["embed"][:ODD.vocab - 126 * r], full["embed"][126 * r:126 * (r + 1)])
        assert w["head"].shape == (ODD.vocab, ODD.hidden)                  # the head stays replicated
    assert not hm.build_weights(Placement(ODD, 2, 1, "replicated", "vocab-parallel"))["embed"][-1].any()


def test_tied_embeddings_share_the_shard_only_when_both_are_vocab_parallel():
    tied = dataclasses.replace(TINY, name="tiny-tied", tied_embeddings=True)
    both = hm.build_weights(Placement(tied, 2, 1, "vocab-parallel", "vocab-parallel"))
    assert both["head"] is both["embed"] and "head" not in local_param_shapes(Placement(tied, 2, 1, "vocab-parallel",
                                                                                       "vocab-parallel"))
    emb_only = hm.build_weights(Placement(tied, 2, 1, "replicated", "vocab-parallel"))
    assert emb_only["embed"].shape[0] == 128 and emb_only["head"].shape[0] == 256
    assert torch.equal(emb_only["head"][128:], emb_only["embed"])          # tied: the same values


def test_masked_partials_sum_to_the_lookup():
    """Each rank's masked lookup is its shard's rows and zero elsewhere; the two partials sum (what
    embed.allreduce does) to the replicated lookup."""
    st = Stack(dtype="fp32", embed="vocab-parallel")
    sched = build("standard", ODD, 2, Step.prefill(BATCH, PROMPT + GEN - 1, 1, st), st)
    op = sched.ops[0]
    assert (op.name, op.kind, op.get("masked", 0)) == ("embed", "embed", 1) and sched.ops[1].name == "embed.allreduce"
    ids = _ids(ODD)
    full = hm.full_weights(ODD)["embed"][ids.reshape(-1)]
    parts = []
    for r in range(2):
        rm = hm.build_rank_model(ODD, 2, r, batch=BATCH, max_seq=PROMPT + GEN, embed="vocab-parallel")
        parts.append(KERNELS["embed"](KernelCtx(Runner(rm), sched, 0), op, ids))
        inside = (ids.reshape(-1) // 126) == r
        assert torch.equal(parts[r][inside], full[inside]) and not parts[r][~inside].any()
    assert torch.equal(parts[0] + parts[1], full)
    whole = hm.build_rank_model(ODD, 2, 0, batch=BATCH, max_seq=PROMPT + GEN)     # the schedule's layout, not the rank's
    with pytest.raises(ValueError, match="holds the whole table"):
        KERNELS["embed"](KernelCtx(Runner(whole), sched, 0), op, ids)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _passes(runner, m, stack, toks, how):
    """Prefill + teacher-forced decode of standard -> logits [B * S, vocab(+pad)] of every position;
    `how`: "eager" (Runner.forward), "functional" (Runner.functional_pass, the compiled harness's pass with
    funcol collectives, run eagerly) or "compiled" (that pass through torch.compile, as bench/check --compile)."""
    pre = build("standard", m, 2, Step.prefill(BATCH, PROMPT, GEN, stack), stack)
    dec = build("standard", m, 2, Step.decode(BATCH, PROMPT, GEN, 1, stack), stack)
    if how == "eager":
        run = lambda s, t, p: runner.forward(s, t, p).logits  # noqa: E731
    else:
        from tpsim.hw.inductor_flags import compile_functional_pass   # lazy: imports torch._dynamo (~1 s)
        fn = compile_functional_pass(runner, True) if how == "compiled" else runner.functional_pass
        run = lambda s, t, p: fn(s, t, torch.tensor(p))[0].clone()  # noqa: E731
    runner.rm.reset_cache()
    outs = [run(pre, toks[:, :PROMPT], 0).view(BATCH, PROMPT, -1)]
    for j in range(1, GEN):
        pos = PROMPT + j - 1
        outs.append(run(dec, toks[:, pos:pos + 1], pos).view(BATCH, 1, -1))
    return torch.cat(outs, dim=1).reshape(BATCH * (PROMPT + GEN - 1), -1)


def gloo_rank(rank: int, port: int, out: str, cases: tuple) -> None:
    """One of 2 gloo ranks: each (model, head, embed, how) of `cases`; rank 0 saves the logits."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    res = {}
    for m, head, embed, hows in cases:
        st = Stack(dtype="fp32", head=head, embed=embed)
        rm = hm.build_rank_model(m, 2, rank, batch=BATCH, max_seq=PROMPT + GEN, head=head, embed=embed)
        runner = Runner(rm, dist.group.WORLD, rank=rank)
        res[("embed rows", m.name, head, embed)] = rm.weights["embed"].shape[0]
        for how in hows:
            res[(m.name, head, embed, how)] = _passes(runner, m, st, _ids(m), how)
    if rank == 0:
        torch.save(res, out)
    dist.destroy_process_group()


def _spawn(tmp_path, cases) -> dict:
    out = tmp_path / "logits.pt"
    # spawn, not fork: gloo in a forked child of a process with torch's threads running can hang
    torch.multiprocessing.start_processes(gloo_rank, args=(_port(), str(out), cases), nprocs=2, start_method="spawn")
    return torch.load(out)


def _assert_same_as_replicated(res, want_how="eager") -> int:
    """Every vocab-parallel embedding's logits against the replicated embedding's (same model, head)."""
    compared = 0
    for key, got in res.items():
        if key[0] != "embed rows" and key[2] == "vocab-parallel":
            name, head, _, how = key
            want = res[(name, head, "replicated", want_how)]
            assert got.shape == want.shape and got.shape[0] == BATCH * (PROMPT + GEN - 1)
            # eager and functional: the same ops on the same rows (x + 0 sums exactly); compiled: Inductor's
            # fused kernels round differently in the last bits (fp32)
            tol = 1e-5 if how == "compiled" else 1e-6
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda e: f"{key}: {e}")
            compared += 1
    return compared


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> dict:
    """One spawn of 2 gloo ranks for both tests below (a spawn starts two Python processes that import
    torch): eager and functional passes of every model x head x embed, and the compiled pass of the
    vocab-parallel embedding of vocab 251 with the vocab-parallel head."""
    def hows(m, head, embed):
        extra = ("compiled",) if (m, head, embed) == (ODD, "vocab-parallel", "vocab-parallel") else ()
        return ("eager", "functional") + extra
    return _spawn(tmp_path_factory.mktemp("vocab-parallel"),
                  tuple((m, head, embed, hows(m, head, embed)) for m in (TINY, ODD)
                        for head in ("replicated", "vocab-parallel") for embed in ("replicated", "vocab-parallel")))


@pytest.mark.slow          # starts 2 real gloo ranks: ~15 s
def test_two_gloo_ranks_vocab_parallel_embedding_is_the_replicated_one(ranks):
    res = {k: v for k, v in ranks.items() if k[-1] != "compiled"}
    for head in ("replicated", "vocab-parallel"):       # the ranks held their shards, not the table
        assert [res[("embed rows", n, head, e)] for n in ("tiny", "tiny-v251") for e in ("replicated", "vocab-parallel")] \
            == [256, 128, 251, 126]
    assert _assert_same_as_replicated(res) == 8


@pytest.mark.slow          # 2 gloo ranks each compile a prefill and a decode pass (Inductor C++): ~40 s
def test_compiled_vocab_parallel_embedding_is_the_replicated_one(ranks):
    """torch.compile(functional_pass): the masked lookup and embed.allreduce (funcol) inside one graph,
    vocab 251 over TP 2 with the vocab-parallel head, against the eager replicated run."""
    res = {k: v for k, v in ranks.items()
           if k[0] == "embed rows" or k[:3] == ("tiny-v251", "vocab-parallel", "replicated") and k[3] == "eager"
           or k[-1] == "compiled"}
    assert res[("embed rows", "tiny-v251", "vocab-parallel", "vocab-parallel")] == 126
    assert _assert_same_as_replicated(res) == 1


def test_run_config_carries_the_embedding_to_the_ranks():
    from tpsim.hw.run_config import RunConfig
    cfg = RunConfig(embed="vocab-parallel", head="vocab-parallel")
    back = RunConfig.from_dict(cfg.to_dict())                  # what a rank process receives
    assert back == cfg and back.stack().embed == "vocab-parallel" and RunConfig().stack().embed == "replicated"
    with pytest.raises(ValueError, match="unknown embed 'rows'"):
        RunConfig(embed="rows")
