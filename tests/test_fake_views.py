"""hw/fake_views.py: the FakeTensor view strides that decide whether the reference's wo folds into one
mm (Stack.wo_bmm), on this torch and under the reference's (torch 2.5's) rule."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tpsim.hw.fake_views import folds_attention_output, view_strides  # noqa: E402

pytestmark = pytest.mark.hw


def _minor() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def test_eager_view_strides_fold_and_this_torchs_do_not_in_any_order():
    """gpt-fast's attention output [2, 1, 3, 4] viewed as [2, 1, 12]: eager's rule (the C++ meta) gives
    (12, 12, 1), which matmul folds; torch 2.9+'s fake impl (torch._refs._reshape_view_helper) keeps the
    size-1 dim's stride 4. The dispatch cache is class-wide, so each mode is asked after the other."""
    bare = folds_attention_output()
    with view_strides("eager"):
        assert folds_attention_output() is True
    assert folds_attention_output() is bare                  # the eager answer was not left cached
    with view_strides("fake"):
        assert folds_attention_output() is bare
    with view_strides("eager"):
        assert folds_attention_output() is True
    if _minor() >= (2, 9):
        assert bare is False                                 # the pinned 2.13: wo would be a bmm


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown view strides 'cpp'; choose from: eager, fake"):
        with view_strides("cpp"):
            pass
