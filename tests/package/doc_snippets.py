"""Run a documentation snippet as a script, as a reader would, and check what it shows.

Shared by ``test_readme.py`` and ``test_docs.py`` (imported by name: pytest puts this
folder on ``sys.path``).

* :func:`run_script` runs the snippet in a fresh interpreter from a folder outside
  the repository (this checkout first on the path, matplotlib's Agg backend); the
  snippet must exit 0, print no warning, and every figure it leaves open must have
  no title, axis label, tick label or legend over another panel.
* :func:`check_quoted_values` compares the value quoted at the end of a print line's
  comment (``print(x)  # what x is: 0.943``) with what that line printed.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: runs the snippet (argv[1]) as __main__, then checks the figures it left open
RUNNER = r"""
import itertools, runpy, sys
runpy.run_path(sys.argv[1], run_name="__main__")
plt = sys.modules.get("matplotlib.pyplot")
for num in plt.get_fignums() if plt else []:
    fig = plt.figure(num)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for k, ax in enumerate(fig.axes):
        if not (ax.get_visible() and ax.axison):
            continue
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        texts = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
                 *(t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1),
                 *(t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1)]
        items = [(repr(t.get_text()), t) for t in texts if t.get_visible() and t.get_text()]
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            items.append(("its legend", legend))
        items.append(("the panel", ax))
        boxes += [(k, name, item.get_window_extent(renderer)) for name, item in items]
    for (i, a, p), (j, b, q) in itertools.combinations(boxes, 2):
        if i != j and p.x0 < q.x1 - 0.5 and q.x0 < p.x1 - 0.5 and p.y0 < q.y1 - 0.5 \
                and q.y0 < p.y1 - 0.5:
            sys.exit(f"figure {num}: {a} of panel {i} overlaps {b} of panel {j}")
"""


def run_script(code, cwd, timeout=600):
    """``stdout`` of ``code`` run as a script in ``cwd``; fails the test on a non-zero
    exit, a warning on stderr, or overlapping labels in a figure left open."""
    path = Path(cwd) / "snippet.py"
    path.write_text(code, encoding="utf-8")
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", RUNNER, str(path)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def check_quoted_values(code, stdout):
    """Each value quoted at the end of a print line's comment is what that line printed.

    ``# ...: 0.943`` is compared at the quoted number of decimals, ``# ...: 3.3e-4``
    within a factor 1.5, ``# ...: ['the' 'cat']`` as text; ``# ...: ~1e-11`` (an order of
    magnitude) is not compared.  Each ``print(`` line at the start of a line prints one
    line.

    Returns
    -------
    (n_prints, n_checked) : tuple of int
    """
    printed = iter(stdout.splitlines())
    n_prints = n_checked = 0
    for line in code.splitlines():
        if not line.startswith("print("):
            continue
        n_prints += 1
        out = next(printed)
        text = re.search(r"#.*:\s*(\[.*\])\s*$", line)
        number = re.search(r"#.*:\s*([-+0-9.e]+)\s*$", line)
        if text:
            assert out == text.group(1), (line, out)
        elif number:
            value = number.group(1)
            if "e" in value:
                assert float(out) == pytest.approx(float(value), rel=0.5), (line, out)
            else:
                decimals = len(value.split(".")[-1]) if "." in value else 0
                assert f"{float(out):.{decimals}f}" == value, (line, out)
        else:
            continue
        n_checked += 1
    return n_prints, n_checked
