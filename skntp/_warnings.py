"""Warnings that point at the user's line."""

from __future__ import annotations

import inspect
import os
import warnings

import joblib
import sklearn

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _skipped_folders():
    """skntp's folder, scikit-learn's and joblib's (their ``fit`` wrappers, model
    selection and parallel loops stand between the user's call and the estimator)."""
    return (_PACKAGE + os.sep,) + tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                                        for m in (sklearn, joblib))


def user_stacklevel():
    """The ``stacklevel`` of :func:`warnings.warn` that names the first frame outside
    skntp and scikit-learn.

    Counted from the caller of :func:`warnings.warn`, so a warning raised anywhere in
    the package, however deep, is reported at the line of the user's code (``fit``,
    ``GridSearchCV(...).fit``, ...), never at skntp's own or at scikit-learn's
    wrappers around ``fit``.
    """
    skipped = _skipped_folders()
    frame = inspect.currentframe()
    level = 0
    try:
        while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
                skipped):
            level += 1
            frame = frame.f_back
    finally:
        del frame
    return max(level, 1)


def reemit(caught):
    """Warn again, at their own file and line, warnings recorded by
    :class:`warnings.catch_warnings` (``record=True``)."""
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
