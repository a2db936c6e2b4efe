"""The attention programs (``skntp/svm/_att_svm.py``) and their methods (the dual
active set, the NNLS working set, the nuclear-norm interior-point method), value by value.

Each test checks documented behaviour against a value written here by hand (the
definition in a docstring, a closed form, a program in cvxpy) and names the
survivors it kills; see ``docs/mutation.md``, "Run 9".
"""

import numpy as np
import pytest
from helpers import att_program, head_from_rows, rel_err, rows_by_definition, rows_of, tight_qp
from helpers import key_query_instance as _key_query_instance

import skntp.svm._att_svm as svm_attention
import skntp.svm.solvers.dual_active_set as dual_active_set
import skntp.svm.solvers.least_distance as least_distance
import skntp.svm.solvers.nnls_working_set as nnls_working_set
from skntp.svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    _problem,
    att_svm_prime,
    att_svm_w,
    is_locally_optimal,
    min_score_gap,
)


class _DenseRows:
    """The interface of ``_KeyRows`` over a dense ``G``, recording what is read."""

    def __init__(self, G):
        self.G = np.asarray(G, dtype=float)
        self.read = []

    def rows(self, idx=None):
        self.read.append(idx)
        return (self.G if idx is None else self.G[idx]).copy()

    def values(self, x):
        return self.G @ x

    def row_sum(self):
        return self.G.sum(axis=0)


# ------------------------------------------------- Def. 2: local optimality


def test_local_optimality_is_strict_and_reads_only_the_neighbors():
    # is_locally_optimal 3 (neighbors dropped), 7 (>= 0): gamma_{i alpha_i} - gamma_it
    # over t in T_i, by hand
    scores = np.array([[2.0, 1.0, 3.0], [1.0, 1.0, 0.0]])
    selected = [0, 0]
    below = np.array([[False, True, False], [False, False, True]])
    tie = np.array([[False, True, False], [False, True, False]])
    above = np.array([[False, False, True], [False, False, False]])
    assert min_score_gap(scores, selected, below) == 1.0
    assert is_locally_optimal(scores, selected, below)
    assert min_score_gap(scores, selected, tie) == 0.0
    assert not is_locally_optimal(scores, selected, tie)  # Def. 2 asks for strictly lower
    assert min_score_gap(scores, selected, above) == -1.0
    assert not is_locally_optimal(scores, selected, above)
    assert min_score_gap(scores, selected, np.zeros((2, 3), bool)) == np.inf
    # min_score_gap 24, 26: no input at all
    assert min_score_gap(np.zeros((0, 3)), np.zeros(0, int), np.zeros((0, 3), bool)) == np.inf


# ------------------------------------------------- App. D: ATT-SVM' by enumeration


def test_att_svm_prime_enumerates_at_most_4096_choices_by_default(monkeypatch):
    # att_svm_prime 3 (default 4097): 4097 = 17 * 241 choices are refused before any
    # program is built; 4096 = 16 * 256 are enumerated (stopped here at the first build)
    class Built(Exception):
        pass

    def build(*args, **kwargs):
        raise Built

    monkeypatch.setattr(svm_attention, "att_svm_problem", build)
    keys = np.random.default_rng(0).standard_normal((2, 257, 2))
    for sizes, refused in (((17, 241), True), ((16, 256), False)):
        optimal = np.zeros((2, 257), bool)
        optimal[0, :sizes[0]] = True
        optimal[1, :sizes[1]] = True
        if refused:
            with pytest.raises(ValueError, match="4097 > max_combinations=4096"):
                att_svm_prime(keys, optimal)
        else:
            with pytest.raises(Built):
                att_svm_prime(keys, optimal)


# ------------------------------------------------- least-distance programming by NNLS


@pytest.mark.parametrize("norm_x", [1e-3, 0.9e6, 1.2e6, 1e12, 1e17])
def test_solve_ldp_finds_solutions_of_norm_up_to_1e18(norm_x):
    # min |x| s.t. x / norm_x >= 1 is x = norm_x: beyond 1e6 the unit-scale NNLS leaves
    # 1 - h^T u = 1 / (1 + norm_x^2) below 1e-12, and the rescaled solves find it
    x, lam = least_distance.solve_ldp([[1.0 / norm_x]], [1.0])
    assert x == pytest.approx([norm_x], rel=1e-9)
    assert lam == pytest.approx([norm_x ** 2], rel=1e-9)  # x = G^T lam


def test_solve_ldp_returns_the_farkas_certificate_when_infeasible():
    G, h = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]), np.ones(3)
    x, ray = least_distance.solve_ldp(G, h)
    assert x is None
    np.testing.assert_allclose(G.T @ ray, 0.0, atol=1e-15)
    assert h @ ray == pytest.approx(1.0) and np.all(ray >= 0)


@pytest.mark.parametrize("h_scale", [1e-9, 1.0, 1e9])
def test_solve_ldp_is_accurate_whatever_the_scale_of_its_solution(h_scale):
    # the rhs is scaled to a unit solution: active rows met to 1e-12, the
    # multipliers' primal equal to x (a first solve of norm 5e3 met them to 2e-8)
    G = np.random.default_rng(1).standard_normal((40, 5))
    G *= np.sign(G @ np.ones(5))[:, None]
    h = np.full(40, h_scale)
    x, lam = least_distance.solve_ldp(G, h)
    assert np.min(G @ x) / h_scale == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(G.T @ lam, x, rtol=1e-12, atol=1e-12 * np.abs(x).max())


def test_solve_ldp_allows_nnls_50_m_d_1_iterations(monkeypatch):
    # solve_ldp 23, 26 (scipy's default 3 m), 28, 29, 31 (other counts)

    seen, exact = [], least_distance.nnls

    def spy(A, b, maxiter=None, **kwargs):
        seen.append(maxiter)
        return exact(A, b, maxiter=maxiter, **kwargs)

    monkeypatch.setattr(least_distance, "nnls", spy)
    G = np.random.default_rng(1).standard_normal((7, 3))
    x, _ = least_distance.solve_ldp(G, np.ones(7))
    assert seen and set(seen) == {50 * (7 + 3 + 1)}
    monkeypatch.setattr(least_distance, "nnls", exact)
    ref, _ = least_distance.solve_ldp(G, np.ones(7))
    np.testing.assert_array_equal(x, ref)


# ------------------------------------------------- the working set's helpers


def test_smallest_returns_what_its_docstring_says():
    rng = np.random.default_rng(2)
    smallest = dual_active_set._smallest
    # _smallest 2: k >= m is every index, in order
    v = rng.random(10)
    np.testing.assert_array_equal(smallest(v, 10), np.arange(10))
    np.testing.assert_array_equal(smallest(v, 11), np.arange(10))
    # _smallest 4 (m = 16 k not exact), 11, 12 (k + 1, k - 2): exactly the k smallest
    for m, k in ((10, 3), (48, 3), (80, 5), (160, 10)):
        for _ in range(20):
            v = rng.random(m)
            got = smallest(v, k)
            assert sorted(got) == sorted(np.argsort(v)[:k]), (m, k)
    # long arrays: every value at most the cut, about k of them
    for _ in range(20):
        v = rng.random(4000)
        got = np.sort(smallest(v, 20))
        assert 1 <= got.size <= 80
        np.testing.assert_array_equal(got, np.flatnonzero(v <= v[got].max()))


def test_smallest_cuts_ties_at_the_quantile_to_k():
    smallest = dual_active_set._smallest
    m, k = 1000, 5  # a sample of every 50th value, cut at its smallest
    # _smallest 29 (< cut): all values tied, the pool must not be empty
    got = smallest(np.ones(m), k)
    assert got.size == k
    # _smallest 30 (>= 4 k): exactly 4 k = 20 values at the cut are all kept
    v = np.ones(m)
    v[np.arange(0, 1000, 50)] = 0.0
    assert sorted(smallest(v, k)) == list(range(0, 1000, 50))
    # _smallest 32 (> 5 k), 38, 39: 24 distinct values at most the cut (23 below it)
    # are cut to the k smallest of them
    rng = np.random.default_rng(3)
    off_sample = np.setdiff1d(np.arange(m), np.arange(0, m, 50))
    for _ in range(20):
        v = np.ones(m)
        low = rng.choice(off_sample, 23, replace=False)
        v[low] = 0.5 * rng.random(23)
        v[0] = 0.6  # the smallest sample value: the cut
        got = smallest(v, k)
        assert sorted(got) == sorted(low[np.argsort(v[low])[:k]])


