"""The key-query ATT-SVM with one query per input, Frobenius and nuclear norm.

References are cvxpy programs written here from the equations of
"Transformers as Support Vector Machines" ((W-SVM), (KQ-SVM)), not through the
package's builders: ``min ||W||`` s.t. ``z_i^T W (x_{i alpha_i} - x_{it}) >= 1``.
"""

import cvxpy as cp
import numpy as np
import pytest
from helpers import key_query_instance, key_query_margins

from skntp.metrics import numerical_rank
from skntp.svm import NotSeparableError, att_svm_w, att_svm_w_problem, solve_max_margin


def _reference(X, Z, selected, norm):
    n, T, d = X.shape
    W = cp.Variable((Z.shape[1], d))
    cons = [Z[i] @ W @ (X[i, selected[i]] - X[i, t]) >= 1
            for i in range(n) for t in range(T) if t != selected[i]]
    obj = cp.normNuc(W) if norm == "nuclear" else cp.norm(W, "fro")
    prob = cp.Problem(cp.Minimize(obj), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return W.value, prob.value


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", [dict(n=8, T=5, d=6), dict(n=6, T=4, d=5, k=3),
                                   dict(n=6, T=4, d=6, self_attention=True)])
def test_nuclear_program_matches_cvxpy_and_is_certified(seed, shape):
    X, Z, sel = key_query_instance(seed, **shape)
    W, res = att_svm_w(X, Z, sel, norm="nuclear", return_result=True)
    W_ref, value = _reference(X, Z, sel, "nuclear")
    nuc = np.linalg.svd(W, compute_uv=False).sum()
    assert res.method == "nuclear-ipm" and res.status == "optimal"
    assert abs(nuc - value) <= 1e-6 * value
    assert key_query_margins(W, X, Z, sel) >= 1 - 1e-9
    # the certificate, recomputed here: the dual multipliers are dual feasible
    # (||sum_j y_j G_j||_2 <= 1) and their value bounds the optimum from below
    i, t = np.nonzero(np.arange(X.shape[1])[None, :] != sel[:, None])
    M = Z[i].T @ (res.dual[:, None] * (X[i, sel[i]] - X[i, t]))
    assert np.all(res.dual >= 0) and np.linalg.norm(M, 2) <= 1 + 1e-9
    assert res.gap <= 1e-8
    assert (nuc - res.dual.sum()) / nuc <= 1e-8 + 1e-12
    assert np.linalg.norm(W / np.linalg.norm(W) - W_ref / np.linalg.norm(W_ref)) < 1e-3


@pytest.mark.parametrize("seed", range(3))
def test_frobenius_program_matches_cvxpy(seed):
    X, Z, sel = key_query_instance(seed, n=7, T=5, d=5, k=4)
    W = att_svm_w(X, Z, sel)
    W_ref, value = _reference(X, Z, sel, "fro")
    assert W.shape == (4, 5)
    np.testing.assert_allclose(np.linalg.norm(W), value, rtol=1e-6)
    np.testing.assert_allclose(W, W_ref, atol=1e-5 * np.abs(W_ref).max())


def test_cvxpy_method_of_the_core_agrees():
    X, Z, sel = key_query_instance(7)
    W1 = att_svm_w(X, Z, sel, norm="nuclear")
    W2, res = att_svm_w(X, Z, sel, norm="nuclear", method="cvxpy", return_result=True)
    n1, n2 = (np.linalg.svd(w, compute_uv=False).sum() for w in (W1, W2))
    assert abs(n1 - n2) <= 1e-6 * n2 and res.gap <= 1e-6


def test_nuclear_solution_has_lower_rank_than_frobenius():
    # the setting of the public rank experiment (n = 10, T = 10), d = 16
    ranks = []
    for seed in range(3):
        X, Z, sel = key_query_instance(seed, n=10, T=10, d=16)
        ranks.append((numerical_rank(att_svm_w(X, Z, sel, norm="nuclear")),
                      numerical_rank(att_svm_w(X, Z, sel))))
    nuc, fro = np.array(ranks).T
    assert (nuc < fro).all() and nuc.max() <= 7 and fro.min() >= 8


def test_scale_of_the_data_does_not_change_the_solution():
    X, Z, sel = key_query_instance(3)
    W, res1 = att_svm_w(X, Z, sel, norm="nuclear", return_result=True)
    W_small, res = att_svm_w(X * 1e-6, Z, sel, norm="nuclear", return_result=True)
    nuc = np.linalg.svd(W, compute_uv=False).sum()
    assert abs(np.linalg.svd(W_small * 1e-6, compute_uv=False).sum() - nuc) <= 1e-8 * nuc
    # a gap of 1e-8 in value pins the solution down to about its square root
    np.testing.assert_allclose(W_small * 1e-6, W, atol=1e-4 * np.abs(W).max())
    # the multipliers scale as 1/alpha for the nuclear norm (1/alpha^2 for Frobenius)
    assert abs(res.dual.sum() * 1e-6 - res1.dual.sum()) <= 1e-7 * res1.dual.sum()
    assert res.gap <= 1e-8


