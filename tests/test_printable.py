"""Issue 48 item 5: one printable-text rule for every third-party string (fileio/policy.py CONTROL).
An escape sequence in an HF config's `architectures`, a --model folder's name or a stack file's name
reached the terminal raw (it can set the window title or clear the screen); profiles already refused
control characters. Now JSON inputs refuse them naming the field (parse_json), arguments refuse them
naming the argument (the `tpsim` group), and an error that quotes a tool's log shows them escaped.
Nothing printed holds a raw control character. Pure Python: no torch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpsim import cli
from tpsim.fileio.policy import CONTROL, parse_json, printable

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
ESC = "\x1b]0;pwned\x07"              # sets the window title


def one_plain_line_exit_2(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [x for x in r.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert not CONTROL.search(r.output), repr(r.output)       # escaped, never raw
    return lines[0]


def _config(tmp_path, **change) -> Path:
    cfg = json.loads((FIX / "hf" / "llama-3.1-8b" / "config.json").read_text()) | change
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    return tmp_path / "m"


@pytest.mark.parametrize("args", [["predict", "--tp", "8", "--model"], ["models", "--show"]])
def test_an_escape_in_an_hf_config_is_refused_naming_the_field(tmp_path, args):
    m = _config(tmp_path, architectures=[f"Llama{ESC}ForCausalLM"])
    line = one_plain_line_exit_2(CliRunner().invoke(cli.main, [*args, str(m)]))
    assert "config.json: field 'architectures[0]' holds a control character ('\\x1b')" in line, line


def test_an_escape_in_a_config_key_is_refused(tmp_path):
    m = _config(tmp_path, **{f"x{ESC}": 1})
    assert "is a key that holds a control character" in one_plain_line_exit_2(
        CliRunner().invoke(cli.main, ["models", "--show", str(m)]))


def test_an_escape_in_an_argument_is_refused_naming_it(tmp_path):
    """Before: `--model 'm<ESC>[2Jx'` printed the folder name raw in predict's title."""
    m = tmp_path / "m\x1b[2Jx"
    m.mkdir()
    (m / "config.json").write_text((FIX / "hf" / "llama-3.1-8b" / "config.json").read_text())
    line = one_plain_line_exit_2(CliRunner().invoke(cli.main, ["predict", "--tp", "8", "--model", str(m)]))
    assert line.startswith("Error: argument 5 (") and "\\x1b[2Jx" in line and "holds a control character" in line


def test_an_escape_in_a_stack_file_name_is_refused(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"format": "tpsim-stack", "extends": "vllm", "name": f"my{ESC}"}))
    line = one_plain_line_exit_2(CliRunner().invoke(cli.main, ["predict", "--model", "tiny", "--tp", "2",
                                                               "--stack", str(p)]))
    assert "s.json: field 'name' holds a control character" in line


def test_an_escape_quoted_from_a_tool_log_is_shown_escaped(tmp_path):
    """A text log is read as it is (nccl-tests output is no JSON): where an error quotes it (here the
    column header of a row that does not fit it), the escape is shown as '\\x1b', not sent
    (commands/errors.py)."""
    lines = (FIX / "nccl_tests" / "ar_v2_13.txt").read_text().splitlines()
    head = next(i for i, x in enumerate(lines) if "redop" in x and "size" in x)
    row = next(i for i, x in enumerate(lines) if x.strip() and x.split()[0].isdigit())
    lines[head] = lines[head].replace("redop", f"redop{ESC}")
    lines[row] += " 0"
    (tmp_path / "a.txt").write_text("\n".join(lines))
    for args in (["profiles", "import-nccl-tests", str(tmp_path / "a.txt"), "--out", str(tmp_path / "o.json")],
                 ["collective", "--group", "4", "--compare", str(tmp_path / "a.txt")]):
        line = one_plain_line_exit_2(CliRunner().invoke(cli.main, args))
        assert "redop\\x1b]0;pwned\\x07" in line, line


def test_printable_keeps_tabs_newlines_and_unicode():
    assert printable("a\tb\nc é 漢") == "a\tb\nc é 漢"
    assert printable("\x1b[2J\x9b\x7f") == "\\x1b[2J\\x9b\\x7f"
    with pytest.raises(ValueError, match="field 'a' holds a control character"):
        parse_json('{"a": "\\u001b[2J"}', "x.json")
