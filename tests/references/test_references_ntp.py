"""The NTP decoder against references written here from the paper's equations.

Thrampoulidis (2024), ``ntp-implicit-bias-linear-models.md``: the loss (2), the
log-odds equations (3) of the finite component, the NTP-SVM (4) with every pair
of tokens (not the package's anchored form), and the regularization path
``argmin_{||W|| <= B} CE(W)`` as a convex program.  Nothing here goes through
the package's builders, aggregation or objective: the references are dense
NumPy formulas, central finite differences, textbook GD/NGD/Adam updates and
cvxpy programs (Clarabel).
"""

import warnings

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import (
    ntp_svm_all_pairs,
    numerical_grad,
)
from scipy.special import logsumexp, softmax

from skntp import NTPDecoderClassifier
from skntp._backend import get_backend
from skntp.datasets import make_ntp_data
from skntp.losses.decoder import CrossEntropy, ntp_cross_entropy
from skntp.svm import finite_component, ntp_svm


def empirical(X, y, V):
    """Distinct contexts, their weights and next-token distributions, by counting."""
    rows = [tuple(r) for r in X]
    keys = sorted(set(rows))
    H = np.array(keys)
    index = {k: j for j, k in enumerate(keys)}
    counts = np.zeros((len(keys), V))
    for r, z in zip(rows, y):
        counts[index[r], z] += 1
    return H, counts.sum(axis=1) / len(y), counts / counts.sum(axis=1, keepdims=True)


def ce(W, H, pi, P):
    """Eq. (2): ``-sum_j pi_j sum_z p_jz log softmax_z(W h_j)``."""
    L = H @ W.T
    return float(np.sum(pi[:, None] * P * (logsumexp(L, axis=1, keepdims=True) - L)))


def ce_grad(W, H, pi, P):
    """Eq. (2) differentiated: ``(diag(pi) (softmax(H W^T) - P))^T H``."""
    return (pi[:, None] * (softmax(H @ W.T, axis=1) - P)).T @ H


def data(seed, m=10, d=14, V=6, s=(1, 4), n=300):
    X, y = make_ntp_data(n_samples=n, n_contexts=m, n_features=d, n_tokens=V,
                         support_size=s, random_state=seed)
    return X, y, *empirical(X, y, V)


# --------------------------------------------------------------------------
# the loss and its gradient
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_cross_entropy_and_gradient_match_the_formula_and_finite_differences(seed, scale):
    X, y, H, pi, P = data(seed)
    W = scale * np.random.default_rng(seed).standard_normal((P.shape[1], H.shape[1]))
    for max_elements in (None, 7):  # one chunk, and a chunk per context or so
        obj = CrossEntropy(get_backend(), H, pi, sp.csr_matrix(P), max_elements=max_elements)
        loss, (grad,) = obj((W,))
        assert float(loss) == pytest.approx(ce(W, H, pi, P), rel=1e-12)
        np.testing.assert_allclose(grad, ce_grad(W, H, pi, P), rtol=1e-10, atol=1e-14)
    fd = numerical_grad(lambda w: ce(w, H, pi, P), W)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    assert ntp_cross_entropy(W, H, pi, P) == pytest.approx(ce(W, H, pi, P), rel=1e-12)


def test_cross_entropy_keeps_out_of_support_mass_at_large_norms():
    # W* + R W^mm at R = 600: the probability of a token that never follows any
    # context is below 1e-40; its gradient row sum_j pi_j q_jv h_j must keep that mass
    # exactly (a plain softmax - p_hat on the support would be rounding noise)
    X, y, H, pi, P = data(2)
    V = P.shape[1]
    est = NTPDecoderClassifier(solver="svm", svm_radius=600.0, vocabulary=V + 2).fit(X, y)
    P2 = np.hstack([P, np.zeros((P.shape[0], 2))])
    W = est.coef_
    loss, (grad,) = CrossEntropy(get_backend(), H, pi, sp.csr_matrix(P2))((W,))
    L = H @ W.T
    q = np.exp(L - logsumexp(L, axis=1, keepdims=True))
    ref = (pi[:, None] * q[:, V:]).T @ H
    assert 0 < np.abs(ref).max() < 1e-40
    np.testing.assert_allclose(grad[V:], ref, rtol=1e-9)
    assert float(loss) == pytest.approx(ce(W, H, pi, P2), rel=1e-12)


