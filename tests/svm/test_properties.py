"""Property-based tests (hypothesis): context aggregation and the max-margin core.

* Aggregating contexts (NTP paper, Sec. 2, eq. (2)) depends on the data only
  through the empirical distribution: any permutation of the rows, and any
  duplication of rows (equivalently, integer sample weights), gives the same
  distinct contexts, weights and next-token probabilities.
* The max-margin core (``min 1/2 ||w||^2`` under score-difference
  constraints) returns a KKT point on random feasible instances of every
  program family (NTP-SVM, ATT-SVM, head SVM), and scaling the data by
  ``c > 0`` scales the solution by ``1/c`` (the margin ``1/||w||`` by ``c``).
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import rel_err, tight_ntp_svm, tight_qp
from hypothesis import given, settings
from hypothesis import strategies as st

from skntp import NTPDecoderClassifier
from skntp.decoder import aggregate_contexts
from skntp.svm import (
    att_svm_problem,
    head_svm_problem,
    ntp_svm_problem,
    solve_max_margin,
)

# The rest (derandomized, no example database, no deadline) comes from the profile
# loaded in conftest.py.
SETTINGS = settings(max_examples=25)


def test_hypothesis_profile_is_deterministic():
    profile = settings.get_profile("deterministic")
    assert profile.derandomize and profile.database is None and profile.deadline is None
    # the tests' settings inherit the loaded profile (deterministic unless asked)
    assert SETTINGS.derandomize == settings.default.derandomize
    assert SETTINGS.database is None


# --------------------------------------------------------------------------
# Context aggregation
# --------------------------------------------------------------------------
@st.composite
def ntp_rows(draw):
    """Rows ``(h_i, z_i)`` over a few distinct contexts with repeated rows."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    m = draw(st.integers(1, 6))
    d = draw(st.integers(1, 4))
    V = draw(st.integers(2, 5))
    n = draw(st.integers(m, 30))
    # small integer grid: distinct contexts that may share coordinates
    contexts = np.unique(rng.integers(-2, 3, size=(m, d)).astype(float), axis=0)
    which = np.concatenate([np.arange(len(contexts)),
                            rng.integers(len(contexts), size=n - len(contexts))])
    tokens = rng.integers(V, size=which.size)
    return contexts[which], tokens, V, rng


def _aggregate(X, z, V, weights=None):
    Y = sp.csr_matrix((np.ones(len(z)), (np.arange(len(z)), z)), shape=(len(z), V))
    H, pi, P, _ = aggregate_contexts(X, Y, weights)
    return H, pi, P.toarray()


def _assert_same_aggregate(a, b):
    np.testing.assert_array_equal(a[0], b[0])  # the same distinct contexts, same order
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a[2], b[2], rtol=1e-12, atol=1e-15)


@SETTINGS
@given(ntp_rows())
def test_aggregation_permutation_invariant(data):
    X, z, V, rng = data
    perm = rng.permutation(len(z))
    ref = _aggregate(X, z, V)
    _assert_same_aggregate(ref, _aggregate(X[perm], z[perm], V))
    # sanity: weights and probabilities are distributions over the distinct contexts
    assert ref[0].shape[0] == np.unique(X, axis=0).shape[0]
    np.testing.assert_allclose(ref[1].sum(), 1.0)
    np.testing.assert_allclose(ref[2].sum(axis=1), 1.0)


@SETTINGS
@given(ntp_rows(), st.integers(2, 4))
def test_aggregation_uniform_duplication_invariant(data, k):
    X, z, V, rng = data
    perm = rng.permutation(k * len(z))
    Xk, zk = np.tile(X, (k, 1))[perm], np.tile(z, k)[perm]
    _assert_same_aggregate(_aggregate(X, z, V), _aggregate(Xk, zk, V))


@SETTINGS
@given(ntp_rows())
def test_aggregation_duplicated_rows_equal_integer_weights(data):
    X, z, V, rng = data
    counts = rng.integers(1, 4, size=len(z))
    rows = np.repeat(np.arange(len(z)), counts)
    perm = rng.permutation(rows.size)
    duplicated = _aggregate(X[rows][perm], z[rows][perm], V)
    weighted = _aggregate(X, z, V, counts.astype(float))
    _assert_same_aggregate(duplicated, weighted)


@settings(max_examples=10)
@given(ntp_rows())
def test_decoder_probabilities_permutation_invariant(data):
    X, z, V, rng = data
    if np.unique(z).size < 2:
        z = z.copy()
        z[0] = (z[0] + 1) % V
    perm = rng.permutation(len(z))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = NTPDecoderClassifier(solver="gd", max_iter=30, vocabulary=V,
                                 random_state=0).fit(X, z)
        b = NTPDecoderClassifier(solver="gd", max_iter=30, vocabulary=V,
                                 random_state=0).fit(X[perm], z[perm])
    np.testing.assert_array_equal(a.contexts_, b.contexts_)
    np.testing.assert_allclose(a.next_token_probs_, b.next_token_probs_, rtol=1e-12)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-9,
                               atol=1e-12)


# --------------------------------------------------------------------------
# The max-margin core on random feasible problems
# --------------------------------------------------------------------------
def _att_instance(rng):
    n, T, d = (int(rng.integers(1, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 4)))
    keys = rng.standard_normal((n, T, d))
    p0 = rng.standard_normal(d)
    selected = np.argmax(keys @ p0, axis=1)  # p0 separates them: feasible
    return keys, selected


