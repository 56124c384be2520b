"""The text `tpsim spd-plan` measures perplexity on, as windows of token ids, and the digest of a
plan's inputs (what a resumed run must match to reuse a finished pass). Imports no torch: the
launcher validates the text (one line, exit 2) before any rank starts.

Tokenization, in this order; the result says which one ran (`Tokens.how`):
  1. "tokenizer.json": the checkpoint folder ships a Hugging Face fast tokenizer and the
     `tokenizers` library loads it (offline: it is a local file). Encoded without special tokens.
  2. "token ids": the file is whitespace-separated integers, every one in 0..vocab-1.
  3. "bytes mod V": otherwise each byte of the file, mod the vocabulary size V. Meaningless as
     language, but deterministic: what the tiny random test models (no tokenizer) are fed.
The ids are cut into `windows` non-overlapping windows of `seq_len` tokens from the start; each
window is one prefill (positions 0..seq_len-1) and scores its seq_len - 1 next-token predictions.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tpsim.fileio.policy import MAX_TEXT_BYTES, read_input_bytes

TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class Tokens:
    """The measured windows: `windows` x `seq_len` ids, and how the text became ids."""

    ids: tuple[int, ...]             # windows * seq_len ids, window after window
    how: str                         # "tokenizer.json" | "token ids" | "bytes mod V"
    available: int                   # ids the whole text gave
    seq_len: int
    windows: int

    def window(self, w: int) -> list[int]:
        return list(self.ids[w * self.seq_len:(w + 1) * self.seq_len])


def tokenize(text_path: str, checkpoint: str, vocab: int) -> tuple[list[int], str]:
    """All ids of `text_path` and how they were made (module doc: tokenizer.json, token ids,
    bytes mod vocab). ValueError (one line) when the file cannot be read."""
    # the input policy: a directory, FIFO or device is named as such (a FIFO would block), a huge file refused
    data = read_input_bytes(text_path, "--text", MAX_TEXT_BYTES)
    tok = Path(checkpoint) / TOKENIZER
    if tok.is_file():
        try:
            # lazy: optional (a dependency of transformers); only real checkpoints ship a tokenizer
            from tokenizers import Tokenizer
            ids = Tokenizer.from_file(str(tok)).encode(data.decode("utf-8", errors="replace"),
                                                       add_special_tokens=False).ids
            if all(0 <= i < vocab for i in ids):
                return list(ids), TOKENIZER
        except Exception:             # noqa: BLE001 - no tokenizers library, or a file it cannot read
            pass
    words = data.split()
    if words and all(w.isdigit() for w in words):
        ids = [int(w) for w in words]
        if all(i < vocab for i in ids):
            return ids, "token ids"
    return [b % vocab for b in data], f"bytes mod {vocab}"


def load_tokens(text_path: str, checkpoint: str, vocab: int, seq_len: int, windows: int | None) -> Tokens:
    """The windows spd-plan measures; ValueError (one line) for a text too short for one window, or
    fewer windows than `windows` asks for."""
    if seq_len < 2:
        raise ValueError(f"--seq-len must be >= 2 (a window scores seq_len - 1 predictions), got {seq_len}")
    if windows is not None and windows < 1:
        raise ValueError(f"--windows must be >= 1, got {windows}")
    ids, how = tokenize(text_path, checkpoint, vocab)
    have = len(ids) // seq_len
    need = windows or 1
    if have < need:
        raise ValueError(f"--text {text_path} gives {len(ids)} tokens ({how}); {need} window(s) of --seq-len "
                         f"{seq_len} need at least {need * seq_len}: give a longer text or a smaller --seq-len")
    n = windows or have
    return Tokens(tuple(ids[:n * seq_len]), how, len(ids), seq_len, n)


def checkpoint_identity(checkpoint: str) -> str:
    """sha256 of the checkpoint's config.json and, per safetensors file, its name, size and header
    (tensor names, dtypes, shapes, offsets). Not of the weight bytes (a 70B model is ~140 GB to
    hash): a snapshot whose weights were rewritten in place with the same header and size digests
    the same, so delete the partial file (--out's .partial.jsonl) after such an edit."""
    h = hashlib.sha256()
    root = Path(checkpoint)
    for name in sorted(os.listdir(root)):
        p = root / name
        if name == "config.json" or name.endswith(".index.json"):
            h.update(name.encode() + p.read_bytes())
        elif name.endswith(".safetensors"):
            with open(p, "rb") as f:
                head = f.read(8)
                n = int.from_bytes(head, "little") if len(head) == 8 else 0
                h.update(name.encode() + str(p.stat().st_size).encode() + head + f.read(min(n, 1 << 26)))
    return h.hexdigest()


def code_identity() -> str:
    """sha256 of the harness and simulator sources (every .py under hw/ and sim/): a pass measured by
    other code is never reused."""
    root = Path(__file__).resolve().parent.parent.parent
    h = hashlib.sha256()
    for d in ("hw", "sim"):
        for f in sorted((root / d).rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def plan_digest(tokens: Tokens, checkpoint: str, tp: int, dtype: str, device: str, layers: int | None) -> str:
    """What a finished pass in the partial file stands for: the token windows, the checkpoint
    (checkpoint_identity), the TP degree, dtype, device, layers run and the code. Two runs with
    the same digest measure the same perplexities (up to the backend's summation order)."""
    h = hashlib.sha256(json.dumps({"how": tokens.how, "seq_len": tokens.seq_len, "windows": tokens.windows,
                                   "tp": tp, "dtype": dtype, "device": device, "layers": layers},
                                  sort_keys=True).encode())
    h.update(hashlib.sha256(json.dumps(tokens.ids).encode()).digest())
    h.update(checkpoint_identity(checkpoint).encode())
    h.update(code_identity().encode())
    return h.hexdigest()[:32]
