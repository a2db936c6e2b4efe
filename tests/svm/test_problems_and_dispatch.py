"""The max-margin core (``skntp.svm._problem``, ``_solve``) against closed forms and dense algebra.

* Score maps: ``forward`` is the dense map, ``adjoint`` its transpose and
  ``matrix`` its sparse matrix, checked entry by entry on small random shapes.
* Programs with a known answer: one constraint ``a^T w >= r`` (``w = r a/||a||^2``),
  orthogonal constraints, equalities only (the pseudo-inverse), a constraint that
  is inactive, and the trivial empty program.
* The ``auto`` dispatch: the order per program class, methods that decline,
  methods whose result is far from feasible, and the final certificate passed to
  ``callback``.
* The cvxpy reference path: the duals' signs (inequalities ``>= 0``, equalities
  free) and the relative gap and violation it reports.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import key_problem
from sklearn.exceptions import ConvergenceWarning

from skntp.svm import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    QueryKeyScores,
    _solve,
    ntp_separability,
    ntp_svm_problem,
    partial_ntp_svm_problem,
    solve_max_margin,
    solve_min_norm,
    solvers,
)
from skntp.svm._problem import constraint_violation

EXACT_METHODS = ["cvxpy", "auto"]


def dense_constraints(problem):
    """Row ``S[b, a] - S[b, t]`` (or ``S[b, a]``) of every constraint, by looping."""
    c = problem.constraints
    n_var = int(np.prod(problem.shape))
    rows = np.zeros((len(c), n_var))
    for j in range(n_var):
        e = np.zeros(n_var)
        e[j] = 1.0
        S = problem.scores.forward(np, e.reshape(problem.shape))
        for i in range(len(c)):
            rows[i, j] = S[c.block[i], c.pos[i]] - (S[c.block[i], c.ref[i]]
                                                    if c.ref[i] >= 0 else 0.0)
    return rows


# --------------------------------------------------------------------------
# score maps
# --------------------------------------------------------------------------
@pytest.mark.parametrize("outputs", ["identity", "dense", "scaled"])
def test_bilinear_scores_forward_adjoint_and_matrix(outputs):
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((4, 3))  # 4 blocks, q = 3
    if outputs == "identity":
        smap = BilinearScores(Q, n_outputs=5)
        E = np.eye(5)
    elif outputs == "scaled":
        scale = rng.random(5) + 0.5
        smap = BilinearScores(Q, n_outputs=5, output_scale=scale)
        E = np.diag(scale)
    else:
        E = rng.standard_normal((6, 2))
        smap = BilinearScores(Q, E)
    p = E.shape[1]
    assert smap.shape == (p, 3) and smap.n_blocks == 4 and smap.n_positions == E.shape[0]
    W = rng.standard_normal((p, 3))
    S = Q @ W.T @ E.T  # S[b, t] = e_t^T W q_b
    np.testing.assert_allclose(smap.forward(np, W), S, rtol=1e-13)
    C = rng.standard_normal(S.shape)
    # <S(W), C> = <W, S*(C)>
    np.testing.assert_allclose(np.sum(S * C), np.sum(W * smap.adjoint(np, C)), rtol=1e-12)
    np.testing.assert_allclose(smap.adjoint(np, C), E.T @ C.T @ Q, rtol=1e-12)
    M = smap.matrix()
    assert sp.issparse(M) and M.shape == (4 * E.shape[0], p * 3)
    np.testing.assert_allclose(M @ W.ravel(), S.ravel(), rtol=1e-12)


def test_bilinear_scores_refuses_inconsistent_arguments():
    with pytest.raises(ValueError, match="n_outputs is required when outputs is None"):
        BilinearScores(np.ones((2, 2)))
    with pytest.raises(ValueError, match="output_scale is only for outputs=None"):
        BilinearScores(np.ones((2, 2)), np.ones((3, 2)), output_scale=np.ones(3))


def test_key_scores_forward_adjoint_and_matrix():
    rng = np.random.default_rng(1)
    K = rng.standard_normal((3, 4, 5))
    smap = KeyScores(K)
    assert smap.shape == (5,) and smap.n_blocks == 3 and smap.n_positions == 4
    p = rng.standard_normal(5)
    np.testing.assert_allclose(smap.forward(np, p), K @ p, rtol=1e-13)
    C = rng.standard_normal((3, 4))
    np.testing.assert_allclose(smap.adjoint(np, C), np.einsum("btd,bt->d", K, C),
                               rtol=1e-13)
    np.testing.assert_allclose(smap.matrix() @ p, (K @ p).ravel(), rtol=1e-13)


def test_constraint_matrix_operators_and_violation_match_dense_rows():
    rng = np.random.default_rng(2)
    problem = key_problem(rng.standard_normal((3, 4, 5)), [0, 1, 2, 2, 0], [1, 0, 3, 2, 2],
                          [0, -1, 1, 0, -1], [1.0, 0.5, 0.0, 1.0, 2.0],
                          [False, False, True, False, True])
    rows = dense_constraints(problem)
    np.testing.assert_allclose(problem.constraint_matrix().toarray(), rows, rtol=1e-13)
    values, dual_to_primal = problem.operators(_solve.get_backend())
    w = rng.standard_normal(5)
    lam = rng.standard_normal(5)
    np.testing.assert_allclose(values(w), rows @ w, rtol=1e-12)
    np.testing.assert_allclose(dual_to_primal(lam), rows.T @ lam, rtol=1e-12)
    slack = rows @ w - problem.constraints.rhs
    eq = problem.constraints.equality
    expected = max(np.abs(slack[eq]).max(), np.maximum(-slack[~eq], 0).max())
    assert constraint_violation(problem, w) == pytest.approx(expected, rel=1e-12)
    assert problem.shape == (5,)


def test_constraints_validate_and_concatenate():
    a = Constraints([0], [1], [2], [1.0], [False])
    b = Constraints([3, 4], [5, 6], [-1, 0], [0.0, 2.0], [True, False])
    c = Constraints.concatenate([a, Constraints([], [], [], [], []), b])
    np.testing.assert_array_equal(c.block, [0, 3, 4])
    np.testing.assert_array_equal(c.pos, [1, 5, 6])
    np.testing.assert_array_equal(c.ref, [2, -1, 0])
    np.testing.assert_array_equal(c.rhs, [1.0, 0.0, 2.0])
    np.testing.assert_array_equal(c.equality, [False, True, False])
    assert len(c) == 3 and c.block.dtype == np.int64 and c.rhs.dtype == float
    empty = Constraints.concatenate([])
    assert len(empty) == 0 and empty.equality.dtype == bool
    for name, args in [("pos", ([0], [1, 2], [0], [1.0], [False])),
                       ("ref", ([0], [1], [0, 1], [1.0], [False])),
                       ("rhs", ([0], [1], [0], [1.0, 2.0], [False])),
                       ("equality", ([0], [1], [0], [1.0], [False, True]))]:
        with pytest.raises(ValueError, match=f"constraint array '{name}' must have shape"):
            Constraints(*args)


# --------------------------------------------------------------------------
# programs with known answers
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method", EXACT_METHODS)
def test_one_constraint_gives_the_scaled_normal(method):
    # S[0, 0] - S[0, 1] = (k0 - k1)^T w >= r: w = r a / ||a||^2, multiplier r/||a||^2
    k0, k1 = np.array([3.0, 1.0, -2.0]), np.array([1.0, 1.0, 0.0])
    a = k0 - k1
    res = solve_max_margin(key_problem([[k0, k1]], [0], [0], [1], [2.5], [False]),
                           method=method)
    np.testing.assert_allclose(res.primal, 2.5 * a / (a @ a), rtol=1e-6)
    np.testing.assert_allclose(res.dual, [2.5 / (a @ a)], rtol=1e-5)
    assert res.status == "optimal"
    assert abs(res.gap) < 1e-6 and res.max_violation < 1e-7
    assert res.primal.shape == (3,)


@pytest.mark.parametrize("method", EXACT_METHODS)
def test_inactive_and_orthogonal_constraints(method):
    # w_0 >= 2 and w_1 >= 3 (orthogonal, both active); w_0 + w_1 >= 1 (inactive)
    keys = [[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]]
    res = solve_max_margin(key_problem(keys, [0, 1, 2], [0, 0, 0], [-1, -1, -1],
                                       [2.0, 3.0, 1.0], [False] * 3), method=method)
    np.testing.assert_allclose(res.primal, [2.0, 3.0], rtol=1e-7)
    np.testing.assert_allclose(res.dual, [2.0, 3.0, 0.0], atol=1e-6)


def test_equalities_give_the_minimum_norm_solution_and_free_duals():
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((1, 4, 6))
    # S[0,1] - S[0,0] = -1 and S[0,2] - S[0,0] = 2: equalities with right-hand sides
    # of both signs, so the multipliers have both signs
    problem = key_problem(keys, [0, 0], [1, 2], [0, 0], [-1.0, 2.0], [True, True])
    A = dense_constraints(problem)
    ref = np.linalg.pinv(A) @ np.array([-1.0, 2.0])
    res = solve_max_margin(problem, method="cvxpy")
    np.testing.assert_allclose(res.primal, ref, rtol=1e-6, atol=1e-9)
    lam = np.linalg.lstsq(A.T, ref, rcond=None)[0]  # w = A^T lam
    np.testing.assert_allclose(res.dual, lam, rtol=1e-5, atol=1e-8)
    assert res.gap == pytest.approx(0.0, abs=1e-7)
    assert res.max_violation <= 1e-7  # |A w - r| on equalities
    w, residual = solve_min_norm(problem)
    np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-13)
    assert residual < 1e-12


def test_min_norm_reports_the_residual_of_unsolvable_equations():
    keys = np.array([[[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]]])
    # w_0 = 1 and 2 w_0 = 5 cannot both hold: least squares gives w_0 = 11/5
    problem = key_problem(keys, [0, 0], [0, 2], [1, 1], [1.0, 5.0], [True, True])
    w, residual = solve_min_norm(problem)
    np.testing.assert_allclose(w, [11 / 5, 0.0], rtol=1e-10, atol=1e-14)
    r = np.array([11 / 5 - 1.0, 22 / 5 - 5.0])
    assert residual == pytest.approx(np.linalg.norm(r) / np.linalg.norm([1.0, 5.0]),
                                     rel=1e-8)
    empty = key_problem(keys, [], [], [], [], [])
    w0, r0 = solve_min_norm(empty)
    np.testing.assert_array_equal(w0, [0.0, 0.0])
    assert r0 == 0.0


def test_empty_program_is_the_zero_solution():
    problem = key_problem(np.ones((2, 3, 4)), [], [], [], [], [])
    calls = []
    res = solve_max_margin(problem, method="cvxpy", callback=lambda *a: calls.append(a))
    np.testing.assert_array_equal(res.primal, np.zeros(4))
    assert res.method == "trivial" and res.status == "optimal"
    assert res.gap == 0.0 and res.max_violation == 0.0 and res.dual.shape == (0,)
    assert calls == []


@pytest.mark.parametrize("method, norm", [("cvxpy", "fro"), ("auto", "fro"), ("highs", "max"),
                                          ("auto", "l1")])
def test_a_program_of_zero_right_hand_sides_is_the_zero_solution(method, norm):
    # rows >= 0 only (eq. (10) with no support vector): w = 0 is feasible with norm 0, so
    # it is the optimum in every norm; Clarabel stopped at |p| ~ 6e-5 with gap 1
    from skntp.svm import relaxed_att_svm

    rng = np.random.default_rng(0)
    keys = rng.standard_normal((4, 3, 2))
    p, res = relaxed_att_svm(keys, [0, 1, 2, 0], np.zeros(4, bool), method=method,
                             norm=norm, return_result=True)
    np.testing.assert_array_equal(p, np.zeros(2))
    assert res.method == "trivial" and res.status == "optimal" and res.gap == 0.0
    assert res.max_violation == 0.0
    np.testing.assert_array_equal(res.dual, np.zeros(8))  # 4 inputs x 2 other tokens


@pytest.mark.parametrize("method, norm", [
    ("cvxpy", "fro"), ("auto", "fro"), ("pnorm-barrier", ("lp", 3.0)), ("auto", "max"),
    ("spectral-barrier", "spectral"), ("nuclear-ipm", "nuclear")])
def test_nonpositive_right_hand_sides_are_the_zero_solution(method, norm):
    # rows ">= r" with r <= 0 and "= 0": w = 0 is feasible, so it is the optimum in every
    # norm (the barrier methods divided by mu0 = f(0) / m = 0, or reported a gap of
    # 6e23, before the core answered these programs)
    from dataclasses import replace

    from skntp.svm import att_svm_w_problem

    rng = np.random.default_rng(0)
    X, Z = rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 2))
    problem = att_svm_w_problem(X, Z, [0, 1, 2, 0], norm=norm)
    c = problem.constraints
    rhs = -rng.uniform(0.0, 1.0, len(c))
    rhs[0] = 0.0
    problem = replace(problem, constraints=Constraints(c.block, c.pos, c.ref, rhs,
                                                       c.equality))
    res = solve_max_margin(problem, method=method)
    np.testing.assert_array_equal(res.primal, np.zeros(problem.shape))
    assert res.method == "trivial" and res.status == "optimal" and res.gap == 0.0
    np.testing.assert_array_equal(res.dual, np.zeros(len(c)))
    # an equality of nonzero rhs is not met by w = 0: w_0 = 1 and w_0 + w_1 >= -1
    problem = key_problem([[[1.0, 0.0]], [[1.0, 1.0]]], [0, 1], [0, 0], [-1, -1],
                          [1.0, -1.0], [True, False])
    res = solve_max_margin(problem, method="cvxpy")
    assert res.method == "cvxpy"
    np.testing.assert_allclose(res.primal, [1.0, 0.0], atol=1e-8)


def test_infeasible_programs_name_themselves():
    # w_0 >= 1 and -w_0 >= 1
    problem = key_problem([[[1.0]], [[-1.0]]], [0, 1], [0, 0], [-1, -1], [1.0, 1.0],
                          [False, False])
    for method in ("cvxpy", "auto"):
        with pytest.raises(NotSeparableError, match="toy is infeasible.*the toy data are "
                           "not separable"):
            solve_max_margin(problem, method=method)


# --------------------------------------------------------------------------
# the auto dispatch
# --------------------------------------------------------------------------
@pytest.fixture
def methods(monkeypatch):
    """A private registry: the real cvxpy method plus the test's own, tried by "auto"
    for key-score programs in the order the test sets."""
    registry = {"cvxpy": solvers.METHODS["cvxpy"]}
    monkeypatch.setattr(_solve, "METHODS", registry)
    monkeypatch.setattr(_solve, "AUTO_ORDER", dict(solvers.AUTO_ORDER))
    return registry


def register_method(name, func):
    """Add a method to the private registry of the ``methods`` fixture."""
    _solve.METHODS[name] = solvers.Method(func)


def _answer(problem, primal, dual, name):
    # the figures a method claims (gap 0.25, no violation) are replaced by the certificate
    return MaxMarginResult(primal=np.asarray(primal, float), dual=np.asarray(dual, float),
                           method=name, status="optimal", n_iter=7, gap=0.25,
                           max_violation=0.0)


def test_auto_tries_methods_in_order_and_skips_decliners(methods):
    problem = key_problem([[[1.0, 0.0]]], [0], [0], [-1], [1.0], [False])
    seen = []

    def decline(p, tol, max_iter, be, verbose, callback):
        seen.append("decline")
        return None

    def answer(p, tol, max_iter, be, verbose, callback):
        seen.append(("answer", tol, max_iter, str(be.dtype)))
        return _answer(p, [1.0, 0.0], [1.0], "answer")  # exact: w = lam k = (1, 0)

    register_method("decline", decline)
    register_method("answer", answer)
    register_method("never", lambda *a: pytest.fail("a method out of the auto order"))
    _solve.AUTO_ORDER["keys"] = ("decline", "answer", "cvxpy")
    calls = []
    res = solve_max_margin(problem, tol=1e-6, max_iter=11, dtype="float32",
                           callback=lambda *a: calls.append(a))
    # float32 requests are solved in float64; tol and max_iter reach the method
    assert seen == ["decline", ("answer", 1e-6, 11, "float64")] and res.method == "answer"
    assert calls == [(7, 0.0, 0.0)]  # the final certificate, recomputed
    # asked by name, a method runs alone
    assert solve_max_margin(problem, method="answer").method == "answer"
    with pytest.raises(ValueError, match="no max-margin method accepts the problem toy"):
        solve_max_margin(problem, method="decline")


def test_auto_moves_on_from_an_uncertified_result(methods):
    # an answer whose recomputed certificate fails has not decided: the next method
    # (cvxpy, last) decides; a certified one stands
    problem = key_problem([[[2.0, 0.0]]], [0], [0], [-1], [1.0], [False])
    _solve.AUTO_ORDER["keys"] = ("rough", "cvxpy")
    register_method("rough", lambda p, *a: _answer(p, [0.0, 0.0], [0.25], "rough"))
    assert solve_max_margin(problem).method == "cvxpy"
    register_method("rough", lambda p, *a: _answer(p, [0.5, 0.0], [0.25], "rough"))
    res = solve_max_margin(problem)
    assert res.method == "rough" and res.status == "optimal"
    np.testing.assert_array_equal(res.primal, [0.5, 0.0])
    # the last candidate's answer is returned, with what it is, whatever it claimed
    _solve.AUTO_ORDER["keys"] = ("rough",)
    register_method("rough", lambda p, *a: _answer(p, [0.0, 0.0], [0.25], "rough"))
    with pytest.warns(ConvergenceWarning, match="no answer could be certified"):
        res = solve_max_margin(problem)
    assert res.status == "infeasible_point" and res.max_violation == 1.0


def test_unknown_method_and_bad_backend_are_refused():
    problem = key_problem([[[1.0]]], [0], [0], [-1], [1.0], [False])
    with pytest.raises(ValueError, match=r"unknown max-margin method 'magic'; choose from "
                       r"\[.*'cvxpy'.*'auto'\]"):
        solve_max_margin(problem, method="magic")
    with pytest.raises(ValueError, match="backend must be 'numpy' or 'torch', got 'jax'"):
        solve_max_margin(problem, backend="jax")
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32'"):
        solve_max_margin(problem, dtype="float16")


def test_cvxpy_reports_gap_and_violation_of_its_answer():
    rng = np.random.default_rng(4)
    K = rng.standard_normal((3, 4, 6))
    selected = np.argmax(K @ rng.standard_normal(6), axis=1)
    i, t = np.nonzero(np.arange(4)[None, :] != selected[:, None])
    problem = key_problem(K, i, selected[i], t, np.ones(i.size), np.zeros(i.size, bool))
    res = solve_max_margin(problem, method="cvxpy")
    A = dense_constraints(problem)
    w, lam = res.primal, res.dual
    assert res.method == "cvxpy" and res.n_iter > 0
    assert res.gap == pytest.approx((w @ w - lam.sum()) / (w @ w), abs=1e-12)
    assert res.max_violation == pytest.approx(max(0.0, (1 - A @ w).max()), abs=1e-15)
    assert np.all(lam >= -1e-9) and np.allclose(A.T @ lam, w, atol=1e-6)


def test_auto_order_covers_every_class_and_tries_the_reference():
    from skntp.svm._solve import program_class
    from skntp.svm.solvers import AUTO_ORDER
    from skntp.svm.solvers.accelerated_dual import GatheredScores

    assert set(AUTO_ORDER) == {"decoder", "decoder-partial", "keys", "bilinear", "nuclear",
                               "lp", "spectral", "lp-norm"}
    for names in AUTO_ORDER.values():
        assert "cvxpy" in names and set(names) <= set(solvers.METHODS)
    H = np.eye(3, 4)
    ntp = ntp_svm_problem(H, np.eye(3, 5, dtype=bool))
    assert program_class(ntp) == "decoder"
    gathered = MaxMarginProblem(GatheredScores(ntp.scores, np.zeros((3, 2), np.int64)),
                                ntp.constraints)
    assert program_class(gathered) == "decoder"
    partial = partial_ntp_svm_problem(H, ntp_separability(H, np.eye(3, 5, dtype=bool)))
    assert program_class(partial) == "decoder-partial"
    assert program_class(key_problem([[[1.0]]], [0], [0], [-1], [1.0], [False])) == "keys"
    graph = MaxMarginProblem(BilinearScores(np.eye(2), np.eye(2)), ntp.constraints)
    assert program_class(graph) == "bilinear"
    nuclear = MaxMarginProblem(QueryKeyScores(np.ones((3, 2, 2)), np.ones((3, 2))),
                               ntp.constraints, norm="nuclear")
    assert program_class(nuclear) == "nuclear"
    lp = MaxMarginProblem(graph.scores, ntp.constraints, norm="l1")
    assert program_class(lp) == "lp"
    # every method of a class minimizes that class's norm
    for cls, names in AUTO_ORDER.items():
        norm = {"nuclear": "nuclear", "lp": "max", "spectral": "spectral",
                "lp-norm": "lp"}.get(cls, "fro")
        assert all(norm in solvers.METHODS[name].norms for name in names)
    assert program_class(MaxMarginProblem(graph.scores, ntp.constraints,
                                          norm="spectral")) == "spectral"
    assert program_class(MaxMarginProblem(graph.scores, ntp.constraints,
                                          norm=["lp", 3])) == "lp-norm"
    with pytest.raises(ValueError, match="norm must be one of"):
        MaxMarginProblem(graph.scores, ntp.constraints, norm="operator")
    with pytest.raises(ValueError, match="needs a matrix parameter"):
        MaxMarginProblem(KeyScores(np.ones((3, 2, 2))), ntp.constraints, norm="spectral")
    with pytest.raises(ValueError, match="needs a matrix parameter"):
        MaxMarginProblem(KeyScores(np.ones((3, 2, 2))), ntp.constraints, norm="nuclear")


def test_constraint_violation_counts_both_sides_of_an_equality():
    # w = (3, 0): the equality w_0 = 1 is violated by +2, the inequality w_0 >= 5 by 2,
    # the inequality w_0 >= -1 not at all
    problem = key_problem([[[1.0, 0.0]]] * 3, [0, 1, 2], [0, 0, 0], [-1, -1, -1],
                          [1.0, 5.0, -1.0], [True, False, False])
    assert constraint_violation(problem, np.array([3.0, 0.0])) == 2.0
    assert constraint_violation(problem, np.array([5.0, 0.0])) == 4.0  # the equality
    assert constraint_violation(problem, np.array([1.0, 7.0])) == 4.0  # w_0 >= 5
    empty = key_problem([[[1.0, 0.0]]], [], [], [], [], [])
    assert constraint_violation(empty, np.array([3.0, 0.0])) == 0.0


def test_cvxpy_verbose_reaches_the_solver(capfd):
    problem = key_problem([[[1.0, 0.0]]], [0], [0], [-1], [1.0], [False])
    solve_max_margin(problem, method="cvxpy", verbose=0)
    assert "Clarabel" not in capfd.readouterr().out
    solve_max_margin(problem, method="cvxpy", verbose=1)
    assert "Clarabel" in capfd.readouterr().out


def test_a_conic_form_that_would_not_fit_is_refused_and_auto_moves_on(monkeypatch, caplog):
    # cvxpy's conic form of a partial NTP-SVM (the separable rows of real text) outgrew
    # the memory and took the user's process with it: it is now refused before cvxpy
    # allocates it, and "auto" goes on with the next method
    from skntp.svm import ProgramTooLargeError, _problem
    from skntp.svm.solvers import AUTO_ORDER, conic

    rng = np.random.default_rng(5)
    H = rng.standard_normal((14, 4))
    support = np.eye(6, dtype=bool)[rng.integers(0, 6, 14)]
    sep = ntp_separability(H, support)
    assert sep.status == "certified" and 0 < sep.n_separable < sep.n_rows
    problem = partial_ntp_svm_problem(H, sep)
    nnz = problem.constraint_matrix().nnz
    assert conic._constraint_nonzeros(problem) == nnz  # counted without the matrix
    n_var = int(np.prod(problem.shape))
    need = conic.CONIC_BYTES_PER_NONZERO * nnz + conic.CONIC_BYTES_PER_VARIABLE_PAIR * n_var**2
    reference = solve_max_margin(problem, method="cvxpy")
    monkeypatch.setattr(_problem, "available_memory", lambda: 0.99 * need / 0.8)
    with pytest.raises(ProgramTooLargeError,
                       match=rf"^{problem.name}: the program has {len(problem.constraints)} "
                             rf"constraints .* dense in the {n_var} variables"):
        solve_max_margin(problem, method="cvxpy")
    monkeypatch.setitem(AUTO_ORDER, "decoder-partial", ("cvxpy", "dcd"))
    with caplog.at_level("INFO", logger="skntp.svm"):
        res = solve_max_margin(problem)
    assert res.method == "dcd" and res.status == "optimal"
    assert any("(cvxpy) declined" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(res.primal, reference.primal, atol=1e-5)
    # every method too large: the first refusal is raised
    monkeypatch.setitem(AUTO_ORDER, "decoder-partial", ("cvxpy",))
    with pytest.raises(ProgramTooLargeError, match="dense in the"):
        solve_max_margin(problem)
    # with just enough memory, cvxpy runs
    monkeypatch.setattr(_problem, "available_memory", lambda: 1.01 * need / 0.8)
    assert solve_max_margin(problem, method="cvxpy").status == "optimal"
