"""The docstrings of Python's standard library, read from its installed sources.

The third corpus of :func:`skntp.datasets.load_text_ntp`
(``corpus="stdlib-docstrings"``).  Every ``.py`` file under
``sysconfig.get_paths()["stdlib"]`` is parsed with :mod:`ast` (never imported,
so nothing runs), and the docstrings of its module, classes and functions are
kept in a fixed order: files sorted by their path inside the standard library,
then docstrings in source order (depth first, as the definitions appear).  The
test suites (directories named ``test``, ``tests`` or ``idle_test``: ``test/``,
``unittest/test/``, ``idlelib/idle_test/``, ``lib2to3/tests/``, ``ctypes/test/``,
``tkinter/test/``, ``distutils/tests/``), third-party packages
(``site-packages``, ``dist-packages``) and files that do not parse are left out.

The text is part of the Python standard library, distributed under the Python
Software Foundation License Agreement (PSF-2.0, ``LICENSE.txt`` in the same
directory).
"""

from __future__ import annotations

import ast
import os
import sysconfig
import warnings
from functools import lru_cache
from pathlib import Path

__all__ = ["EXCLUDED_DIRECTORIES", "stdlib_docstrings"]

#: Directory names whose files are not read: the test suites and third-party packages.
EXCLUDED_DIRECTORIES = frozenset({"test", "tests", "idle_test", "site-packages",
                                  "dist-packages", "__pycache__"})

_DEFINITIONS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_STATEMENT_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")


def _source_files(root):
    """``.py`` files under ``root`` outside the excluded directories, in sorted order.

    The excluded directories are pruned, not walked (``site-packages`` may hold
    gigabytes).
    """
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRECTORIES]
        rel = Path(dirpath).relative_to(root)
        files.extend(rel / f for f in filenames if f.endswith(".py"))
    return sorted(files, key=lambda rel: rel.parts)


def _docstrings(node, prefix, out):
    """Append ``(qualname, docstring)`` of ``node`` and its nested definitions, in source order.

    Only statements are visited (a definition is a statement, so none hides in an
    expression), in the order of their fields: body, handlers, else, finally, cases.
    """
    name = prefix
    if isinstance(node, _DEFINITIONS):
        if not isinstance(node, ast.Module):
            name = f"{prefix}.{node.name}" if prefix else node.name
        doc = ast.get_docstring(node, clean=True)
        if doc and doc.strip():
            out.append((name, doc))
    for field in _STATEMENT_FIELDS:
        children = getattr(node, field, None)
        if isinstance(children, list):
            for child in children:
                _docstrings(child, name, out)


def stdlib_docstrings(root=None):
    """The docstrings of the standard library's modules, classes and functions.

    Read once per process and root (about 3 s of one core for CPython 3.11's
    734 modules, nearly all of it in :func:`ast.parse`), then served from a
    cache.

    Parameters
    ----------
    root : str, optional
        The directory to read (default: ``sysconfig.get_paths()["stdlib"]``).

    Returns
    -------
    docstrings : tuple of (str, str, str)
        ``(path, qualname, docstring)``: the file's path inside ``root`` (POSIX
        separators), the dotted name of the class or function inside the
        module (``""`` for the module docstring), and the docstring cleaned by
        :func:`inspect.cleandoc`.
    skipped : tuple of str
        Files that were left out because they do not parse.

    Raises
    ------
    FileNotFoundError
        If ``root`` holds no Python source (an install that ships the
        standard library compiled only).
    """
    return _read(str(sysconfig.get_paths()["stdlib"] if root is None else root))


@lru_cache(maxsize=4)
def _read(root):
    """:func:`stdlib_docstrings` of a resolved root (the key of the cache)."""
    base = Path(root)
    files = _source_files(base) if base.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no Python source of the standard library under {str(base)!r}; this "
            f"install ships it compiled only, so corpus='stdlib-docstrings' cannot be "
            f"read (corpus='python' needs no source)."
        )
    docstrings, skipped = [], []
    for rel in files:
        try:
            with warnings.catch_warnings():  # invalid escapes in old sources
                warnings.simplefilter("ignore")
                tree = ast.parse((base / rel).read_bytes(), filename=str(rel))
        except (SyntaxError, ValueError, RecursionError, OSError):
            skipped.append(rel.as_posix())
            continue
        found = []
        _docstrings(tree, "", found)
        docstrings.extend((rel.as_posix(), name, doc) for name, doc in found)
    return tuple(docstrings), tuple(skipped)
