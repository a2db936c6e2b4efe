"""Limits at scale: sparse next-token matrices, matrix-free operators, memory refusal,
and thread control for loops of small products (issue: the explicit limit at the scale
of gradient descent)."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info

import skntp._backend as backend_module
from skntp import NTPDecoderClassifier
from skntp._backend import blas_threads, get_backend
from skntp.metrics import SubspaceProjector
from skntp.svm import (
    ProgramTooLargeError,
    _problem,
    exchangeable_tokens,
    finite_component,
    log_odds_problem,
    ntp_svm,
    solve_ntp_svm,
)
from skntp.svm._problem import constraint_operator


def sparse_probs(rng, m, V, k=3):
    cols = np.stack([rng.choice(V, k, replace=False) for _ in range(m)])
    vals = rng.dirichlet(np.ones(k), m)
    return sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, m * k + 1, k)),
                         shape=(m, V))


def explicit_rows(problem):
    """The constraint rows from the definition: one dense row per constraint."""
    c = problem.constraints
    H = problem.scores.queries
    V, d = problem.shape
    A = np.zeros((len(c), V * d))
    for k in range(len(c)):
        A[k, c.pos[k] * d:(c.pos[k] + 1) * d] += H[c.block[k]]
        if c.ref[k] >= 0:
            A[k, c.ref[k] * d:(c.ref[k] + 1) * d] -= H[c.block[k]]
    return A


def test_log_odds_problem_from_sparse_equals_dense_and_definition():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((25, 6))
    P = sparse_probs(rng, 25, 40)
    a, b = log_odds_problem(H, P), log_odds_problem(H, P.toarray())
    for f in ("block", "pos", "ref", "rhs", "equality"):
        assert np.array_equal(getattr(a.constraints, f), getattr(b.constraints, f))
    # rhs = log(p_z / p_anchor), the anchor the most likely token of its context
    c = a.constraints
    dense = P.toarray()
    assert np.all(c.ref == np.argmax(dense, axis=1)[c.block])
    np.testing.assert_allclose(c.rhs, np.log(dense[c.block, c.pos] / dense[c.block, c.ref]))
    assert a._is_sparse_decoder()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_matrix_free_operators_match_the_definition(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    H = rng.standard_normal((20, 5))
    problem = log_odds_problem(H, sparse_probs(rng, 20, 30))
    assert problem._is_sparse_decoder()
    A = explicit_rows(problem)
    np.testing.assert_allclose(problem.constraint_matrix().toarray(), A, atol=1e-15)
    be = get_backend(backend)
    values, adjoint = problem.operators(be)
    w = rng.standard_normal(problem.shape)
    lam = rng.standard_normal(len(problem.constraints))
    from skntp._backend import to_numpy

    np.testing.assert_allclose(to_numpy(values(be.asarray(w))), A @ w.ravel(), atol=1e-12)
    np.testing.assert_allclose(to_numpy(adjoint(be.asarray(lam))).ravel(), A.T @ lam,
                               atol=1e-12)
    op = constraint_operator(problem)
    np.testing.assert_allclose(op.matvec(w.ravel()), A @ w.ravel(), atol=1e-12)


def test_finite_component_sparse_solves_eq3_with_min_norm():
    rng = np.random.default_rng(2)
    H = rng.standard_normal((15, 40))  # d > m: compatible, F is a strict subspace
    P = sparse_probs(rng, 15, 25)
    W, res = finite_component(H, P, return_residual=True)
    assert res <= 1e-10
    np.testing.assert_array_equal(W, finite_component(H, P.toarray()))
    # eq. (3) holds and W is the minimum-norm solution: the pseudo-inverse one
    A = explicit_rows(log_odds_problem(H, P))
    rhs = log_odds_problem(H, P).constraints.rhs
    np.testing.assert_allclose(A @ W.ravel(), rhs, atol=1e-9)
    np.testing.assert_allclose(W.ravel(), np.linalg.pinv(A) @ rhs, atol=1e-9)


def test_ntp_svm_from_sparse_support_equals_dense():
    rng = np.random.default_rng(3)
    H = rng.standard_normal((12, 30))
    S = sparse_probs(rng, 12, 20, k=2) > 0
    S[:, 19] = S[:, 18]  # an exchangeable pair (and never-predicted tokens)
    for a, b in zip(exchangeable_tokens(S), exchangeable_tokens(S.toarray())):
        np.testing.assert_array_equal(a, b)
    pa, ra = solve_ntp_svm(H, S)
    pb, rb = solve_ntp_svm(H, S.toarray())
    for f in ("block", "pos", "ref", "rhs", "equality"):
        assert np.array_equal(getattr(pa.constraints, f), getattr(pb.constraints, f))
    np.testing.assert_array_equal(ra.primal, rb.primal)
    np.testing.assert_array_equal(ra.dual, rb.dual)


def test_projector_matrix_free_equals_dense_basis():
    rng = np.random.default_rng(4)
    H = rng.standard_normal((10, 8))
    problem = log_odds_problem(H, sparse_probs(rng, 10, 12))
    dense = SubspaceProjector.from_problem(problem)
    free = SubspaceProjector.from_problem(problem, max_dense=0)
    assert dense.basis is not None and free.basis is None
    W = rng.standard_normal(problem.shape)
    np.testing.assert_allclose(free.project(W), dense.project(W), atol=1e-9)
    # a projector: idempotent, and W - P(W) is orthogonal to every row
    P = dense.project(W)
    np.testing.assert_allclose(dense.project(P), P, atol=1e-12)
    assert np.abs(explicit_rows(problem) @ (W - P).ravel()).max() <= 1e-10


def test_svm_radius_is_the_same_in_chunks(monkeypatch):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 30))
    y = rng.integers(0, 6, 40)
    whole = NTPDecoderClassifier(solver="svm").fit(X, y)
    # chunks of 2 rows (13 numbers) and of 1 row (6): the logits of a chunk come from
    # another BLAS call (gemv for one row), whose summation order may differ in the last
    # bit (1 row: 4e-16 relative in R, measured; 2 rows: the same bits with OpenBLAS's
    # AVX kernels, not with its Prescott ones), so R agrees to rounding: 1e-12 is
    # d = 30 terms of eps over a margin of 1, with room for a condition of 100
    for budget in (13, 6):
        monkeypatch.setattr(backend_module, "CHUNK_ELEMENTS", budget)
        chunked = NTPDecoderClassifier(solver="svm").fit(X, y)
        assert whole.svm_radius_ > 0
        assert chunked.svm_radius_ == pytest.approx(whole.svm_radius_, rel=1e-12, abs=0)
    # the promise of "auto": out-of-support logits 20 nats below, tight somewhere
    L = X @ chunked.coef_.T
    sup = np.eye(6, dtype=bool)[np.searchsorted(chunked.classes_, y)]
    gap = np.where(sup, L, np.inf).min(1) - np.where(sup, -np.inf, L).max(1)
    assert gap.min() == pytest.approx(20.0, abs=1e-6)


def test_limits_leave_the_gradient_fit_bit_identical():
    """Solving the limits must not touch the data the training loop uses."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((60, 12))[rng.integers(0, 20, 60)]
    y = rng.integers(0, 5, 60)
    kw = dict(solver="gd", max_iter=30, random_state=0)
    a = NTPDecoderClassifier(compute_limits=False, **kw).fit(X, y)
    b = NTPDecoderClassifier(compute_limits=True, **kw).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.history_["loss"], b.history_["loss"])


