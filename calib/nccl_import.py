"""`tpsim profiles import-nccl-tests`: nccl-tests outputs -> a profile of measured collective tables.

Each file is read by calib.imports (text of any nccl-tests version, MPI-prefixed, `-I 1`, or `-J`
JSON). A log holding several runs one after another (a section per GPU count, an eager run then a
`-G 1` run) is split at each run's header -- a `# nThread ...` line, `# Using devices`, a rank
line or the column header that follows data rows -- and every section becomes its own table, so
runs are never merged. The profile written holds one table per (collective, group, mode, impl)
and `extends` a base profile for everything nccl-tests does not measure (compute, topology); the
base defaults to the built-in profile of the GPU named in the files' device lines.

Pure Python (no torch): it runs wherever `tpsim predict` does. The command: commands/import_nccl_tests.py.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from tpsim.sim.hardware.profile import (MAX_EXTENDS, builtin_names, load_profile, new_profile, read_json,
                                        resolve)

from tpsim.calib.imports import COLLECTIVES, ImportedTable, parse_nccl_tests, read_log

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<(stdout|stderr)>:")
_RUN_START = re.compile(r"^#\s*(nThread\b|Using devices\b|Rank\s+\d+\b|size\s+count\b)")
_RUN_OPEN = re.compile(r"^#\s*nThread\b")
_DEVICE = re.compile(r"^#\s*Rank\s+\d+\b.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")

# GPU name in a rank line -> the built-in profile a table-only import extends by default.
# Order matters: the first pattern found in the name wins.
_GPU_PROFILES = (("H200", "h200-sxm"), ("H100", "h100-sxm"), ("A100", "a100-sxm"), ("L40S", "l40s-pcie"))


@dataclass(frozen=True)
class Section:
    """One run of a (possibly multi-run) nccl-tests file."""

    path: str
    first_line: int       # 1-based line of the run's first header line (`# nThread ...`)
    text: str             # the run's lines, preceded by first_line - 1 empty lines (parser line numbers match)
    gpus: tuple[str, ...]  # GPU names from the rank lines
    hosts: frozenset


def split_runs(text: str, path: str) -> list[Section]:
    """The runs of one nccl-tests text output, split at the header that starts each run.

    A header line seen after data rows starts the next run. (Consecutive `-N` cycles of one run
    repeat no header: they stay one section, and a repeated size keeps its last time.)"""
    lines = text.splitlines()
    starts, seen_data, opened = [0], False, None
    for i, raw in enumerate(lines):
        line = _MPI_PREFIX.sub("", raw).strip()
        if line.startswith("#"):
            if seen_data and _RUN_START.match(line):
                # a run's own header block (nThread, devices, ranks, columns) all lands in one section
                starts.append(i)
                seen_data, opened = False, None
            if _RUN_OPEN.match(line):
                if opened is not None:
                    raise ValueError(f"{path} line {i + 1}: a new run starts before the run at line "
                                     f"{opened + 1} printed any data (an interrupted run?); remove the "
                                     f"interrupted run's header")
                opened = i
        elif line.split() and line.split()[0].isdigit():
            seen_data = True
    out = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else len(lines)
        body = lines[s:e]
        gpus, hosts = [], set()
        head = next((s + j for j, raw in enumerate(body) if _RUN_START.match(_MPI_PREFIX.sub("", raw).strip())), s)
        for raw in body:
            m = _DEVICE.match(_MPI_PREFIX.sub("", raw).strip())
            if m:
                hosts.add(m.group(1))
                gpus.append(m.group(2))
        out.append(Section(path, head + 1, "\n" * s + "\n".join(body), tuple(gpus), frozenset(hosts)))
    return out


def _collective_of(path: str, given: str | None) -> str:
    """The flag, else the nccl-tests binary named in the file name (all_gather_perf.log), else all_reduce."""
    if given:
        return given
    stem = Path(path).name.lower()
    for c in COLLECTIVES:
        if c in stem or c.replace("_", "") in stem:
            return c
    return "all_reduce"


def read_files(paths, *, group: int | None = None, mode: str | None = None,
               collective: str | None = None) -> tuple[list[ImportedTable], list[str], dict]:
    """Every run of every file as a table, the GPU names seen, and {table path: hosts} of runs
    whose rank lines name more than one host. ValueError names file and line."""
    tables, gpus, spans = [], [], {}
    for p in paths:
        text = read_log(p)
        coll = _collective_of(p, collective)
        head = text.lstrip()
        if head.startswith("{") or (head.startswith("[") and not _MPI_PREFIX.match(head)):
            tables.append(parse_nccl_tests(text, str(p), group=group, collective=coll, mode=mode))
            continue
        sections = split_runs(text, str(p))
        for s in sections:
            t = parse_nccl_tests(s.text, str(p), group=group, collective=coll, mode=mode)
            if len(sections) > 1:
                t = _with_path(t, f"{p} (run at line {s.first_line})")
            tables.append(t)
            gpus += s.gpus
            if len(s.hosts) > 1:
                spans[t.path] = len(s.hosts)
    return tables, gpus, spans


def _with_path(t: ImportedTable, path: str) -> ImportedTable:
    return replace(t, path=path)


def default_base(gpus: list[str]) -> str:
    """The built-in profile for the GPU the files name; ValueError when none (or several) match."""
    found = set()
    for g in gpus:
        name = g.upper()
        for key, prof in _GPU_PROFILES:
            # the SXM profiles do not describe PCIe / NVL boards of the same chip
            if key in name and (prof.endswith("pcie") or not any(x in name for x in ("PCIE", "NVL"))):
                found.add(prof)
                break
            if key in name:
                found.add(f"no built-in profile ({g.strip()})")
                break
    if len(found) != 1 or not found <= set(builtin_names()):
        what = (f"GPUs of several kinds ({', '.join(sorted(found))})" if len(found) > 1
                else "no GPU with a built-in profile" + (f" ({gpus[0].strip()})" if gpus else ""))
        raise ValueError(f"the files name {what}; give --extends BASE (a built-in profile: "
                         f"{', '.join(builtin_names())}, or a profile JSON) for what nccl-tests does not measure")
    return found.pop()


def build_profile(tables: list[ImportedTable], *, extends: str, name: str, impl: str = "nccl") -> dict:
    """A partial profile: the imported tables in front of `extends`'s. Same (collective, group,
    mode) twice is refused: two measurements of one thing are not merged silently."""
    base = load_profile(extends)                       # a bad base fails before anything is written
    out, seen = [], {}
    for t in sorted(tables, key=lambda t: (t.collective, t.group, t.mode)):
        key = (t.collective, t.group, t.mode, impl)
        if key in seen:
            raise ValueError(f"{seen[key]} and {t.path} both measure {t.collective} over {t.group} ranks "
                             f"({t.mode}); import them into separate profiles or tag one with --impl")
        seen[key] = t.path
        # the simulator looks a group up as 'node' when it fits in one node of the base, else 'net'
        scope = "node" if t.group <= base.gpus_per_node else "net"
        out.append(t.to_table(scope=scope, impl=impl))
    doc = new_profile(name, f"{base.description.split(';')[0]}; collectives measured by nccl-tests "
                            f"({len(out)} table{'s' * (len(out) != 1)}, imported by tpsim)", extends=extends)
    doc["collectives"] = {"tables": out}
    return doc


def refuse_overwriting_inputs(out: str, files, base: str, base_what: str = "the --extends base") -> None:
    """`--out` must not be one of the files read, nor the base profile or any profile of its
    `extends` chain: `--extends base.json --out base.json` destroyed the base and wrote a profile
    that extends itself. `base_what`: the option that named `base`, for the message."""
    if not os.path.exists(out):
        return
    chain, ref, folder = [], base, None
    while ref and len(chain) < MAX_EXTENDS:
        path = resolve(ref, folder)
        chain.append(str(path))
        ref, folder = read_json(path).get("extends"), path.parent
    for f, what in [(f, "an input") for f in files] + [(c, f"{base_what} (or a profile it extends)") for c in chain]:
        if os.path.exists(f) and os.path.samefile(out, f):
            raise ValueError(f"--out {out} is {what} ({f}): the import would overwrite what it reads; "
                             f"choose another --out")
