"""The code base is ruff-clean and importing skntp stays light."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean():
    # ruff is in the test extra: a missing ruff is a broken test environment, not a skip
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed; install the test extra: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "skntp", "tests",
                          "benchmarks", "examples", "tools"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_import_does_not_import_torch_or_matplotlib():
    code = ("import skntp, skntp.svm, skntp.datasets, skntp.sweeps, sys; "
            "assert 'torch' not in sys.modules, 'torch'; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_demo_runs():
    out = subprocess.run([sys.executable, "-m", "skntp", "demo", "--max-iter", "20"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert "cos(W - W*, W^mm)" in out.stdout
    assert "SVM limit" in out.stdout and "What the rows are" in out.stdout
    assert out.stderr == ""  # no warning, no progress: the table is the whole output


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines()
                if line.startswith("pip install ") and "pytest" in line]
    assert len(commands) == 1, commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == commands[0]
    assert "--runslow" in commands[0] and "--cov=skntp" in commands[0]
    # a fresh environment with the newest packages, as a new user's
    assert "--upgrade" in commands[0] and "venv" in "\n".join(ci)
