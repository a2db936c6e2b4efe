"""Log-loss over the whole vocabulary: finite GridSearchCV scores on next-token data."""

import warnings

import numpy as np
import pytest
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

from skntp import NTPAttentionClassifier, NTPDecoderClassifier
from skntp.datasets import make_ntp_data, make_token_priority_data
from skntp.metrics import make_vocabulary_log_loss_scorer, vocabulary_log_loss


def test_gridsearch_self_attention_gives_finite_log_loss():
    X, y, E = make_token_priority_data(8, 8, 18, 5, acyclic=False, random_state=0)
    folds = list(KFold(3, shuffle=True, random_state=0).split(X, y))
    # the situation of the issue: test folds lack tokens of classes_ (all K ids)
    assert all(np.unique(y[te]).size < E.shape[0] for _, te in folds)
    est = NTPAttentionClassifier(E, solver="ngd", lr=0.05, max_iter=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = GridSearchCV(est, {"lr": [0.01, 0.1]}, cv=folds,
                              scoring=make_vocabulary_log_loss_scorer()).fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)
    # each candidate refitted by hand on the same folds, scored by sklearn's log_loss over
    # every token id: the search must report these scores and pick the better one
    manual = {}
    for lr in (0.01, 0.1):
        fold_scores = []
        for tr, te in folds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fitted = NTPAttentionClassifier(E, solver="ngd", lr=lr, max_iter=40).fit(
                    X[tr], y[tr])
            proba = fitted.predict_proba(X[te])
            fold_scores.append(-log_loss(y[te], proba, labels=np.arange(E.shape[0])))
        manual[lr] = np.mean(fold_scores)
    got = dict(zip(search.cv_results_["param_lr"], scores))
    assert got == pytest.approx(manual, rel=1e-9)
    assert manual[0.01] != pytest.approx(manual[0.1], rel=1e-6)  # a choice to make
    assert search.best_params_["lr"] == max(manual, key=manual.get)


def test_matches_sklearn_log_loss_when_every_label_occurs():
    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(4), size=12)
    y = np.array([0, 1, 2, 3] * 3)
    w = rng.random(12)
    ours = vocabulary_log_loss(y, np.log(proba), np.arange(4), sample_weight=w)
    assert ours == pytest.approx(log_loss(y, proba, labels=np.arange(4), sample_weight=w),
                                 rel=1e-12)
    # a fold holding two of the four tokens: still defined, same per-sample terms
    sub = y < 2
    expected = -np.average(np.log(proba[sub, y[sub]]), weights=w[sub])
    assert vocabulary_log_loss(y[sub], np.log(proba[sub]), np.arange(4),
                               sample_weight=w[sub]) == pytest.approx(expected, rel=1e-12)


def test_uses_exact_log_probabilities_and_clips_zeros():
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=10, n_tokens=5,
                         support_size=2, random_state=0)
    svm = NTPDecoderClassifier(solver="svm", svm_radius=2000.0).fit(X, y)
    scorer = make_vocabulary_log_loss_scorer()
    # large norm: predict_proba underflows to 0 for out-of-support tokens, the log
    # probabilities do not; the in-support next tokens keep an exact score
    expected = -np.mean(svm.predict_log_proba(X)[np.arange(len(y)),
                                                 np.searchsorted(svm.classes_, y)])
    assert scorer(svm, X, y) == pytest.approx(-expected, rel=1e-12)
    # a token with probability exactly 0 costs -log(eps), not infinity
    cost = vocabulary_log_loss([1], [[0.0, -np.inf]], [0, 1])
    assert cost == pytest.approx(-np.log(np.finfo(float).eps))


def test_labels_outside_the_vocabulary_and_reordered_labels():
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=10, n_tokens=5,
                         support_size=2, random_state=0)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    with pytest.raises(ValueError, match="outside the labels"):
        vocabulary_log_loss(np.array([7]), np.zeros((1, 5)), np.arange(5))
    with pytest.raises(ValueError, match="shape"):
        vocabulary_log_loss(y, np.zeros((len(y), 3)), np.arange(5))
    # labels= naming a larger vocabulary in another order gives the same score
    wide = make_vocabulary_log_loss_scorer(labels=[6, 5, 4, 3, 2, 1, 0])
    assert wide(est, X, y) == pytest.approx(make_vocabulary_log_loss_scorer()(est, X, y))
    assert "labels" in repr(wide)


def test_decoder_cross_val_with_vocabulary():
    X, y = make_ntp_data(n_samples=300, n_contexts=10, n_features=12, n_tokens=6,
                         support_size=2, random_state=1)
    est = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=50, vocabulary=6,
                               random_state=0)
    scores = cross_val_score(est, X, y, cv=3, scoring=make_vocabulary_log_loss_scorer())
    assert np.all(np.isfinite(scores))
