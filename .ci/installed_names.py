"""Print the top-level names the installed `tpsim` distribution put into site-packages (its RECORD)
and fail (exit 1) on any but tpsim itself, its dist-info, and an editable install's .pth/finder.

usage: python .ci/installed_names.py     (with the environment's python)
"""
import re
import sys
from importlib.metadata import distribution

ALLOWED = re.compile(r"tpsim|tpsim-[^/]+\.dist-info|__editable__\.tpsim-[^/]+\.pth|__editable___tpsim_\w+_finder\.py")


def main() -> int:
    files = distribution("tpsim").files or []
    # entries outside site-packages (the console script: ../../../bin/tpsim) are not importable names
    # a top-level module's bytecode (__pycache__/m.cpython-311.pyc) counts as that module (m.py)
    names = sorted({(f.parts[1].split(".")[0] + ".py") if f.parts[0] == "__pycache__" and len(f.parts) > 1
                    else f.parts[0] for f in files if f.parts and f.parts[0] != ".."})
    scripts = sorted(f.name for f in files if f.parts and f.parts[0] == "..")
    print("tpsim put into site-packages:", " ".join(names))
    print("and scripts:", " ".join(scripts))
    bad = [n for n in names if not ALLOWED.fullmatch(n)]
    if bad:
        print(f"FAIL: top-level names other than tpsim: {' '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
