"""The working-set "nnls" method of the max-margin core (key-score programs)."""

import numpy as np
import pytest
from helpers import att_program, rel_err, rows_by_definition, tight_cvxpy

import skntp.svm.solvers.least_distance as least_distance
import skntp.svm.solvers.nnls_working_set as nnls_working_set
from skntp.svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    solve_max_margin,
)

pytest.importorskip("cvxpy")


def _head(rng, n, d):
    """Head-SVM-like: ``y_i r_i^T v >= 1`` (ref = -1)."""
    R = rng.standard_normal((n, d))
    y = np.sign(R @ rng.standard_normal(d))
    return MaxMarginProblem(
        KeyScores((y[:, None] * R)[:, None, :]),
        Constraints(np.arange(n), np.zeros(n), -np.ones(n), np.ones(n),
                    np.zeros(n, bool)), name="head SVM")


def _mixed(rng, n, T, d):
    """Both kinds of rows in one program: differences and ``S[b, a] >= 1``."""
    K = rng.standard_normal((n, T, d))
    teacher = rng.standard_normal(d)
    S = K @ teacher
    sel = np.argmax(S, axis=1)
    i, t = np.nonzero(np.arange(T)[None, :] != sel[:, None])
    pos_blocks = np.flatnonzero(S[np.arange(n), sel] > 0)
    block = np.concatenate([i, pos_blocks])
    pos = np.concatenate([sel[i], sel[pos_blocks]])
    ref = np.concatenate([t, -np.ones(pos_blocks.size, int)])
    rhs = rng.uniform(0.5, 2.0, block.size)
    return MaxMarginProblem(KeyScores(K), Constraints(block, pos, ref, rhs,
                                                      np.zeros(block.size, bool)))


CASES = (
    [("att", 20, 6, 5), ("att", 60, 8, 10), ("att", 150, 10, 12), ("att", 300, 8, 20),
     ("att", 120, 16, 30), ("att", 40, 30, 8), ("att", 500, 5, 6)]
    + [("relaxed", 100, 8, 10), ("relaxed", 200, 6, 16), ("relaxed", 80, 12, 25)]
    + [("head", 50, 5), ("head", 400, 10), ("head", 1000, 20), ("head", 2000, 8),
       ("head", 1500, 40), ("head", 700, 3)]
    + [("mixed", 50, 6, 7), ("mixed", 150, 8, 15), ("mixed", 300, 4, 10),
       ("mixed", 100, 12, 24)]
)


def _build(case, seed):
    rng = np.random.default_rng(seed)
    kind, *args = case
    if kind == "att":
        return att_program(rng, *args)
    if kind == "relaxed":
        return att_program(rng, *args, relaxed=0.3)
    if kind == "head":
        return _head(rng, *args)
    return _mixed(rng, *args)


@pytest.mark.parametrize("initial", [None, 10])
@pytest.mark.parametrize("k", range(len(CASES)))
def test_nnls_matches_cvxpy_and_kkt(k, initial, monkeypatch):
    if initial is not None:  # a tiny first working set: many rounds
        monkeypatch.setattr(nnls_working_set, "_WS_INITIAL", initial)
    problem = _build(CASES[k], 100 + k)
    res = solve_max_margin(problem, method="nnls")
    if initial is not None and len(problem.constraints) > 100:
        assert res.n_iter >= 2
    assert res.method == "nnls" and res.status == "optimal"
    ref = solve_max_margin(problem, method="cvxpy")
    x, x_ref = res.primal.ravel(), ref.primal.ravel()
    assert np.linalg.norm(x - x_ref) <= 1e-5 * np.linalg.norm(x_ref)
    # the program written in the test from the score map's definition
    assert rel_err(res.primal, tight_cvxpy(problem)) <= 1e-5

    A = problem.constraint_matrix().toarray()
    h = problem.constraints.rhs
    lam = np.asarray(res.dual)
    assert lam.shape == (len(h),)
    assert np.all(lam >= 0)
    slack = A @ x - h
    scale = max(1.0, np.abs(h).max())
    assert slack.min() >= -1e-8 * scale
    assert res.max_violation == pytest.approx(max(0.0, -slack.min()), abs=1e-12)
    assert np.abs(lam * slack).max() <= 1e-8 * scale * max(1.0, lam.max())
    assert np.linalg.norm(A.T @ lam - x) <= 1e-8 * max(1.0, np.linalg.norm(x))
    assert abs(res.gap) <= 1e-8


def test_several_rounds_happen():
    problem = att_program(np.random.default_rng(0), 200, 10, 60)
    assert len(problem.constraints) > nnls_working_set._WS_INITIAL
    res = solve_max_margin(problem, method="nnls")
    assert res.n_iter >= 2
    assert res.max_violation <= 1e-9
    # outside the last working set the multipliers are exactly zero
    assert np.count_nonzero(res.dual) <= 2 * (problem.shape[0] + 1) + nnls_working_set._WS_INITIAL


