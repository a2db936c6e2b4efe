"""The analytic center of the margin polytope (skntp.svm._ntp_center): its Farkas table of
every row, checked here from the definition; the barrier's minimizer against cvxpy's."""

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import partially_separable_instance, python_text_40
from scipy.optimize import linprog

from skntp.svm import (
    NTPSeparability,
    analytic_center_separability,
    ntp_svm_problem,
    partial_finite_component,
    stationary_separability,
)
from skntp.svm._newton import newton_cg


def _random_instance(seed, m=40, d=3, V=6):
    # contexts in general position with m >> d, wide supports: no row separable
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((m, d))
    S = rng.random((m, V)) < 0.3
    S[np.arange(m), rng.integers(0, V, m)] = True
    return H, S


def _anchors(S):
    return np.argmax(S, axis=1)


def _gaps(H, S, W):
    # r_jv(W) = (e_{z_j} - e_v)^T W h_j, z_j the first token of S_j
    L = H @ W.T
    return L[np.arange(len(H)), _anchors(S)][:, None] - L


def _farkas_bounds(H, S, T):
    # from the definition: with each row of T summed to 0 on its anchor, every D in the
    # cone K has sum_{v not in S_j} (-T_jv) r_jv(D) = <D, T^T H>, each term >= 0, so a
    # row's normalized margin r_jv(D) / (||D|| ||a_jv||) is at most
    # (||T^T H|| + eps || |T|^T |H| ||) / (-T_jv ||a_jv||), ||a_jv|| = sqrt(2) ||h_j||;
    # on an orthonormal basis of the contexts' span (an SVD's here), where the bound
    # does not depend on their conditioning
    U, s, _ = np.linalg.svd(H / np.abs(H).max(), full_matrices=False)
    H = U[:, s > s[0] * 1e-12]
    T = T.copy()
    rows = np.arange(len(H))
    T[rows, _anchors(S)] -= T.sum(axis=1)
    assert np.all(T[~S] < 0)
    numerator = (np.linalg.norm(T.T @ H)
                 + np.finfo(float).eps * np.linalg.norm(np.abs(T).T @ np.abs(H)))
    a = np.sqrt(2.0) * np.linalg.norm(H, axis=1)
    return numerator / (-T[~S] * np.repeat(a, (~S).sum(axis=1)))


def _separable_rows_lp(H, S):
    # Def. 3.2's cone: max sum s_jv s.t. r_jv(W) >= s_jv, 0 <= s_jv <= 1, equal logits
    # on each support; the rows with s_jv > 0 at the optimum are separable.  On an
    # orthonormal basis of the contexts' span (an SVD's): the cone of W H^T is that of
    # W' U^T, and HiGHS fails on the raw word vectors of real text.  W in a box of 1e4
    # (the cone is scaled to s <= 1: normalized margins down to about 1e-4 / sqrt(V d),
    # below the package's 1e-5); unboxed, HiGHS ends that text with "Not Set"
    U, s, _ = np.linalg.svd(H / np.abs(H).max(), full_matrices=False)
    H = U[:, s > s[0] * 1e-12]
    m, V = S.shape
    d = H.shape[1]
    n_w = V * d
    a = _anchors(S)
    jo, vo = np.nonzero(~S)
    ji, zi = np.nonzero(S & (np.arange(V)[None, :] != a[:, None]))

    def rows(j, v, extra=None):
        # the coefficients of r_jv(W) on vec(W) (row-major W of shape (V, d))
        n = len(j)
        k = np.repeat(np.arange(n), d)
        cols = np.concatenate([(a[j][:, None] * d + np.arange(d)).ravel(),
                               (v[:, None] * d + np.arange(d)).ravel()])
        vals = np.concatenate([H[j].ravel(), -H[j].ravel()])
        k = np.concatenate([k, k])
        if extra is not None:
            k, cols = np.concatenate([k, np.arange(n)]), np.concatenate([cols, n_w + extra])
            vals = np.concatenate([vals, np.ones(n)])
        return sp.csr_matrix((vals, (k, cols)), shape=(n, n_w + len(jo)))
    A_ub = -rows(jo, vo)
    A_ub = A_ub + sp.csr_matrix((np.ones(len(jo)), (np.arange(len(jo)),
                                                      n_w + np.arange(len(jo)))),
                                shape=A_ub.shape)
    A_eq = rows(ji, zi) if len(ji) else None
    res = linprog(np.concatenate([np.zeros(n_w), -np.ones(len(jo))]), A_ub=A_ub,
                  b_ub=np.zeros(len(jo)), A_eq=A_eq,
                  b_eq=np.zeros(len(ji)) if len(ji) else None,
                  bounds=[(-1e4, 1e4)] * n_w + [(0, 1)] * len(jo), method="highs")
    assert res.status == 0, res.message
    return int(np.count_nonzero(res.x[n_w:] > 1e-7))


