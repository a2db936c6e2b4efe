"""Every script in ``examples/`` runs (slow tier: ``pytest --runslow``).

Each example runs in a subprocess with ``--quick`` when its ``--help`` offers
it (else with the short arguments listed below), with a ``--plot`` file when
it takes one, and must exit 0, print a table, and write the plot.
"""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

# Short runs for examples without a --quick flag (the same code paths, fewer trials).
SHORT_ARGS = {
    "attention_fig1.py": ["--iters", "300"],
    "attention_fig9.py": ["--trials", "20", "--iters", "200", "--dims", "2", "10",
                          "--n-jobs", "1"],
    "joint_fig3.py": ["--iters", "200"],
    "self_attention_figs.py": ["--trials", "3", "--no-draw"],
}


def _run(args, tmp_path, timeout=900):
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_there_are_examples():
    names = {p.name for p in EXAMPLES}
    assert {"ntp_app_b2.py", "ntp_fig1_2d.py", "ntp_real_text.py"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    help_text = _run([path, "--help"], tmp_path, timeout=120)
    assert help_text.returncode == 0, help_text.stderr
    if "--quick" in help_text.stdout:
        args = ["--quick"]
    else:
        args = list(SHORT_ARGS.get(path.name, []))
    out_png = tmp_path / "plot.png"
    if "--plot" in help_text.stdout:
        args += ["--plot", out_png]
    proc = _run([path, *args], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) >= 3, proc.stdout
    assert "nan" not in proc.stdout.lower().split(), proc.stdout
    if "--plot" in help_text.stdout:
        assert out_png.exists() and out_png.stat().st_size > 1000


def _reproduction_names():
    from skntp._reproduce import REPRODUCTIONS

    return sorted(REPRODUCTIONS)


@pytest.mark.slow
@pytest.mark.parametrize("name", _reproduction_names())
def test_reproduction_quick(name, tmp_path):
    """``python -m skntp reproduce NAME --quick --plot`` for every registered figure."""
    out_png = tmp_path / f"{name}.png"
    proc = _run(["-m", "skntp", "reproduce", name, "--quick", "--plot", out_png], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "paper" in proc.stdout.lower(), proc.stdout
    assert out_png.exists() and out_png.stat().st_size > 1000
