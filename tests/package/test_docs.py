"""The documentation: builds with warnings as errors, its code runs, its gallery renders.

* ``test_docs_build`` (default run): the whole site with ``-W``, the gallery
  pages generated but not executed (``plot_gallery=0``), which is fast; with
  ``--runslow`` the gallery build below makes the same checks instead.
* ``test_user_guide_code_runs`` (default run): every ``.. code-block::
  python`` of the user-guide pages runs, page by page.
* ``test_user_guide_page_prints_what_it_quotes``: the pages of ``QUOTED_PAGES``
  (NTP-UFM) run as one script each (``doc_snippets.py``), with the numbers their
  comments quote.
* ``test_getting_started_block_runs_as_a_script``: every block of the
  getting-started page runs on its own as a script (``doc_snippets.py``), with
  the numbers its comments quote (the plots block in the slow tier).
* ``test_docs_build_with_gallery`` (slow): the site as published, every
  example executed by sphinx-gallery; each gallery page must show its
  figure(s) and its printed output, and MathJax must be the bundled copy.
"""

import importlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from doc_snippets import check_quoted_values, run_script

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = sorted((ROOT / "examples").glob("plot_*.py"))
PAGES = ["getting_started", "user_guide/decoder", "user_guide/embeddings",
         "user_guide/attention", "user_guide/key_query", "user_guide/joint",
         "user_guide/self_attention", "user_guide/optimizers", "user_guide/machinery"]


def _build(tmp_path, *extra, timeout=900):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("pydata_sphinx_theme")
    pytest.importorskip("sphinx_gallery")
    pytest.importorskip("matplotlib")
    try:
        importlib.import_module("sphinx-mathjax-offline")  # the bundled MathJax
    except ImportError:
        pytest.skip("sphinx-mathjax-offline is not installed")
    out = tmp_path / "html"
    # sphinx-gallery writes its pages into the source tree: build from a copy
    src = tmp_path / "src"
    shutil.copytree(DOCS, src / "docs",
                    ignore=shutil.ignore_patterns("_build", "auto_examples"))
    shutil.copytree(ROOT / "examples", src / "examples")
    # one BLAS/OpenMP/torch thread: sphinx-gallery runs the examples one after another in
    # this one process, beside pytest's other workers (-n auto, one per core), and a pool
    # of threads spins for cores those workers hold (plot_real_text_separability's SVDs:
    # 38 s of CPU on two threads against 21 s on one, the same output)
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), *extra, str(src / "docs"), str(out)],
        capture_output=True, text=True, timeout=timeout, cwd=src, env=env,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return out


def test_docs_build(tmp_path, request):
    if request.config.getoption("--runslow"):
        pytest.skip("--runslow: test_docs_build_with_gallery builds the same site, runs the "
                    "examples too, and checks it the same way")
    _check_site(_build(tmp_path, "-D", "plot_gallery=0"))


def _check_site(out):
    """The pages, the API names, the bundled MathJax, and no remote resource."""
    for page in ("index", "api", "auto_examples/index", *PAGES):
        assert (out / f"{page}.html").exists(), page
    for example in EXAMPLES:
        assert (out / "auto_examples" / f"{example.stem}.html").exists(), example.name
    api = (out / "api.html").read_text(encoding="utf-8")
    for name in ("NTPDecoderClassifier", "AttentionSelector", "JointAttentionSVM",
                 "KeyQuerySelector", "NTPAttentionClassifier", "NTPEmbeddingClassifier",
                 "ntp_svm", "ntp_logit_svm", "logit_geometry", "load_text_ntp",
                 "TokenEncoder",
                 "plot_training_curves", "TrainingCurvesDisplay", "alignment",
                 "make_vocabulary_log_loss_scorer"):
        assert name in api, name
    # formulas use the MathJax copied into the site, not a CDN
    decoder = (out / "user_guide" / "decoder.html").read_text(encoding="utf-8")
    assert re.search(r'src="[./]*_static/mathjax/tex-chtml\.js"', decoder), "local MathJax"
    assert "cdn.jsdelivr" not in decoder
    assert (out / "_static" / "mathjax" / "tex-chtml.js").exists()
    _assert_offline(out)