def test_infeasible_selection_raises_with_a_farkas_certificate():
    # two inputs with the same query and swapped tokens: z^T W (x1 - x2) >= 1 and
    # z^T W (x2 - x1) >= 1 cannot both hold
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    X = np.stack([x, x[[1, 0, 2]]])
    Z = np.ones((2, 4))
    with pytest.raises(NotSeparableError, match="not separable"):
        att_svm_w(X, Z, np.array([0, 0]), norm="nuclear")
    with pytest.raises(NotSeparableError, match="not separable"):
        att_svm_w(X, Z, np.array([0, 0]))
    # a generic infeasible instance: more constraints than the d^2 entries of W
    X, Z, sel = key_query_instance(0, n=10, T=6, d=4, self_attention=True)
    with pytest.raises(NotSeparableError, match="not separable"):
        att_svm_w(X, Z, sel, norm="nuclear", method="nuclear-ipm")


def test_bad_input():
    X, Z, sel = key_query_instance(0)
    with pytest.raises(NotSeparableError, match="queries of inputs \\[2\\] are zero"):
        Z0 = Z.copy()
        Z0[2] = 0
        att_svm_w(X, Z0, sel, norm="nuclear")
    with pytest.raises(NotSeparableError, match="same token"):
        X1 = X.copy()
        X1[0, 1 if sel[0] != 1 else 0] = X1[0, sel[0]]
        att_svm_w(X1, Z, sel)
    with pytest.raises(ValueError, match="norm must be"):
        att_svm_w(X, Z, sel, norm="operator")
    with pytest.raises(ValueError, match="queries must have shape"):
        att_svm_w(X, Z[:3], sel)
    with pytest.raises(ValueError, match="queries must be finite"):
        att_svm_w(X, Z * np.nan, sel)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    with pytest.raises(ValueError, match="minimizes the fro norm, not the nuclear norm"):
        solve_max_margin(problem, method="dual-active-set")


def test_numerical_rank():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    W = U[:, :3] @ np.diag([3.0, 1.0, 1e-5]) @ U[:, 3:].T
    assert numerical_rank(W) == 3
    assert numerical_rank(W, rtol=1e-4) == 2
    assert numerical_rank(W + 1e-9 * U[:, :1] @ U[:, 5:].T) == 3
    assert numerical_rank(np.zeros((2, 3))) == 0
    with pytest.raises(ValueError, match="rtol"):
        numerical_rank(W, rtol=1.0)
    with pytest.raises(ValueError, match="matrix"):
        numerical_rank(np.ones(3))


def test_query_key_score_map_is_the_lifted_key_map():
    from skntp.svm import QueryKeyScores

    rng = np.random.default_rng(1)
    X, Z = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 2))
    W, C = rng.standard_normal((2, 5)), rng.standard_normal((4, 3))
    sc = QueryKeyScores(X, Z)
    S = sc.forward(np, W)
    np.testing.assert_allclose(S, np.einsum("btd,kd,bk->bt", X, W, Z))
    np.testing.assert_allclose(sc.matrix() @ W.ravel(), S.ravel())
    assert np.isclose(np.sum(S * C), np.sum(W * sc.adjoint(np, C)))
    assert sc.shape == (2, 5) and sc.magnitude() == np.abs(X).max() * np.abs(Z).max()
    np.testing.assert_allclose(sc.rescaled(2.0).forward(np, W), 2 * S)
    with pytest.raises(ValueError, match="as many blocks"):
        QueryKeyScores(X, Z[:3])


def test_progress_callback_and_verbose(capsys):
    X, Z, sel = key_query_instance(2)
    calls = []
    W, res = att_svm_w(X, Z, sel, norm="nuclear", callback=lambda *a: calls.append(a),
                       return_result=True)
    # one call per iteration and the final certificate; the gaps end below tol
    assert len(calls) == res.n_iter + 1 and calls[-1][1] == res.gap <= 1e-8
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    solve_max_margin(problem, verbose=1)
    assert "nuclear-ipm" in capsys.readouterr().out


def test_program_too_large_is_refused(monkeypatch):
    from skntp.svm import ProgramTooLargeError

    X, Z, sel = key_query_instance(0)
    monkeypatch.setattr("skntp.svm._problem.available_memory", lambda: 1000)
    with pytest.raises(ProgramTooLargeError, match="m x m matrices"):
        att_svm_w(X, Z, sel, norm="nuclear", method="nuclear-ipm")
