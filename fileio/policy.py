"""Every file tpsim reads or writes, by one policy each way (docs/reliability.md, issue #29).

Output (`--out`, `--plot`, `--trace`, sweep's `.json` twin, profiles, state files, compare's files):
  * the path is a regular file or does not exist yet; a directory, symlink, FIFO, socket or device
    is refused with one line (`check_output`, and again by the writers themselves), because the
    writers *replace* the path: `--out /dev/full` used to turn the device into a regular file and
    `--out /dev/stdout` would replace the symlink;
  * `-` is stdout, written on purpose, for the commands that print one document (`stdout_ok`);
  * every write is atomic: a temporary (mkstemp: O_EXCL, unpredictable name) in the same
    directory, then rename(2), so a reader sees the old file or the whole new one;
  * side files (`OUT.lock`, `OUT.partial.jsonl`) are opened O_NOFOLLOW and must be regular files of
    their own (one link): a planted `OUT.lock -> victim` is refused instead of truncated;
    temporaries (the writable probe, the atomic writers' temps) are mkstemp's.
Input (profiles, HF configs, nccl-tests outputs, `compare --measured`, checkpoints):
  * regular files only, after following symlinks (a Hugging Face cache's config.json is a symlink
    to a blob): a symlink to /dev/zero or a FIFO is refused at open, which never blocks (O_NONBLOCK);
  * size-bounded before reading (and read with a cap, in case the file grows meanwhile);
  * text is UTF-8 (a BOM is accepted); JSON is parsed by `parse_json` (no duplicate keys, no
    NaN/Infinity, integers below 2**63, bounded nesting), and every error names the file and line.
Lives in sim/ because sim itself writes (profiles, sweep checkpoints); it imports nothing of tpsim.
"""
from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import stat
import sys
import tempfile

STDOUT = "-"
MAX_JSON_DEPTH = 64          # nesting of objects/lists (the deepest real profile or config is ~10)
MAX_INT_DIGITS = 19          # |n| < 2**63 has at most 19 digits; more is nobody's measurement
# Input size limits, each well above the largest real file of its kind:
MAX_PROFILE_BYTES = 64 << 20          # a calibrated profile with its raw points is well under 1 MiB
MAX_CONFIG_BYTES = 16 << 20           # a Hugging Face config.json is a few KiB (id2label tables: ~1 MiB)
MAX_LOG_BYTES = 64 << 20              # an nccl-tests log: ~10 KiB per run; a measured-run JSON: ~1 MiB;
                                      # an engine benchmark's JSON (vllm bench latency, bench_one_batch): ~1 KiB
MAX_CHECKPOINT_BYTES = 1 << 30        # a sweep checkpoint: ~2 KiB per point, 10^5 points is 200 MiB
MAX_TEXT_BYTES = 64 << 20             # spd-plan's --text: WikiText-2 (the SPD paper's) is 1.3 MB (test) to 11 MB


# C0 and C1 control characters but tab and newline: text tpsim reads from a file or an argument is
# printed, and an escape sequence there could clear the screen or set the window title (issue 48)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def control_problem(text: str) -> str | None:
    """None when `text` is plain text, else what is wrong: "holds a control character ('\\x1b'); ..."
    (the one rule for third-party text: JSON inputs by parse_json, arguments by the CLI group)."""
    m = CONTROL.search(text)
    return None if m is None else (f"holds a control character ({m.group()!r}); text tpsim prints must be "
                                   f"plain text (an escape sequence could clear the screen or set the window title)")


def printable(text: str) -> str:
    """`text` with each control character but tab and newline shown as its escape ('\\x1b'): for
    what tpsim prints of text it did not write and could not refuse (a tool log's line in an error)."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


# ------------------------------------------------------------------ output

def _refuse_special(path: str, option: str, stdout_ok: bool = False) -> os.stat_result | None:
    """lstat of an existing `path` that is a regular file; None when absent; ValueError otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"{option} {path}: cannot use it: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{option} {path} is a directory; give a file path")
    if not stat.S_ISREG(st.st_mode):
        hint = "; give --out - to write to stdout" if stdout_ok else ""
        raise ValueError(f"{option} {path} is a {_kind(st.st_mode)}, not a regular file: tpsim replaces its "
                         f"output with a new file and will not replace that{hint}")
    return st