def test_row_norms_reads_each_row_once_in_chunks(monkeypatch):
    # _row_norms 7, 8, 11, 12, 13, 14: chunks of _DAS_NORM_CHUNK rows, each read once
    monkeypatch.setattr(dual_active_set, "_DAS_NORM_CHUNK", 3)
    G = np.random.default_rng(4).standard_normal((10, 4))
    rows = _DenseRows(G)
    np.testing.assert_allclose(dual_active_set._row_norms(rows, 10),
                               np.sqrt((G ** 2).sum(axis=1)), rtol=1e-14)
    spans = [range(10)[s] for s in rows.read]
    assert all(len(s) <= 3 for s in spans)
    assert sorted(i for s in spans for i in s) == list(range(10))


def _initial_by_hand(G, h, k):
    """The docstring of ``_initial_working_set``, on dense rows."""
    u = G.sum(axis=0)
    if np.linalg.norm(u) == 0:
        order = np.argsort(-h)
    else:
        au = G @ (u / np.linalg.norm(u))
        pos = au > 1e-12 * max(1.0, np.abs(au).max())
        c = max(h[pos] / au[pos]) if pos.any() else 1.0
        order = np.argsort((c if c > 0 else 1.0) * au - h)
    return set(order[:k].tolist())


def _rows_along_e1(a, b_scale=1.0, rng=None):
    """Rows ``(a_i, b_i)`` with ``sum_i b_i = 0``: their sum is along ``e_1``, so
    ``row_i . u = a_i`` (for ``sum a > 0``)."""
    b = b_scale * rng.standard_normal(len(a))
    b -= b.mean()
    return np.column_stack([a, b])


def test_initial_working_set_is_the_tightest_at_the_scaled_row_sum():
    # _initial_working_set 6, 32, 34, 39, 42, 43, 48, 49: random rows and right-hand
    # sides, every regime of the scale c
    rng = np.random.default_rng(5)
    for trial in range(60):
        m, d, k = rng.integers(8, 30), rng.integers(2, 6), rng.integers(2, 6)
        G = rng.standard_normal((m, d)) + (trial % 3) * rng.standard_normal(d)
        h = [np.ones(m), rng.random(m), 0.1 * rng.random(m), -rng.random(m),
             rng.standard_normal(m)][trial % 5]
        got = nnls_working_set._initial_working_set(_DenseRows(G), h, k)
        assert len(got) == k
        assert set(got.tolist()) == _initial_by_hand(G, h, k), trial


def test_initial_working_set_edge_cases():
    rng = np.random.default_rng(6)
    iws = nnls_working_set._initial_working_set
    # _initial_working_set 15, 16: rows that sum to zero give the k largest h
    for _ in range(20):
        g = rng.integers(-5, 6, (6, 3)).astype(float)  # sums exactly to zero
        G = np.vstack([g, -g])
        h = rng.random(12)
        assert set(iws(_DenseRows(G), h, 4).tolist()) == set(np.argsort(-h)[:4].tolist())
    # _initial_working_set 38: h = 0 (relaxed inputs) keeps c = 1, the smallest a_i
    a = rng.permutation(np.arange(1.0, 13.0))
    G = _rows_along_e1(a - 4.0, rng=rng)
    assert set(iws(_DenseRows(G), np.zeros(12), 3).tolist()) == set(np.argsort(a)[:3].tolist())
    # _initial_working_set 35, 37, 40: no positive ratio (h <= 0 where a_i > 0): c = 1,
    # rows 0-3, 5, 7 (c = 2 would take row 4 for row 7; c = max ratio < 0 differs too)
    G = _rows_along_e1(np.arange(-3.0, 9.0), rng=rng)
    h = np.r_[1.0, 2.0, 3.0, 4.0, -np.array([5.0, 0.5, 4.0, 1.0, 3.0, 2.0, 0.1, 6.0])]
    assert set(iws(_DenseRows(G), h, 6).tolist()) == {0, 1, 2, 3, 5, 7}
    # _initial_working_set 20 (every row), 23: a row orthogonal to u with h > 0 is not
    # used for c
    a = np.r_[rng.random(11) + 0.5, 0.0]
    G = _rows_along_e1(a, rng=rng)
    h = np.ones(12)
    assert set(iws(_DenseRows(G), h, 3).tolist()) == _initial_by_hand(G, h, 3)
    assert 11 in _initial_by_hand(G, h, 3)
    # the cut at 1e-12 max(1, max |a_i|): 22 (1e-12 / max), 28 (max(2, .)), 19 (c u
    # computed from u ||u||, which moves the cut when max |a_i| < 1 < ||u||)
    # A row with a_i = -1, h_i = -50 is among the tightest only when the tiny row sets c.
    for a_tiny, big, n_big, used in ((1e-11, 100.0, 11, False), (1.5e-12, 0.999, 11, True),
                                     (5e-13, 0.1, 40, False)):
        a = np.r_[big * (1 + 0.01 * np.arange(n_big)), a_tiny, -1.0]
        G = _rows_along_e1(a, rng=rng)
        h = np.r_[np.ones(n_big + 1), -50.0]
        expected = _initial_by_hand(G, h, 2)
        assert set(iws(_DenseRows(G), h, 2).tolist()) == expected, a_tiny
        assert (a.size - 1 in expected) == used, a_tiny


# ------------------------------------------------- the nuclear-norm interior-point method


def test_nuclear_ipm_certifies_infeasibility_exactly():
    # frobenius_solution (the Frobenius program on the lifted keys): the
    # docstring promises an exact certificate (a Farkas ray of a key-score method),
    # not the fast method's "normalized margin below 1e-9"
    X, Z, sel = _key_query_instance(0, n=10, T=6, d=4, self_attention=True)
    with pytest.raises(NotSeparableError) as info:
        att_svm_w(X, Z, sel, norm="nuclear", method="nuclear-ipm")
    assert "not separable" in str(info.value)
    assert "below 1e-09" not in str(info.value)
    assert "dual active set" in str(info.value) or "NNLS" in str(info.value)


# ------------------------------------------------- the "nnls" method


def _head_program(n, d, seed=0, rhs=None):
    """Head-SVM rows ``y_i r_i^T v >= rhs_i`` of a separable sample."""
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((n, d))
    y = np.sign(R @ rng.standard_normal(d))
    return head_from_rows(y[:, None] * R, None if rhs is None else np.asarray(rhs, float))


def _record_nnls(problem, monkeypatch):
    """Solve with "nnls", recording each LDP's rows (``None``: all) and answer."""
    rounds = []
    exact_rows, exact_ldp = least_distance.KeyRows.rows, least_distance.solve_ldp_checked

    def rows(self, idx=None):
        rounds.append([None if idx is None else np.array(idx)])
        return exact_rows(self, idx)

    def ldp(G, h, problem):
        out = exact_ldp(G, h, problem)
        rounds[-1].append(out)
        return out

    monkeypatch.setattr(least_distance.KeyRows, "rows", rows)
    monkeypatch.setattr(nnls_working_set, "solve_ldp_checked", ldp)
    res = nnls_working_set.solve(problem, 1e-8, 100, None, 0)
    monkeypatch.setattr(least_distance.KeyRows, "rows", exact_rows)
    monkeypatch.setattr(nnls_working_set, "solve_ldp_checked", exact_ldp)
    return res, rounds


def test_nnls_solves_a_small_program_whole_with_loose_negative_rhs(monkeypatch):
    # _solve_nnls 24, 25 (n_iter), 45 (g x + h as the slack): rows with rhs -5 are
    # loose; one LDP of all rows; the answer is (ATT-SVM)'s on rows by definition
    problem = _head_program(40, 5, rhs=np.r_[np.ones(30), np.full(10, -5.0)])
    res, rounds = _record_nnls(problem, monkeypatch)
    assert len(rounds) == 1 and rounds[0][0] is None
    assert res.n_iter == 1 and res.method == "nnls"
    G = rows_by_definition(problem)
    ref = tight_qp(G, problem.constraints.rhs, problem.constraints.equality, problem.shape)
    assert rel_err(res.primal, ref) <= 1e-6
    x = res.primal.ravel()
    assert res.max_violation == max(0.0, float((problem.constraints.rhs - G @ x).max()))
    assert res.max_violation <= 1e-12
    np.testing.assert_allclose(G.T @ res.dual, x, atol=1e-10)  # x = G^T lam