def _head_instance(rng):
    n, d = int(rng.integers(1, 8)), int(rng.integers(1, 4))
    tokens = rng.standard_normal((n, d))
    v0 = rng.standard_normal(d)
    y = np.where(tokens @ v0 >= 0, 1.0, -1.0)  # v0 separates them: feasible
    return tokens, y


def _build(kind, rng):
    """``make(c)``, the package's program of the data scaled by ``c``, and
    ``make.by_hand()``, the solution of the unscaled program written here from the
    papers' constraints and solved by Clarabel to tight tolerances."""
    if kind == "ntp":
        m = int(rng.integers(1, 6))
        d = int(rng.integers(m + 1, m + 5))
        V = int(rng.integers(2, 6))
        support = rng.random((m, V)) < 0.4
        support[np.arange(m), rng.integers(V, size=m)] = True
        H = rng.standard_normal((m, d))

        def make(c):
            return ntp_svm_problem(c * H, support)

        make.by_hand = lambda: tight_ntp_svm(H, support)  # (4a)-(4b)
        return make
    if kind in ("att", "relaxed"):
        keys, selected = _att_instance(rng)
        relaxed = (rng.random(keys.shape[0]) < 0.5 if kind == "relaxed"
                   else np.zeros(keys.shape[0], bool))

        def make(c):
            return att_svm_problem(c * keys, selected, relaxed)

        # (ATT-SVM) and its relaxation (10): p^T (k_{i alpha_i} - k_it) >= 1 (>= 0 if relaxed)
        i, t = np.nonzero(np.arange(keys.shape[1])[None, :] != selected[:, None])
        rows = keys[i, selected[i]] - keys[i, t]
        rhs = np.where(relaxed[i], 0.0, 1.0)
        make.by_hand = lambda: tight_qp(rows, rhs, np.zeros(i.size, bool), (keys.shape[2],))
        return make
    tokens, y = _head_instance(rng)

    def make(c):
        return head_svm_problem(c * tokens, y)

    n = len(y)  # (SVM): Y_i v^T r_i >= 1
    make.by_hand = lambda: tight_qp(y[:, None] * tokens, np.ones(n), np.zeros(n, bool),
                                    (tokens.shape[1],))
    return make


def _check_kkt(problem, res, atol):
    A = problem.constraint_matrix()
    c = problem.constraints
    w = np.asarray(res.primal, dtype=float).ravel()
    lam = np.asarray(res.dual, dtype=float)
    slack = A @ w - c.rhs
    ineq, eq = ~c.equality, c.equality
    scale = max(1.0, float(np.linalg.norm(w)))
    # primal feasibility
    assert np.all(slack[ineq] >= -atol * scale), slack[ineq].min()
    assert np.all(np.abs(slack[eq]) <= atol * scale)
    # dual feasibility
    assert np.all(lam[ineq] >= -atol * scale), lam[ineq].min()
    # stationarity: w = A^T lam
    np.testing.assert_allclose(A.T @ lam, w, atol=atol * scale * max(1.0, np.abs(lam).sum()))
    # complementary slackness
    assert np.all(np.abs(lam[ineq] * slack[ineq]) <= atol * scale * scale)
    # strong duality: ||w||^2 = r^T lam
    np.testing.assert_allclose(w @ w, c.rhs @ lam, rtol=atol * 10, atol=atol * scale)


@SETTINGS
@given(st.sampled_from(["ntp", "att", "relaxed", "head"]), st.integers(0, 2**31 - 1),
       st.sampled_from(["auto", "cvxpy"]))
def test_core_solution_is_a_kkt_point(kind, seed, method):
    make = _build(kind, np.random.default_rng(seed))
    problem = make(1.0)
    res = solve_max_margin(problem, method=method)
    _check_kkt(problem, res, 1e-7 if method == "auto" else 1e-5)
    if method == "auto":
        assert rel_err(res.primal, make.by_hand()) <= 1e-5


@SETTINGS
@given(st.sampled_from(["ntp", "att", "relaxed", "head"]), st.integers(0, 2**31 - 1),
       st.floats(0.01, 100.0))
def test_scaling_data_scales_the_margin(kind, seed, c):
    make = _build(kind, np.random.default_rng(seed))
    w1 = solve_max_margin(make(1.0)).primal
    wc = solve_max_margin(make(c)).primal
    # S(cX; w) = c S(X; w): the solution is w/c and the margin 1/||w|| grows by c
    np.testing.assert_allclose(c * wc, w1, rtol=1e-6,
                               atol=1e-9 * max(1.0, float(np.linalg.norm(w1))))
    n1, nc = np.linalg.norm(w1), np.linalg.norm(wc)
    if n1 > 0:
        assert (1 / nc) == pytest.approx(c / n1, rel=1e-6)


@SETTINGS
@given(st.sampled_from(["ntp", "att", "relaxed", "head"]), st.integers(0, 2**31 - 1))
def test_fast_methods_agree_with_cvxpy(kind, seed):
    make = _build(kind, np.random.default_rng(seed))
    problem = make(1.0)
    ours = solve_max_margin(problem)
    assert rel_err(ours.primal, make.by_hand()) <= 1e-5
    ref = solve_max_margin(problem, method="cvxpy")
    # Clarabel's own accuracy is ~1e-5 absolute (e.g. it returns |w| ~ 5e-5 when
    # every margin is relaxed to 0 and the exact answer is w = 0)
    tol = 1e-4 * max(1.0, float(np.linalg.norm(ref.primal)))
    np.testing.assert_allclose(ours.primal, ref.primal, atol=tol)
