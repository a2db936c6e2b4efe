"""The "dual-active-set" method (Goldfarb & Idnani) of the max-margin core."""

import numpy as np
import pytest
from helpers import head_from_rows, rel_err, rows_by_definition, tight_cvxpy

import skntp.svm.solvers.dual_active_set as dual_active_set
import skntp.svm.solvers.least_distance as least_distance
import skntp.svm.solvers.nnls_working_set as nnls_working_set
from skntp.svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    att_svm_problem,
    solve_max_margin,
)

pytest.importorskip("cvxpy")

METHOD = "dual-active-set"


def _head(rng, n, d):
    R = rng.standard_normal((n, d))
    y = np.sign(R @ rng.standard_normal(d))
    y[y == 0] = 1.0
    return head_from_rows(y[:, None] * R)


def _att(rng, n, T, d):
    K = rng.standard_normal((n, T, d))
    sel = np.argmax(K @ rng.standard_normal(d), axis=1)
    return att_svm_problem(K, sel)


def _degenerate(rng, kind):
    if kind == "duplicates":  # repeated rows
        base = _head(rng, int(rng.integers(20, 80)), int(rng.integers(2, 12)))
        X = base.scores.keys[:, 0]
        X = np.vstack([X, X[rng.integers(0, len(X), len(X) // 2)]])
        return head_from_rows(X)
    if kind == "multiples":  # rows that are exact positive multiples of others
        base = _head(rng, int(rng.integers(20, 80)), int(rng.integers(2, 12)))
        X = base.scores.keys[:, 0]
        pick = rng.integers(0, len(X), len(X) // 2)
        X = np.vstack([X, X[pick] * rng.choice([0.5, 2.0, 3.0], pick.size)[:, None]])
        return head_from_rows(X)
    if kind == "wide":  # fewer constraints than dimensions
        d = int(rng.integers(5, 30))
        return _head(rng, int(rng.integers(1, d)), d)
    # duplicated rows with mixed right-hand sides (some 0, some 2)
    base = _head(rng, int(rng.integers(30, 90)), int(rng.integers(2, 10)))
    X = base.scores.keys[:, 0]
    X = np.vstack([X, X[: len(X) // 3]])
    rhs = rng.choice([0.0, 1.0, 2.0], len(X))
    return head_from_rows(X, rhs)


def _build(kind, seed):
    rng = np.random.default_rng(seed)
    if kind == "head":
        return _head(rng, int(rng.integers(50, 401)), int(rng.integers(2, 31)))
    if kind == "att":
        return _att(rng, int(rng.integers(10, 60)), int(rng.integers(3, 10)),
                    int(rng.integers(2, 25)))
    return _degenerate(rng, ("duplicates", "multiples", "wide", "mixed-rhs")[seed % 4])


def _check(problem, res, ref=None):
    """KKT to roundoff, and agreement with cvxpy: the core's path (``ref``) and the
    program written in the test from the score map's definition (``tight_cvxpy``).

    Returns whether the test's own program was solved to its tight tolerances."""
    assert res.method == METHOD and res.status == "optimal"
    A = problem.constraint_matrix().toarray()
    h = problem.constraints.rhs
    x, lam = res.primal.ravel(), np.asarray(res.dual)
    scale = max(1.0, np.abs(h).max())
    slack = A @ x - h
    assert lam.shape == h.shape and lam.min() >= 0
    assert slack.min() >= -1e-9 * scale
    assert res.max_violation == pytest.approx(max(0.0, -slack.min()), abs=1e-12)
    assert np.abs(lam * slack).max() <= 1e-8 * scale * max(1.0, lam.max())
    assert np.linalg.norm(A.T @ lam - x) <= 1e-8 * max(1.0, np.linalg.norm(x))
    assert abs(res.gap) <= 1e-8
    if ref is not None:
        # relative error 1e-5, or what cvxpy's own suboptimality allows: for a
        # feasible x_ref, ||x_ref - x*||^2 <= 2 (f(x_ref) - f(x*)), f = ||.||^2 / 2
        x_ref = ref.primal.ravel()
        f, f_ref = 0.5 * x @ x, 0.5 * x_ref @ x_ref
        assert f <= f_ref + 1e-7 * max(1.0, f_ref)  # cvxpy: feasible to ~1e-8
        bound = 1.01 * np.sqrt(2 * max(0.0, f_ref - f)) if ref.max_violation <= 1e-12 else 0
        assert np.linalg.norm(x - x_ref) <= max(1e-5 * np.linalg.norm(x_ref), bound, 1e-12)
        # and the independent exact method (Lawson & Hanson NNLS) to roundoff
        x_nnls = solve_max_margin(problem, method="nnls").primal.ravel()
        assert np.linalg.norm(x - x_nnls) <= 1e-8 * max(1.0, np.linalg.norm(x_nnls))
    tight = tight_cvxpy(problem)
    if tight is not None:
        assert rel_err(x, tight.ravel()) <= 1e-5
    return tight is not None


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("kind", ["head", "att", "degenerate"])
def test_matches_cvxpy_and_kkt(kind, seed):
    problem = _build(kind, 1000 * (1 + ["head", "att", "degenerate"].index(kind)) + seed)
    res = solve_max_margin(problem, method=METHOD)
    assert _check(problem, res, solve_max_margin(problem, method="cvxpy"))


@pytest.mark.parametrize("seed", range(6))
def test_scan_paths(seed, monkeypatch):
    """Pool selection with rescans, from dense rows and from the key scores."""
    problem = _build("att", 50 + seed)
    ref = solve_max_margin(problem, method="cvxpy")
    monkeypatch.setattr(dual_active_set, "_DAS_POOL", 10)
    assert _check(problem, solve_max_margin(problem, method=METHOD), ref)
    monkeypatch.setattr(dual_active_set, "_DAS_DENSE_MAX", 0)
    _check(problem, solve_max_margin(problem, method=METHOD), ref)
    monkeypatch.setattr(dual_active_set, "_DAS_POOL", 1000)  # whole, but no dense rows
    _check(problem, solve_max_margin(problem, method=METHOD), ref)


def test_zero_rhs_everywhere_gives_zero():
    problem = head_from_rows(np.random.default_rng(0).standard_normal((30, 4)),
                              np.zeros(30))
    res = solve_max_margin(problem, method=METHOD)
    assert np.all(res.primal == 0) and np.all(res.dual == 0)


def _infeasible(seed):
    rng = np.random.default_rng(seed)
    kind = seed % 3
    if kind == 0:  # a point and its negation with the same label
        base = _head(rng, int(rng.integers(10, 300)), int(rng.integers(2, 30)))
        X = base.scores.keys[:, 0]
        i = int(rng.integers(0, len(X)))
        return head_from_rows(np.vstack([X, -X[i] * rng.uniform(0.5, 2.0)]))
    if kind == 1:  # ATT-SVM: two inputs with swapped keys
        K = rng.standard_normal((int(rng.integers(5, 40)), 4, 6))
        a, b = rng.standard_normal(6), rng.standard_normal(6)
        K[0, 0], K[0, 1], K[1, 0], K[1, 1] = a, b, b, a
        sel = np.argmax(K @ rng.standard_normal(6), axis=1)
        sel[0] = sel[1] = 0
        return att_svm_problem(K, sel)
    # a positive combination of rows against the negated sum (Farkas)
    d = int(rng.integers(2, 20))
    X = rng.standard_normal((int(rng.integers(2, 10)), d))
    return head_from_rows(np.vstack([X, -X.sum(axis=0)]))


@pytest.mark.parametrize("seed", range(12))
def test_infeasible_raises(seed):
    problem = _infeasible(seed)
    with pytest.raises(NotSeparableError, match="is infeasible"):
        solve_max_margin(problem, method=METHOD)
    with pytest.raises(NotSeparableError):
        solve_max_margin(problem, method="cvxpy")


@pytest.mark.parametrize("seed", range(12))
def test_its_infeasibility_carries_farkas_multipliers(seed):
    # checked on the rows written from the definitions: lam >= 0, A^T lam = 0 to the
    # rounding of its terms, r^T lam > 0; the dispatcher then needs no LP of its own
    from skntp._backend import get_backend

    problem = _infeasible(seed)
    with pytest.raises(NotSeparableError) as raised:
        dual_active_set.solve(problem, 1e-8, 1000, get_backend("numpy"), 0)
    lam = raised.value.ray
    A = rows_by_definition(problem)
    assert lam.shape == (A.shape[0],) and np.all(lam >= 0)
    scale = np.abs(A).T @ lam
    assert np.all(np.abs(A.T @ lam) <= 1e-12 * scale.max())
    assert problem.constraints.rhs @ lam > 1e-6 * np.abs(problem.constraints.rhs) @ lam


def test_zero_row_with_positive_rhs_is_infeasible():
    X = np.random.default_rng(3).standard_normal((5, 3))
    X[2] = 0.0
    with pytest.raises(NotSeparableError, match="head SVM is infeasible") as raised:
        solve_max_margin(head_from_rows(X), method=METHOD)
    # certified by the zero row alone: 0 >= 1
    assert np.array_equal(raised.value.result.dual, np.eye(5)[2])


def test_auto_routes_key_scores_here():
    problem = _head(np.random.default_rng(1), 800, 12)
    assert solve_max_margin(problem, method="auto").method == METHOD


def test_addition_limit_falls_back(monkeypatch):
    problem = _head(np.random.default_rng(2), 300, 10)
    rows = least_distance.KeyRows(problem)
    assert dual_active_set._dual_active_set(rows, problem.constraints.rhs, 10, max_add=3) is None
    monkeypatch.setattr(dual_active_set, "_DAS_MAX_ADD", 0)
    with pytest.raises(ValueError, match="no max-margin method accepts"):
        solve_max_margin(problem, method=METHOD)
    res = solve_max_margin(problem, method="auto")
    assert res.method == "nnls"


def test_declines_other_programs():
    problem = _head(np.random.default_rng(4), 20, 3)
    big = MaxMarginProblem(KeyScores(np.zeros((1, 1, nnls_working_set.MAX_DIM + 1))),
                           Constraints([0], [0], [-1], [1.0], [False]))
    assert dual_active_set.solve(big, 1e-8, 100, None, 0) is None
    eq = MaxMarginProblem(problem.scores, Constraints(
        problem.constraints.block, problem.constraints.pos, problem.constraints.ref,
        problem.constraints.rhs, np.r_[True, np.zeros(19, bool)]))
    assert dual_active_set.solve(eq, 1e-8, 100, None, 0) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(300))
def test_sweep(seed):
    kind = ("head", "att", "degenerate")[seed % 3]
    problem = _build(kind, 5000 + seed)
    assert _check(problem, solve_max_margin(problem, method=METHOD),
                  solve_max_margin(problem, method="cvxpy"))