def test_batched_cross_entropy_equals_each_trial():
    parts = [data(s, m=8, V=5)[2:] for s in (3, 4, 5)]
    m = min(p[0].shape[0] for p in parts)
    H = np.stack([p[0][:m] for p in parts])
    pi = np.stack([p[1][:m] / p[1][:m].sum() for p in parts])
    P = [p[2][:m] for p in parts]
    W = np.random.default_rng(0).standard_normal((3, 5, H.shape[2]))
    obj = CrossEntropy(get_backend(), H, pi, sp.csr_matrix(np.vstack(P)), max_elements=11)
    loss, (grad,) = obj((W,))
    for b in range(3):
        assert loss[b] == pytest.approx(ce(W[b], H[b], pi[b], P[b]), rel=1e-12)
        np.testing.assert_allclose(grad[b], ce_grad(W[b], H[b], pi[b], P[b]), rtol=1e-10,
                                   atol=1e-14)
    with pytest.raises(ValueError, match=r"next_token_probs has 15 rows; expected 24"):
        CrossEntropy(get_backend(), H, pi, sp.csr_matrix(np.vstack(P)[:15]))


# --------------------------------------------------------------------------
# aggregation, entropy, the finite component (eq. (3)) and the NTP-SVM (eq. (4))
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aggregated_data_and_entropy_match_counting(seed):
    X, y, H, pi, P = data(seed)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    np.testing.assert_array_equal(est.contexts_, H)
    np.testing.assert_allclose(est.context_weights_, pi, rtol=1e-14)
    np.testing.assert_allclose(est.next_token_probs_, P, rtol=1e-14)
    H_ent = -np.sum(pi[:, None] * np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0))
    assert est.entropy_ == pytest.approx(H_ent, rel=1e-13)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ntp_svm_and_finite_component_match_the_paper_programs(seed):
    X, y, H, pi, P = data(seed)
    S = P > 0
    ref = ntp_svm_all_pairs(H, S)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    scale = np.linalg.norm(ref)
    assert est.mm_margin_ == pytest.approx(1 / scale, rel=1e-5)
    np.testing.assert_allclose(est.mm_direction_, ref / scale, atol=1e-5)
    np.testing.assert_allclose(ntp_svm(H, S), ref, atol=1e-5 * scale)
    # W*: minimum-norm solution of every log-odds equation (all pairs), by pinv
    rows, rhs = [], []
    V, d = P.shape[1], H.shape[1]
    for j in range(H.shape[0]):
        ins = np.flatnonzero(S[j])
        for a in ins:
            for b in ins[ins > a]:
                A = np.zeros((V, d))
                A[a], A[b] = H[j], -H[j]
                rows.append(A.ravel())
                rhs.append(np.log(P[j, a] / P[j, b]))
    W_star = (np.linalg.pinv(np.array(rows)) @ np.array(rhs)).reshape(V, d)
    np.testing.assert_allclose(est.finite_component_, W_star, atol=1e-9)
    np.testing.assert_allclose(finite_component(H, P), W_star, atol=1e-9)
    assert est.is_ntp_compatible_ and est.is_ntp_separable_
    # the limit attains the entropy bound: CE(W* + R W^mm/||W^mm||) -> H as R grows
    assert ce(est.coef_, H, pi, P) - est.entropy_ < 1e-8
    assert ce(W_star, H, pi, P) > ce(est.coef_, H, pi, P)


def test_soft_labels_with_unseen_tokens_match_the_paper_programs():
    rng = np.random.default_rng(7)
    m, d, V = 6, 9, 7
    H = rng.standard_normal((m, d))
    P = np.zeros((m, V))
    for j in range(m):  # tokens 5 and 6 never follow any context
        support = rng.choice(5, size=rng.integers(1, 4), replace=False)
        P[j, support] = rng.random(support.size) + 0.2
    P /= P.sum(axis=1, keepdims=True)
    w = rng.random(m) + 0.5
    est = NTPDecoderClassifier(solver="svm").fit(H, P, sample_weight=w)
    ref = ntp_svm_all_pairs(H, P > 0)
    np.testing.assert_allclose(est.mm_direction_, ref / np.linalg.norm(ref), atol=1e-5)
    order = np.lexsort(H.T[::-1])  # aggregation sorts the contexts
    np.testing.assert_allclose(est.contexts_, H[order])
    np.testing.assert_allclose(est.context_weights_, w[order] / w.sum(), rtol=1e-14)
    # unseen tokens: out of support everywhere, probability below e^-20 at the limit
    assert np.all(est.predict_proba(H)[:, 5:] < np.exp(-20))


# --------------------------------------------------------------------------
# the regularization path as a convex program
# --------------------------------------------------------------------------
def test_regularization_path_solves_the_constrained_program():
    X, y, H, pi, P = data(5, m=8, d=10, V=5, s=(2, 3))
    radii = [1.5, 6.0]
    est = NTPDecoderClassifier(solver="regpath", path_radii=radii, max_iter=3000,
                               random_state=0).fit(X, y)
    W = cp.Variable((P.shape[1], H.shape[1]))
    L = H @ W.T
    # sum_j pi_j (logsumexp(L_j) - sum_z p_jz L_jz), by rows
    obj = sum(pi[j] * (cp.log_sum_exp(L[j]) - P[j] @ L[j]) for j in range(H.shape[0]))
    cp.Problem(cp.Minimize(obj), [cp.norm(W, "fro") <= radii[-1]]).solve(solver=cp.CLARABEL)
    assert ce(est.coef_, H, pi, P) == pytest.approx(ce(W.value, H, pi, P), rel=1e-7, abs=1e-9)
    np.testing.assert_allclose(est.coef_, W.value, atol=2e-4)
    assert np.linalg.norm(est.coef_) == pytest.approx(radii[-1], rel=1e-9)  # on the sphere
    np.testing.assert_allclose(est.history_["radius"], radii)
    assert est.n_iter_ == 2


