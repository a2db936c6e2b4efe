"""What the history costs: record_every's default and the cheap finite-distance metric."""

import importlib.util
import time

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import finite_side_rows, partially_separable_instance
from sklearn.base import clone

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    KeyQuerySelector,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
    metrics,
)
from skntp._backend import blas_threads, get_backend
from skntp.datasets import load_text_ntp, make_ntp_data, make_token_priority_data
from skntp.graphs import cyclic_subspace_basis
from skntp.losses.decoder import CrossEntropy, aggregate_contexts
from skntp.metrics import SubspaceProjector, history_metrics
from skntp.svm import (
    finite_side_problem,
    log_odds_problem,
    ntp_separability,
    partial_ntp_svm_problem,
)
from skntp.sweeps import fit_ntp_trials

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")


def test_record_every_defaults_to_ten_and_keeps_first_and_last():
    for cls in (NTPDecoderClassifier, NTPAttentionClassifier, AttentionSelector,
                JointAttentionSVM, KeyQuerySelector):
        assert cls().get_params()["record_every"] == 10, cls.__name__
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=10, n_tokens=5,
                         support_size=2, random_state=0)
    est = NTPDecoderClassifier(max_iter=35, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.history_["iteration"], [0, 10, 20, 30, 35])
    every = NTPDecoderClassifier(max_iter=35, record_every=1, random_state=0).fit(X, y)
    np.testing.assert_array_equal(every.coef_, est.coef_)  # recording never changes a fit
    np.testing.assert_allclose(every.history_["finite_distance"][[0, 10, 20, 30, 35]],
                               est.history_["finite_distance"], rtol=1e-12)


def test_coordinates_through_the_sparse_rows_match_the_basis():
    rng = np.random.default_rng(0)
    A = sp.random(40, 300, density=0.02, random_state=1, format="csr")
    A = sp.vstack([A, A[:5] * 2.0]).tocsr()  # dependent rows: rank 40 at most
    proj = SubspaceProjector(A, (300,))
    assert proj._from_rows is not None and proj.basis.shape[1] <= 40
    w = rng.standard_normal(300)
    np.testing.assert_allclose(proj.coordinates(w), proj.basis.T @ w, atol=1e-12)
    # the basis spans the row space of A, orthonormally
    np.testing.assert_allclose(proj.basis.T @ proj.basis, np.eye(proj.basis.shape[1]),
                               atol=1e-12)
    dense_rows = A.toarray()
    np.testing.assert_allclose(proj.project(dense_rows[3]), dense_rows[3], atol=1e-12)


def test_finite_distance_equals_the_projection_distance():
    X, y = make_ntp_data(n_samples=500, n_contexts=10, n_features=12, n_tokens=6,
                         support_size=3, random_state=0)
    est = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=300, random_state=0).fit(X, y)
    # F of eq. (5): spanned by vec((e_z - e_z') h_j^T) for z, z' in the support S_j
    H, P = est.contexts_, est.next_token_probs_
    rows = []
    for j in range(H.shape[0]):
        support = np.flatnonzero(P[j])
        for z in support[1:]:
            rows.append(np.outer(np.eye(P.shape[1])[z] - np.eye(P.shape[1])[support[0]],
                                 H[j]).ravel())
    direct = np.linalg.norm(_project(np.array(rows), est.coef_) - est.finite_component_)
    np.testing.assert_allclose(est.history_["finite_distance"][-1], direct, rtol=1e-10)
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=500).fit(X, y)
    rows = cyclic_subspace_basis(clf.embeddings_, clf.sccs_)  # S_cyc of Def. 3
    direct = np.linalg.norm(_project(rows, clf.coef_) - clf.finite_component_)
    np.testing.assert_allclose(clf.history_["finite_distance"][-1], direct, rtol=1e-10)


def _project(rows, W):
    """The orthogonal projection of ``W`` onto the span of ``rows`` (least squares)."""
    coef = np.linalg.lstsq(rows.T, W.ravel(), rcond=None)[0]
    return (rows.T @ coef).reshape(W.shape)


