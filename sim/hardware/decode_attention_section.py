"""`compute.decode_attention` of a profile: what the grid of a split-KV decode attention kernel is priced
with (sim/price/decode_grid.py; docs/profile-format.md). Kept beside sim/hardware/check.py, which calls
`parse_decode_attention` with its typed getter, so every failure names the file and the field.

    "decode_attention": {"sms": {"value": 132, "source": "..."},                  # SMs the split rules read
                         "cta_gbps": {"value": 35, "range": [17, 60], "source": "..."}}   # one CTA's rate

Absent (or null, which drops a base's section under `extends`): decode attention is priced by its bytes
alone (the kernel's bandwidth curve or roofline), and a prediction says so once."""
from __future__ import annotations

from tpsim.sim.hardware.schema import DecodeAttentionSpec

SECTION = "compute.decode_attention"
MAX_SMS = 4096           # as overlap.gpu.sms: no GPU has more
MAX_CTA_GBPS = 1e4       # 10 TB/s for one CTA: above any GPU's whole HBM rate; more is a typo


def parse_decode_attention(g) -> DecodeAttentionSpec | None:
    """compute.decode_attention as a DecodeAttentionSpec (None when absent or null). `g`: check.py's _Getter."""
    if g.get(SECTION, None) is None:
        return None
    g.obj(SECTION)
    sms = g.num(f"{SECTION}.sms", positive=True, max_=MAX_SMS)
    if sms != int(sms) or f"{SECTION}.sms" in g.ranges:
        g.fail(f"{SECTION}.sms", f"must be a whole number of SMs (a count has no range), got {sms:g}")
    rate = g.num(f"{SECTION}.cta_gbps", positive=True, max_=MAX_CTA_GBPS)
    return DecodeAttentionSpec(int(sms), rate * 1e9)