@pytest.mark.parametrize("initial", [None, 10, 40])
def test_nnls_working_set_rounds_follow_the_rule(initial, monkeypatch):
    # _solve_nnls 59 (n_iter), 78 (no stop at a feasible point), 90 (keeps rows with
    # zero multiplier), 92 (dropped rows never return), 100, 101, 102 (rows added):
    # each round checked by hand on rows written from the definition; a small first
    # working set (_WS_INITIAL) makes more rounds
    if initial is not None:
        monkeypatch.setattr(nnls_working_set, "_WS_INITIAL", initial)
    size = nnls_working_set._WS_INITIAL
    total = 0
    for args, seed in (((400, 10, 30), 1), ((120, 16, 30), 0), ((200, 6, 8), 2)):
        problem = att_program(np.random.default_rng(seed), *args)
        h, n, d = problem.constraints.rhs, len(problem.constraints), args[2]
        G = rows_by_definition(problem)
        res, rounds = _record_nnls(problem, monkeypatch)
        assert res is not None and res.n_iter == len(rounds)
        total += len(rounds)
        assert set(rounds[0][0].tolist()) == _initial_by_hand(G, h, size)
        for k, (work, (x, lam)) in enumerate(rounds):
            vals = G @ x - h
            outside = np.setdiff1d(np.arange(n), work)
            violated = -vals[outside].min() > max(1e-9, -vals[work].min())
            if k == len(rounds) - 1:
                assert not violated
                break
            assert violated, k
            keep = work[lam > 0]
            others = np.setdiff1d(np.arange(n), keep)
            n_add = min(2 * (d + 1), n - keep.size)
            added = others[np.argsort(vals[others])[:n_add]]
            assert set(rounds[k + 1][0].tolist()) == set(keep.tolist()) | set(added.tolist())
        np.testing.assert_array_equal(res.dual[work], lam)
        assert not res.dual[outside].any()
    assert total >= 6


def test_nnls_stops_after_the_round_limit(monkeypatch):
    # _solve_nnls 59, 60, 61: _WS_MAX_ROUNDS rounds at most; one short of the rounds
    # needed, the answer violates its program and is declined
    monkeypatch.setattr(nnls_working_set, "_WS_INITIAL", 10)
    problem = att_program(np.random.default_rng(1), 400, 10, 30)
    needed = nnls_working_set.solve(problem, 1e-8, 100, None, 0).n_iter
    assert needed >= 3
    monkeypatch.setattr(nnls_working_set, "_WS_MAX_ROUNDS", needed)
    assert nnls_working_set.solve(problem, 1e-8, 100, None, 0).n_iter == needed
    monkeypatch.setattr(nnls_working_set, "_WS_MAX_ROUNDS", needed - 1)
    assert nnls_working_set.solve(problem, 1e-8, 100, None, 0) is None


@pytest.mark.parametrize("h_scale", [1.0, 1e3])
def test_nnls_declines_an_answer_violating_by_more_than_1e_6_scale(h_scale, monkeypatch):
    # _solve_nnls 12 (scale 1), 18 (scale at least 2): the answer x (1 - delta) violates
    # the active rows by delta * h; accepted up to 1e-6 max(1, max |h|)
    problem = _head_program(40, 5, rhs=np.full(40, h_scale))
    exact = least_distance.solve_ldp_checked
    for delta, accepted in ((0.5e-6, True), (1.5e-6, False)):
        monkeypatch.setattr(nnls_working_set, "solve_ldp_checked",
                            lambda G, h, p, delta=delta: ((1 - delta) * exact(G, h, p)[0],
                                                          exact(G, h, p)[1]))
        res = nnls_working_set.solve(problem, 1e-8, 100, None, 0)
        assert (res is not None) == accepted, delta
        if accepted:
            assert res.max_violation == pytest.approx(delta * h_scale, rel=1e-2)


def test_nnls_size_limits(monkeypatch):
    # _solve_nnls 6 (2000 parameters declined), 31, 32, 33, 34 (the whole-program size
    # max(300, 2 (d + 1)) = 402 for d = 200)
    for d, solved in ((2000, True), (2001, False)):
        res = nnls_working_set.solve(_head_program(3, d), 1e-8, 100, None, 0)
        assert (res is not None) == solved, d
    for n, whole in ((402, True), (403, False)):
        _, rounds = _record_nnls(_head_program(n, 200), monkeypatch)
        assert (rounds[0][0] is None) == whole, n
        if not whole:
            assert rounds[0][0].size == 300


def test_solve_ldp_without_constraints_is_zero():
    x, lam = least_distance.solve_ldp(np.zeros((0, 3)), np.zeros(0))
    np.testing.assert_array_equal(x, np.zeros(3))
    assert lam.shape == (0,)


def test_att_svm_prime_reads_optimal_as_booleans():
    # att_svm_prime 12, 14: a 0/1 float array is the same selection as booleans
    rng = np.random.default_rng(3)
    K = rng.standard_normal((3, 4, 5))
    opt = np.zeros((3, 4), bool)
    opt[:, :2] = True
    p, alpha, tied = att_svm_prime(K, opt)
    p2, alpha2, tied2 = att_svm_prime(K, opt.astype(float))
    np.testing.assert_array_equal(p2, p)
    np.testing.assert_array_equal(alpha2, alpha)
    assert tied2 == tied


def test_nnls_reports_the_duality_gap_of_its_pair(monkeypatch):
    # _solve_nnls 138, 139, 143, 144, 145: gap = (||x||^2 - h^T lam) / ||x||^2 of the
    # returned pair (1/2 with half the multipliers, here with ||x|| < 1), and 0 at x = 0
    problem = _head_program(40, 5)
    big = MaxMarginProblem(KeyScores(10.0 * problem.scores.keys), problem.constraints)
    exact = least_distance.solve_ldp_checked
    monkeypatch.setattr(nnls_working_set, "solve_ldp_checked",
                        lambda G, h, p: (exact(G, h, p)[0], 0.5 * exact(G, h, p)[1]))
    res = nnls_working_set.solve(big, 1e-8, 100, None, 0)
    assert float(res.primal @ res.primal) < 1.0
    assert res.gap == pytest.approx(0.5, rel=1e-6)
    monkeypatch.setattr(nnls_working_set, "solve_ldp_checked", exact)
    relaxed = _head_program(40, 5, rhs=np.zeros(40))  # every row relaxed: x = 0
    with np.errstate(all="raise"):
        res = nnls_working_set.solve(relaxed, 1e-8, 100, None, 0)
    assert not res.primal.any() and res.gap == 0.0


@pytest.mark.parametrize("solve, args", [
    ("att_svm", lambda: (np.random.default_rng(0).standard_normal((4, 3, 2)), [0, 1, 2, 0])),
    ("att_svm_w", lambda: (*_key_query_instance(1, n=4, T=3, d=2)[:2], [0, 1, 2, 0])),
])
def test_att_svm_passes_its_solver_options(solve, args, monkeypatch):
    # att_svm 4, 27, 28; att_svm_w 6 and the like: tol=1e-8 and max_iter=100_000 by
    # default, and what the caller gives, reach solve_max_margin
    seen = []

    class Stop(Exception):
        pass

    def spy(problem, **kwargs):
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(svm_attention, "solve_max_margin", spy)
    with pytest.raises(Stop):
        getattr(svm_attention, solve)(*args())
    with pytest.raises(Stop):
        getattr(svm_attention, solve)(*args(), tol=1e-5, max_iter=7, method="cvxpy")
    # (tol=None: the norm's default of solve_max_margin)
    assert seen[0]["tol"] is None and seen[0]["max_iter"] == 100_000
    assert seen[0]["method"] == "auto" and seen[0]["callback"] is None
    assert seen[1]["tol"] == 1e-5 and seen[1]["max_iter"] == 7
    assert seen[1]["method"] == "cvxpy"


def test_nuclear_certificate_by_hand():
    # nuclear_certificate 9 (b >= 0 scaled), 13 (values above 1 only), 19, 26, 33 (the
    # violations): W = I and rows z_j = e_1, a_j = (v_j, 0.3), so z_j^T W a_j = v_j
    from skntp.svm.solvers.sdp_interior_point import nuclear_certificate

    def rows(v):
        v = np.asarray(v, dtype=float)
        return np.tile([1.0, 0.0], (v.size, 1)), np.column_stack([v, np.full(v.size, 0.3)])

    z, a = rows([0.5, 0.25, -0.1, 0.3])
    b = np.array([1.0, 1.0, 0.0, 0.0])
    y = np.array([1.0, 0.5, -2.0, 0.0])
    W, y_out, gap, violation = nuclear_certificate(z, a, b, np.eye(2), y)
    np.testing.assert_allclose(W, 4.0 * np.eye(2), rtol=1e-15)  # b_j / v_j at most 4
    assert violation == pytest.approx(0.4, rel=1e-12)  # -4 * (-0.1), the b = 0 row
    spec = np.linalg.norm(a[0] + 0.5 * a[1])  # ||sum_j max(y_j, 0) z_j a_j^T||_2
    np.testing.assert_allclose(y_out, np.array([1.0, 0.5, 0.0, 0.0]) / spec, rtol=1e-14)
    assert gap == pytest.approx((8.0 - 1.5 / spec) / 8.0, rel=1e-12)
    # a row with b > 0 and z^T W a <= 0 cannot be fixed by scaling: gap inf, and the
    # violation is max_j b_j - z_j^T W a_j over those rows
    z, a = rows([0.5, -0.2, 3.0])
    W, _, gap, violation = nuclear_certificate(z, a, np.array([1.0, 1.0, 0.0]), np.eye(2),
                                               np.ones(3))
    assert gap == np.inf and violation == pytest.approx(1.2, rel=1e-12)
    np.testing.assert_array_equal(W, np.eye(2))


