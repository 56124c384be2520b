"""fileio/shape.py: a document's shape declared as a spec, refused at the first wrong field with
its path (the state file's groups and a measured run are checked with it)."""
import pytest

from tpsim.fileio.shape import Depends, ShapeError, check_shape

SPEC = {
    "name": "text",
    "n?": "count",
    "tags": {"*": "text"},
    "rows": ("non-empty list", [{"t": "positive", "kind?": lambda v: None if v in ("a", "b") else "is not a or b"}]),
    "pair": Depends(lambda d: {"lo?": "number", "hi" + ("" if isinstance(d, dict) and "lo" in d else "?"): "number"}),
}
GOOD = {"name": "x", "tags": {"a": "1"}, "rows": [{"t": 1.5}], "pair": {}}


@pytest.mark.parametrize("doc, says", [
    (GOOD | {"n": 3}, None),
    (GOOD | {"name": 3}, "f 'name' must be a string, got 3"),
    ({k: v for k, v in GOOD.items() if k != "rows"}, "f 'rows' is missing"),
    (GOOD | {"n": 2.5}, "f 'n' must be a whole number >= 0, got 2.5"),
    (GOOD | {"n": True}, "f 'n' must be a whole number >= 0, got True"),          # true is no count
    (GOOD | {"tags": {"a": "1", "b": 2}}, "f 'tags.b' must be a string, got 2"),     # every key of "*"
    (GOOD | {"rows": []}, "f 'rows' must be a non-empty list, got []"),
    (GOOD | {"rows": [{"t": 1}, {"t": 0}]}, "f 'rows[1].t' must be a number > 0, got 0"),
    (GOOD | {"rows": [{"t": 1, "kind": "c"}]}, "f 'rows[0].kind' is not a or b"),
    (GOOD | {"pair": {"lo": 1}}, "f 'pair.hi' is missing"),                          # lo brings hi
    (GOOD | {"pair": {"hi": 2}}, None),
    ([GOOD], "doc must be an object, got [{"),
])
def test_check_shape_names_the_first_wrong_field(doc, says):
    if says is None:
        check_shape(doc, SPEC, "f", "doc")
        return
    with pytest.raises(ShapeError) as e:
        check_shape(doc, SPEC, "f", "doc")
    assert str(e.value).startswith(says)
