"""Warnings point at the user's line (``skntp._warnings.user_stacklevel``), however deep in
the package they are raised and whatever scikit-learn or joblib stands in between."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_data
from skntp.svm import Constraints, KeyScores, MaxMarginProblem, _problem, solve_max_margin, solvers


def _caught(func):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        func()
    assert caught
    return caught


def test_a_fit_warns_at_the_users_line():
    X, y = make_ntp_data(n_samples=300, random_state=0)
    est = NTPDecoderClassifier(solver="gd", lr=1e-30, max_iter=20, random_state=0,
                               compute_limits=False)
    for w in _caught(lambda: est.fit(X, y)):
        assert w.category is ConvergenceWarning and w.filename == __file__
    search = GridSearchCV(est, {"lr": [1e-30]}, cv=2, error_score="raise")
    for w in _caught(lambda: search.fit(X, y)):
        assert w.filename == __file__, (w.filename, w.message)


def test_the_certificate_warns_at_the_users_line(monkeypatch):
    def rough(problem, *args):  # 10 % above the optimum: feasible, not certified
        return _problem.MaxMarginResult(primal=np.array([0.55, -0.55]), dual=np.array([0.5]),
                                     method="rough", status="optimal")

    monkeypatch.setitem(solvers.METHODS, "rough", solvers.Method(rough))
    problem = MaxMarginProblem(KeyScores(np.array([[[1.0, 0.0], [0.0, 1.0]]])),
                               Constraints([0], [0], [1], [1.0], [False]))
    (w,) = _caught(lambda: solve_max_margin(problem, method="rough"))
    assert w.category is ConvergenceWarning and w.filename == __file__
    assert "no answer could be certified" in str(w.message)


@pytest.mark.parametrize("depth", [1, 3])
def test_user_stacklevel_counts_the_package_frames(depth):
    from skntp._warnings import user_stacklevel

    def nested(k):  # frames of this file stand for the user's code
        return user_stacklevel() if k == 0 else nested(k - 1)

    assert nested(depth) == 1