def test_auto_uses_dual_active_set_then_nnls():
    """auto tries "dual-active-set" first; "nnls" stays registered behind it."""
    problem = _head(np.random.default_rng(1), 800, 12)
    assert solve_max_margin(problem, method="auto").method == "dual-active-set"
    assert solve_max_margin(problem, method="nnls").method == "nnls"


@pytest.mark.parametrize("n", [10, 400])
def test_infeasible_raises(n):
    """Two blocks with opposite rows: no ``p`` with both ``>= 1``."""
    rng = np.random.default_rng(2)
    feasible = att_program(rng, n, 4, 6)
    K = feasible.scores.keys
    a, b = rng.standard_normal(6), rng.standard_normal(6)
    bad = np.zeros((2, 4, 6))
    bad[0, 0], bad[0, 1], bad[1, 0], bad[1, 1] = a, b, b, a
    bad[:, 2:] = rng.standard_normal((2, 2, 6))
    keys = np.concatenate([K, bad])
    c = feasible.constraints
    extra = Constraints([n, n + 1], [0, 0], [1, 1], [1.0, 1.0], [False, False])
    problem = MaxMarginProblem(KeyScores(keys), Constraints.concatenate([c, extra]),
                               name="ATT-SVM", infeasible_message="not separable")
    with pytest.raises(NotSeparableError, match="ATT-SVM is infeasible"):
        solve_max_margin(problem, method="nnls")


@pytest.mark.parametrize("kind", ["att", "head", "mixed"])
def test_dense_rows_match_constraint_matrix(kind):
    problem = _build({"att": ("att", 30, 5, 4), "head": ("head", 40, 3),
                      "mixed": ("mixed", 30, 5, 4)}[kind], 7)
    rows = least_distance.KeyRows(problem)
    A = problem.constraint_matrix().toarray()
    np.testing.assert_array_equal(A, rows_by_definition(problem))
    np.testing.assert_array_equal(rows.rows(), A)
    idx = np.array([0, 3, len(A) - 1, 2])
    np.testing.assert_array_equal(rows.rows(idx), A[idx])
    x = np.random.default_rng(8).standard_normal(problem.shape)
    np.testing.assert_allclose(rows.values(x), A @ x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rows.row_sum(), A.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["auto", "nnls"])
def test_large_program_is_solved_exactly(method):
    """37 500 constraints (dense rows 2.4e6 entries): auto (dual active set) and
    nnls solve it exactly."""
    rng = np.random.default_rng(21)
    problem = att_program(rng, 2500, 16, 64)
    res = solve_max_margin(problem, method=method)
    assert res.method == {"auto": "dual-active-set"}.get(method, method)
    assert res.status == "optimal"
    c = problem.constraints
    A = problem.constraint_matrix()
    x, lam = res.primal.ravel(), res.dual
    slack = A @ x - c.rhs
    assert slack.min() >= -1e-9
    assert lam.min() >= 0
    np.testing.assert_allclose(A.T @ lam, x, atol=1e-8 * max(1.0, np.abs(lam).max()))
    assert np.abs(lam * slack).max() <= 1e-8 * max(1.0, x @ x)


def test_working_set_when_the_rows_sum_to_zero():
    # rows g_i and -g_i (g_i.v >= 1/2 and g_i.v <= 4): their sum is exactly zero, so the
    # initial working set falls back to the largest right-hand sides; the answer is
    # still the exact program's
    rng = np.random.default_rng(5)
    G = rng.integers(-3, 4, (200, 6)).astype(float)  # integers: the sum is exact
    G[:, 0] = rng.integers(1, 3, 200)  # v = e_0 is feasible
    keys = np.vstack([G, -G])[:, None, :]
    n = keys.shape[0]
    rhs = np.r_[0.5 * np.ones(200), -4.0 * np.ones(200)]
    problem = MaxMarginProblem(KeyScores(keys), Constraints(
        np.arange(n), np.zeros(n), -np.ones(n), rhs, np.zeros(n, bool)), name="band")
    rows = least_distance.KeyRows(problem)
    np.testing.assert_array_equal(rows.row_sum(), 0.0)
    first = nnls_working_set._initial_working_set(rows, rhs, 50)
    assert set(first.tolist()) <= set(range(200))  # the largest rhs: the >= 1 rows
    res = solve_max_margin(problem, method="nnls")
    ref = solve_max_margin(problem, method="cvxpy")
    np.testing.assert_allclose(res.primal, ref.primal, atol=1e-6)
    assert rel_err(res.primal, tight_cvxpy(problem)) <= 1e-5
    assert res.max_violation <= 1e-9
