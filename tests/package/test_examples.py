"""Every script in ``examples/`` runs as plain user code and draws its figures.

Each example runs in a fresh interpreter (this checkout first on the path),
with ``plt.show()`` saving every open figure: it must exit 0, print its
table next to the paper's claim (``paper`` in its output, no NaN), use only
the public API, and draw at least one figure.  The quick ones run here,
by default; the long ones (the papers' full sizes) run in the gallery build
of the slow tier (``tests/package/test_docs.py``), which checks the same.
"""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("plot_*.py"))
# seconds on a 2-core machine: ntp_app_b2 ~20, attention_fig9 ~20, self_attention ~11,
# embeddings_real_text 10 s of CPU, real_text_separability 21, embeddings_synthetic ~30,
# trained_transformer ~90 (two trainings of a transformer, 32 readings)
SLOW = {"plot_ntp_app_b2.py", "plot_attention_fig9.py", "plot_self_attention_figs.py",
        "plot_optimizer_norms.py", "plot_transformers_svm.py", "plot_real_text_separability.py",
        "plot_embeddings_real_text.py", "plot_embeddings_synthetic.py",
        "plot_trained_transformer.py"}

RUNNER = """
import runpy, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
shown = []
def show(*args, **kwargs):
    for num in plt.get_fignums():
        if num not in shown:
            plt.figure(num).savefig(f"figure_{num}.png", dpi=50)
            shown.append(num)
plt.show = show
runpy.run_path(sys.argv[1], run_name="__main__")
show()
"""

# one page per paper figure, plus the recipe for your own text
EXPECTED = {
    "plot_ntp_fig1_2d.py",          # NTP paper Fig. 1/2
    "plot_ntp_app_b2.py",           # NTP paper Fig. 4/5
    "plot_attention_fig1.py",       # max-margin paper Fig. 1/8
    "plot_attention_fig9.py",       # max-margin paper Fig. 9
    "plot_joint_fig3.py",           # max-margin paper Fig. 3
    "plot_self_attention_figs.py",  # self-attention paper Figs. 2-4
    "plot_transformers_svm.py",     # Transformers as SVMs: W, K Q^T and rank
    "plot_optimizer_norms.py",      # the optimizer chooses the norm (Fan et al., AttentionMD)
    "plot_your_own_text.py",
    "plot_real_text_separability.py",  # real text with d < m: the separable rows (#37)
    "plot_embeddings_real_text.py",  # NTP-UFM and a torch MLP on real text against L_mm (#36)
    "plot_embeddings_synthetic.py",  # NTP-UFM on the synthetic data of Zhao et al. (2024)
    "plot_trained_transformer.py",  # a transformer on real text, read against both limits (#48)
}


def _env():
    """The scripts' environment: this checkout first on the path, Agg, and one
    BLAS/OpenMP/torch thread (they run beside pytest's other workers, -n auto one per
    core, and a pool of threads spins for cores those workers hold: the ntp-ufm-real-text
    reproduction took 17 s of CPU on two threads against 7.5 s on one, the same output)."""
    return dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                MKL_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def _params():
    # the long ones run in the slow tier's gallery build (tests/package/test_docs.py), which
    # checks their pages for the same things: running them here too doubled CI's time
    return [p for p in EXAMPLES if p.name not in SLOW]


def test_one_example_per_figure_and_your_own_text():
    from skntp._reproduce import REPRODUCTIONS

    assert {p.name for p in EXAMPLES} == EXPECTED
    readme = (ROOT / "examples" / "README.txt").read_text(encoding="utf-8")
    for name in REPRODUCTIONS:
        assert f"``{name}``" in readme, name


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_uses_only_the_public_api(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and "paper" in doc.lower(), "the docstring states the paper's claim"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("skntp"):
            assert not any(part.startswith("_") for part in node.module.split(".")), \
                node.module
            assert not any(a.name.startswith("_") for a in node.names), node.module
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("skntp._") for a in node.names)


@pytest.mark.parametrize("path", _params(), ids=lambda p: p.stem)
def test_example_runs(path, tmp_path, request):
    if request.config.getoption("--runslow"):
        pytest.skip("--runslow: the gallery build (tests/package/test_docs.py) runs every "
                    "example and checks the same")
    pytest.importorskip("matplotlib")
    env = _env()
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert len(out.strip().splitlines()) >= 3 and "paper" in out.lower(), out
    assert "nan" not in out.lower().split(), out
    figures = list(tmp_path.glob("figure_*.png"))
    assert figures and all(f.stat().st_size > 1000 for f in figures)


def _reproduction_names():
    from skntp._reproduce import REPRODUCTIONS

    return sorted(REPRODUCTIONS)


@pytest.mark.slow
@pytest.mark.parametrize("name", _reproduction_names())
def test_reproduction_quick(name, tmp_path):
    """``python -m skntp reproduce NAME --quick --plot`` for every registered figure."""
    out_png = tmp_path / f"{name}.png"
    env = _env()
    proc = subprocess.run([sys.executable, "-m", "skntp", "reproduce", name, "--quick",
                           "--plot", str(out_png)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "paper" in proc.stdout.lower(), proc.stdout
    assert out_png.exists() and out_png.stat().st_size > 1000