def test_nuclear_certificate_degenerate_values():
    # nuclear_certificate 34 (violation of b > 0 rows), 59, 60 (||W||_* = 1 and 0), 62, 63
    # (spectral norm 1 and 0): the relative gap (||W||_* - b^T y) / ||W||_* by hand
    from skntp.svm.solvers.sdp_interior_point import nuclear_certificate

    e1 = np.array([[1.0, 0.0]])
    # ||W||_* = 1 exactly, no rescaling (b / z^T W a = 1): gap 1 - b y / ||a||
    a = np.array([[0.5, 0.3]])
    W, y, gap, violation = nuclear_certificate(e1, a, np.array([0.25]), 0.5 * np.eye(2),
                                               np.ones(1))
    np.testing.assert_array_equal(W, 0.5 * np.eye(2))
    assert gap == pytest.approx(1.0 - 0.25 / np.linalg.norm(a), rel=1e-12)
    assert violation == 0.0
    # ||sum_j y_j z_j a_j^T||_2 = 1 exactly: y is kept, gap (2 - 1) / 2
    W, y, gap, _ = nuclear_certificate(e1, np.array([[1.0, 0.0]]), np.array([1.0]),
                                       np.eye(2), np.ones(1))
    np.testing.assert_array_equal(W, np.eye(2))
    np.testing.assert_array_equal(y, [1.0])
    assert gap == pytest.approx(0.5, rel=1e-12)
    # every multiplier clipped to 0: the dual bound is 0, gap 1
    assert nuclear_certificate(e1, a, np.array([0.25]), np.eye(2), -np.ones(1))[2] == 1.0
    # W = 0 with only b = 0 rows: optimal, gap 0
    z2, a2 = np.tile(e1, (2, 1)), np.array([[0.5, 0.3], [-1.0, 0.2]])
    W, _, gap, violation = nuclear_certificate(z2, a2, np.zeros(2), np.zeros((2, 2)),
                                               np.ones(2))
    assert gap == 0.0 and violation == 0.0
    # violations are those of the b = 0 rows only, after the scaling
    W, _, _, violation = nuclear_certificate(z2, a2, np.array([1.0, 0.0]), np.eye(2),
                                             np.ones(2))
    assert violation == pytest.approx(2.0, rel=1e-12)  # scale 2, z^T W a = -1 * 2


def test_max_step_is_the_largest_step_keeping_definiteness():
    # _max_step 17, 19, 21: the largest t <= 1 with L L^T + t D positive definite, by a
    # generalized eigenvalue problem (min eig of (D, A) = e: t = -1 / e where e < -1)
    import scipy.linalg as sla

    from skntp.svm.solvers.sdp_interior_point import _max_step

    rng = np.random.default_rng(7)
    B = rng.standard_normal((4, 4))
    A = B @ B.T + np.eye(4)
    L = np.linalg.cholesky(A)
    for D, expected in ((A, 1.0), (-0.5 * A, 1.0), (-4.0 * A, 0.25)):
        assert _max_step(L, D) == pytest.approx(expected, rel=1e-12)
    for _ in range(10):
        C = rng.standard_normal((4, 4))
        D = 3.0 * (C + C.T)
        e = sla.eigh(D, A, eigvals_only=True)[0]
        assert _max_step(L, D) == pytest.approx(1.0 if e >= -1.0 else -1.0 / e, rel=1e-9)


def test_max_step_vec_keeps_the_vector_nonnegative():
    # _max_step_vec 2 (dx = 0 counted as decreasing), 10, 15: the largest t <= 1 with
    # x + t dx >= 0
    from skntp.svm.solvers.sdp_interior_point import _max_step_vec

    x = np.array([1.0, 2.0, 3.0])
    assert _max_step_vec(x, np.array([0.0, 1.0, 0.0])) == 1.0
    assert _max_step_vec(x, np.array([-0.5, 0.0, 1.0])) == 1.0  # could go to 2
    assert _max_step_vec(x, np.array([-4.0, -1.0, 0.0])) == 0.25


def test_rank_one_factors_of_differences_and_of_rows_against_zero():
    # _rank_one_factors 4: z_j^T W a_j >= b_j with a_j = x_pos - x_ref, or x_pos where
    # ref = -1
    from skntp.svm import QueryKeyScores
    from skntp.svm.solvers.sdp_interior_point import _rank_one_factors

    rng = np.random.default_rng(8)
    X, Z = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 5))
    c = Constraints([0, 1, 2, 2], [1, 0, 3, 2], [2, -1, 0, -1], [1.0, 0.5, 1.0, 0.0],
                    np.zeros(4, bool))
    z, a, b = _rank_one_factors(MaxMarginProblem(QueryKeyScores(X, Z), c, norm="nuclear"))
    np.testing.assert_array_equal(z, Z[[0, 1, 2, 2]])
    np.testing.assert_array_equal(a, [X[0, 1] - X[0, 2], X[1, 0], X[2, 3] - X[2, 0], X[2, 2]])
    np.testing.assert_array_equal(b, c.rhs)


def test_nuclear_ipm_takes_its_programs_and_declines_others():
    # _solve_nuclear_ipm 2, 3, 4 (what it declines), 9, 10 (rhs 0 and 1/2 are its
    # programs): rows rhs_j >= 0 without equalities, nuclear norm, query-key scores
    from dataclasses import replace

    from skntp.svm import att_svm_w_problem
    from skntp.svm._solve import frobenius_solution
    from skntp.svm.solvers.sdp_interior_point import solve as _solve_nuclear_ipm

    X, Z, sel = _key_query_instance(2, n=5, T=4, d=3)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    c = problem.constraints
    m = len(c)
    solve = lambda p: _solve_nuclear_ipm(  # noqa: E731
        p, 1e-8, 100, None, 0, frobenius=frobenius_solution)
    for rhs in (np.where(np.arange(m) % 3 == 0, 0.0, 1.0), np.full(m, 0.5)):
        res = solve(replace(problem, constraints=Constraints(c.block, c.pos, c.ref, rhs,
                                                             c.equality)))
        assert res is not None and res.gap <= 1e-8
    equal = replace(problem, constraints=Constraints(c.block, c.pos, c.ref, c.rhs,
                                                     np.arange(m) == 0))
    assert solve(equal) is None
    assert solve(replace(problem, norm="fro")) is None
    negative = replace(problem, constraints=Constraints(c.block, c.pos, c.ref,
                                                        np.r_[-1.0, c.rhs[1:]], c.equality))
    assert solve(negative) is None


def test_nuclear_ipm_memory_estimate_is_a_dozen_m_by_m_matrices(monkeypatch):
    # _solve_nuclear_ipm 18, 20, 23, 24, 27-30: refused when m * 12 * 8 (m + k + d) bytes
    # exceed 4/5 of the available memory, with the program's name and the advice
    from skntp.svm import ProgramTooLargeError, att_svm_w_problem
    from skntp.svm._solve import frobenius_solution
    from skntp.svm.solvers.sdp_interior_point import solve as _solve_nuclear_ipm

    X, Z, sel = _key_query_instance(2, n=5, T=4, d=3)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    m = len(problem.constraints)
    need = m * 12 * 8 * (m + Z.shape[1] + X.shape[2])
    monkeypatch.setattr(_problem, "available_memory", lambda: need / 0.8 * (1 + 1e-9))
    assert _solve_nuclear_ipm(problem, 1e-8, 100, None, 0,
                              frobenius=frobenius_solution) is not None
    monkeypatch.setattr(_problem, "available_memory", lambda: need / 0.8 * (1 - 1e-9))
    with pytest.raises(ProgramTooLargeError) as info:
        _solve_nuclear_ipm(problem, 1e-8, 100, None, 0, frobenius=frobenius_solution)
    assert str(info.value).startswith(problem.name + ": ")
    assert str(info.value).endswith(
        " are available. the interior-point method stores m x m matrices; use fewer "
        "inputs or tokens, or method='cvxpy'.")


def test_nuclear_ipm_within_tol_but_violating_is_max_iter():
    # _solve_nuclear_ipm 40, 41: three iterations reach a gap of 0.42 < tol = 0.5 while
    # the rows with b_j = 0 are violated by 0.98: not optimal, status "max_iter"
    from dataclasses import replace

    from skntp.svm import att_svm_w_problem
    from skntp.svm._solve import frobenius_solution
    from skntp.svm.solvers.sdp_interior_point import solve as _solve_nuclear_ipm

    X, Z, sel = _key_query_instance(2, n=5, T=4, d=3)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    c = problem.constraints
    rhs = np.where(np.arange(len(c)) % 2 == 0, 0.0, 1.0)
    problem = replace(problem, constraints=Constraints(c.block, c.pos, c.ref, rhs,
                                                       c.equality))
    res = _solve_nuclear_ipm(problem, 0.5, 3, None, 0, frobenius=frobenius_solution)
    assert res.gap <= 0.5 < res.max_violation
    assert res.status == "max_iter" and res.n_iter == 3


