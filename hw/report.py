"""What `tpsim bench` and `tpsim check` print: their tables in the style every table of tpsim has
(commands/console.py compact_table: light rules, no vertical lines, two-line headers with the unit
below the name) and predict's column names where a column means what predict's does (prefill ms,
decode ms, tokens/s, speedup, exposed comm ms); notes under a table wrapped at its width. Imports no
torch: the launcher and the ranks (under torchrun, rank 0 prints) both format with it."""
from __future__ import annotations

import io
import textwrap

WIDTH = 80         # a terminal's columns when nothing says otherwise: every line of the table fits it


def wrapped(line: str) -> list[str]:
    """A note under a table in lines of at most WIDTH, broken at spaces (later lines indented by 2): a
    stack note ran to 234 columns (issue 48). commands/console.py echo_wrapped is the commands' own."""
    return textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False) or [""]


def caption(fields: list[str]) -> list[str]:
    """A table's caption: `fields` joined by two spaces, wrapped between fields to WIDTH columns (later
    lines indented by 4); a field is never cut (a config.json path as the model may stand alone)."""
    lines = [fields[0]]
    for f in fields[1:]:
        if len(lines[-1]) + 2 + len(f) <= WIDTH:
            lines[-1] += "  " + f
        else:
            lines.append("    " + f)
    return lines


def table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a table as predict draws it (rich, SIMPLE_HEAD, no edge padding), at most WIDTH wide:
    the first column left-aligned, wrapping (a long spd:LIST), the others right-aligned, never cut."""
    from rich import box                  # lazy: rich takes ~30 ms to import; only printing a result needs it
    from rich.console import Console      # lazy: as above
    from rich.markup import escape        # lazy: as above
    from rich.table import Table          # lazy: as above
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
    for r in rows:
        t.add_row(*map(escape, r))           # a schedule spec's brackets are text, not markup
    buf = io.StringIO()
    Console(file=buf, width=WIDTH, no_color=True, highlight=False).print(t)
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def format_result(result: dict) -> str:
    """bench's result as its table: the caption, a row per schedule, the notes."""
    # the caption was one line, 81 columns for tiny at --prompt 16 --gen 5 (85 at bench's defaults)
    lines = caption([result["model"], f"TP {result['tp']}", f"batch {result['batch']}",
                     f"prompt {result['prompt_len']}", f"gen {result['gen_len']}", result.get("precision", result["dtype"]),
                     f"{result['env']['backend']}/{result['env']['device']}",
                     f"(median of {result['repeats']}, interleaved)"])
    rows = []
    for r in result["schedules"]:
        sp = r["spread"]["speedup"]
        exposed = "-" if r["exposed_comm_s"] is None else f"{r['exposed_comm_s'] * 1e3:.2f}"
        rows.append([r["schedule"], f"{r['prefill_s'] * 1e3:.2f}", f"{r['decode_s'] * 1e3:.2f}",
                     f"{r['tokens_per_s']:.1f}", f"{r['speedup']:.2f}x",
                     f"{sp.get('min', 0):.2f}-{sp.get('max', 0):.2f}x", exposed])
    lines += table(["schedule", "prefill\nms", "decode\nms", "tokens\n/s", "speedup", "speedup\nspread",
                    "exposed\ncomm ms"], rows)
    if any(r["exposed_comm_s"] is None for r in result["schedules"]):
        lines.append("exposed comm ms -: not measured with --compile (its waits are inside the graph)")
    notes = [f"{r['schedule']}: {n}" for r in result["schedules"] for n in r.get("notes", ())]
    notes += list(result["stack"].get("collective_notes", ()))        # each says "symm-mem: ..." (hw.symm_mem)
    return "\n".join(lines + [w for n in notes for w in wrapped(n)])


def format_check(result: dict) -> str:
    """check's result as its table: the caption, a row per schedule, the notes, the verdict."""
    # the caption wraps between its fields at 80 columns, as bench's (a long model name or config path)
    lines = caption([f"check {result['model']}", f"TP {result['tp']}", result.get("precision", result["dtype"]),
                     f"{result['backend']}/{result['device']}", f"batch {result['batch']}",
                     f"prompt {result['prompt_len']}", f"gen {result['gen_len']}"])
    fmt = lambda e: "-" if e is None else f"{e:.2e}"  # noqa: E731
    lines += table(["schedule", "prefill\nerror", "decode\nerror", "decode\nsteps", "result"],
                   [[r["schedule"], fmt(r["prefill_err"]), fmt(r["decode_err"]), str(r["decode_steps"]),
                     "ok" if r["ok"] else "FAIL"] for r in result["schedules"]])
    # each note (why a schedule ran unchecked, a token-split fallback) on its own line under the table: beside
    # its row it took the row past 80 columns
    lines += [w for r in result["schedules"] if r.get("note") for w in wrapped(f"{r['schedule']}: {r['note']}")]
    lines.append("all schedules match their references" if result["ok"] else "numerics check FAILED")
    return "\n".join(lines)