def check_output(out: str | os.PathLike, option: str = "--out", *, stdout_ok: bool = False) -> None:
    """`out` can be written, checked before any work (so a long run never fails at its last step):
    `-` where the command prints to stdout (`stdout_ok`), else a regular file or a new name in a
    directory that takes a new file (a probe created and removed: permission bits lie to root and on
    read-only mounts), and an existing file is writable. A directory that does not exist yet is
    made when the output is written (`make_parent`), as `compare --out-dir` makes its folder: the
    probe then goes into the nearest one that exists, so nothing is made for a run that fails."""
    out = os.fspath(out)
    if out == STDOUT:
        if stdout_ok:
            return
        raise ValueError(f"{option} -: this command writes a file (and files beside it); give a file path")
    if not out:
        raise ValueError(f"{option} must not be empty")
    st = _refuse_special(out, option, stdout_ok)
    d = os.path.dirname(os.path.abspath(out))
    while not os.path.isdir(d):           # made at the write; what exists on the way must be a folder
        if os.path.lexists(d):
            raise ValueError(f"{option} {out}: {d} is not a directory")
        d = os.path.dirname(d)
    try:
        fd, probe = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(out)}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{option} {out}: cannot write in {d}: {e.strerror}") from None
    if st is not None and not os.access(out, os.W_OK):
        raise ValueError(f"{option} {out}: the existing file is not writable")


