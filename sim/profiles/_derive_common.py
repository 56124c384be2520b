"""What every part of the built-in profiles' derivation shares: the database path (argv[1]), the
output folder (argv[2]), the database's name, and the {value, source} leaf. See _derive_builtin.py."""
from __future__ import annotations

import sys
from pathlib import Path

AIC = "aiconfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0, NVIDIA)"
DATA = Path(sys.argv[1])
OUT = Path(sys.argv[2])


def sv(value, source):
    return {"value": value, "source": source}
