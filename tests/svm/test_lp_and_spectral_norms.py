"""The max-margin programs in the spectral norm and the entrywise lp norms.

Spectral descent (Muon) converges in direction to the max-margin solution in
the spectral norm, lp steepest descent to the one in the lp norm.  The core
solves the same constraints in these norms by barrier methods of its own and
certifies each answer by its duality gap.  References are cvxpy programs
written here from the papers' equations (every pair of tokens for the
NTP-SVM, eq. (4); (W-SVM) and (ATT-SVM) of "Transformers as Support Vector
Machines"; (Graph-SVM) from the graphs' edges and SCCs), not through the
package's builders.

Tolerances, measured: the lp barrier certifies a relative gap of at most 1e-8
on every instance here (about 3e-9); the spectral barrier stops at the
precision of float64 near the optimum, where the barrier's Hessian has
condition about ``1 / mu^2``: its certified gap is 1e-8 to 5e-8 on these
instances (Clarabel's own gap on the same programs is about 1e-8), so the
spectral tests ask for 1e-7.
"""

import itertools
import warnings

import cvxpy as cp
import numpy as np
import pytest
from helpers import (
    att_instance,
    check_ntp_constraints,
    graph_svm_constraints,
    kq_instance,
    ntp_instance,
    ntp_svm_all_pairs,
)

from skntp.datasets import make_token_priority_data
from skntp.graphs import strongly_connected_components, token_priority_graphs
from skntp.svm import (
    NotSeparableError,
    att_svm,
    att_svm_problem,
    att_svm_w,
    check_norm,
    dual_norm,
    graph_svm,
    head_svm,
    ntp_svm,
    relaxed_att_svm,
    solve_max_margin,
)
from skntp.svm._norms import norm_value

P_VALUES = [1.5, 1.75, 3.0, 4.0]
SPECTRAL_GAP = 1e-6
LP_GAP = 1e-8


def value(W, norm):
    """The norm, written here (not the package's ``norm_value``)."""
    if norm == "spectral":
        return np.linalg.svd(np.atleast_2d(W), compute_uv=False)[0]
    return np.sum(np.abs(W) ** norm[1]) ** (1 / norm[1])


def objective(norm):
    if norm == "spectral":
        return cp.sigma_max
    return lambda X: cp.pnorm(cp.vec(X, order="C"), norm[1])


def _solve(prob):
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return prob.value