# ---------------------------------------------------------------------------
# The Gram projector (more rows than features: data that are not NTP-separable)
# ---------------------------------------------------------------------------
def _instance(kind, seed=0):
    """``(H, P, problem, rows)``: NTP data of one kind, the program whose rows span the
    projector's subspace (``F`` or ``F_I``) and those rows written out by hand."""
    rng = np.random.default_rng(seed)
    if kind == "separable":
        # 12 positive multiples of each of d = 2 directions, one support per direction:
        # separable as 2 independent contexts, 24 x 2 in-support rows > V d = 10
        H = np.repeat(np.eye(2), 12, axis=0) * rng.uniform(0.5, 2.0, (24, 1))
        P = np.zeros((24, 5))
        P[:12, :3] = rng.dirichlet(np.ones(3), 12)
        P[12:, 2:] = rng.dirichlet(np.ones(3), 12)
    elif kind == "not separable":
        H = rng.standard_normal((40, 3))
        P = np.zeros((40, 6))
        for j in range(40):
            k = int(rng.integers(1, 3))
            P[j, rng.choice(6, k, replace=False)] = rng.dirichlet(np.ones(k))
    else:
        H, P = partially_separable_instance(seed)
    sep = ntp_separability(H, P > 0)
    assert sep.status == "certified"
    assert {"separable": sep.fraction == 1, "not separable": sep.fraction == 0,
            "partly separable": 0 < sep.fraction < 1}[kind]
    problem = (log_odds_problem(H, P) if kind == "separable"
               else finite_side_problem(partial_ntp_svm_problem(H, sep)))
    return H, P, problem, finite_side_rows(H, P > 0, sep.separable)


def _lstsq_projection(rows, W):
    """The orthogonal projection of ``W`` onto the span of ``rows`` (least squares)."""
    coef = np.linalg.lstsq(rows.T, W.ravel(), rcond=None)[0]
    return (rows.T @ coef).reshape(W.shape)


@pytest.mark.parametrize("kind", ["separable", "not separable", "partly separable"])
def test_the_gram_projector_is_the_least_squares_projection(kind):
    H, P, problem, rows = _instance(kind)
    assert len(problem.constraints) > rows.shape[1]  # more rows than features: Gram
    proj = SubspaceProjector.from_problem(problem)
    lsqr_proj = SubspaceProjector.from_problem(problem, max_dense=0)
    assert proj.method == "gram" and lsqr_proj.method == "lsqr"
    rank = np.linalg.matrix_rank(rows)
    assert proj.rank == rank
    B = proj.basis
    np.testing.assert_allclose(B.T @ B, np.eye(rank), atol=1e-12)
    if proj.complement is not None:  # the smaller of the two: the rest of the space
        N = proj.complement
        assert N.shape[1] == rows.shape[1] - rank < rank
        np.testing.assert_allclose(np.hstack([B, N]).T @ np.hstack([B, N]),
                                   np.eye(rows.shape[1]), atol=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(3):
        W = rng.standard_normal(problem.shape) * 10.0
        ref = _lstsq_projection(rows, W)
        np.testing.assert_allclose(proj.project(W), ref, atol=1e-10)
        np.testing.assert_allclose(lsqr_proj.project(W), ref, atol=1e-8)
        np.testing.assert_allclose(proj.coordinates(W) @ proj.coordinates(W),
                                   np.sum(ref * ref), rtol=1e-10)
    # the subspace does not depend on the data's units (rows scaled by their largest entry)
    for scale in (1e-150, 1e150):
        scaled = log_odds_problem(H * scale, P) if kind == "separable" else (
            finite_side_problem(partial_ntp_svm_problem(H * scale, ntp_separability(
                H * scale, P > 0))))
        np.testing.assert_allclose(SubspaceProjector.from_problem(scaled).project(W),
                                   proj.project(W), atol=1e-10)


def test_the_gram_projector_of_explicit_rows_keeps_their_span():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((7, 20))
    # 40 rows of rank 7: repeats, multiples of 1e-12 and 1e12, and zero rows
    rows = np.vstack([A, 1e-12 * A[:3], 1e12 * A[3:], np.zeros((3, 20)),
                      rng.standard_normal((23, 7)) @ A])
    ref_basis = np.linalg.svd(A)[2][:7].T
    for matrix in (rows, sp.csr_matrix(rows)):
        proj = SubspaceProjector(matrix, (4, 5))
        assert proj.method == "gram" and proj.rank == 7 and proj.complement is None
        W = rng.standard_normal((4, 5))
        np.testing.assert_allclose(proj.project(W).ravel(),
                                   ref_basis @ (ref_basis.T @ W.ravel()), atol=1e-10)
    # nearly the whole space: the complement is kept, and projects the same
    full = np.vstack([rows, rng.standard_normal((12, 20))])
    full[-1] = full[-2] - full[-3]  # rank 7 + 11
    proj = SubspaceProjector(full, (4, 5))
    assert proj.rank == 18 and proj.complement.shape == (20, 2)
    W = rng.standard_normal((4, 5))
    np.testing.assert_allclose(proj.project(W), _lstsq_projection(
        np.vstack([A, full[-12:]]), W), atol=1e-10)  # (the same span, well conditioned)
    zero = SubspaceProjector(np.zeros((30, 6)), (2, 3))
    assert zero.is_zero and zero.rank == 0 and zero.method == "zero"
    np.testing.assert_array_equal(zero.project(np.ones((2, 3))), np.zeros((2, 3)))


# short descents on purpose: data with no separable row warn that the minimizer is not reached
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kind", ["not separable", "partly separable"])
def test_the_finite_distance_of_data_that_are_not_separable(kind):
    H, P, problem, rows = _instance(kind)
    X = np.repeat(H, 5, axis=0)
    y = np.repeat(P, 5, axis=0)
    est = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=200, random_state=0).fit(X, y)
    assert est.is_ntp_separable_ is False
    direct = np.linalg.norm(_lstsq_projection(rows, est.coef_) - est.finite_component_)
    np.testing.assert_allclose(est.history_["finite_distance"][-1], direct, rtol=1e-9)