def test_nuclear_ipm_reports_each_iterate_to_the_callback():
    # _solve_nuclear_ipm 73, 78 (iterations), 92-95 (the callback's arguments):
    # callback(iteration, gap, violation) of each iterate's certificate; the result is
    # the best of them
    from skntp.svm import att_svm_w_problem
    from skntp.svm._solve import frobenius_solution
    from skntp.svm.solvers.sdp_interior_point import solve as _solve_nuclear_ipm

    X, Z, sel = _key_query_instance(2, n=5, T=4, d=3)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    calls = []

    def callback(it, gap, violation):
        calls.append((it, gap, violation))

    res = _solve_nuclear_ipm(problem, 1e-8, 4, None, 0, callback=callback,
                             frobenius=frobenius_solution)
    assert res.status == "max_iter" and res.n_iter == 4
    assert [c[0] for c in calls] == [1, 2, 3, 4]
    gaps = [c[1] for c in calls]
    assert all(isinstance(g, float) for g in gaps) and min(gaps) == res.gap
    assert calls[gaps.index(res.gap)][2] == res.max_violation
    calls.clear()
    res = _solve_nuclear_ipm(problem, 1e-8, 100, None, 0, callback=callback,
                             frobenius=frobenius_solution)
    assert res.status == "optimal" and len(calls) == res.n_iter and calls[-1][1] == res.gap


# ------------------------------------------------- the ATT-SVM builders, by hand


def _selection_by_hand(mask, selected, against=None, relaxed=None):
    """``{(i, alpha_i, t, rhs_i, False)}`` over real tokens ``t != alpha_i`` (among
    ``against``), ``rhs_i = 0`` for relaxed inputs (eq. (10)), else 1."""
    n, T = mask.shape
    return {(i, int(selected[i]), t, 0.0 if relaxed is not None and relaxed[i] else 1.0,
             False)
            for i in range(n) for t in range(T)
            if t != selected[i] and mask[i, t] and (against is None or against[i, t])}


def test_att_svm_problem_rows_by_hand():
    from skntp.svm import att_svm_problem

    rng = np.random.default_rng(9)
    K = rng.standard_normal((6, 5, 3))
    mask = rng.random((6, 5)) < 0.8
    sel = np.array([int(np.flatnonzero(row)[0]) if row.any() else 0 for row in mask])
    mask[np.arange(6), sel] = True
    against = rng.random((6, 5)) < 0.7
    relaxed = np.array([True, False, True, False, False, False])
    for kw, expected in (
            ({}, _selection_by_hand(mask, sel)),
            ({"relaxed": relaxed}, _selection_by_hand(mask, sel, relaxed=relaxed)),
            ({"against": against}, _selection_by_hand(mask, sel, against=against))):
        args = (kw.pop("relaxed"),) if "relaxed" in kw else ()
        problem = att_svm_problem(K, sel, *args, mask=mask, **kw)
        assert rows_of(problem) == expected
        np.testing.assert_array_equal(problem.scores.keys, K)
        np.testing.assert_array_equal(problem.info["selected"], sel)
        np.testing.assert_array_equal(problem.info["mask"], mask)
        assert problem.name == ("relaxed ATT-SVM (10)" if args else "ATT-SVM")
        assert problem.norm == "fro"
    assert att_svm_problem(K, sel, mask=mask, norm="max").norm == "max"
    # _check_keys 25: a mask of 0/1 numbers is the same mask
    for numbers in (mask.astype(int), mask.astype(float)):
        problem = att_svm_problem(K, sel, mask=numbers)
        assert rows_of(problem) == _selection_by_hand(mask, sel)
        assert problem.info["mask"].dtype == bool
    # _selection_constraints 10: against given as 0/1 numbers is the same selection
    for numbers in (against.astype(int), against.astype(float)):
        assert rows_of(att_svm_problem(K, sel, mask=mask, against=numbers)) == \
            _selection_by_hand(mask, sel, against=against)
    none_relaxed = att_svm_problem(K, sel, np.zeros(6, bool), mask=mask)
    assert none_relaxed.name == "ATT-SVM"
    # relaxed given as a list, or as 0/1 numbers (a list raised AttributeError before)
    for given in (relaxed.tolist(), relaxed.astype(int), relaxed.astype(float)):
        problem = att_svm_problem(K, sel, given, mask=mask)
        assert problem.name == "relaxed ATT-SVM (10)"
        assert rows_of(problem) == _selection_by_hand(mask, sel, relaxed=relaxed)
    assert att_svm_problem(K, sel, [False] * 6, mask=mask).name == "ATT-SVM"
    # one input given as a 2-D (T, k) array
    problem = att_svm_problem(K[0], [2])
    assert problem.scores.keys.shape == (1, 5, 3)
    assert rows_of(problem) == {(0, 2, t, 1.0, False) for t in (0, 1, 3, 4)}


def test_att_svm_problem_same_key_is_infeasible_unless_relaxed():
    from skntp.svm import att_svm_problem

    K = np.random.default_rng(10).standard_normal((3, 4, 2))
    K[1, 3] = K[1, 0]
    with pytest.raises(NotSeparableError, match="in input 1 the selected token 0 has the "
                                                "same key as token 3"):
        att_svm_problem(K, [0, 0, 0])
    relaxed = att_svm_problem(K, [0, 0, 0], np.array([False, True, False]))
    assert (1, 0, 3, 0.0, False) in rows_of(relaxed)
    # a padded copy of the selected key is no constraint
    mask = np.ones((3, 4), bool)
    mask[1, 3] = False
    assert (1, 0, 3, 1.0, False) not in rows_of(att_svm_problem(K, [0, 0, 0],
                                                                        mask=mask))


@pytest.mark.parametrize("norm", ["fro", "nuclear", "spectral", "max"])
def test_att_svm_w_problem_rows_and_scores_by_hand(norm):
    from skntp.svm import QueryKeyScores, att_svm_w_problem

    rng = np.random.default_rng(11)
    X, Z = rng.standard_normal((4, 5, 3)), rng.standard_normal((4, 2))
    mask = np.ones((4, 5), bool)
    mask[2, 4] = mask[3, 0] = False
    sel = np.array([1, 0, 3, 2])
    problem = att_svm_w_problem(X, Z, sel, mask=mask, norm=norm)
    assert rows_of(problem) == _selection_by_hand(mask, sel)
    assert problem.info["shape"] == (2, 3)
    np.testing.assert_array_equal(problem.info["selected"], sel)
    np.testing.assert_array_equal(problem.info["mask"], mask)
    label = {"fro": "Frobenius"}.get(norm, norm)
    assert problem.name == f"ATT-SVM ({label} norm, key-query W)"
    if norm in ("nuclear", "spectral"):
        assert isinstance(problem.scores, QueryKeyScores) and problem.shape == (2, 3)
    else:  # the lifted keys vec(z_i x_it^T), W flattened row-major
        assert isinstance(problem.scores, KeyScores) and problem.shape == (6,)
        lifted = np.einsum("ik,itd->itkd", Z, X).reshape(4, 5, 6)
        np.testing.assert_allclose(problem.scores.keys, lifted, rtol=1e-15)