# --------------------------------------------------------------------------
# the estimator's training runs, iterate by iterate
# --------------------------------------------------------------------------
def _textbook_run(solver, W0, grad, lr, n_iter, betas=(0.9, 0.99), eps=1e-8):
    W = W0.copy()
    m1 = np.zeros_like(W)
    m2 = np.zeros_like(W)
    for t in range(1, n_iter + 1):
        g = grad(W)
        if solver == "gd":
            W = W - lr * g
        elif solver == "ngd":
            W = W - lr * g / np.linalg.norm(g)
        else:
            m1 = betas[0] * m1 + (1 - betas[0]) * g
            m2 = betas[1] * m2 + (1 - betas[1]) * g * g
            W = W - lr * (m1 / (1 - betas[0] ** t)) / (np.sqrt(m2 / (1 - betas[1] ** t)) + eps)
    return W


@pytest.mark.parametrize("solver, lr", [("gd", 0.5), ("ngd", 0.05), ("adam", 0.02)])
def test_gradient_solvers_follow_the_textbook_updates(solver, lr):
    X, y, H, pi, P = data(6)
    est = NTPDecoderClassifier(solver=solver, lr=lr, max_iter=60, random_state=3).fit(X, y)
    d = H.shape[1]
    W0 = np.random.RandomState(3).standard_normal((P.shape[1], d)) / np.sqrt(d)  # LeCun
    W = _textbook_run(solver, W0, lambda w: ce_grad(w, H, pi, P), lr, 60)
    np.testing.assert_allclose(est.coef_, W, rtol=1e-9, atol=1e-12)
    assert est.history_["loss"][-1] == pytest.approx(ce(W, H, pi, P), rel=1e-10)
    assert est.history_["loss"][0] == pytest.approx(ce(W0, H, pi, P), rel=1e-12)
    assert est.history_["norm"][-1] == pytest.approx(np.linalg.norm(W), rel=1e-10)
    # the recorded metrics, from their definitions
    unit = est.mm_direction_
    assert est.history_["alignment_uncorrected"][-1] == pytest.approx(
        np.sum(W * unit) / np.linalg.norm(W), rel=1e-10)
    R = W - est.finite_component_
    assert est.alignment_ == pytest.approx(np.sum(R * unit) / np.linalg.norm(R), rel=1e-10)
    # the history's alignment is the fit's
    assert est.history_["alignment"][-1] == pytest.approx(est.alignment_, rel=1e-12)
    assert est.history_["excess_loss"][-1] == pytest.approx(
        ce(W, H, pi, P) - est.entropy_, rel=1e-9)


def test_finite_distance_is_the_projection_on_F():
    X, y, H, pi, P = data(8)
    est = NTPDecoderClassifier(solver="gd", max_iter=30, random_state=0).fit(X, y)
    S = P > 0
    V, d = P.shape[1], H.shape[1]
    rows = []
    for j in range(H.shape[0]):  # F = span{(e_z - e_z') h_j^T}, eq. (5)
        ins = np.flatnonzero(S[j])
        for a in ins:
            for b in ins[ins > a]:
                A = np.zeros((V, d))
                A[a], A[b] = H[j], -H[j]
                rows.append(A.ravel())
    _, sv, Vt = np.linalg.svd(np.array(rows), full_matrices=False)
    basis = Vt[sv > 1e-10 * sv[0]].T
    proj = (basis @ (basis.T @ est.coef_.ravel())).reshape(V, d)
    assert est.history_["finite_distance"][-1] == pytest.approx(
        np.linalg.norm(proj - est.finite_component_), rel=1e-8)


def test_not_separable_data_still_minimize_the_loss():
    # d = 1, alternating tokens on a line: not NTP-separable, CE has a finite minimizer
    X = np.array([[1.0], [2.0], [3.0]])
    y = np.array([0, 1, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=20_000, tol=1e-10,
                                   random_state=0).fit(X, y)
    H, pi, P = empirical(X, y, 2)
    W = cp.Variable((2, 1))
    L = H @ W.T
    obj = sum(pi[j] * (cp.log_sum_exp(L[j]) - P[j] @ L[j]) for j in range(3))
    value = cp.Problem(cp.Minimize(obj)).solve(solver=cp.CLARABEL)
    assert ce(est.coef_, H, pi, P) == pytest.approx(value, rel=1e-7)
    assert est.mm_direction_ is None and est.is_ntp_separable_ is False