def test_too_large_program_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr(_problem, "available_memory", lambda: 10_000_000)
    rng = np.random.default_rng(7)
    # (linearly independent contexts: every row separable, so the decoder solves the
    # NTP-SVM of every row; d < m would take the stationary route, whose table
    # certifies rows not separable and so the NTP-SVM infeasible without solving it)
    H = rng.standard_normal((300, 300))
    S = np.eye(200, dtype=bool)[rng.integers(0, 200, 300)]
    with pytest.raises(ProgramTooLargeError, match=r"59\.7k? ?|5\.97e\+04.*GiB"):
        ntp_svm(H, S)
    with pytest.raises(MemoryError, match="compute_limits=False"):
        ntp_svm(H, S)
    # the decoder fits without the direction, says so once, keeps W*
    y = np.argmax(S, axis=1)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(max_iter=5, vocabulary=200).fit(H, y)
    msgs = [str(w.message) for w in rec if "constraints" in str(w.message)]
    assert len(msgs) == 1 and "GiB" in msgs[0] and "compute_limits=False" in msgs[0]
    assert est.mm_direction_ is None and est.finite_component_ is not None
    assert np.isnan(est.alignment_)
    # separability unknown: neither True nor False, and no margin (nan, not 0)
    assert est.is_ntp_separable_ is None and np.isnan(est.mm_margin_)
    with pytest.raises(ProgramTooLargeError):
        NTPDecoderClassifier(solver="svm", vocabulary=200).fit(H, y)


def _blas_threads_now():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_blas_threads_limits_small_loops_only():
    before = _blas_threads_now()
    with blas_threads(1000):
        assert set(_blas_threads_now()) == {1}
    assert _blas_threads_now() == before
    with blas_threads(backend_module.SMALL_PRODUCT):
        assert _blas_threads_now() == before


def test_blas_threads_makes_its_controller_once_per_set_of_imports(monkeypatch):
    # a loop of thousands of small solves enters blas_threads each time: walking the
    # process's libraries on each entry took 90 % of such a loop (att_svm_prime)
    import sys
    import types

    import threadpoolctl

    made = []

    class Counting(threadpoolctl.ThreadpoolController):
        def __init__(self):
            # threadpool_info() makes one too: count blas_threads' own only
            made.append(sys._getframe(1).f_code.co_name == "_threadpool_controller")
            super().__init__()

    monkeypatch.setattr(backend_module, "ThreadpoolController", Counting)
    monkeypatch.setattr(backend_module, "_CONTROLLER", [None, -1])
    before = _blas_threads_now()
    for _ in range(50):
        with blas_threads(1000):
            assert set(_blas_threads_now()) == {1}
    assert sum(made) == 1 and _blas_threads_now() == before
    # a new import may load a new BLAS library: the controller is made anew
    monkeypatch.setitem(sys.modules, "_skntp_test_new_module", types.ModuleType("m"))
    with blas_threads(1000):
        assert set(_blas_threads_now()) == {1}
    assert sum(made) == 2 and _blas_threads_now() == before


def test_blas_threads_limits_and_restores_torch():
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    with blas_threads(10, get_backend("torch")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == n


def test_loops_run_on_one_thread_for_small_objectives(monkeypatch):
    """The training loop and the max-margin core see one BLAS thread on small problems."""
    seen = []
    import skntp.losses.decoder as models_decoder

    original = models_decoder.CrossEntropy.__call__

    def spy(self, params):
        seen.append(tuple(_blas_threads_now()))
        return original(self, params)

    monkeypatch.setattr(models_decoder.CrossEntropy, "__call__", spy)
    rng = np.random.default_rng(8)
    NTPDecoderClassifier(max_iter=3, compute_limits=False).fit(
        rng.standard_normal((30, 5)), rng.integers(0, 3, 30))
    assert seen and all(set(s) == {1} for s in seen)
