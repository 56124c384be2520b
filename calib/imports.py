"""Read public measurements: nccl-tests `all_reduce_perf` output into profile tables (serving
engines' latency benchmarks: calib/engine_bench_read.py).

Layouts accepted (docs/sources.md §5), all reduced to (bytes, out-of-place time_us) per row:
  * text, nccl-tests >= 2.13: `size count type redop root | time algbw busbw #wrong | (in-place) ...`
    (13 tokens; root is -1 for all-reduce);
  * text, <= 2.12: no root column, `error` instead of `#wrong` (12 tokens);
  * `-I 1`: four more columns per block (i_min i_max i_p99 i_cv%) -- located through the header;
  * MPI launches: lines prefixed `[1,0]<stdout>:` and `NCCL INFO` log lines interleaved;
  * `-J file.json` (>= 2.18.5): one record per size with `out_of_place{time, alg_bw, bus_bw, ...}`.
The group size comes from the header's `#  Rank  N ...` lines (one per GPU) or the `group`
argument. A malformed data row is rejected with a ValueError naming the file and the line.
Pure Python: no torch needed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from tpsim.sim.bounds import BOUNDS, check_time
from tpsim.fileio.policy import MAX_LOG_BYTES, parse_json, read_input_text

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<(stdout|stderr)>:")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b")
_GRAPH = re.compile(r"\bgraph:\s*(\d+)")
_NGPUS = re.compile(r"\bnGpus\s+(\d+)")
_LOG = re.compile(r"\bNCCL (INFO|WARN|version)\b")
_RUN_OPEN = re.compile(r"^#\s*nThread\b")
_TRAILER = re.compile(r"^#\s*Avg bus bandwidth\b")
_TEST_NAME = re.compile(r"^#\s*Collective test starting:\s*(\w+?)_perf")     # nccl-tests names its binary
# what each binary's rows say in their redop column: a reduction, or "none" (all_gather, sendrecv, ...)
_REDUCES = {"all_reduce": True, "reduce_scatter": True, "all_gather": False}
_JSON_START = re.compile(r"^(\{|\[\s*(\{|\[|$))")
_NUMBER = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
MAX_RANKS = BOUNDS["collective_group"].hi     # ranks of one nccl-tests run (the bounds table: ~16k-GPU jobs)
# a collective table's impl tag: predict's `--collective TAG` picks the table, so it is a plain
# word ('auto' already means "the profile's default")
_IMPL_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_impl_tag(impl: str, option: str = "--impl") -> str:
    """`impl` as a table tag (calibrate and import-nccl-tests write it); ValueError naming `option`."""
    if not _IMPL_TAG.fullmatch(impl) or impl == "auto":
        raise ValueError(f"{option} must be a table tag (letters, digits, '.', '_', '-'; not 'auto'), got {impl!r}")
    return impl


@dataclass(frozen=True)
class ImportedTable:
    """Latency vs size of one collective as nccl-tests measured it (out-of-place)."""

    collective: str
    group: int
    mode: str                       # "eager", or "graph" when the run replayed CUDA graphs (-G)
    bytes: tuple[int, ...]
    time_us: tuple[float, ...]
    layout: str                     # "text>=2.13" | "text<=2.12" | "json"
    path: str
    gpus_per_thread: int = 1        # nccl-tests -g (header 'nGpus N'): GPUs one thread launches each iteration
    graph_launches: int = 0         # nccl-tests -G (header 'graph: N'): launches of each timed graph; 0 = none/unknown

    def to_table(self, scope: str = "node", impl: str = "nccl", source: str | None = None) -> dict:
        """A `collectives.tables` entry of a profile."""
        return {"collective": self.collective, "group": self.group, "scope": scope, "mode": self.mode,
                "impl": impl, "bytes": list(self.bytes), "time_us": list(self.time_us),
                "source": source or f"nccl-tests output {self.path} ({self.layout}, out-of-place time, "
                                     f"{self.group} ranks), imported by tpsim"}


def read_nccl_tests(path: str | Path, *, group: int | None = None, collective: str = "all_reduce",
                    mode: str | None = None) -> ImportedTable:
    """Parse an nccl-tests output file (text or -J JSON); see the module docstring."""
    p = Path(path)
    return parse_nccl_tests(read_log(p), str(p), group=group, collective=collective, mode=mode)


def read_log(path: str | Path) -> str:
    """An nccl-tests output by the input policy (fileio/policy.py): a regular file (a symlink to
    /dev/zero or a FIFO is refused, not read until memory runs out), at most 64 MiB, UTF-8 text: a
    byte that is not UTF-8 is refused with its offset (replacing it imported a binary file's
    digits, or a corrupted log's, as if measured)."""
    return read_input_text(path, "nccl-tests output", MAX_LOG_BYTES)


def parse_nccl_tests(text: str, name: str = "<text>", *, group: int | None = None,
                     collective: str = "all_reduce", mode: str | None = None) -> ImportedTable:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; choose from {', '.join(COLLECTIVES)}")
    if group is not None and not 1 <= group <= MAX_RANKS:
        raise ValueError(f"group must be in 1..{MAX_RANKS}, got {group}")
    head = text.lstrip()
    if head.startswith("{") or (head.startswith("[") and not _MPI_PREFIX.match(head)):
        return _parse_json(text, name, group, collective, mode)
    return _parse_text(text, name, group, collective, mode)


# ------------------------------------------------------------------ text

def _parse_text(text: str, name: str, group, collective, mode) -> ImportedTable:
    ranks: set[int] = set()
    header: list[str] | None = None
    graph = None
    gpus = 1
    rows: dict[int, float] = {}
    layout = None
    # concatenated runs (`cat run1.txt run2.txt`): a '# Rank 0' line after data rows starts another
    # run; runs of the same rank count merge (the last row of a size wins), others are refused
    run_ranks: list[tuple[int, set[int]]] = [(1, ranks)]
    run_rows = 0                                 # data rows since the current run's header
    opened = None                                # line of the open run's `# nThread` header (no trailer yet)
    headed = False                               # an nccl-tests header line seen (nThread, rank, columns)
    named: tuple[int, str] | None = None         # (line, collective) its `Collective test starting:` line names
    redop: tuple[int, str] | None = None         # (line, redop) of the first data row
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _MPI_PREFIX.sub("", raw).strip()
        if not line:
            continue
        if _LOG.search(line):
            if re.match(r"\d+\s", line):          # a data row with a log line spliced into it
                raise ValueError(f"{name} line {lineno}: an NCCL log line is spliced into this data row, so its "
                                 f"numbers cannot be trusted; rerun with NCCL_DEBUG off or remove the row")
            continue
        if _JSON_START.match(line):                # not `[host:pid] ...` launcher chatter
            if not (headed or rows):
                raise _not_nccl_tests(name)
            raise ValueError(f"{name} line {lineno}: JSON follows the text output (a -J run appended?); "
                             f"import each run from its own file")
        if line.startswith("#"):
            if _RUN_OPEN.match(line):
                _check_closed(name, opened, run_rows)
                opened = lineno
                headed = True
            elif _TRAILER.match(line):
                opened = None
            m = _RANK_LINE.match(line)
            if m:
                r = int(m.group(1))
                if r >= MAX_RANKS:
                    raise ValueError(f"{name} line {lineno}: rank {r} is beyond {MAX_RANKS} ranks")
                if r == 0 and run_rows:
                    ranks, run_rows = set(), 0
                    run_ranks.append((lineno, ranks))
                ranks.add(r)
                headed = True
            t = _TEST_NAME.match(line)
            if t and named is None:
                named = (lineno, t.group(1))
            g = _GRAPH.search(line)
            if g:
                graph = int(g.group(1))
            g = _NGPUS.search(line)
            if g:
                gpus = max(gpus, int(g.group(1)))
            cols = line.lstrip("#").split()
            if cols[:2] == ["size", "count"] and "time" in cols:
                header = cols
                headed = True
            continue
        toks = line.split()
        where = f"{name} line {lineno}"
        if not re.fullmatch(r"\d+", toks[0]):
            if _NUMBER.fullmatch(toks[0]):
                raise ValueError(f"{where}: size {toks[0]} is not a whole number of bytes")
            continue                              # stray text (launcher chatter): not a data row
        cols = header or _default_header(len(toks), where)
        if len(toks) != len(cols):
            raise ValueError(f"{where}: data row has {len(toks)} columns, the header has {len(cols)} "
                             f"({' '.join(cols)}); is the file truncated or two runs mixed?")
        row = dict(zip(cols, toks))
        t_tok = toks[cols.index("time")]         # the first 'time' column is the out-of-place one
        try:
            size = int(row["size"])
            if not re.fullmatch(r"\d+", row["count"]):
                raise ValueError
            t_us = float(t_tok)
        except ValueError:
            raise ValueError(f"{where}: cannot read size/count/time from {line!r}") from None
        wrong_col = "#wrong" if "#wrong" in cols else ("error" if "error" in cols else None)
        layout = "text>=2.13" if "root" in cols else "text<=2.12"
        if wrong_col == "#wrong":
            w = toks[cols.index("#wrong")]
            if w not in ("N/A", "0"):
                raise ValueError(f"{where}: nccl-tests reports {w} wrong results for size {size}: "
                                 f"the measurement is invalid")
        check_time("measured_op", t_us, f"{where}: time", "us")     # the profile tables' span, naming the line
        _check_size(where, size)
        run_rows += 1
        if redop is None and "redop" in row:
            redop = (lineno, row["redop"])
        if size > 0:
            rows[size] = t_us                    # a repeated size (several -n runs): the last wins
    _check_closed(name, opened, run_rows)
    if not (headed or rows):
        raise _not_nccl_tests(name)
    if not rows:
        raise ValueError(f"{name}: no nccl-tests data rows found (expected lines like "
                         f"'  8  2  float  sum  -1  10.35  0.00  0.00  0 ...')")
    for (l0, r0), (l1, r1) in zip(run_ranks, run_ranks[1:]):
        if r1 and r0 and len(r1) != len(r0):
            raise ValueError(f"{name} line {l1}: a second run with {len(r1)} ranks follows one with {len(r0)} "
                             f"(line {l0}); split the file and import each run on its own")
    _check_collective(name, collective, named, redop)
    ranks = set().union(*(r for _, r in run_ranks)) if group is None else ranks
    return _table(rows, name, group, ranks, collective, mode, graph, layout, gpus)


def _check_collective(name: str, collective: str, named, redop) -> None:
    """The file measured `collective`: its `Collective test starting: X_perf` line, where it has one,
    names X; else its rows' redop column says whether it was a reduction (sum, ...) or not (none).
    A file of another collective priced as this one compares unlike with unlike."""
    if named is not None and named[1] in COLLECTIVES and named[1] != collective:
        raise ValueError(f"{name} line {named[0]}: this is {named[1]}_perf output, not {collective}'s; "
                         f"give the collective it measured (--op {named[1]})")
    if named is None and redop is not None and collective in _REDUCES and \
            (redop[1] != "none") != _REDUCES[collective]:
        raise ValueError(f"{name} line {redop[0]}: its rows' redop is {redop[1]!r}, so it measured "
                         f"{'a reduction' if redop[1] != 'none' else 'no reduction'}, not {collective}")


def _not_nccl_tests(name: str) -> ValueError:
    """A text file with no nccl-tests header line and no data row before anything else went wrong:
    it is some other file, whatever line a later check would have tripped on."""
    return ValueError(f"{name}: not an nccl-tests output: no nccl-tests data rows and no header ('# nThread ...', "
                      f"'#  Rank N ...', '#  size  count ...'); give what all_reduce_perf (or another nccl-tests "
                      f"binary) printed, as text or -J JSON")


def _check_size(where: str, size: int) -> None:
    if size > BOUNDS["message_bytes"].hi:
        raise ValueError(f"{where}: size {size:.3g} B is beyond {BOUNDS['message_bytes'].hi} B "
                         f"({BOUNDS['message_bytes'].why})")


def _check_closed(name: str, opened: int | None, run_rows: int) -> None:
    """A run opened by `# nThread` that printed rows ends with `# Avg bus bandwidth`: without it
    the run was cut off (a killed job, a log truncated at a line boundary) and its last sizes are
    missing, so it is refused rather than imported as if complete."""
    if opened is not None and run_rows:
        raise ValueError(f"{name} line {opened}: the run starting here has no '# Avg bus bandwidth' line after "
                         f"its rows: truncated? (nccl-tests prints it after the last size)")


def _default_header(n: int, where: str) -> list[str]:
    """Column names of a header-less data row, by its token count."""
    block13 = ["time", "algbw", "busbw", "#wrong"]
    block12 = ["time", "algbw", "busbw", "error"]
    inter = ["i_min", "i_max", "i_p99", "i_cv%"]
    layouts = {13: ["size", "count", "type", "redop", "root"] + block13 * 2,
               12: ["size", "count", "type", "redop"] + block12 * 2,
               21: ["size", "count", "type", "redop", "root"] + (block13 + inter) * 2,
               20: ["size", "count", "type", "redop"] + (block12 + inter) * 2}
    if n not in layouts:
        raise ValueError(f"{where}: a data row of {n} columns matches no nccl-tests layout "
                         f"(12, 13, or 20/21 with -I 1) and the file has no column header")
    return layouts[n]


def _table(rows: dict, name, group, ranks, collective, mode, graph, layout, gpus: int = 1) -> ImportedTable:
    n = group or len(ranks)
    if not n:
        raise ValueError(f"{name}: no '#  Rank N ...' header lines to count the ranks from; "
                         f"give the group size (`tpsim profiles import-nccl-tests --group N`, or group=N)")
    if mode is None:
        mode = "graph" if graph else "eager"
    sizes = sorted(rows)
    # the -G count; a JSON flag without its count (True) reads as 1, at least one launch
    launches = int(graph) if isinstance(graph, (int, float)) and graph > 0 else 0
    return ImportedTable(collective, n, mode, tuple(sizes), tuple(rows[s] for s in sizes), layout, name,
                         max(1, min(gpus, n)), launches)


# ------------------------------------------------------------------ -J JSON

def _parse_json(text: str, name: str, group, collective, mode) -> ImportedTable:
    data = parse_json(text, name)      # no duplicate keys, NaN, 20-digit numbers or deep nesting; names the line
    records = _find_records(data)
    if records is None:
        raise ValueError(f"{name}: JSON without any record holding 'out_of_place' (is this nccl-tests -J output?)")
    marks = [m.start() for m in re.finditer(r'"out_of_place"', text)]
    rows: dict[int, float] = {}
    for i, rec in enumerate(records):
        line = text.count("\n", 0, marks[i]) + 1 if i < len(marks) else "?"
        where = f"{name} line {line}"
        try:
            size = next(rec[k] for k in ("size", "bytes", "size_bytes") if k in rec)
            t_us = rec["out_of_place"]["time"]
        except (StopIteration, KeyError, TypeError):
            raise ValueError(f"{where}: record {i} needs 'size' and 'out_of_place.time' (us)") from None
        # typed: "size": true is not 1 byte, "time": "12" is not a number
        if isinstance(size, bool) or not isinstance(size, (int, float)) or size != int(size) or size < 0:
            raise ValueError(f"{where}: record {i}: 'size' must be a whole number of bytes, got {size!r}")
        if isinstance(t_us, bool) or not isinstance(t_us, (int, float)):
            raise ValueError(f"{where}: record {i}: 'out_of_place.time' must be a number of us, got {t_us!r}")
        size, t_us = int(size), float(t_us)
        _check_size(where, size)
        wrong = _wrong_count(rec["out_of_place"].get("wrong", rec["out_of_place"].get("#wrong", 0)), where, i)
        if wrong > 0:
            raise ValueError(f"{where}: nccl-tests reports {wrong} wrong results for size {size}")
        check_time("measured_op", t_us, f"{where}: out_of_place.time", "us")
        if size > 0:
            rows[size] = t_us
    ranks = set(range(_json_ranks(data, text, name))) if group is None else set()
    graph = _json_find(data, ("graph", "cudaGraph", "graph_launches"))
    if not rows:
        raise ValueError(f"{name}: no nccl-tests records with a positive size")
    gpus = _json_find(data, ("nGpus", "ngpus"))
    gpus = int(gpus) if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) and gpus >= 1 else 1
    if isinstance(graph, str):                   # "1" as a string: the count; anything else: unknown
        graph = int(graph) if graph.strip().isdigit() else None
    elif not isinstance(graph, (bool, int, float)):
        graph = None
    return _table(rows, name, group, ranks, collective, mode, graph, "json", gpus)