# short descents on purpose: data with no separable row warn that the minimizer is not reached
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=needs_torch)])
def test_records_of_not_separable_data_in_trials_and_on_torch(backend):
    # both forms of the Gram projector batched over trials (two complements; a
    # complement beside a basis of another rank, which takes the bases), and on
    # torch, record what the single NumPy fits record
    not_sep = [_instance("not separable", seed)[:2] for seed in (0, 1)]  # d = 3, V = 6
    partly = partially_separable_instance(0, d_a=1, m_a=1, d_b=1, m_b=25, t_a=2, t_b=3)
    tmpl = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=30, vocabulary=6,
                                random_state=0)
    forms = [SubspaceProjector.from_problem(finite_side_problem(partial_ntp_svm_problem(
        H, ntp_separability(H, P > 0)))).complement is not None for H, P in not_sep + [partly]]
    assert forms == [True, True, False]
    for batch in (not_sep, [not_sep[0], partly]):
        data = [(np.repeat(H, 5, axis=0), np.repeat(P, 5, axis=0)) for H, P in batch]
        alone = [clone(tmpl).fit(X, y) for X, y in data]
        torch_tmpl = clone(tmpl).set_params(backend=backend)
        for fits in (fit_ntp_trials(torch_tmpl, data),
                     [clone(torch_tmpl).fit(X, y) for X, y in data]):
            for fit, ref in zip(fits, alone):
                for key in ("norm", "finite_distance"):
                    np.testing.assert_allclose(fit.history_[key], ref.history_[key],
                                               rtol=1e-9, atol=1e-12, err_msg=key)


def test_a_record_never_solves_least_squares(monkeypatch):
    # a program of more rows than a dense basis allows (here: a small budget) used to
    # take LSQR at every record; its Gram matrix fits, so the basis is made once
    H, P = partially_separable_instance(0)
    X, y = np.repeat(H, 5, axis=0), np.repeat(P, 5, axis=0)
    calls = []
    real = metrics.lsqr
    monkeypatch.setattr(metrics, "lsqr", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(SubspaceProjector, "MAX_DENSE", 2500)  # V d = 49: 49^2 <= 2500
    est = NTPDecoderClassifier(solver="gd", max_iter=50, record_every=1, random_state=0)
    est.fit(X, y)
    assert len(est.history_["finite_distance"]) == 51 and calls == []


def test_a_record_costs_less_than_a_gradient_step_on_real_text():
    # the case of issue #48 (m = 970, d = 16, V = 79, no row separable): a record was
    # one LSQR solve, hundreds of gradient steps; now B^T w (or N^T w), a fraction of one
    text = load_text_ntp(corpus="python", embedding="words", n_words=80)
    labels = np.unique(text.target, return_inverse=True)[1].ravel()
    Y = sp.csr_matrix((np.ones(labels.size), (np.arange(labels.size), labels)))
    H, pi, P, _ = aggregate_contexts(text.data, Y)
    proj = SubspaceProjector.from_problem(finite_side_problem(partial_ntp_svm_problem(
        H, ntp_separability(H, P))))
    assert proj.method == "gram" and proj.complement is not None
    rng = np.random.default_rng(0)
    shape = (P.shape[1], H.shape[1])
    direction = rng.standard_normal(shape)
    be = get_backend("numpy")
    record = history_metrics(be, 0, direction / np.linalg.norm(direction),
                             proj.project(rng.standard_normal(shape)), proj,
                             other_directions={"fro": direction})
    step = CrossEntropy(be, H, pi, P)
    W = (rng.standard_normal(shape),)
    t_step = t_record = np.inf
    with blas_threads(step.work_size):  # as the training loop runs them
        for _ in range(20):  # interleaved, the minimum: another job does not enter
            t0 = time.perf_counter()
            step(W)
            t1 = time.perf_counter()
            record(W)
            t2 = time.perf_counter()
            t_step, t_record = min(t_step, t1 - t0), min(t_record, t2 - t1)
    assert t_record < t_step  # measured: 0.14 steps
