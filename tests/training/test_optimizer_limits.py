"""Each optimizer's limit, on every model (issue #20).

The theorems: normalized steepest descent in a norm converges in direction to
the max-margin solution in that norm (Fan, Schmidt, Thrampoulidis 2025, for
separable multiclass data: sign descent -> max norm, spectral descent -> the
spectral norm, normalized GD -> Frobenius), and normalized lp mirror descent on
attention to the lp ATT-SVM of the tokens it selects (Julistiono, Tarzanagh,
Azizan 2024).  The references are cvxpy programs written here from the
equations, and the normalized Bregman divergence written from its definition.
"""

import warnings

import cvxpy as cp
import numpy as np
import pytest
from helpers import margin, onehot_optimum

from skntp import (
    JointAttentionSVM,
    KeyQuerySelector,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
)
from skntp.datasets import make_key_query_data, make_token_priority_data
from skntp.diagnostics import compare_optimizers

SOLVERS = {"NGD": {"solver": "ngd"}, "SignGD": {"solver": "signgd"},
           "Spectral": {"solver": "nsd", "descent_norm": "spectral"}}


def _onehot(seed, m=20, d=12, V=5):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, d)), rng.integers(0, V, m)


def _check_diagonal(seed, max_iter, floor):
    X, y = _onehot(seed)
    template = NTPDecoderClassifier(lr=0.1, power_t=1 / 3, max_iter=max_iter, init="zeros",
                                    record_every=max_iter, compute_limits=False, vocabulary=5)
    norms = ("fro", "max", "spectral")
    table = compare_optimizers(template, X, y, solvers=SOLVERS, norms=norms)
    F = table["margin_fraction"]
    # the package's fractions against the references written here
    for i, est in enumerate(table["estimators"].values()):
        for j, norm in enumerate(norms):
            ref = margin(X, y, est.coef_.copy(), norm) / onehot_optimum(X, y, 5, norm)
            assert F[i, j] == pytest.approx(ref, rel=1e-5, abs=1e-7)
    # every row's largest entry is its own norm's, and close to the optimum
    np.testing.assert_array_equal(np.argmax(F, axis=1), [0, 1, 2])
    assert np.all(np.diag(F) >= floor)
    off = F[~np.eye(3, dtype=bool)]
    assert off.max() <= np.diag(F).min() - 0.05


def test_sign_spectral_and_normalized_gd_reach_their_own_norms_limit():
    """Fan et al. on one-hot data: the optimizer x norm matrix is diagonal-dominant."""
    _check_diagonal(0, 3000, floor=0.92)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_optimizer_norm_matrix_over_seeds(seed):
    _check_diagonal(seed, 20_000, floor=0.92)  # NGD reaches 0.932 in seed 3


def _bregman(w1, w2, p):
    """``D_psi(w1, w2)``, ``psi = (1/p) ||w||_p^p``, both normalized to unit lp norm."""
    a = np.ravel(w1) / np.sum(np.abs(w1) ** p) ** (1 / p)
    b = np.ravel(w2) / np.sum(np.abs(w2) ** p) ** (1 / p)
    return (np.sum(np.abs(a) ** p) / p + (p - 1) * np.sum(np.abs(b) ** p) / p
            - np.sum(np.sign(b) * np.abs(b) ** (p - 1) * a))


def _lq_att_svm(tokens, queries, selected, q):
    """``min ||W||_q`` s.t. ``z_i^T W (x_{i a_i} - x_it) >= 1`` (cvxpy, from the equations)."""
    n, T, d = tokens.shape
    W = cp.Variable((queries.shape[1], d))
    cons = [queries[i] @ W @ (tokens[i, selected[i]] - tokens[i, t]) >= 1
            for i in range(n) for t in range(T) if t != selected[i]]
    cp.Problem(cp.Minimize(cp.pnorm(cp.vec(W, order="C"), q)), cons).solve(
        solver=cp.CLARABEL)
    return W.value


