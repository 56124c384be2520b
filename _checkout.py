"""Load a source checkout (or an installed copy) as the package `tpsim`, by its path, not by name.

Used where the code to run is known by its location: `python cli.py` in a checkout, the scripts
under bench/ and sim/hardware/profiles/, the test suite, and every rank the launcher starts (hw/dist.py:
`python -I`, then this file from the launcher's own package directory). Importing `tpsim` by name
there could find another copy first (an install of another version, a `tpsim/` in the working
directory); loading `ROOT/__init__.py` under the name `tpsim` with `ROOT` as its only search
location cannot: every `tpsim.x` is then looked up under ROOT (the package's __path__).

    import _checkout; _checkout.load()          # with this file's directory on sys.path
"""
from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

ROOT = os.path.dirname(os.path.abspath(__file__))


def load(root: str = ROOT) -> ModuleType:
    """sys.modules["tpsim"] from `root` (a directory holding tpsim's __init__.py); an already
    imported tpsim is kept as it is (its modules may be in use)."""
    if "tpsim" in sys.modules:
        return sys.modules["tpsim"]
    spec = importlib.util.spec_from_file_location("tpsim", os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tpsim"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules["tpsim"]
        raise
    return mod
