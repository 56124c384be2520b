"""bench/triton_sass.py: the reference's generated decode kernels compiled for sm_90 offline, per launch
config (registers, executed instructions, the issue-time floor, KV row bytes per loop step)."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.hw, pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason="needs torch and triton (pip install triton): Triton's compiler and bundled ptxas / nvdisasm")]


def _script():
    spec = importlib.util.spec_from_file_location("triton_sass", ROOT / "bench" / "triton_sass.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# a loop of 5 instructions whose counter R28 advances by 0x40 (8 unrolled steps of RBLOCK 8), compared
# against 0x5fc: over rnumel 1536 it runs 1536 / 64 = 24 times; 2 instructions before it, 2 after (NOPs
# are not counted)
_SASS = """
        /*0000*/                   MOV R10, RZ ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0020*/                   LDG.E.EF.U16 R11, desc[UR6][R28.64] ;
        /*0030*/                   IADD3 R28, R10, 0x40, RZ ;
        /*0040*/                   ISETP.GE.U32.AND P0, PT, R28, 0x5fc, PT ;
        /*0050*/                   MOV R10, R28 ;
        /*0060*/              @!P0 BRA `(.L_x_0) ;
        /*0070*/                   STG.E desc[UR6][R2.64], R5 ;
        /*0080*/                   EXIT ;
        /*0090*/                   NOP;
"""


def test_a_loops_trips_come_from_its_counters_step():
    T = _script()
    assert T.executed(_SASS, 1536) == 2 + 5 * 24 + 2
    assert T.executed(_SASS, None) == 2 + 5 + 2                    # no reduction size: the body once


def test_kv_row_bytes_reads_the_tile_the_gqa_load_takes():
    """q@k^T reads K along D (the reduction index): RBLOCK fp16 of a row per step; p@v reads V across D
    (the output index x0): XBLOCK."""
    T = _script()
    qk = "    tmp1 = tl.load(in_ptr1 + (r2 + (128*x0) + (196608*(x1 // 8))), rmask, eviction_policy='evict_first')"
    pv = "    tmp1 = tl.load(in_ptr1 + (x0 + (128*r2) + (196608*(x1 // 8))), rmask, eviction_policy='evict_first')"
    assert T.kv_row_bytes(qk, {"XBLOCK": 64, "RBLOCK": 8}) == [16]
    assert T.kv_row_bytes(pv, {"XBLOCK": 64, "RBLOCK": 8}) == [128]
    assert T.kv_row_bytes("    tmp0 = tl.load(in_ptr0 + (r2 + (1536*x1)), rmask)", {"XBLOCK": 64, "RBLOCK": 8}) == []


@pytest.mark.slow
def test_the_script_prints_every_starting_config_of_the_attention_reductions():
    """8B TP1 batch 4 on the installed torch: q@k^T and p@v each with their autotuner's starting configs,
    every row with registers, instructions and a positive issue floor."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "triton_sass.py"), "--at", "llama-3.1-8b:1:4",
                          "--kernel", "bmm"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    blocks = re.findall(r"^(triton_\w+)  xnumel (\d+)  rnumel (\d+)  \((\d+) starting configs\)\n(.*?)(?:\n\n|\Z)",
                        out.stdout, re.S | re.M)
    assert len(blocks) == 2, out.stdout
    for name, xnumel, rnumel, n, body in blocks:
        rows = [r.split() for r in body.splitlines()[1:]]
        assert len(rows) == int(n) >= 1, (name, body)
        for row in rows:
            regs, instr, programs, issue_us = int(row[2]), int(row[4]), int(row[5]), float(row[6])
            assert regs > 0 and instr > 0 and issue_us > 0 and programs >= 1, row