def _attention_md(p, seed, max_iter):
    data = make_key_query_data(6, 8, 10, attention="cross", random_state=seed)
    W0 = np.random.default_rng(10_000 + seed).standard_normal((10, 10))
    est = KeyQuerySelector(head=data.head, query_index="extra-row",
                           solver="nmirror", mirror_p=p, lr=0.1, max_iter=max_iter, init=W0,
                           record_every=max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(data.X, data.y)
    return data, est


def _check_mirror_descent(p, seed, max_iter):
    data, est = _attention_md(p, seed, max_iter)
    assert est.limit_norm_ == (("lp", p) if p != 2 else "fro")
    sel = est.selected_tokens_
    qs = (1.75, 2.0, 3.0)
    refs = {q: _lq_att_svm(data.tokens, data.queries, sel, q) for q in qs}
    # the fitted limit is the lp ATT-SVM of the selected tokens (unit Frobenius norm)
    ref = refs[p] / np.linalg.norm(refs[p])
    np.testing.assert_allclose(est.mm_direction_, ref, atol=2e-5)
    D = [_bregman(refs[q], est.key_query_, p) for q in qs]
    assert int(np.argmin(D)) == qs.index(p), D
    return D


def test_normalized_mirror_descent_reaches_the_lp_att_svm():
    """AttentionMD: the divergence to the own lp ATT-SVM is the row's smallest."""
    D = _check_mirror_descent(1.75, 0, 1500)
    assert D[0] < 0.005  # the authors' code: mean 0.0147 over 50 seeds


@pytest.mark.slow
@pytest.mark.parametrize("p,steps", [(1.75, 1500), (2.0, 2000), (3.0, 20_000)])
@pytest.mark.parametrize("seed", range(1, 4))
def test_normalized_mirror_descent_over_seeds(p, steps, seed):
    _check_mirror_descent(p, seed, steps)


def test_mirror_descent_does_not_drift_after_saturation():
    """The authors' runs drift once the gradient underflows (after 5-10k steps); the
    log-domain gradient keeps normalized mirror descent going toward the limit."""
    data, est = _attention_md(1.75, 0, 6000)
    # the gradient was scaled by e^{log_grad_scale}: unscaled it would be below the
    # smallest float64 (e^-745), i.e. exactly zero
    assert est.history_["log_grad_scale"][-1] > 745
    ref = _lq_att_svm(data.tokens, data.queries, est.selected_tokens_, 1.75)
    assert _bregman(ref, est.key_query_, 1.75) < 1e-4


def test_sign_descent_on_attention_and_self_attention_records_the_max_norm_limit():
    X, y, E = make_token_priority_data(random_state=0)
    clf = NTPAttentionClassifier(E, solver="signgd", lr=0.05, power_t=0.5,
                                 max_iter=3000).fit(X, y)
    assert clf.limit_norm_ == "max"
    assert set(clf.limit_directions_) == {"max", "fro"}
    assert clf.mm_direction_ is clf.limit_directions_["max"]
    # sign descent goes to the max-norm Graph-SVM, not to the Frobenius one
    assert clf.history_["alignment"][-1] > 0.97
    assert clf.history_["alignment"][-1] > clf.history_["alignment_fro"][-1] + 0.2
    gd = NTPAttentionClassifier(E, solver="ngd", lr=0.1, max_iter=3000).fit(X, y)
    np.testing.assert_allclose(clf.limit_directions_["fro"], gd.mm_direction_, atol=1e-6)
    assert gd.history_["alignment_fro"][-1] == pytest.approx(gd.history_["alignment"][-1])


def test_joint_model_limits_in_the_solvers_norm():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((10, 4, 5)), rng.choice([0, 1], 10)
    est = JointAttentionSVM(solver="signgd", lr=0.05, power_t=0.5, max_iter=500,
                            random_state=0).fit(X, y)
    assert est.limit_norm_ == "max"
    # the head SVM in the max norm on the selected tokens, written here
    r = X[np.arange(10), est.selected_tokens_]
    Y = np.where(y == 1, 1.0, -1.0)
    v = cp.Variable(5)
    cp.Problem(cp.Minimize(cp.norm(v, "inf")), [cp.multiply(Y, r @ v) >= 1]).solve(
        solver=cp.CLARABEL)
    assert est.head_mm_margin_ == pytest.approx(1 / np.abs(v.value).max(), rel=1e-6)
    assert set(est.limit_directions_) == set(est.head_limit_directions_) == {"max", "fro"}
    assert "alignment_fro" in est.history_ and "head_alignment_fro" in est.history_
    np.testing.assert_allclose(est.history_["head_alignment_fro"][-1],
                               np.dot(est.head_, est.head_limit_directions_["fro"])
                               / np.linalg.norm(est.head_), rtol=1e-9)


def test_adam_without_eps_is_measured_against_the_max_norm_limit():
    X, y = _onehot(0)
    adam0 = NTPDecoderClassifier(solver="adam", eps=0.0, lr=0.01, max_iter=2000,
                                 init="zeros").fit(X, y)
    adam = NTPDecoderClassifier(solver="adam", lr=0.01, max_iter=2000, init="zeros").fit(X, y)
    assert adam0.limit_norm_ == "max" and adam.limit_norm_ == "fro"
    assert np.all(np.isfinite(adam0.coef_))
    np.testing.assert_allclose(adam0.limit_directions_["fro"], adam.mm_direction_, atol=1e-6)
