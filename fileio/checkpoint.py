"""A checkpoint of finished work: one JSON line per finished point, `{"key": ..., "rows": [...]}`,
appended as each point finishes, so a killed run restarted with the same output continues where it
stopped (the sweep's OUT.partial.jsonl, spd-plan's partial file)."""
from __future__ import annotations

import json
import os

from .policy import MAX_CHECKPOINT_BYTES, read_input_text


def read_checkpoint(path: str | os.PathLike) -> dict[str, list[dict]]:
    """Finished points from a checkpoint; a torn last line (killed mid-write) is ignored."""
    out: dict[str, list[dict]] = {}
    if not os.path.lexists(path):
        return out
    for line in read_input_text(path, "checkpoint", MAX_CHECKPOINT_BYTES, lenient=True).splitlines():
        try:
            d = json.loads(line)
            out[d["key"]] = d["rows"]
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return out
