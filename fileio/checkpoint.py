"""A checkpoint of finished work: one JSON line per finished point, `{"key": ..., "rows": [...]}`,
appended as each point finishes, so a killed run restarted with the same output continues where it
stopped (the sweep's OUT.partial.jsonl, spd-plan's partial file)."""
from __future__ import annotations

import json
import os

from .policy import MAX_CHECKPOINT_BYTES, read_input_text


def read_checkpoint(path: str | os.PathLike) -> dict[str, list[dict]]:
    """Finished points from a checkpoint; a line that is not `{"key": "...", "rows": [{...}, ...]}`
    (a torn last line, killed mid-write; a hand edit) is ignored: its point is computed again. What
    the rows say is the reader's to check against the point they claim to be (commands/sweep_grid.py
    `resumable`)."""
    out: dict[str, list[dict]] = {}
    if not os.path.lexists(path):
        return out
    for line in read_input_text(path, "checkpoint", MAX_CHECKPOINT_BYTES, lenient=True).splitlines():
        try:
            d = json.loads(line)
        except ValueError:                # not JSON, or Python's limit on a 4,300-digit integer
            continue
        if isinstance(d, dict) and isinstance(d.get("key"), str) and isinstance(d.get("rows"), list) \
                and all(isinstance(r, dict) for r in d["rows"]):
            out[d["key"]] = d["rows"]
    return out