def test_att_svm_w_problem_refuses_zero_queries_and_bad_shapes():
    from skntp.svm import att_svm_w_problem

    rng = np.random.default_rng(12)
    X, Z = rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 2))
    Z[[1, 3]] = 0.0
    with pytest.raises(NotSeparableError, match=r"the queries of inputs \[1, 3\] are zero"):
        att_svm_w_problem(X, Z, [0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"queries must have shape \(4, k\), got \(3, 2\)"):
        att_svm_w_problem(X, Z[:3], [0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"queries must have shape \(4, k\), got \(8,\)"):
        att_svm_w_problem(X, Z.ravel(), [0, 0, 0, 0])


def test_svm_neighbors_by_hand():
    # Def. 2: t in T_i when p^T (k_{i alpha_i} - k_it) <= rhs_i + tol, t real, t != alpha_i
    from skntp.svm import svm_neighbors

    rng = np.random.default_rng(13)
    K = rng.standard_normal((5, 4, 3))
    p = rng.standard_normal(3)
    sel = np.array([0, 1, 2, 3, 0])
    mask = rng.random((5, 4)) < 0.8
    mask[np.arange(5), sel] = True
    gaps = (K @ p)[np.arange(5), sel][:, None] - K @ p
    for rhs in (1.0, np.array([1.0, 0.0, 1.0, 0.5, 2.0])):
        for tol in (1e-6, 0.3):
            r = np.broadcast_to(rhs, (5,))
            expected = mask & (gaps <= r[:, None] + tol)
            expected[np.arange(5), sel] = False
            got = svm_neighbors(K, sel, p, mask=mask, rhs=rhs, tol=tol)
            np.testing.assert_array_equal(got, expected)
            got = svm_neighbors(K, sel, p, mask=mask.astype(float), rhs=rhs, tol=tol)
            assert got.dtype == bool
            np.testing.assert_array_equal(got, expected)
    # exactly at rhs + tol is active: logits (2, 1, 1/2), gaps (0, 1, 3/2)
    p1 = np.array([1.0, 0.0])
    K1 = np.array([[[2.0, 0.0], [1.0, 5.0], [0.5, 0.0]]])
    for rhs, tol, expected in ((1.0, 0.5, [False, True, True]),
                               (1.0, 0.49, [False, True, False]),
                               (1.0, 0.0, [False, True, False]),
                               (0.5, 0.5, [False, True, False]),
                               (0.5, 0.49, [False, False, False])):
        np.testing.assert_array_equal(svm_neighbors(K1, [0], p1, rhs=rhs, tol=tol),
                                      [expected])


def test_att_svm_problem_input_checks():
    from skntp.svm import att_svm_problem

    K = np.random.default_rng(14).standard_normal((3, 4, 2))
    for keys, match in ((K[0, 0], r"keys must be 3-D \(n, T, k\), got shape \(2,\)"),
                        (K[None], r"keys must be 3-D \(n, T, k\), got shape \(1, 3, 4, 2\)")):
        with pytest.raises(ValueError, match=match):
            att_svm_problem(keys, [0, 0, 0])
    bad = K.copy()
    bad[2, 1, 0] = np.inf
    with pytest.raises(ValueError, match="keys must be finite; it contains NaN or infinity"):
        att_svm_problem(bad, [0, 0, 0])
    with pytest.raises(ValueError, match=r"mask must have shape \(3, 4\), got \(3, 3\)"):
        att_svm_problem(K, [0, 0, 0], mask=np.ones((3, 3), bool))
    for sel in ([0, 0], [0.0, 0.0, 0.0], [[0, 0, 0]]):
        with pytest.raises(ValueError, match=r"selected must be an integer array of shape "
                                             r"\(3,\)"):
            att_svm_problem(K, sel)
    for sel in ([0, -1, 0], [0, 4, 0]):
        with pytest.raises(ValueError, match=r"selected token indices must lie in \[0, 4\)"):
            att_svm_problem(K, sel)
    mask = np.ones((3, 4), bool)
    mask[[0, 2], 3] = False
    with pytest.raises(ValueError, match=r"selected tokens of inputs \[0, 2\] are padding"):
        att_svm_problem(K, [3, 0, 3], mask=mask)
    problem = att_svm_problem(K, np.array([3, 0, 1], dtype=np.uint8), mask=None)
    assert problem.info["selected"].dtype == np.int64
    assert problem.info["mask"].all() and problem.info["mask"].shape == (3, 4)


def test_nuclear_ipm_keeps_its_best_iterate_when_a_step_fails(monkeypatch, capsys):
    # _solve_nuclear_ipm 133 (a failed factorization declines), 142 (the printed gap),
    # 145, 146 (the Frobenius feasibility check runs only without convergence)
    import skntp.svm.solvers.sdp_interior_point as sdp_interior_point
    from skntp.svm import att_svm_w_problem

    X, Z, sel = _key_query_instance(2, n=5, T=4, d=3)
    problem = att_svm_w_problem(X, Z, sel, norm="nuclear")
    from skntp.svm._solve import frobenius_solution

    checked, calls = [], []
    exact_step = sdp_interior_point._predictor_corrector

    def check(p):
        checked.append(p)
        return frobenius_solution(p)

    res = sdp_interior_point.solve(problem, 1e-8, 100, None, 1,
                                   callback=lambda *a: calls.append(a), frobenius=check)
    assert res.status == "optimal" and not checked
    printed = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("nuclear-ipm")]
    assert len(printed) == res.n_iter - 1  # the last iterate is certified, not stepped
    for line, (it, gap, _) in zip(printed, calls):
        assert line.startswith(f"nuclear-ipm {it:3d}: mu ") and f" gap {gap:.2e} " in line
    steps = []
    monkeypatch.setattr(sdp_interior_point, "_predictor_corrector",
                        lambda *a: None if len(steps) == 5 else steps.append(1) or
                        exact_step(*a))
    res = sdp_interior_point.solve(problem, 1e-8, 100, None, 0, frobenius=check)
    assert res is not None and res.n_iter == 6 and res.status == "max_iter"
    assert len(checked) == 1 and res.gap > 1e-8


# ------------------------------------------------- the dual active-set method


def test_dual_active_set_allows_50_d_plus_1_additions_by_default(monkeypatch):
    # _dual_active_set_loop 6, 7: max_add = _DAS_MAX_ADD (d + 1); with _DAS_MAX_ADD
    # set so that the limit is exactly the additions needed (or half one less), the
    # method ends (or gives up)
    problem = _head_program(300, 10, seed=3)
    rows, h, d = least_distance.KeyRows(problem), problem.constraints.rhs, 10
    needed = dual_active_set._dual_active_set(rows, h, d)[2]
    assert needed > d
    assert dual_active_set._DAS_MAX_ADD == 50
    monkeypatch.setattr(dual_active_set, "_DAS_MAX_ADD", needed / (d + 1))
    assert dual_active_set._dual_active_set(rows, h, d)[2] == needed
    monkeypatch.setattr(dual_active_set, "_DAS_MAX_ADD", (needed - 0.5) / (d + 1))
    assert dual_active_set._dual_active_set(rows, h, d) is None


@pytest.mark.parametrize("m, pool", [(1000, 100), (10_000, 200), (120_000, 2000)])
def test_dual_active_set_pool_is_m_over_50_within_100_and_2000(m, pool, monkeypatch):
    # _dual_active_set_loop 20 and the like: the pool of rows scanned between full
    # scans holds m / 50 rows, at least _DAS_POOL = 100 and at most 2000
    sizes, exact = [], dual_active_set._smallest

    def spy(values, k):
        sizes.append(k)
        return exact(values, k)

    monkeypatch.setattr(dual_active_set, "_smallest", spy)
    problem = _head_program(m, 3, seed=4)
    res = dual_active_set.solve(problem, 1e-8, 100, None, 0)
    assert res is not None and sizes and set(sizes) == {pool}


@pytest.mark.parametrize("h_scale", [1.0, 1e3])
def test_dual_active_set_declines_an_answer_violating_by_more_than_1e_9_scale(
        h_scale, monkeypatch):
    # _solve_dual_active_set 21 (scale 1), 27 (scale at least 2): the answer x (1 - delta)
    # violates the active rows by delta * h; accepted up to 1e-9 max(1, max |h|), else
    # declined for another method
    problem = _head_program(40, 5, rhs=np.full(40, h_scale))
    exact = dual_active_set._dual_active_set
    for delta, accepted in ((0.5e-9, True), (1.5e-9, False)):
        def shrunk(rows, h, d, delta=delta):
            x, lam, n_add = exact(rows, h, d)
            return (1 - delta) * x, lam, n_add

        monkeypatch.setattr(dual_active_set, "_dual_active_set", shrunk)
        res = dual_active_set.solve(problem, 1e-8, 100, None, 0)
        assert (res is not None) == accepted, delta
        if accepted:
            assert res.max_violation == pytest.approx(delta * h_scale, rel=1e-2)


def test_dual_active_set_takes_2000_parameters():
    # _solve_dual_active_set 7: 2000 parameters solved, 2001 declined
    for d, solved in ((2000, True), (2001, False)):
        res = dual_active_set.solve(_head_program(3, d), 1e-8, 100, None, 0)
        assert (res is not None) == solved, d


def test_dual_active_set_reports_its_additions_and_the_gap_of_its_pair(monkeypatch):
    # _solve_dual_active_set: n_iter is the number of additions; gap = (||x||^2 -
    # h^T lam) / ||x||^2 of the returned pair (1/2 with half the multipliers, here with
    # ||x|| < 1), 0 at x = 0; the multipliers are those of the method
    problem = _head_program(40, 5)
    big = MaxMarginProblem(KeyScores(10.0 * problem.scores.keys), problem.constraints)
    rows, h = least_distance.KeyRows(big), big.constraints.rhs
    x, lam, n_add = dual_active_set._dual_active_set(rows, h, 5)
    res = dual_active_set.solve(big, 1e-8, 100, None, 0)
    assert res.method == "dual-active-set" and res.status == "optimal"
    assert res.n_iter == n_add
    np.testing.assert_array_equal(res.primal, x)
    np.testing.assert_array_equal(res.dual, lam)
    assert abs(res.gap) <= 1e-12
    exact = dual_active_set._dual_active_set
    monkeypatch.setattr(dual_active_set, "_dual_active_set",
                        lambda r, h, d: (lambda o: (o[0], 0.5 * o[1], o[2]))(exact(r, h, d)))
    res = dual_active_set.solve(big, 1e-8, 100, None, 0)
    assert float(res.primal @ res.primal) < 1.0
    assert res.gap == pytest.approx(0.5, rel=1e-9)
    monkeypatch.setattr(dual_active_set, "_dual_active_set", exact)
    with np.errstate(all="raise"):
        res = dual_active_set.solve(_head_program(40, 5, rhs=np.zeros(40)),
                                                   1e-8, 100, None, 0)
    assert not res.primal.any() and res.gap == 0.0 and res.n_iter == 0


def test_dual_active_set_adds_rows_violated_by_more_than_1e_10():
    # _dual_active_set_loop 35 (the tolerance doubled): a row is violated when its slack
    # is below -1e-10 max(1, |h|) (-1e-10 max(1, |h|) / ||g|| normalized).  x1 >= 1
    # first, then x1 + x2 >= 1 + 1.5e-10 is violated by 1.5e-10 and must be added; the
    # solution is (1, 1.5e-10) by hand
    delta = 1.5e-10
    res = dual_active_set.solve(
        head_from_rows(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 1.0 + delta])),
        1e-8, 100, None, 0)
    assert res.n_iter == 2
    np.testing.assert_allclose(res.primal, [1.0, delta], rtol=0, atol=1e-14)
    # _dual_active_set_loop 72 (the tolerance divided by the scale): with rhs 1000 the
    # tolerance is 1e-7; a row violated by 0.5e-7 is within it, one by 1.5e-7 is added
    for delta, added in ((0.5e-7, False), (1.5e-7, True)):
        res = dual_active_set.solve(
            head_from_rows(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1e3, 1e3 + delta])),
            1e-8, 100, None, 0)
        assert res.n_iter == (2 if added else 1)
        np.testing.assert_allclose(res.primal, [1e3, delta if added else 0.0], rtol=0,
                                   atol=1e-11)


