"""Every Python snippet of the README runs on its own, as written, from a folder outside
the repository, and prints the same numbers every time; the numbers its comments quote
are the ones it prints."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"),
                      flags=re.S)
#: snippets that take more than a few seconds (10 000 GD steps; the text examples)
SLOW = {0, 3, 4}


def _run(code, cwd):
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_readme_has_its_snippets():
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("k", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k
                               for k in range(len(SNIPPETS))])
def test_readme_snippet_runs_as_written(k, tmp_path):
    code = SNIPPETS[k]
    first = _run(code, tmp_path)
    assert _run(code, tmp_path) == first  # the same numbers every time
    # a number quoted in a print line's comment ("...: 0.943") is what that line prints
    printed = iter(first.splitlines())
    for line in code.splitlines():
        if not line.startswith("print("):
            continue
        out = next(printed)
        quoted = re.search(r"#.*:\s*([-+0-9.e]+)\s*$", line)
        if quoted and not quoted.group(1).startswith("~"):
            value = quoted.group(1)
            assert f"{float(out):.{len(value.split('.')[-1])}f}" == value \
                if "e" not in value else float(out) == pytest.approx(float(value), rel=0.5)