def test_newton_keeps_a_barrier_inside_its_domain():
    # 100 sum x_i - sum log x_i - sum log(1 - x_i) from x = 0.5: the full Newton step
    # (-12.5) leaves the domain; with max_step the first length tried is 0.99 of the
    # way to the boundary, so the barrier is never evaluated outside; either way the
    # minimizer, the root of 100 x^2 - 102 x + 1, is found
    outside = []

    def fun(x):
        if np.any(x <= 0) or np.any(x >= 1):
            outside.append(x)
            return np.inf, np.zeros_like(x)
        return (float(100 * x.sum() - np.log(x).sum() - np.log1p(-x).sum()),
                100 - 1 / x + 1 / (1 - x))

    def hess_at(x):
        return lambda v: (1 / x**2 + 1 / (1 - x) ** 2) * v

    def max_step(x, step):
        with np.errstate(divide="ignore"):
            t = np.where(step < 0, -x / step, np.where(step > 0, (1 - x) / step, np.inf))
        return float(t.min())

    center = (102 - np.sqrt(102**2 - 400)) / 200
    for guard in (None, max_step):
        outside.clear()
        x, _ = newton_cg(fun, hess_at, np.full(3, 0.5), 1e-10, 100, max_step=guard)
        np.testing.assert_allclose(x, center, rtol=1e-12)
        assert (len(outside) == 0) == (guard is not None)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("unit", [1.0, 1e-8, 1e8])
def test_the_center_certifies_every_row_where_none_is_separable(seed, unit):
    H, S = _random_instance(seed)
    assert _separable_rows_lp(H, S) == 0
    found = analytic_center_separability(unit * H, S)
    assert found is not None and found.status == "certified"
    assert found.method == "analytic center" and found.n_separable == 0
    assert np.all(_farkas_bounds(H, S, found.farkas) <= 1e-5)