def test_dual_active_set_keeps_rows_densely_up_to_its_limit(monkeypatch):
    # _dual_active_set_loop 38-43: the normalized rows are formed once (rows() of all)
    # when m (d + 1) <= _DAS_DENSE_MAX, else read on demand; the answer is the same
    monkeypatch.setattr(dual_active_set, "_DAS_DENSE_MAX", 1200)
    read, exact = [], least_distance.KeyRows.rows
    monkeypatch.setattr(least_distance.KeyRows, "rows",
                        lambda self, idx=None: read.append(idx is None) or exact(self, idx))
    for m, dense in ((300, True), (301, False)):
        read.clear()
        problem = _head_program(m, 3, seed=5)
        res = dual_active_set.solve(problem, 1e-8, 100, None, 0)
        assert any(read) == dense, m
        G = rows_by_definition(problem)
        ref = tight_qp(G, problem.constraints.rhs, problem.constraints.equality,
                       problem.shape)
        assert rel_err(res.primal, ref) <= 1e-6


def test_dual_active_set_scans_every_row_of_small_programs(monkeypatch):
    # _dual_active_set_loop 85 and the like: up to 2 * pool (= 200) rows every row is
    # looked at in every step, without a pool; above, a pool is drawn (_smallest)
    sizes, exact = [], dual_active_set._smallest
    monkeypatch.setattr(dual_active_set, "_smallest",
                        lambda values, k: sizes.append(k) or exact(values, k))
    for m, pooled in ((200, False), (201, True)):
        sizes.clear()
        res = dual_active_set.solve(_head_program(m, 3, seed=6), 1e-8, 100,
                                                   None, 0)
        assert res is not None and bool(sizes) == pooled, m


def test_dual_active_set_picks_among_rows_violated_beyond_their_tolerance():
    # _dual_active_set_loop 162-169: the row of smallest normalized slack is within the
    # tolerance (slack -0.9e-10 > -1e-10), another row is beyond it (slack -2e-10, but
    # normalized -2e-11 as its norm is 10): the step adds that row, never the first
    # (multiplier 0, x1 = 0); x = (0, 2e-10 / 10) by hand
    G = np.array([[1.0, 0.0], [0.0, 10.0]])
    h = np.array([0.9e-10, 2e-10])
    res = dual_active_set.solve(head_from_rows(G, h), 1e-8, 100, None, 0)
    assert res.n_iter == 1 and res.dual[0] == 0.0 and res.dual[1] > 0
    np.testing.assert_allclose(res.primal, [0.0, 2e-11], rtol=1e-12, atol=0)


def test_dual_active_set_with_duplicated_rows_in_the_pooled_regime():
    # _dual_active_set_loop 191 (every row of slack below +tolerance "violated"): a
    # repeated row (a repeated input) is tight but not active once its twin is; it must
    # not be picked.  300 rows (> 2 pools of 100: the pooled regime), each twice; the
    # answer is that of the 150 distinct rows (tight_qp, written from the KKT system)
    rng = np.random.default_rng(7)
    R = rng.standard_normal((150, 4))
    R *= np.sign(R @ rng.standard_normal(4))[:, None]
    G = np.vstack([R, R])
    res = dual_active_set.solve(head_from_rows(G), 1e-8, 100, None, 0)
    assert res is not None and res.n_iter <= 3 * (4 + 1)
    ref = tight_qp(R, np.ones(150), np.zeros(150, bool), (4,))
    assert rel_err(res.primal, ref) <= 1e-10
    lam = res.dual[:150] + res.dual[150:]
    np.testing.assert_allclose(R.T @ lam, res.primal, atol=1e-10)


def test_dual_active_set_full_scan_allows_the_roundoff_of_the_slacks():
    # _dual_active_set_loop 192: a row counts as violated when its normalized slack is
    # below -(1e-10 scale / ||g|| + 1e-14 ||x||) (the second term: the roundoff of the
    # slacks).  x1 >= 1 and x1 + x2 >= 1 + 1e-10 (normalized slack -1e-10 / sqrt 2 at
    # x = e1, within the allowance) among 250 rows that hold with room: the pooled regime,
    # and the answer stays x = e1
    G = np.vstack([[1.0, 0.0], [1.0, 1.0], np.tile([0.0, 1.0], (250, 1))])
    h = np.r_[1.0, 1.0 + 1e-10, -np.ones(250)]
    res = dual_active_set.solve(head_from_rows(G, h), 1e-8, 100, None, 0)
    assert res.n_iter == 1
    np.testing.assert_array_equal(res.primal, [1.0, 0.0])


