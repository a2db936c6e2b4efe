"""Sphinx configuration of the skntp documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (warnings are
errors).  The gallery (``auto_examples/``) is built by sphinx-gallery from
``examples/plot_*.py``, which run at build time (about four minutes on two
cores; results are cached until a script changes).  ``-D plot_gallery=0``
builds the pages without running them (no figures, no printed output).

Formulas are typeset by a MathJax copy bundled with the
``sphinx-mathjax-offline`` extension, so the pages render without network.
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("."))  # gallery_order

import skntp  # noqa: E402


def _formatwarning(message, category, filename, lineno, line=None):
    """A warning as a gallery page prints it: its category and message only.

    The file name in Python's default format is a path on the machine that builds the
    docs (the example's copy, or a library's site-packages); the published pages must
    not show it.
    """
    return f"{category.__name__}: {message}\n"


warnings.formatwarning = _formatwarning

project = "skntp"
author = "skntp developers"
copyright = "2026, skntp developers"
release = skntp.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # bundled MathJax: formulas render offline
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"/notebooks/",
    "within_subsection_order": "gallery_order.PaperOrder",
    "download_all_examples": False,
    "min_reported_time": 0,
    "show_memory": False,
    "capture_repr": (),
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "first_notebook_cell": None,
    "copyfile_regex": "",
    # the execution-times pages load jQuery, DataTables and stylesheets from CDNs: the
    # site must read offline
    "write_computation_times": False,
}

autosummary_generate = True
# sklearn's generated set_*_request methods cite sklearn's own glossary.
autodoc_default_options = {
    "exclude-members": "set_fit_request, set_score_request, set_predict_request, "
                       "set_transform_request, set_output, set_params, get_params, "
                       "get_metadata_routing",
}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
numpydoc_xref_param_type = False

intersphinx_mapping = {}

templates_path = []
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip"]
html_theme = "pydata_sphinx_theme"
html_title = f"skntp {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    # gallery pages: the whole width for the figures
    "secondary_sidebar_items": {
        **{page: ["page-toc", "sourcelink"]
           for page in ("index", "getting_started", "api", "user_guide/*")},
        "auto_examples/**": [],
    },
}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_sidebars = {"getting_started": [], "api": [], "auto_examples/**": []}