def _wrong_count(w, where: str, i: int) -> int:
    """nccl-tests' #wrong: a count, "N/A" (not checked: -c 0) or null; "3" as a string is 3, not 0."""
    if w is None or w == "N/A":
        return 0
    if isinstance(w, str) and w.strip().isdigit():
        return int(w)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or w != int(w) or w < 0:
        raise ValueError(f"{where}: record {i}: 'wrong' must be a count of wrong results or \"N/A\", got {w!r}")
    return int(w)


def _find_records(obj) -> list | None:
    """The first list of dicts (depth-first) whose entries carry 'out_of_place'."""
    if isinstance(obj, list):
        if obj and all(isinstance(x, dict) for x in obj) and any("out_of_place" in x for x in obj):
            return [x for x in obj if "out_of_place" in x]
        for x in obj:
            r = _find_records(x)
            if r is not None:
                return r
    elif isinstance(obj, dict):
        for v in obj.values():
            r = _find_records(v)
            if r is not None:
                return r
    return None


def _json_find(obj, keys: tuple[str, ...]):
    if isinstance(obj, dict):
        for k in keys:
            if k in obj and not isinstance(obj[k], (dict, list)):
                return obj[k]
        for v in obj.values():
            if isinstance(v, dict):
                r = _json_find(v, keys)
                if r is not None:
                    return r
    return None


def _json_ranks(data, text: str = "", name: str = "<json>") -> int:
    """Rank count from the JSON's config: a 'devices'/'ranks' list, or nranks/world_size/nGpus,
    within 0..MAX_RANKS (a claimed 1e9 would otherwise be materialized)."""
    n = None
    if isinstance(data, dict):
        for k in ("devices", "ranks"):
            for holder in (data, data.get("config", {}) if isinstance(data.get("config"), dict) else {}):
                if isinstance(holder.get(k), list):
                    n, key = len(holder[k]), k
                    break
            if n is not None:
                break
    if n is None:
        keys = ("nranks", "nRanks", "world_size", "nranks_total")
        n = _json_find(data, keys)
        key = next((k for k in keys if f'"{k}"' in text), keys[0])
        if isinstance(n, bool) or not isinstance(n, (int, float)):
            return 0
    if not (math.isfinite(n) and n == int(n) and 0 <= n <= MAX_RANKS):
        at = text.find(f'"{key}"')
        line = text.count("\n", 0, at) + 1 if at >= 0 else "?"
        raise ValueError(f"{name} line {line}: '{key}' must be a whole number of ranks in 0..{MAX_RANKS}, got {n}")
    return int(n)