def test_dual_active_set_rescans_every_scan_every_additions(monkeypatch):
    # _dual_active_set_loop 174-176, 219-221 (the rescan counter, p = 0 taken for "no
    # pick"): rows read on demand (_DAS_DENSE_MAX = 0) and a pool of every row, so no
    # pool runs dry.  The method scans all rows (rows.values) and reads the picked row
    # alone (rows.rows([p])) at its first addition and after every scan_every = 3
    # additions, and scans once more to find nothing violated
    monkeypatch.setattr(dual_active_set, "_DAS_DENSE_MAX", 0)
    rng = np.random.default_rng(8)
    R = rng.standard_normal((60, 8))
    R *= np.sign(R @ rng.standard_normal(8))[:, None]

    class Counted(_DenseRows):
        def values(self, x):
            self.read.append("scan")
            return super().values(x)

        def single(self):
            return [int(i[0]) for i in self.read if isinstance(i, np.ndarray) and i.size == 1]

    # the order of the picks, each by a full scan (scan_every = 1)
    rows = Counted(R)
    *_, n_add = dual_active_set._dual_active_set(rows, np.ones(60), 8, pool=60, scan_every=1)
    picks = rows.single()
    assert len(picks) == n_add >= 7
    # the second pick (from the pool below) made row 0
    order = np.r_[picks[1], np.delete(np.arange(60), picks[1])]
    new_index = np.argsort(order)
    rows = Counted(R[order])
    x, lam, n_add = dual_active_set._dual_active_set(rows, np.ones(60), 8, pool=60,
                                                   scan_every=3)
    assert n_add == len(picks) and lam[0] > 0
    assert rows.single() == [int(new_index[p]) for p in picks[::3]]
    assert sum(isinstance(i, str) for i in rows.read) == -(-n_add // 3) + 1
    np.testing.assert_allclose(x, tight_qp(R, np.ones(60), np.zeros(60, bool), (8,)),
                               atol=1e-10)


@pytest.mark.parametrize("u, r, k, t", [
    ([1.0, 2.0, 4.0], [0.5, 4.0, -1.0], 1, 0.5),   # min u_k / r_k over r_k > 0
    ([1.0, 2.0], [-1.0, 0.0], None, np.inf),      # no r_k > 0: no block
    ([0.0, 3.0], [2.0, 1.0], 0, 0.0),             # u_k = 0 with r_k > 0 blocks at once
    ([0.0, 1.0, 2.0], [0.0, 1.0, 4.0], 2, 0.5),   # 0 / 0 at 0: the r_k > 0 decide
    ([0.0, 3.0, 1.0], [0.0, -1.0, 0.0], None, np.inf),  # 0 / 0 and no r_k > 0
    ([2.0, 0.0, 1.0], [1.0, 0.0, 4.0], 2, 0.25),  # 0 / 0 after the blocking row
    ([0.0, 0.1, 2.0], [0.0, 0.5, 4.0], 1, 0.2),   # 0 / 0, the block at r_k < 1
])
def test_blocking_step_by_hand(u, r, k, t):
    # _dual_active_set_loop 112, 114, 243-253 (run 10: the ratio test, now a function):
    # the largest t with u - t r >= 0, and the k it blocks
    with np.errstate(divide="ignore", invalid="ignore"):
        kk, tt = dual_active_set._blocking_step(np.array(u), np.array(r))
    assert tt == t and (k is None or kk == k)
    if np.isfinite(tt):
        after = np.array(u) - tt * np.array(r)
        assert after.min() >= 0 and after[kk] == 0


def test_dual_active_set_solves_the_final_active_set_afresh(monkeypatch):
    # _dual_active_set_loop 432 (the final QR solve skipped): the rank-one updates of Z
    # drift (here made to, by 1e-5 of noise on each update); the answer is solved afresh
    # from the final active rows, G_A x = h_A with x = G_A^T u, so the drift stays out of it
    noise = np.random.default_rng(9)
    exact = dual_active_set.dger

    def drifting(alpha, x, y, a, overwrite_a=0):
        out = exact(alpha, x, y, a=a, overwrite_a=overwrite_a)
        if out.shape[0] == out.shape[1]:  # Z (d x d), not N
            out += 1e-5 * noise.standard_normal(out.shape)
        return out

    monkeypatch.setattr(dual_active_set, "dger", drifting)
    rng = np.random.default_rng(3)
    R = rng.standard_normal((150, 6))
    R *= np.sign(R @ rng.standard_normal(6))[:, None]
    res = dual_active_set.solve(head_from_rows(R), 1e-8, 100, None, 0)
    ref = tight_qp(R, np.ones(150), np.zeros(150, bool), (6,))
    assert rel_err(res.primal, ref) <= 1e-12
    np.testing.assert_allclose(R.T @ res.dual, res.primal, atol=1e-12)


def _active_rows_for(u, seed=4):
    """Normalized rows ``G_A`` (q x 5) and ``h_A = G_A G_A^T u``: the active equations of ``u``."""
    ga = np.random.default_rng(seed).standard_normal((len(u), 5))
    ga /= np.linalg.norm(ga, axis=1, keepdims=True)
    return ga, ga @ ga.T @ np.asarray(u, dtype=float)


@pytest.mark.parametrize("u, kept", [
    ([2.0, 0.5, 1.0], True),           # u >= 0: solved afresh
    ([0.1, 3e-10, -5e-10], True),      # max u < 1: down to -1e-9 accepted, clipped at 0
    ([0.1, 3e-10, -2e-9], False),      # beyond -1e-9: the loop's iterate
    ([1e3, 2.0, -5e-7], True),         # max u = 1e3: down to -1e-6 accepted
    ([1e3, 2.0, -2e-6], False),
    ([4.0, -2e-9, 1.0], True),         # -1e-9 max(1, max u) = -4e-9
    ([4.0, -5e-9, 1.0], False),
    ([1.5, 0.3, -1.8e-9], False),      # -1e-9 max(1, max u) = -1.5e-9
])
def test_resolved_active_set_by_hand(u, kept):
    # _dual_active_set_loop 431, 435-437, 442, 453-455 (runs 9 and 10, then in the
    # pragma: no cover branch): R u = y with R^T y = h_A, x = Q y = G_A^T u, accepted when
    # min u >= -1e-9 max(1, max u), and then clipped at 0
    ga, ha = _active_rows_for(u)
    x0, u0 = np.full(5, 7.0), np.full(3, 9.0)  # the loop's drifted iterate
    x, un = dual_active_set._resolved_active_set(ga, ha, x0, u0)
    if not kept:
        assert x is x0 and un is u0
        return
    exact = np.asarray(u)
    np.testing.assert_allclose(un, np.maximum(exact, 0.0), rtol=1e-9, atol=1e-13)
    assert un.min() >= 0.0
    np.testing.assert_allclose(x, ga.T @ exact, rtol=1e-12, atol=1e-12)  # not clipped
    np.testing.assert_allclose(ga @ x, ha, rtol=1e-12, atol=1e-12)


def _dependent_rows(kind):
    if kind == "near":  # a repeated normalized row: R_33 ~ 1e-16, u of order 1e31
        ga, _ = _active_rows_for([1.0, 1.0, 1.0])
        ga[2] = ga[0]
        return ga, np.array([1.0, 1.0, 2.0])
    ga = np.zeros((3, 5))
    ga[0, 0] = ga[1, 1] = ga[2, 0] = 1.0
    if kind == "overflow":  # R_22 = 1e-300: u = (inf, -inf, 1), and min u >= -1e-9 max u
        ga[[1, 2]] = ga[[2, 1]]
        ga[1, 3] = 1e-300
        return ga, np.array([1.0, 0.0, 1.0])
    if kind == "subnormal":  # R_22 = 1e-310: y = (1, -inf) already, and u = (inf, -inf)
        ga = ga[[0, 2]]
        ga[1, 2] = 1e-310
        return ga, np.array([1.0, 0.0])
    return ga, np.array([1.0, 1.0, 0.0])  # "exact": R_33 = 0, solve_triangular raises


@pytest.mark.parametrize("kind", ["near", "overflow", "subnormal", "exact"])
def test_resolved_active_set_keeps_the_iterate_for_dependent_rows(kind):
    # the loop's iterate stays where the fresh u is not finite or not >= 0 (run 12:
    # _resolved_active_set 21, 22 check y for infinities, which "subnormal" has)
    ga, ha = _dependent_rows(kind)
    x0, u0 = np.arange(5.0), np.full(len(ha), 0.25)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x, un = dual_active_set._resolved_active_set(ga, ha, x0, u0)
    assert x is x0 and un is u0


def test_dual_active_set_silences_its_own_zero_divisions(monkeypatch):
    # _dual_active_set 8, 9 (np.errstate dropped): the ratio test may divide by a
    # multiplier clamped to 0 at a near tie (r_k / 0 = inf: no block, as intended).
    # Whether this instance does depends on the last bits of the platform's BLAS, so
    # the test checks the promise itself: the loop runs under the method's own
    # floating-point state whatever the caller's, and the answer is exact
    G = np.array([[0, 1, -1], [-1, 1, 1], [1, 0, -1], [-1, 0, -1], [-1, 1, 0], [1, 1, -1],
                  [-1, 1, 1]], dtype=float)
    h = np.array([2.0, 0.0, 2.0, 2.0, 0.0, 2.0, 0.0])
    loop, states = dual_active_set._dual_active_set_loop, []

    def spy(*args):
        states.append(np.geterr())
        np.float64(1.0) / np.float64(0.0)  # a division by zero inside the loop
        return loop(*args)

    monkeypatch.setattr(dual_active_set, "_dual_active_set_loop", spy)
    with np.errstate(all="raise"):
        res = dual_active_set.solve(head_from_rows(G, h), 1e-8, 100, None, 0)
    assert states and all(s["divide"] == s["invalid"] == "ignore" for s in states)
    ref = tight_qp(G, h, np.zeros(7, bool), (3,))
    assert rel_err(res.primal, ref) <= 1e-10


def test_dual_active_set_passes_its_pool_size(monkeypatch):
    # _dual_active_set 20 (pool dropped): the pool of the selection is the one asked for
    sizes, exact = [], dual_active_set._smallest
    monkeypatch.setattr(dual_active_set, "_smallest",
                        lambda values, k: sizes.append(k) or exact(values, k))
    problem = _head_program(300, 4, seed=10)
    h = problem.constraints.rhs
    x, _, _ = dual_active_set._dual_active_set(least_distance.KeyRows(problem), h, 4, pool=7)
    assert sizes and set(sizes) == {7}
    ref = tight_qp(rows_by_definition(problem), h, problem.constraints.equality, (4,))
    assert rel_err(x, ref) <= 1e-10
