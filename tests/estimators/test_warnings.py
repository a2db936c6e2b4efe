"""Warnings point at the user's line (``skntp._warnings.user_stacklevel``), however deep in
the package they are raised and whatever scikit-learn or joblib stands in between; and no
warning of scikit-learn or NumPy reaches the user where the situation is normal for NTP
data (issue #48): many distinct next tokens, and a NaN label, which is one clear error."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.utils.multiclass import check_classification_targets

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    KeyQuerySelector,
    NTPDecoderClassifier,
    NTPEmbeddingClassifier,
)
from skntp.datasets import make_ntp_data
from skntp.losses.decoder import check_next_tokens
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


def _quiet(func):
    """Run ``func``; return what it raised (or None), failing on any warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            func()
        except Exception as exc:  # noqa: BLE001 - the caller checks it
            raised = exc
        else:
            raised = None
    assert not caught, [f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught]
    return raised


@pytest.mark.parametrize("estimator", [NTPDecoderClassifier, NTPEmbeddingClassifier])
def test_many_distinct_next_tokens_are_no_warning(estimator):
    # 40 samples, 30 distinct next tokens: scikit-learn would call y a regression target
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 50)), np.arange(40) % 30
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_classification_targets(y)  # the warning exists: what the estimators silence
    assert any("greater than 50%" in str(w.message) for w in caught)
    assert _quiet(lambda: estimator(max_iter=2, compute_limits=False).fit(X, y)) is None


def test_only_that_warning_is_silenced():
    with pytest.warns(UserWarning, match="something else"):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            check_next_tokens(np.arange(30) % 20)  # silenced inside
            warnings.warn("something else", UserWarning, stacklevel=1)  # not by it
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        check_next_tokens(np.linspace(0, 1, 30))  # a regression target is still refused


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("estimator", [NTPDecoderClassifier, NTPEmbeddingClassifier])
def test_a_nan_label_is_one_clear_error_and_no_cast_warning(estimator, bad):
    X = np.random.default_rng(0).standard_normal((30, 4))
    y = np.arange(30) % 5 * 1.0
    y[3] = bad
    raised = _quiet(lambda: estimator(max_iter=2).fit(X, y))
    assert isinstance(raised, ValueError)
    assert str(raised).startswith("Input y contains " + ("NaN" if bad != np.inf else "inf"))


@pytest.mark.parametrize("estimator", [AttentionSelector, JointAttentionSVM, KeyQuerySelector])
def test_a_nan_binary_label_is_one_clear_error_and_no_cast_warning(estimator):
    X = np.random.default_rng(0).standard_normal((6, 3, 2))
    y = np.array([0.0, 1.0, np.nan, 1.0, 0.0, 1.0])
    kwargs = {"query_index": 0} if estimator is KeyQuerySelector else {}
    raised = _quiet(lambda: estimator(max_iter=2, **kwargs).fit(X, y))
    assert isinstance(raised, ValueError) and "Input y contains NaN" in str(raised)
