"""Flash prefill under the causal mask: the key tiles the kernel runs up to each row block's diagonal,
at its causal rate (sim/price/flash_prefill.py); math SDPA keeps the full square."""
import pytest

from tpsim.sim.price import flash_prefill as fp
from tpsim.sim.price.work import op_work
from tpsim.sim.schedule.ir import Op


def test_row_blocks_stop_at_their_diagonal_on_toy_tiles():
    # q = kv = 256 in row blocks of 128 over key tiles of 64: block 0 runs 2 of 4 tiles, block 1 all 4
    assert fp.executed_fraction(256, 256, 128, 64) == 6 / 8
    # the (M + 1) / (2M) rule at 1024 (M = 8), for FA2's 128 x 64 and FA3's 128 x 128 alike
    assert fp.executed_fraction(1024, 1024, 128, 64) == fp.executed_fraction(1024, 1024, 128, 128) == 9 / 16
    # a chunk of 256 queries after 256 cached keys: block 0 sees keys up to 384 (6 of 8 tiles), block 1 all 8
    assert fp.executed_fraction(256, 512, 128, 64) == 14 / 16
    # one query (decode) sees every key tile
    assert fp.executed_fraction(1, 1000, 128, 64) == 1.0


def test_the_causal_rate_reproduces_the_published_causal_throughput():
    """FA3 at 1k: non-causal 565, causal 423 useful TFLOP/s. Priced: 9/16 of the tiles at rate r, so the
    causal time over the non-causal one is (9/16) / r, which must equal (0.5 / 423) / (1 / 565)."""
    frac, rate = fp.causal("fa3", 1024, 0, 1024, 128)
    assert frac == 9 / 16
    assert frac / rate == pytest.approx(0.5 * 565 / 423)
    # held beyond the published lengths, log-linear between them
    assert fp.causal_rate("fa3", 100) == fp.causal_rate("fa3", 512)
    assert fp.causal_rate("fa2", 1 << 20) == fp.causal_rate("fa2", 16384)
    assert fp.causal_rate("fa3", 512) < fp.causal_rate("fa3", 724) < fp.causal_rate("fa3", 1024)
    assert fp.causal_rate("flashinfer", 2048) == fp.causal_rate("fa2", 2048)


def test_where_the_kernel_runs_every_tile():
    assert fp.causal("fa3", 1, 1023, 1024, 128) is None          # decode
    assert fp.causal("fa3", 1024, 0, 1536, 128) is None          # a static cache: keys past the filled ones
    assert fp.causal("math", 1024, 0, 1024, 128) is None


def _sdpa(impl, q=1024, start=0, kv=1024):
    attrs = (("batch", 1), ("q_len", q), ("start_pos", start), ("kv_len", kv), ("heads", 8), ("kv_heads", 1),
             ("head_dim", 128), ("expand_gqa", 0), ("impl", impl))
    return [w for w in op_work(Op("s", "attention", ("x",), ("y",), attrs, "bf16")) if w.matmul][0]


def test_flash_prefill_prices_its_tiles_and_math_the_full_square():
    square = 4.0 * 8 * 1024 * 1024 * 128
    assert _sdpa("math").flops == square and _sdpa("math").rate == 1.0
    fa3 = _sdpa("fa3")
    assert fa3.flops == square * 9 / 16 and fa3.rate == fp.causal_rate("fa3", 1024)
    assert _sdpa("fa3").bytes == _sdpa("fa3", kv=1024).bytes          # K/V still read once
    # FlashInfer packs the 8 query heads of a KV head into its 128-row tile: 16 positions a row block
    assert _sdpa("flashinfer").flops == square * fp.executed_fraction(1024, 1024, 16, 64)
