"""The max-margin programs in the entrywise max and l1 norms (linear programs).

Steepest descent in a norm converges in direction to the max-margin solution in
that norm (sign descent and Adam without epsilon-dominance: the entrywise max
norm).  The core solves the same constraints in these norms by HiGHS and
certifies each answer by its duality gap.  References are cvxpy programs
written here from the papers' equations (every pair of tokens for the
NTP-SVM), not through the package's builders.
"""

import cvxpy as cp
import numpy as np
import pytest
from helpers import check_ntp_constraints, ntp_instance, ntp_svm_all_pairs

from skntp.svm import (
    NotSeparableError,
    att_svm,
    att_svm_problem,
    att_svm_w,
    ntp_svm,
    solve_max_margin,
)

NORMS = {"max": (lambda w: np.abs(w).max(), lambda x: cp.norm(cp.vec(x, order="C"), "inf")),
         "l1": (lambda w: np.abs(w).sum(), lambda x: cp.norm1(cp.vec(x, order="C")))}


def _att_instance(seed, n=8, T=5, k=6):
    rng = np.random.default_rng(seed)
    K = rng.standard_normal((n, T, k))
    return K, np.argmax(K @ rng.standard_normal(k), axis=1)  # separable by construction


@pytest.mark.parametrize("norm", ["max", "l1"])
@pytest.mark.parametrize("seed", range(3))
def test_att_svm_in_lp_norms_matches_cvxpy(norm, seed):
    K, sel = _att_instance(seed)
    p, res = att_svm(K, sel, norm=norm, return_result=True)
    value, objective = NORMS[norm]
    q = cp.Variable(K.shape[2])
    cons = [q @ (K[i, sel[i]] - K[i, t]) >= 1
            for i in range(K.shape[0]) for t in range(K.shape[1]) if t != sel[i]]
    prob = cp.Problem(cp.Minimize(objective(q)), cons)
    prob.solve(solver=cp.CLARABEL)
    assert res.method == "highs" and res.gap <= 1e-8 and res.max_violation <= 1e-9
    assert abs(value(p) - prob.value) <= 1e-6 * prob.value
    margins = np.einsum("itk,k->it", K, p)
    gaps = margins[np.arange(len(sel)), sel][:, None] - margins
    gaps[np.arange(len(sel)), sel] = np.inf
    assert gaps.min() >= 1 - 1e-9


@pytest.mark.parametrize("norm", ["max", "l1"])
@pytest.mark.parametrize("seed", range(2))
def test_ntp_svm_in_lp_norms_matches_cvxpy(norm, seed):
    H, S = ntp_instance(seed)
    W, res = ntp_svm(H, S, norm=norm, return_result=True)
    value, objective = NORMS[norm]
    m, V = S.shape
    reference = value(ntp_svm_all_pairs(H, S, objective))
    assert W.shape == (V, H.shape[1]) and res.gap <= 1e-8
    assert abs(value(W) - reference) <= 1e-6 * reference
    # the constraints (4a)-(4b), checked here on the answer
    check_ntp_constraints(H, S, W, 1e-8)


def test_lp_norms_differ_from_frobenius_and_from_each_other():
    K, sel = _att_instance(5)
    sols = {norm: att_svm(K, sel, norm=norm) for norm in ("fro", "max", "l1")}
    unit = {k: v / np.linalg.norm(v) for k, v in sols.items()}
    assert unit["fro"] @ unit["max"] < 0.999 and unit["fro"] @ unit["l1"] < 0.999
    # each is the smallest in its own norm among the three feasible points
    for norm in ("max", "l1"):
        value = NORMS[norm][0]
        assert all(value(sols[norm]) <= value(w) + 1e-9 for w in sols.values())
    # l1 solutions are sparse (a vertex of the LP), max-norm ones sit on the box
    assert np.sum(np.abs(sols["l1"]) > 1e-9) <= len(sel) * (K.shape[1] - 1)
    top = np.abs(sols["max"]).max()
    assert np.sum(np.abs(np.abs(sols["max"]) - top) < 1e-9) >= 2


def test_key_query_program_in_lp_norms():
    rng = np.random.default_rng(0)
    X, Z = rng.standard_normal((5, 4, 3)), rng.standard_normal((5, 3))
    sel = np.argmax(np.einsum("itd,kd,ik->it", X, rng.standard_normal((3, 3)), Z), axis=1)
    for norm in ("max", "l1"):
        W, res = att_svm_w(X, Z, sel, norm=norm, return_result=True)
        assert W.shape == (3, 3) and res.gap <= 1e-8
        Wc, rc = att_svm_w(X, Z, sel, norm=norm, method="cvxpy", return_result=True)
        value = NORMS[norm][0]
        assert abs(value(W) - value(Wc)) <= 1e-6 * value(Wc) and rc.gap <= 1e-6


def test_scale_and_errors():
    K, sel = _att_instance(1)
    p, res = att_svm(K, sel, norm="max", return_result=True)
    q, res_small = att_svm(K * 1e-7, sel, norm="max", return_result=True)
    np.testing.assert_allclose(q * 1e-7, p, atol=1e-9 * np.abs(p).max())
    assert abs(res_small.dual.sum() * 1e-7 - res.dual.sum()) <= 1e-7 * res.dual.sum()
    with pytest.raises(ValueError, match="minimizes the max or l1 norm, not the fro"):
        solve_max_margin(att_svm_problem(K, sel), method="highs")
    with pytest.raises(ValueError, match="minimizes the fro norm, not the max"):
        solve_max_margin(att_svm_problem(K, sel, norm="max"), method="dual-active-set")
    with pytest.raises(ValueError, match="norm must be one of"):
        att_svm_problem(K, sel, norm="l2")
    # infeasible: two inputs whose keys are swapped
    K2 = np.stack([K[0, :2], K[0, [1, 0]]])
    with pytest.raises(NotSeparableError, match="infeasible \\(HiGHS\\)"):
        att_svm(K2, np.array([0, 0]), norm="l1", method="highs")