REMOTE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//",
                    re.I)


def _assert_offline(out):
    """No page of the site loads a script, stylesheet or image from another host."""
    for page in out.rglob("*.html"):
        found = REMOTE.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(out)} loads {found.group(0)!r}"


def _code_blocks(page):
    text = (DOCS / f"{page}.rst").read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^( *)\.\. code-block:: python\n\n((?:\1   .*\n|\n)+)", text,
                             re.M):
        indent = len(match.group(1)) + 3
        blocks.append("\n".join(line[indent:] for line in match.group(2).splitlines()))
    return blocks


@pytest.mark.parametrize("page", [p for p in PAGES if p != "getting_started"])
def test_user_guide_code_runs(page, tmp_path, monkeypatch):
    blocks = _code_blocks(page)
    assert blocks, f"{page} has no python code"
    namespace = {}
    monkeypatch.chdir(tmp_path)  # files the code saves
    for code in blocks:  # a warning is an error here too: the reader would see it
        exec(compile(code, f"{page}.rst", "exec"), namespace)  # noqa: S102


#: user-guide pages whose code, run as one script, prints only numbers its comments quote
QUOTED_PAGES = ["user_guide/embeddings"]


@pytest.mark.parametrize("page", QUOTED_PAGES)
def test_user_guide_page_prints_what_it_quotes(page, tmp_path):
    """The page's blocks as one script, as a reader pastes them: no warning, and every
    print line prints the value its comment quotes."""
    code = "\n".join(_code_blocks(page))
    n_prints, n_checked = check_quoted_values(code, run_script(code, tmp_path))
    assert n_prints and n_checked == n_prints


GETTING_STARTED = _code_blocks("getting_started")
#: the Plots block: the GD fit of the first block again, and a 16 x 10 in figure (~8 s)
SLOW_BLOCKS = {1}


def test_getting_started_has_its_blocks():
    assert len(GETTING_STARTED) == 4
    assert "NTPEmbeddingClassifier" in GETTING_STARTED[3]
    assert "fig.savefig(" in GETTING_STARTED[1]


@pytest.mark.parametrize("k", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW_BLOCKS
                               else k for k in range(len(GETTING_STARTED))])
def test_getting_started_block_runs_as_a_script(k, tmp_path):
    """Each block on its own, as a reader pastes it: no warning, no label over another
    panel, and every print line quotes what it prints."""
    code = GETTING_STARTED[k]
    if "matplotlib" in code:
        pytest.importorskip("matplotlib")
    n_prints, n_checked = check_quoted_values(code, run_script(code, tmp_path))
    assert n_checked == n_prints
    if "savefig" in code:
        assert (tmp_path / "fits.png").stat().st_size > 10_000


@pytest.mark.slow
def test_docs_build_with_gallery(tmp_path):
    out = _build(tmp_path, timeout=1800)
    index = (out / "auto_examples" / "index.html").read_text(encoding="utf-8")
    for example in EXAMPLES:
        page = (out / "auto_examples" / f"{example.stem}.html").read_text(encoding="utf-8")
        assert f"sphx_glr_{example.stem}_001.png" in page, f"{example.name}: no figure"
        assert "sphx-glr-script-out" in page, f"{example.name}: no printed output"
        assert "paper" in page.lower()
        outputs = re.findall(r'<pre[^>]*class="[^"]*sphx-glr-script-out[^"]*"[^>]*>(.*?)</pre>',
                             page, flags=re.S) or re.findall(
            r'sphx-glr-script-out.*?<pre>(.*?)</pre>', page, flags=re.S)
        assert outputs and not any("nan" in o.lower().split() for o in outputs), \
            f"{example.name}: NaN in its printed table"
        assert (out / "_images" / f"sphx_glr_{example.stem}_001.png").exists()
        assert example.stem in index
    _check_site(out)
