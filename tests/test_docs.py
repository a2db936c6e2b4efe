"""The documentation builds with warnings as errors (skipped without sphinx)."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_docs_build(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("pydata_sphinx_theme")
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    for page in ("index", "getting_started", "api", "gallery", "user_guide/decoder",
                 "user_guide/attention", "user_guide/joint", "user_guide/self_attention"):
        assert (out / f"{page}.html").exists(), page
    api = (out / "api.html").read_text(encoding="utf-8")
    for name in ("NTPDecoderClassifier", "AttentionSelector", "JointAttentionSVM",
                 "NTPAttentionClassifier", "ntp_svm", "load_text_ntp",
                 "plot_training_curves", "alignment"):
        assert name in api, name


def test_gallery_lists_every_reproduction():
    from skntp._reproduce import REPRODUCTIONS

    gallery = (DOCS / "gallery.rst").read_text(encoding="utf-8")
    for name in REPRODUCTIONS:
        assert f"reproduce {name}" in gallery, name
