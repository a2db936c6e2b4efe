"""The sequential dual method ('dcd') for the NTP-SVM against independent references.

The reference is a cvxpy program written here from the paper's constraints
(Thrampoulidis 2024, (4a)-(4b)), not through the package's problem builder,
solved by Clarabel at tight tolerances; every answer must also satisfy the
KKT conditions of the program the package built.  One-hot supports are the
Crammer-Singer SVM without bias, compared with liblinear.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skntp.datasets import make_ntp_svm_data
from skntp.svm import (
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    ntp_svm,
    ntp_svm_problem,
    solve_max_margin,
    solve_ntp_svm,
)
from skntp.svm.solvers.dual_coordinate_descent import solve_dcd

cp = pytest.importorskip("cvxpy")


def reference_ntp_svm(H, S):
    """``argmin ||W||_F`` s.t. equal in-support scores and a margin of 1 to the rest."""
    m, d = H.shape
    V = S.shape[1]
    W = cp.Variable((V, d))
    scores = H @ W.T
    cons = []
    for j in range(m):
        sup = np.flatnonzero(S[j])
        out = np.flatnonzero(~S[j])
        a = sup[0]
        if sup.size > 1:
            cons.append(scores[j, sup[1:]] == scores[j, a])
        if out.size:
            cons.append(scores[j, a] - scores[j, out] >= 1)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), cons)
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return None
    assert prob.status == cp.OPTIMAL
    return W.value


def kkt_residuals(problem, res):
    """Stationarity, dual sign, feasibility and complementarity of a result."""
    c = problem.constraints
    A = problem.constraint_matrix()
    w = res.primal.ravel()
    lam = res.dual
    slack = A @ w - c.rhs
    lam_scale = max(1.0, np.abs(lam).max())
    return {
        "stationarity": np.linalg.norm(A.T @ lam - w) / max(1.0, np.linalg.norm(w)),
        "dual_sign": max(0.0, -lam[~c.equality].min(initial=0.0)) / lam_scale,
        "feasibility": max(np.abs(slack[c.equality]).max(initial=0.0),
                           -slack[~c.equality].min(initial=0.0)),
        "complementarity": np.abs(lam[~c.equality] * slack[~c.equality]).max(initial=0.0)
        / lam_scale,
    }


def random_supports(rng, m, d, V, smax=3):
    H = rng.standard_normal((m, d))
    k = rng.integers(1, smax + 1, size=m)
    ranks = np.argsort(np.argsort(rng.random((m, V)), axis=1), axis=1)
    return H, ranks < k[:, None]


def tied(seed, m=40, d=12, V=15):
    data = make_ntp_svm_data(m, d, V, max_support=4, random_state=seed)
    return data.contexts, data.support


CASES = {
    # overparameterized (d > m): separable for any supports
    "overparameterized": lambda seed: random_supports(np.random.default_rng(seed), 12, 20, 7),
    # more contexts than dimensions, tied supports (the scale benchmark's recipe)
    "tied": tied,
    # one-hot supports: the Crammer-Singer SVM
    "one-hot": lambda seed: random_supports(np.random.default_rng(seed), 10, 16, 6, smax=1),
}


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("seed", range(4))
def test_dcd_matches_reference_and_kkt(kind, seed):
    H, S = CASES[kind](seed)
    problem = ntp_svm_problem(H, S)
    res = solve_dcd(problem, tol=1e-10, hand_over=False)  # the block steps alone
    assert res.method == "dcd" and res.status == "optimal"
    ref = reference_ntp_svm(H, S)
    assert ref is not None
    assert np.linalg.norm(res.primal - ref) <= 1e-6 * np.linalg.norm(ref)
    kkt = kkt_residuals(problem, res)
    assert kkt["stationarity"] <= 1e-9
    assert kkt["dual_sign"] == 0.0
    assert kkt["feasibility"] <= 1e-9
    assert kkt["complementarity"] <= 1e-7
    assert res.gap <= 1e-10 and res.max_violation <= 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
@pytest.mark.parametrize("kind", sorted(CASES))
def test_dcd_matches_reference_many(kind, seed):
    test_dcd_matches_reference_and_kkt(kind, 1000 + seed)


@pytest.mark.parametrize("seed", range(3))
def test_dcd_with_exchangeable_tokens(seed):
    """The reduced program (scaled scores, ``output_scale``) solved by 'dcd' and mapped
    back is the full program's solution."""
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((15, 20))
    S = np.zeros((15, 9), dtype=bool)
    S[np.arange(15), rng.integers(0, 4, 15)] = True
    S[:, 4] = S[:, 3]  # tokens 3 and 4 always occur together; 5..8 never occur
    problem, res = solve_ntp_svm(H, S, method="dcd", tol=1e-10)
    assert res.method == "dcd"
    ref = reference_ntp_svm(H, S)
    assert np.linalg.norm(res.primal - ref) <= 1e-6 * np.linalg.norm(ref)
    # exchangeable tokens share their row: 3 and 4, and the never-predicted 5..8
    assert np.allclose(res.primal[3], res.primal[4])
    assert np.allclose(res.primal[5:], res.primal[5]) and np.linalg.norm(res.primal[5]) > 0
    kkt = kkt_residuals(problem, res)
    assert kkt["stationarity"] <= 1e-9 and kkt["feasibility"] <= 1e-9


