"""The README's two set-up commands, in order, leave an importable package.

``pip install . && python -m skntp demo`` compiles the coordinate-ascent kernel
(numba, cached on disk); the test command's ``pip install -e .`` then uninstalls
the package.  Cache files written next to the installed source would outlive the
uninstall and keep a ``skntp/`` folder in site-packages that shadows the editable
install ("ImportError ... unknown location").
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import skntp.svm.solvers.dual_coordinate_descent as _dcd

ROOT = Path(__file__).resolve().parents[2]


def test_compiled_kernels_are_cached_outside_the_package(monkeypatch, tmp_path):
    numba = pytest.importorskip("numba")
    package = Path(_dcd.__file__).resolve().parents[2]
    kernel = _dcd._compile(_dcd._sweep_source)
    path = Path(kernel._cache._cache_path).resolve()
    assert package not in path.parents
    assert path.is_relative_to(Path(_dcd.cache_dir()).resolve())
    # a cache folder the user chose is used, and numba's setting is left as it was
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    assert _dcd.cache_dir() == str(tmp_path)
    kernel = _dcd._compile(_dcd._sweep_source)
    assert Path(kernel._cache._cache_path).resolve().is_relative_to(tmp_path.resolve())
    assert numba.config.CACHE_DIR == str(tmp_path)


@pytest.mark.slow
def test_the_readme_commands_in_order_leave_an_importable_package(tmp_path):
    # a copy of the tracked tree (building must not write into the checkout)
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    venv = tmp_path / "venv"
    # no pip or setuptools of its own: this environment's (newer) serve it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    inner = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                            "['purelib'])"], capture_output=True, text=True,
                           check=True).stdout.strip()
    # the dependencies come from this environment (after the new venv's own packages)
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(inner, "_outer.pth").write_text("\n".join(sorted(paths)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NUMBA"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    away = tmp_path / "elsewhere"
    away.mkdir()
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]

    def run(*args):
        done = subprocess.run(list(args), cwd=away, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    run(*pip, str(src))
    out = run(str(python), "-m", "skntp", "demo", "--max-iter", "20").stdout
    assert "SVM limit" in out
    # the dual coordinate descent kernel compiles into the user's cache, not the checkout
    run(str(python), "-c", "import numpy as np; from skntp.svm import ntp_svm; "
        "rng = np.random.default_rng(0); H = rng.standard_normal((8, 12)); "
        "S = np.eye(5, dtype=bool)[rng.integers(0, 5, 8)]; S[:, 0] = True; "
        "ntp_svm(H, S, method='dcd')")
    assert list((tmp_path / "cache" / "skntp" / "numba").rglob("*.nbi"))  # compiled, cached
    run(*pip, "-e", str(src))
    assert not Path(inner, "skntp").exists()  # nothing left of the regular install
    out = run(str(python), "-c", "import skntp; from skntp import NTPDecoderClassifier; "
              "print(skntp.__file__)").stdout
    assert Path(out.strip()).resolve() == (src / "skntp" / "__init__.py").resolve()