def write_bytes_atomic(path: str | os.PathLike, data: bytes, option: str = "--out") -> None:
    """Replace `path` (a regular file or a new name) atomically; `-` writes to stdout."""
    path = os.fspath(path)
    if path == STDOUT:
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        out.write(data) if out is not None else sys.stdout.write(data.decode())
        sys.stdout.flush()
        return
    _refuse_special(path, option)
    d = make_parent(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)          # mkstemp makes 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def make_parent(path: str | os.PathLike) -> str:
    """The folder of output `path`, made (with its parents) where missing; check_output checked
    beforehand that it can be."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    return d


def write_text_atomic(path: str | os.PathLike, text: str, option: str = "--out") -> None:
    """Write a file so that readers see the old one or the whole new one, never a torn write."""
    write_bytes_atomic(path, text.encode(), option)


def json_text(obj, indent: int | None = 1) -> str:
    """JSON of `obj` that is always valid JSON: a NaN or Infinity (bare `NaN` is not JSON) is written
    as null, "no number", which readers already meet for values not measured (check's unchecked
    rows). None arises from a validated profile (tests/test_reliability_fuzz.py); this keeps a
    failed measurement (check's error of a non-finite output) reportable instead of crashing."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError:
        return json.dumps(_finite_or_null(obj), indent=indent, allow_nan=False)


def _finite_or_null(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_or_null(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite_or_null(x) for x in v]
    return v


def write_json_atomic(path: str | os.PathLike, obj, option: str = "--out") -> None:
    write_text_atomic(path, json_text(obj) + "\n", option)


def check_figure_path(path: str | os.PathLike, option: str = "--plot") -> None:
    """Refuse, before any work, a figure path whose format matplotlib cannot write (or a missing
    matplotlib): save_figure picks the format from the suffix, png without one."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase   # lazy: the [plot] extra, only with a figure
    except ImportError:
        raise ValueError(f"{option} needs matplotlib: pip install 'tpsim[plot]'") from None
    ext = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    kinds = FigureCanvasBase.get_supported_filetypes()
    if ext not in kinds:
        raise ValueError(f"{option} {os.fspath(path)}: matplotlib cannot write .{ext} figures; "
                         f"name a file ending in one of: {', '.join('.' + k for k in sorted(kinds))}")


def save_figure(fig, path: str | os.PathLike, **kw) -> None:
    """A matplotlib figure, rendered in memory and written like any output (savefig(path) would
    write through a symlink or a device)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=os.path.splitext(os.fspath(path))[1].lstrip(".") or "png", **kw)
    write_bytes_atomic(path, buf.getvalue(), "--plot")


def open_side_file(path: str | os.PathLike, *, append: bool = False) -> int:
    """A side file beside an output (OUT.lock, OUT.partial.jsonl), created if absent: O_NOFOLLOW
    (a planted symlink is refused, not followed), O_NONBLOCK (a planted FIFO cannot hang the open),
    then it must be a regular file with one link (a hard link to someone's file is refused).
    Returns the fd (read-write, or append-only with `append`)."""
    path = os.fspath(path)
    make_parent(path)                 # a missing output folder is made (check_output)
    flags = (os.O_WRONLY | os.O_APPEND if append else os.O_RDWR) | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link; tpsim will not write through it: remove it or "
                             f"choose another --out") from None
        raise ValueError(f"cannot write beside --out: {e.strerror} ({path})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"file with {st.st_nlink} hard links"
        raise ValueError(f"{path} is a {what}, not a file of tpsim's own: remove it or choose another --out")
    os.set_blocking(fd, True)
    return fd


def open_append(path: str | os.PathLike):
    """A text file object appending to side file `path` (see open_side_file)."""
    return os.fdopen(open_side_file(path, append=True), "a")


# ------------------------------------------------------------------ input

def read_input_bytes(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; ValueError `"{what} {path}: ..."` for
    anything else (missing, a directory, a FIFO, a device behind a symlink, too large)."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what} {path} is a {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{what} {path}: {st.st_size} bytes is over the {_fmt_bytes(max_bytes)} limit")
        os.set_blocking(fd, True)
        chunks, n = [], 0
        while n <= max_bytes:
            b = os.read(fd, min(1 << 20, max_bytes + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > max_bytes:
            raise ValueError(f"{what} {path}: over the {_fmt_bytes(max_bytes)} limit (it grew while read)")
        return b"".join(chunks)
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def read_input_text(path: str | os.PathLike, what: str, max_bytes: int, *, lenient: bool = False) -> str:
    """A regular file's text: UTF-8, a BOM accepted; undecodable bytes are an error naming the
    offset, or (`lenient`, for tool logs that may carry stray bytes) replaced."""
    raw = read_input_bytes(path, what, max_bytes)
    try:
        return raw.decode("utf-8-sig", errors="replace" if lenient else "strict")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {os.fspath(path)}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                         f"{e.start})") from None


def _fmt_bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


class _JsonRefused(ValueError):
    def __init__(self, token: str, why: str):
        super().__init__(why)
        self.token = token


def _int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS or abs(int(s)) >= 1 << 63:
        raise _JsonRefused(s, f"integer {s[:20]}{'...' if len(s) > 20 else ''} is out of range (|n| < 2**63)")
    return int(s)


def _no_duplicates(pairs):
    out = dict(pairs)                   # in C; only an object with a repeated key is walked in Python
    if len(out) != len(pairs):
        seen = set()
        k = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _JsonRefused("", f"key {k!r} appears twice in one object (which one is meant?)")
    return out


def parse_json(text: str, where: str, *, max_depth: int = MAX_JSON_DEPTH, walk: bool = True):
    """JSON text -> Python, refusing what no later check could catch: duplicate keys, NaN and
    Infinity, integers of 2**63 or more (or of thousands of digits), nesting deeper than
    `max_depth`, a control character in a string or key (control_problem). ValueError `"{where} line N: ..."` or `"{where}: field 'a.b[3]' ..."`. `walk=False`:
    the caller walks the tree itself for depth and non-finite numbers (one walk, not two)."""
    try:
        data = json.loads(text, parse_int=_int, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested deeper than {max_depth} levels") from None
    except _JsonRefused as e:
        if not e.token:
            raise ValueError(f"{where}: {e}") from None
        at = text.find(e.token)
        raise ValueError(f"{where} line {text.count(chr(10), 0, max(at, 0)) + 1}: {e}") from None
    except ValueError as e:          # int() of a huge literal, before our hook saw it
        raise ValueError(f"{where}: not valid JSON ({e})") from None
    bad = _first_bad(data, max_depth) if walk else None
    if bad:
        raise ValueError(f"{where}: field '{bad[0]}' {bad[1]}")
    return data


def _first_bad(data, max_depth: int) -> tuple[str, str] | None:
    """(path, why) of the first value nested deeper than `max_depth`, of the first NaN/Infinity
    (which Python's json reads, and JSON does not have) or of the first string or key holding a
    control character, walked without recursion."""
    stack = [("", data, 0)]
    while stack:
        path, v, depth = stack.pop()
        if depth > max_depth:
            return path or "<top>", f"is nested deeper than {max_depth} levels"
        if isinstance(v, float) and not math.isfinite(v):
            return path or "<top>", f"must be a finite number, got {v} (JSON has no NaN or Infinity)"
        if isinstance(v, str) and CONTROL.search(v):
            return path or "<top>", control_problem(v)
        if isinstance(v, dict):
            for k in v:
                if CONTROL.search(k):
                    return f"{path}.{printable(k)}" if path else printable(k), f"is a key that {control_problem(k)}"
            stack += [(f"{path}.{k}" if path else str(k), x, depth + 1) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(f"{path}[{i}]", x, depth + 1) for i, x in enumerate(v)]
    return None
