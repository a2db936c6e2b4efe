"""ADMM with singular value thresholding for the logit NTP-SVM (``svm/solvers/svt_admm.py``).

The reference is a cvxpy program written here from the equations of the
logit-space NTP-SVM (Zhao et al. 2024): ``min ||L||_*`` over ``L`` (V x m) with
``L[z, j] = c_j`` on ``S_j`` and ``L[v, j] <= c_j - 1`` off it, solved by
Clarabel (SCS to ``eps = 1e-10`` at m = V = 30, where Clarabel takes ~10 s).
"""

import warnings

import cvxpy as cp
import numpy as np
import pytest
from helpers import logit_margins, random_supports

from skntp._backend import get_backend
from skntp.svm import ntp_logit_svm, ntp_logit_svm_problem, ntp_svm_problem, solve_max_margin
from skntp.svm.solvers import AUTO_ORDER, METHODS
from skntp.svm.solvers.svt_admm import _project, logit_svm_admm
from skntp.svm.solvers.svt_admm import solve as admm_solve


def _reference(S, solver):
    """``(L, value)`` of the program from its equations, one level ``c_j`` per context."""
    m, V = S.shape
    L, c = cp.Variable((V, m)), cp.Variable(m)
    ins = S.T.astype(float)
    shifted = L - np.ones((V, 1)) @ cp.reshape(c, (1, m), order="C")
    cons = [cp.multiply(ins, shifted) == 0, cp.multiply(1 - ins, shifted + 1) <= 0]
    prob = cp.Problem(cp.Minimize(cp.normNuc(L)), cons)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if solver == "clarabel":
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                       tol_feas=1e-10)
        else:
            prob.solve(solver=cp.SCS, eps_abs=1e-10, eps_rel=1e-10, max_iters=100_000)
    # Clarabel may say "inaccurate" at 1e-10; the values compared to 1e-6 decide
    assert prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)
    return L.value, prob.value


@pytest.mark.parametrize("seed", range(3))
def test_matches_the_program_from_the_equations(seed):
    rng = np.random.default_rng(300 + seed)
    m, V = (int(k) for k in rng.integers(6, 21, size=2))
    S = random_supports(300 + seed, m=m, V=V, density=float(rng.uniform(0.15, 0.5)))
    res = ntp_logit_svm(S, method="svt-admm")
    _, value = _reference(S, "clarabel")
    assert res.method == "svt-admm" and res.status == "optimal" and abs(res.gap) <= 1e-8
    assert abs(res.objective - value) <= 1e-6 * value
    assert abs(np.linalg.svd(res.primal, compute_uv=False).sum() - value) <= 1e-6 * value
    ties, margin = logit_margins(S, res.primal)
    assert ties <= 1e-9 * value and margin >= 1 - 1e-9
    # the dual point behind the certificate, by hand: <S, Lambda> / ||Lambda||_2
    _, to_primal = ntp_logit_svm_problem(S).operators(get_backend("numpy"))
    Lam = to_primal(res.dual)
    assert np.allclose(Lam.sum(axis=0), 0.0, atol=1e-10) and np.all(Lam[~S.T] <= 1e-12)
    bound = np.sum(Lam[S.T]) / np.linalg.norm(Lam, 2)
    assert value * (1 - 1e-6) <= bound * (1 + 1e-8) and bound <= value * (1 + 1e-6)


def test_matches_scs_at_m_v_30_and_auto_takes_it():
    S = random_supports(7, m=30, V=30)
    _, value = _reference(S, "scs")
    res = ntp_logit_svm(S)
    assert res.method == "svt-admm" and res.status == "optimal"
    assert abs(res.objective - value) <= 1e-6 * value


def test_merged_classes_match_the_unmerged_program():
    S = random_supports(12, m=9, V=11)
    S = np.vstack([S, S[2], S[2], S[5]])
    S = np.hstack([S, S[:, [3, 3]]])  # tokens 11, 12 repeat token 3
    merged = ntp_logit_svm(S, method="svt-admm")
    full = ntp_logit_svm(S, method="svt-admm", merge_equal=False)
    _, value = _reference(S, "clarabel")
    for res in (merged, full):
        assert res.status == "optimal" and abs(res.objective - value) <= 1e-6 * value
    assert merged.primal.shape == (13, 12)


def test_the_registry_method_on_the_anchored_rows():
    S = random_supports(21, m=10, V=12)
    res = solve_max_margin(ntp_logit_svm_problem(S), method="svt-admm")
    _, value = _reference(S, "clarabel")
    assert res.method == "svt-admm" and res.status == "optimal"
    assert abs(res.objective - value) <= 1e-6 * value
    assert "svt-admm" in AUTO_ORDER["nuclear"] and "nuclear" in METHODS["svt-admm"].norms


def test_other_programs_are_declined():
    S = random_supports(4, m=5, V=6)
    H = np.random.default_rng(0).standard_normal((5, 3))
    be = get_backend("numpy")
    assert admm_solve(ntp_svm_problem(H, S, norm="nuclear"), 1e-8, 100, be, 0) is None
    assert admm_solve(ntp_logit_svm_problem(S), 1e-8, 10_000, be, 0) is not None
    fro = ntp_svm_problem(np.eye(5), S)  # the logit program in the Frobenius norm
    assert admm_solve(fro, 1e-8, 100, be, 0) is None


@pytest.mark.parametrize("max_iter", [1, 3])
def test_an_unconverged_run_is_not_optimal(max_iter):
    S = random_supports(7, m=30, V=30)
    res = ntp_logit_svm(S, method="svt-admm", max_iter=max_iter)
    assert res.n_iter == max_iter
    assert res.status == "max_iter" and res.gap > 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = solve_max_margin(ntp_logit_svm_problem(S), method="svt-admm",
                                max_iter=max_iter)
    assert rows.status != "optimal"
    *_, converged = logit_svm_admm(S.T, max_iter=max_iter)
    assert not converged


def test_the_projection_by_a_quadratic_program():
    # one column at a time: min sum_a n_a (K_a - u_a)^2 over K_a = c on S,
    # K_a <= c - 1 off S, against cvxpy, with class weights
    rng = np.random.default_rng(5)
    a, c = 9, 4
    inside = rng.random((a, c)) < 0.4
    inside[0] = True
    inside[1] = False
    n_tok, n_ctx = rng.integers(1, 4, a).astype(float), rng.integers(1, 3, c).astype(float)
    scale = np.sqrt(np.outer(n_tok, n_ctx))
    Y = 2 * rng.standard_normal((a, c))
    proj, K = _project(Y, inside, n_tok, scale)
    assert np.allclose(proj, K * scale)
    for j in range(c):
        x, level = cp.Variable(a), cp.Variable()
        u = Y[:, j] / scale[:, j]
        ins = inside[:, j]
        cons = [x[ins] == level, x[~ins] <= level - 1]
        cp.Problem(cp.Minimize(cp.sum(cp.multiply(n_tok, cp.square(x - u)))), cons).solve(
            solver=cp.CLARABEL)
        assert np.allclose(K[:, j], x.value, atol=1e-7)


def test_full_supports_give_zero_logits():
    # every token in every support: no margin row, L = 0 is optimal (value 0)
    res = ntp_logit_svm(np.ones((4, 5), dtype=bool), method="svt-admm")
    assert res.status == "optimal" and res.objective == 0.0 and res.n_iter <= 5