def _quiet(func, *args, **kwargs):
    """Call ``func``; a ConvergenceWarning (a gap above tol) is checked by the caller."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args, **kwargs)


def _method(norm):
    """The method under test: "auto" for the spectral norm (the barrier first), the
    barrier by name for the lp norms (for which "auto" tries Clarabel first)."""
    return "auto" if norm == "spectral" else "pnorm-barrier"


def _check_result(res, norm, method):
    # "auto" returns a certified answer to the norm's default tolerance (1e-6 for the
    # spectral norm, which float64 does not certify much closer): the barrier's, or the
    # reference path's
    gap = SPECTRAL_GAP if norm == "spectral" else LP_GAP
    assert res.status == "optimal" and abs(res.gap) <= gap and res.max_violation <= 1e-9
    assert res.method == method or (norm == "spectral" and res.method == "cvxpy")
    assert np.isfinite(res.dual).all()


# --------------------------------------------------------------------------
# NTP-SVM (every pair of tokens, with equalities)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["spectral"] + [("lp", p) for p in P_VALUES])
@pytest.mark.parametrize("seed", range(2))
def test_ntp_svm_matches_cvxpy(norm, seed):
    H, S = ntp_instance(seed)
    W, res = _quiet(ntp_svm, H, S, norm=norm, method=_method(norm), return_result=True)
    m, V = S.shape
    ref = value(ntp_svm_all_pairs(H, S, objective(norm)), norm)
    method = "spectral-barrier" if norm == "spectral" else "pnorm-barrier"
    _check_result(res, norm, method)
    assert W.shape == (V, H.shape[1])
    assert abs(value(W, norm) - ref) <= 1e-6 * ref
    # (4a)-(4b) on the answer, every pair
    check_ntp_constraints(H, S, W, 1e-9)


def test_lp2_is_the_frobenius_solution():
    H, S = ntp_instance(3)
    W2, res = ntp_svm(H, S, norm=("lp", 2), method="pnorm-barrier", return_result=True)
    Wf = ntp_svm(H, S)
    assert res.method == "pnorm-barrier" and res.gap <= LP_GAP
    np.testing.assert_allclose(W2, Wf, atol=1e-6 * np.abs(Wf).max())
    K, sel = att_instance(3)
    np.testing.assert_allclose(att_svm(K, sel, norm=["lp", 2]), att_svm(K, sel),
                               atol=1e-6 * np.abs(att_svm(K, sel)).max())


# --------------------------------------------------------------------------
# ATT-SVM: attention weight p (vector) and key-query W (matrix)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("seed", range(2))
def test_att_svm_matches_cvxpy(p, seed):
    K, sel = att_instance(seed)
    norm = ("lp", p)
    q, res = att_svm(K, sel, norm=norm, method="pnorm-barrier", return_result=True)
    x = cp.Variable(K.shape[2])
    cons = [x @ (K[i, sel[i]] - K[i, t]) >= 1
            for i in range(K.shape[0]) for t in range(K.shape[1]) if t != sel[i]]
    ref = _solve(cp.Problem(cp.Minimize(cp.pnorm(x, p)), cons))
    _check_result(res, norm, "pnorm-barrier")
    assert abs(value(q, norm) - ref) <= 1e-6 * ref
    margins = np.einsum("itk,k->it", K, q)
    gaps = margins[np.arange(len(sel)), sel][:, None] - margins
    gaps[np.arange(len(sel)), sel] = np.inf
    assert gaps.min() >= 1 - 1e-9


@pytest.mark.parametrize("norm", ["spectral", ("lp", 1.5), ("lp", 3.0)])
@pytest.mark.parametrize("seed", range(3))
def test_key_query_att_svm_matches_cvxpy(norm, seed):
    X, Z, sel = kq_instance(seed)
    W, res = _quiet(att_svm_w, X, Z, sel, norm=norm, method=_method(norm),
                    return_result=True)
    n, T, d = X.shape
    V = cp.Variable((Z.shape[1], d))
    cons = [Z[i] @ V @ (X[i, sel[i]] - X[i, t]) >= 1
            for i in range(n) for t in range(T) if t != sel[i]]
    ref = _solve(cp.Problem(cp.Minimize(objective(norm)(V)), cons))
    _check_result(res, norm, "spectral-barrier" if norm == "spectral" else "pnorm-barrier")
    assert W.shape == (Z.shape[1], d)
    assert abs(value(W, norm) - ref) <= 1e-6 * ref
    logits = np.einsum("itd,kd,ik->it", X, W, Z)
    gaps = logits[np.arange(n), sel][:, None] - logits
    gaps[np.arange(n), sel] = np.inf
    assert gaps.min() >= 1 - 1e-9


def test_spectral_certificate_recomputed():
    """The dual multipliers are feasible for the nuclear-norm dual and bound the optimum."""
    X, Z, sel = kq_instance(5)
    W, res = _quiet(att_svm_w, X, Z, sel, norm="spectral", return_result=True,
                    method="spectral-barrier")
    i, t = np.nonzero(np.arange(X.shape[1])[None, :] != sel[:, None])
    M = Z[i].T @ (res.dual[:, None] * (X[i, sel[i]] - X[i, t]))
    assert np.all(res.dual >= 0)
    assert np.linalg.svd(M, compute_uv=False).sum() <= 1 + 1e-9
    top = value(W, "spectral")
    assert 0 <= (top - res.dual.sum()) / top <= SPECTRAL_GAP
    # the spectral solution has a flat top of singular values; it differs from
    # the Frobenius and nuclear ones
    sv = np.linalg.svd(W, compute_uv=False)
    assert sv[1] >= sv[0] * (1 - 1e-4)
    Wf = att_svm_w(X, Z, sel)
    assert value(Wf, "spectral") > top * (1 + 1e-3)


# --------------------------------------------------------------------------
# Graph-SVM
# --------------------------------------------------------------------------
def _graph_reference(E, X, y, norm):
    W = cp.Variable((E.shape[1], E.shape[1]))
    cons = graph_svm_constraints(E, X, y, W)
    return _solve(cp.Problem(cp.Minimize(objective(norm)(W)), cons))


@pytest.mark.parametrize("norm", ["spectral", ("lp", 1.75), ("lp", 4.0)])
@pytest.mark.parametrize("acyclic", [True, False])
def test_graph_svm_matches_cvxpy(norm, acyclic):
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=acyclic, random_state=1)
    graphs = token_priority_graphs(X, y)
    W, res = _quiet(graph_svm, E, graphs, norm=norm, method=_method(norm),
                    return_result=True)
    ref = _graph_reference(E, X, y, norm)
    _check_result(res, norm, "spectral-barrier" if norm == "spectral" else "pnorm-barrier")
    assert abs(value(W, norm) - ref) <= 1e-6 * ref
    sccs = strongly_connected_components(graphs)
    for k, g in graphs.items():
        where = {v: ci for ci, c in enumerate(sccs[k]) for v in c}
        for i, j in itertools.permutations(g.nodes, 2):
            lhs = E[i] @ W @ E[k] - E[j] @ W @ E[k]
            if where[i] == where[j]:
                assert abs(lhs) <= 1e-9
            elif g.has_edge(i, j):
                assert lhs >= 1 - 1e-9


# --------------------------------------------------------------------------
# the joint programs pass the norm through
# --------------------------------------------------------------------------
def test_head_and_relaxed_programs_take_the_norm():
    rng = np.random.default_rng(0)
    R = rng.standard_normal((10, 4))
    y = np.sign(R @ rng.standard_normal(4))
    v, res = head_svm(R, y, norm=("lp", 3), method="pnorm-barrier", return_result=True)
    x = cp.Variable(4)
    ref = _solve(cp.Problem(cp.Minimize(cp.pnorm(x, 3)), [cp.multiply(y, R @ x) >= 1]))
    assert res.method == "pnorm-barrier" and abs(value(v, ("lp", 3)) - ref) <= 1e-6 * ref
    assert np.min(y * (R @ v)) >= 1 - 1e-9
    K, sel = att_instance(2)
    support = np.arange(K.shape[0]) % 2 == 0
    p, res = relaxed_att_svm(K, sel, support, norm=("lp", 1.5), return_result=True)
    x = cp.Variable(K.shape[2])
    cons = [x @ (K[i, sel[i]] - K[i, t]) >= (1 if support[i] else 0)
            for i in range(K.shape[0]) for t in range(K.shape[1]) if t != sel[i]]
    ref = _solve(cp.Problem(cp.Minimize(cp.pnorm(x, 1.5)), cons))
    assert res.gap <= LP_GAP and abs(value(p, ("lp", 1.5)) - ref) <= 1e-6 * ref
    with pytest.raises(ValueError, match="needs a matrix parameter"):
        head_svm(R, y, norm="spectral")


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_auto_takes_clarabel_for_lp_norms_and_it_agrees_with_the_barrier(p):
    # Clarabel is 2-3x faster than the barrier on these programs (benchmarks/norms.py):
    # "auto" tries it first; its certified answer is the barrier's optimum
    K, sel = att_instance(4)
    q, res = att_svm(K, sel, norm=("lp", p), return_result=True)
    qb, resb = att_svm(K, sel, norm=("lp", p), method="pnorm-barrier", return_result=True)
    assert res.method == "cvxpy" and res.status == "optimal" and abs(res.gap) <= LP_GAP
    assert resb.status == "optimal"
    assert abs(value(q, ("lp", p)) - value(qb, ("lp", p))) <= 1e-6 * value(qb, ("lp", p))


# --------------------------------------------------------------------------
# infeasible data, bad norms, the norm helpers
# --------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["spectral", ("lp", 3.0), "max"])
def test_infeasible_data_raise(norm):
    H, S = ntp_instance(0)
    H2 = np.vstack([H[:1], H[:1]])  # one context, two different supports
    S2 = np.zeros((2, S.shape[1]), dtype=bool)
    S2[0, 0], S2[1, 1] = True, True
    with pytest.raises(NotSeparableError, match="not NTP-separable"):
        ntp_svm(H2, S2, norm=norm)
    X, Z, sel = kq_instance(0)
    X2 = np.stack([X[0, :2], X[0, [1, 0]]])
    with pytest.raises(NotSeparableError, match="not separable"):
        att_svm_w(X2, Z[[0, 0]], np.array([0, 0]), norm=norm)


def test_bad_norms_are_refused_clearly():
    K, sel = att_instance(0)
    for bad, msg in [("l2", "norm must be one of"), (("lp", 1), "use norm='l1'"),
                     (("lp", np.inf), "use norm='max'"), (("lp", 0.5), "finite number > 1"),
                     (("lp", np.nan), "finite number > 1"), (("lp", "3"), "real number"),
                     (("lp", True), "real number"), (("lq", 3), "norm must be one of"),
                     (("lp", 3, 4), "norm must be one of"), (3, "norm must be one of")]:
        with pytest.raises(ValueError, match=msg):
            check_norm(bad)
        with pytest.raises(ValueError, match=msg):
            att_svm(K, sel, norm=bad)
    with pytest.raises(ValueError, match="needs a matrix parameter"):
        att_svm(K, sel, norm="spectral")
    with pytest.raises(ValueError, match="minimizes the lp norm, not the fro"):
        solve_max_margin(att_svm_problem(K, sel), method="pnorm-barrier")
    with pytest.raises(ValueError, match="minimizes the fro norm, not the l3"):
        solve_max_margin(att_svm_problem(K, sel, norm=("lp", 3)), method="dual-active-set")


def test_norm_helpers():
    assert check_norm(["lp", 3]) == ("lp", 3.0) and check_norm("spectral") == "spectral"
    assert dual_norm(("lp", 3)) == ("lp", 1.5) and dual_norm(("lp", 1.5)) == ("lp", 3.0)
    assert dual_norm("spectral") == "nuclear" and dual_norm("nuclear") == "spectral"
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 3))
    for p in P_VALUES:
        assert norm_value(W, ("lp", p)) == pytest.approx(value(W, ("lp", p)), rel=1e-14)
        # Hoelder: the dual norms pair to at least the inner product, equality attained
        q = dual_norm(("lp", p))
        G = np.sign(W) * np.abs(W) ** (p - 1)
        assert np.sum(W * G) == pytest.approx(norm_value(W, ("lp", p)) * norm_value(G, q),
                                              rel=1e-12)
    assert norm_value(W * 1e200, ("lp", 3)) == pytest.approx(1e200 * value(W, ("lp", 3)))
    assert norm_value(W, "spectral") == pytest.approx(np.linalg.norm(W, 2))
