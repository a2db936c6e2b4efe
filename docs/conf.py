"""Sphinx configuration of the skntp documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (warnings are
errors).  Nothing heavy runs at build time: the gallery shows tables printed
by ``python -m skntp reproduce NAME``, pasted into ``gallery.rst``.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import skntp  # noqa: E402

project = "skntp"
author = "skntp developers"
copyright = "2026, skntp developers"
release = skntp.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "numpydoc",
]

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
exclude_patterns = ["_build"]
html_theme = "pydata_sphinx_theme"
html_title = f"skntp {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_sidebars = {"gallery": [], "getting_started": [], "api": []}
