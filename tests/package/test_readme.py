"""Every Python snippet of the README runs on its own, as written, from a folder outside
the repository, prints no warning and the same numbers every time; the numbers its
comments quote are the ones it prints (``doc_snippets.py``)."""

import re
from pathlib import Path

import pytest
from doc_snippets import check_quoted_values, run_script

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"),
                      flags=re.S)
#: snippets that take more than a few seconds (10 000 GD steps; the text examples)
SLOW = {0, 3, 4}


def test_the_readme_has_its_snippets():
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("k", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k
                               for k in range(len(SNIPPETS))])
def test_readme_snippet_runs_as_written(k, tmp_path):
    code = SNIPPETS[k]
    first = run_script(code, tmp_path)
    assert run_script(code, tmp_path) == first  # the same numbers every time
    check_quoted_values(code, first)


def test_the_numbers_of_a_snippet_are_checked():
    """The comparison itself: a quoted value that is not printed fails."""
    code = 'print(x)  # x: 0.943\nprint(y)  # y: 3.3e-4\nprint(z)  # z: [\'a\' \'b\']\n' \
           'print(w)  # the order: ~1e-11\n'
    assert check_quoted_values(code, "0.9431\n0.0004\n['a' 'b']\n5e-12\n") == (4, 3)
    for wrong in ("0.9441\n0.0004\n['a' 'b']\n1\n", "0.943\n0.004\n['a' 'b']\n1\n",
                  "0.943\n0.0004\n['a' 'c']\n1\n"):
        with pytest.raises(AssertionError):
            check_quoted_values(code, wrong)