def test_one_hot_agrees_with_liblinear_crammer_singer():
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(0)
    H = rng.standard_normal((200, 8))
    y = np.argmax(H @ rng.standard_normal((4, 8)).T, axis=1)
    W = ntp_svm(H, np.eye(4, dtype=bool)[y], method="dcd", tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc = LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e7, tol=1e-10,
                        max_iter=200_000, random_state=0).fit(H, y)
    # hard margin: liblinear's soft-margin solution tends to W^mm as C grows
    cos = np.sum(W * svc.coef_) / np.linalg.norm(W) / np.linalg.norm(svc.coef_)
    assert 1.0 - cos <= 1e-5
    assert np.linalg.norm(W - svc.coef_) <= 1e-2 * np.linalg.norm(W)


@pytest.mark.parametrize("seed", range(3))
def test_infeasible_raises_not_ntp_separable(seed):
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((60, 3))
    S = rng.random((60, 6)) < 0.3
    S[np.arange(60), rng.integers(0, 6, 60)] = True
    assert reference_ntp_svm(H, S) is None
    with pytest.raises(NotSeparableError, match="not NTP-separable"):
        solve_max_margin(ntp_svm_problem(H, S), method="dcd")


def test_larger_tied_program_is_certified():
    data = make_ntp_svm_data(400, 32, 60, random_state=0)
    problem = ntp_svm_problem(data.contexts, data.support)
    res = solve_max_margin(problem, method="dcd")
    assert res.status == "optimal" and res.gap <= 1e-8 and res.max_violation <= 1e-8
    # the teacher is feasible at margin 0.05, so ||W^mm|| <= ||W0|| / 0.05
    assert np.linalg.norm(res.primal) <= np.linalg.norm(data.teacher) / 0.05
    kkt = kkt_residuals(problem, res)
    assert kkt["stationarity"] <= 1e-9 and kkt["feasibility"] <= 1e-8


def test_hands_over_to_the_accelerated_dual_on_tiny_margins():
    """A nearly non-separable program (||W^mm|| ~ 85): block steps crawl, so the
    method goes on with the accelerated one and still certifies the answer."""
    from skntp.decoder import aggregate_contexts

    rng = np.random.default_rng(6)
    X = rng.standard_normal((60, 12))[rng.integers(0, 20, 60)]
    y = rng.integers(0, 5, 60)
    H, _, P, _ = aggregate_contexts(X, np.eye(5)[y])
    S = P.toarray() > 0
    problem = ntp_svm_problem(H, S)
    res = solve_max_margin(problem, method="dcd")
    assert res.method == "accelerated-dual" and res.status == "optimal"
    ref = reference_ntp_svm(H, S)
    assert np.linalg.norm(res.primal - ref) <= 1e-5 * np.linalg.norm(ref)
    with pytest.warns(ConvergenceWarning, match="dcd"):
        slow = solve_dcd(problem, hand_over=False, max_iter=2000)
    assert slow.status == "max_iter" and slow.max_violation > 1e-3


def test_runs_are_bit_identical():
    H, S = tied(0)
    problem = ntp_svm_problem(H, S)
    a = solve_max_margin(problem, method="dcd")
    b = solve_max_margin(problem, method="dcd")
    assert np.array_equal(a.primal, b.primal) and np.array_equal(a.dual, b.dual)


def test_declines_other_programs_and_checks_omega():
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((3, 4, 5))
    from skntp.svm import Constraints

    att = MaxMarginProblem(KeyScores(keys), Constraints([0, 1], [0, 0], [1, 2], [1.0, 1.0],
                                                        [False, False]))
    assert solve_dcd(att) is None
    H, S = tied(1)
    with pytest.raises(ValueError, match="omega"):
        solve_dcd(ntp_svm_problem(H, S), omega=2.0)


def test_max_iter_reports_and_warns():
    H, S = tied(2, m=200, d=16, V=30)
    with pytest.warns(ConvergenceWarning, match="dcd.*stopped after 3 iterations"):
        res = solve_max_margin(ntp_svm_problem(H, S), method="dcd", max_iter=3)
    assert res.status == "max_iter" and res.n_iter == 3 and res.max_violation > 1e-8


def test_callback_sees_every_check():
    H, S = tied(3)
    seen = []
    res = solve_max_margin(ntp_svm_problem(H, S), method="dcd",
                           callback=lambda it, gap, viol: seen.append((it, gap, viol)))
    its = [s[0] for s in seen]
    assert its == sorted(its) and its[-1] == res.n_iter
    assert seen[-1][1] == res.gap and seen[-1][2] == res.max_violation
    assert seen[0][2] > seen[-1][2]