def test_the_center_is_the_minimizer_of_the_barrier(monkeypatch):
    # the barrier of the module docstring, written here in cvxpy: its minimizer's
    # multipliers 1 / (1 + r_jv) are the table's entries off the supports (Newton run
    # on to the barrier's precision: the function stops once its table certifies)
    from skntp.svm import _ntp_center

    monkeypatch.setattr(_ntp_center, "CHECK_BELOW", 1e-15)
    H, S = _random_instance(0, m=15, d=2, V=4)
    box = 10.0
    found = analytic_center_separability(H, S, box=box)
    m, V = S.shape
    W = cp.Variable((V, H.shape[1]))
    L = H @ W.T
    a = _anchors(S)
    jo, vo = np.nonzero(~S)
    ji, zi = np.nonzero(S & (np.arange(V)[None, :] != a[:, None]))
    gap = cp.hstack([L[j, a[j]] - L[j, v] for j, v in zip(jo, vo)])
    equal = cp.hstack([L[j, a[j]] - L[j, z] for j, z in zip(ji, zi)])
    cp.Problem(cp.Minimize(-cp.sum(cp.log(1 + gap)) - cp.sum(cp.log(box - equal))
                           - cp.sum(cp.log(box + equal)))).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12,
        tol_ktratio=1e-10)
    r = _gaps(H, S, W.value)
    # (the table is for the contexts on their orthonormal basis: a positive multiple)
    theirs = 1.0 / (1.0 + r[~S])
    ours = -found.farkas[~S]
    np.testing.assert_allclose(ours / ours.sum(), theirs / theirs.sum(), rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("unit", [1.0, 1e-8])
def test_a_separable_row_leaves_the_center_uncertified(seed, unit):
    # the polytope is unbounded along a point of K: no certificate, never a wrong one
    H, P = partially_separable_instance(seed)
    S = P > 0
    assert _separable_rows_lp(H, S) > 0
    assert analytic_center_separability(unit * H, S) is None


def test_the_center_certifies_real_text_where_the_loss_table_cannot():
    # the first 40 sentences of the Python documentation, d = 16 < m: W_fin over every
    # row converges, but its table's entries pi_j s_jv spread down to float64's
    # rounding and certify a tenth of the rows; the center's table certifies all
    _, _, H, pi, P = python_text_40()
    S = P > 0
    fin = partial_finite_component(H, P, NTPSeparability(np.zeros_like(S), S,
                                                         "stationary point"), pi)
    assert fin.converged
    loss_table = stationary_separability(H, S, fin, P, pi)
    assert loss_table.status == "undecided"
    assert loss_table.n_undecided > 0.5 * loss_table.n_rows
    found = analytic_center_separability(H, S)
    assert found is not None and found.n_separable == 0
    bounds = _farkas_bounds(H, S, found.farkas)
    assert bounds.size == loss_table.n_rows and np.all(bounds <= 1e-5)
    # its smallest multiplier against its largest: polynomial, not exponential
    entries = -found.farkas[~S]
    assert entries.min() > 1e-6 * entries.max()


@pytest.mark.slow
def test_the_real_text_the_center_certifies_has_no_separable_row():
    # Def. 3.2's linear program on the same 13,642 rows (a minute with HiGHS)
    _, _, H, _, P = python_text_40()
    assert _separable_rows_lp(H, P > 0) == 0


def test_bad_input_is_refused(monkeypatch):
    from skntp.svm import _ntp_center

    H, S = _random_instance(0)
    with pytest.raises(ValueError, match="box must be positive"):
        analytic_center_separability(H, S, box=0.0)
    # above its work, or beyond the memory of its blocks and tables
    for name, value in (("MAX_CENTER_WORK", 10), ("available_memory", lambda: 1000)):
        with monkeypatch.context() as patch:
            patch.setattr(_ntp_center, name, value)
            assert not _ntp_center.center_fits(*S.shape, H.shape[1])
            with pytest.raises(ValueError, match="above its work bound"):
                analytic_center_separability(H, S)


def test_the_diagnosis_certifies_by_the_center_before_the_linear_program(monkeypatch):
    # ntp_separability on the same real text: the loss's Newton converges but its table
    # does not certify; the center does, and the linear program (a minute with HiGHS)
    # is not run
    from skntp.svm import _ntp_partial, ntp_separability

    _, _, H, _, P = python_text_40()
    S = P > 0

    def refused(*args, **kwargs):
        raise AssertionError("the linear program ran")

    monkeypatch.setattr(_ntp_partial, "_separability_program", refused)
    found = ntp_separability(H, S, max_rows=20_000)
    assert found.status == "certified" and found.method == "analytic center"
    assert found.n_separable == 0
    assert np.all(_farkas_bounds(H, S, found.farkas) <= 1e-5)


def test_a_stall_is_five_steps_that_do_not_halve_the_best_gradient():
    from skntp.svm._newton import GradientStall

    stall = GradientStall()
    # quadratic convergence never stalls; a plateau does on its fifth step
    assert not any(stall(g) for g in (1.0, 0.1, 1e-3, 1e-7, 1e-14))
    assert [stall(g) for g in (0.9e-14, 0.8e-14, 0.7e-14, 0.6e-14, 0.55e-14)] == [
        False, False, False, False, True]
    # a halving step starts the count again
    late = GradientStall(patience=2)
    assert [late(g) for g in (1.0, 0.9, 0.4, 0.3, 0.35)] == [False, False, False, False, True]


def test_the_ntp_svm_is_proven_infeasible_by_the_center_before_any_method(monkeypatch):
    # the NTP-SVM of the same real text: its own infeasibility proof (the loss's table
    # cannot be checked in float64) is the center's table, checked by the dispatcher
    # from the program's rows before dcd runs (one pass could not prove anything);
    # before, dcd and the accelerated dual took 17 s to certify it.  (Its contexts
    # share coordinates: the three closed walks they have answer first, so they are removed
    # here to reach the center.)
    from skntp.svm import NotSeparableError, _ntp, ntp_svm_problem, solve_max_margin

    _, _, H, _, P = python_text_40()
    with pytest.raises(NotSeparableError, match=r"3 closed walks of contexts"):
        solve_max_margin(ntp_svm_problem(H, P > 0), method="dcd", max_iter=1)
    monkeypatch.setattr(_ntp, "_cycle_proof", lambda *args: None)
    problem = ntp_svm_problem(H, P > 0)
    with pytest.raises(NotSeparableError, match="analytic center of the margin polytope"):
        solve_max_margin(problem, method="dcd", max_iter=1)


@pytest.mark.parametrize("seed", range(3))
def test_partly_separable_data_do_not_pay_for_the_center_in_the_programs_proof(
        monkeypatch, seed):
    # there the loss has no minimizer, so the NTP-SVM's own proof never tries the
    # center (it could not certify: the polytope is unbounded), and says nothing
    from skntp.svm import _ntp_center
    from skntp.svm._ntp import _infeasibility_proof

    def refused(*args, **kwargs):
        raise AssertionError("the analytic center ran")

    monkeypatch.setattr(_ntp_center, "analytic_center_separability", refused)
    H, P = partially_separable_instance(seed)
    S = P > 0
    assert _separable_rows_lp(H, S) > 0
    problem = ntp_svm_problem(H, S)
    assert _infeasibility_proof(H, S, problem.constraints) is None


def _power_of_two_scaled(H):
    return H / 2.0 ** np.ceil(np.log2(np.abs(H).max()))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("unit", [1.0, 1e-8])
def test_the_center_of_the_rows_not_separable_certifies_each(seed, unit):
    # the polytope of the supports' equalities and the rows off I (Def. 3.2's LP, written
    # in the helper) is bounded: its center's table, checked here, is a Farkas table of
    # each of those rows, supported on them and the supports; one separable row more
    # makes it unbounded, and nothing is certified
    from helpers import separable_rows_by_lp

    from skntp.svm import analytic_center_of_rows

    H, P = partially_separable_instance(seed)
    S = P > 0
    separable = separable_rows_by_lp(H, S)
    rows = ~S & ~separable
    assert rows.any() and separable.any()
    T = analytic_center_of_rows(unit * H, S, rows)
    assert T is not None and T.shape == S.shape
    # (0 off them, up to the rounding of the projection off the contexts' span, <= 0)
    others = T[~S & ~rows]
    assert np.all(T[rows] < 0) and np.all(others <= 0)
    assert np.abs(others).max(initial=0.0) <= 1e-12 * np.abs(T).max()
    Hs = _power_of_two_scaled(unit * H)
    np.testing.assert_allclose(T.sum(axis=1), 0.0, atol=1e-12 * np.abs(T).max())
    assert np.abs(T.T @ Hs).max() <= 1e-8 * (np.abs(T).T @ np.abs(Hs)).max()
    # (its entries 1 / (1 + r_jv): polynomial in the margins)
    entries = -T[rows]
    assert entries.min() > 1e-6 * entries.max()
    one = rows.copy()
    j, v = np.argwhere(separable)[0]
    one[j, v] = True
    assert analytic_center_of_rows(unit * H, S, one) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_the_barrier_entry_by_entry_is_the_dense_one(seed):
    # with every margin row, the barrier of a few rows per context is that of the margin
    # polytope: value, gradient, Hessian products, the fraction to the boundary, table
    from skntp.svm._ntp_center import _MarginBarrier, _RowsBarrier

    H, S = _random_instance(seed, m=30, d=4, V=5)
    Q = np.linalg.svd(H, full_matrices=False)[0]
    dense = _MarginBarrier(Q, S, np.where(S, 2.0, 1.0))
    rows = _RowsBarrier(Q, S, ~S, 2.0)
    rng = np.random.default_rng(seed)
    w, u = 0.05 * rng.standard_normal(5 * 4), rng.standard_normal(5 * 4)
    (a, ga), (b, gb) = dense.value_and_gradient(w), rows.value_and_gradient(w)
    assert b == pytest.approx(a, rel=1e-13)
    np.testing.assert_allclose(gb, ga, rtol=0, atol=1e-12 * np.abs(ga).max())
    hv = dense.hessian_at(w)(u)
    np.testing.assert_allclose(rows.hessian_at(w)(u), hv, rtol=0, atol=1e-12 * np.abs(hv).max())
    assert rows.max_step(w, u) == pytest.approx(dense.max_step(w, u), rel=1e-12)
    np.testing.assert_allclose(rows.table(w), dense.table(w), rtol=0, atol=1e-12)
    assert rows.value_and_gradient(w + 2.0 * rows.max_step(w, u) * u)[0] == np.inf


def test_the_token_blocks_are_each_tokens_pseudo_inverse():
    # B_a = sum_j c_ja q_j q_j^T over each token's entries (fewer or more than r, a
    # repeated pair, a token without any): applied as pinv(B_a), written here densely
    from skntp.svm._ntp_sparse import TokenBlocks

    rng = np.random.default_rng(3)
    m, r, V = 60, 8, 6
    Q = np.linalg.qr(rng.standard_normal((m, r)))[0]
    j = rng.integers(0, m, 40)
    v = rng.integers(1, V - 1, 40)
    v[:20] = 0
    j[1] = j[0]
    v[1] = 0
    v[-3:] = 4  # (three contexts, fewer than r)
    c = rng.random(j.size) + 0.1
    X = rng.standard_normal((V, r))
    out = TokenBlocks(Q, j, v, V).at(c)(X.ravel()).reshape(V, r)
    for a in range(V):
        mine = v == a
        B = (Q[j[mine]].T * c[mine]) @ Q[j[mine]]
        expected = np.linalg.pinv(B, rcond=1e-10, hermitian=True) @ X[a]
        np.testing.assert_allclose(out[a], expected, rtol=0,
                                   atol=1e-10 * max(np.abs(expected).max(), 1e-300))
    assert np.all(out[V - 1] == 0)


def test_the_center_of_rows_refuses_bad_input():
    from skntp.svm import analytic_center_of_rows

    H, S = _random_instance(0)
    rows = ~S & (np.arange(S.shape[1]) == 0)
    with pytest.raises(ValueError, match="off the supports"):
        analytic_center_of_rows(H, S, S)
    with pytest.raises(ValueError, match="shape"):
        analytic_center_of_rows(H, S, rows[:, :-1])
    with pytest.raises(ValueError, match="box must be positive"):
        analytic_center_of_rows(H, S, rows, box=-1.0)
    assert np.all(analytic_center_of_rows(H, S, np.zeros_like(S)) == 0)


def test_the_center_of_rows_refuses_tables_beyond_the_memory(monkeypatch):
    from skntp.svm import _ntp_center, analytic_center_of_rows

    H, S = _random_instance(0)
    monkeypatch.setattr(_ntp_center, "available_memory", lambda: 8.0 * S.size)
    with pytest.raises(ValueError, match="do not fit"):
        analytic_center_of_rows(H, S, ~S)
