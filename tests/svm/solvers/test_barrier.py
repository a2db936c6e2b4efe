"""The barrier methods (``svm/solvers/barrier.py``) checked value by value.

(The survivors of a mutation run, ``docs/mutation.md``, chose the values.)  Each test
checks a documented value by hand: the ridges of the Newton solve, the barrier
objectives ``F_mu`` and their derivatives written from the formulas of the module
docstring, the certificate's violation, the schedule of ``mu`` and the counts the
method reports (verbose lines, callback, ``n_iter``), the budget of Newton steps,
what is returned when no Newton step can be taken, the rank decision that
eliminates the equalities, programs in closed form (one constraint, by Hoelder; a
nonzero equality rhs), the stopping rules on scripted certificates, the size limits,
and a start on the boundary, declined.
"""

import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
from helpers import att_instance, key_problem, kq_instance
from sklearn.exceptions import ConvergenceWarning

import skntp.svm.solvers.barrier as barrier
from skntp._backend import get_backend
from skntp.svm import (
    _problem,
    att_svm_problem,
    att_svm_w_problem,
    ntp_svm_problem,
    solve_max_margin,
)
from skntp.svm._problem import KeyScores
from skntp.svm._solve import frobenius_solution

LINE = re.compile(r"^(pnorm|spectral)-barrier\s+(\d+): mu (\S+) newton (\d+) gap (\S+) "
                  r"violation (\S+)$")


def _att(seed=0, k=6, p=3.0):
    K, sel = att_instance(seed, k=k)
    return att_svm_problem(K, sel, norm=("lp", p))


def _kq(seed=0):
    return att_svm_w_problem(*kq_instance(seed), norm="spectral")


def _ntp(p=3.0):
    from helpers import ntp_instance

    H, S = ntp_instance(0)
    return ntp_svm_problem(H, S, norm=("lp", p))


def _linear(A, r, equality=None, norm=("lp", 3.0)):
    """``A w >= r`` (``= r`` where ``equality``), one key-score block per row."""
    A = np.asarray(A, dtype=float)
    m = A.shape[0]
    eq = np.zeros(m, dtype=bool) if equality is None else np.asarray(equality, dtype=bool)
    problem = key_problem(A[:, None, :], np.arange(m), np.zeros(m), -np.ones(m), r, eq)
    return replace(problem, norm=norm)


def _dense(problem):
    A = problem.constraint_matrix().toarray()
    c = problem.constraints
    return A, c.rhs, c.equality


def _fro_start(problem):
    """Twice the Frobenius solution: the start of programs without equalities."""
    scores = problem.scores
    if len(problem.shape) == 2:  # the key-query program: the lifted Frobenius one
        scores = KeyScores(scores.lifted())
    return 2.0 * np.ravel(solve_max_margin(replace(problem, scores=scores, norm="fro")).primal)


# --------------------------------------------------------------------------
# the Newton solve and its ridges
# --------------------------------------------------------------------------
G = np.array([1.0, -2.0])


@pytest.mark.parametrize("s", [1e-3, 1.0, 1e6])
def test_newton_direction_of_a_singular_hessian_takes_the_first_ridge(s):
    # Cholesky fails on diag(s, 0); the first ridge is 1e-14 times the largest |H_ii|
    d = barrier._newton_direction(G, np.diag([s, 0.0]))
    np.testing.assert_allclose(d, -G / np.array([s + 1e-14 * s, 1e-14 * s]), rtol=1e-12)


def test_newton_direction_of_a_zero_hessian_takes_the_ridge_1e14():
    np.testing.assert_allclose(barrier._newton_direction(G, np.zeros((2, 2))), -G / 1e-14,
                               rtol=1e-12)


def test_newton_direction_ridge_grows_by_100_up_to_1e6():
    # -1e-9: the ridges 1e-14, 1e-12, 1e-10 fail, 1e-8 is the first that works
    d = barrier._newton_direction(G, np.diag([1.0, -1e-9]))
    np.testing.assert_allclose(d, -G / np.array([1.0 + 1e-8, -1e-9 + 1e-8]), rtol=1e-9)
    # -1e-7: the sixth and last try, ridge 1e-6
    d = barrier._newton_direction(G, np.diag([1.0, -1e-7]))
    np.testing.assert_allclose(d, -G / np.array([1.0 + 1e-6, -1e-7 + 1e-6]), rtol=1e-9)
    # -1e-5: no ridge up to 1e-6 makes it positive definite
    assert barrier._newton_direction(G, np.diag([1.0, -1e-5])) is None


# --------------------------------------------------------------------------
# the barrier objectives and their derivatives, from the module's formulas
# --------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1.5, 3.0])
@pytest.mark.parametrize("top", [0.5, 4.0])
def test_pnorm_derivatives_by_hand(p, top):
    problem = _att(p=p)
    A, r, _ = _dense(problem)
    prog = barrier._Program(problem)
    model = barrier._PNorm(prog, p)
    rng = np.random.default_rng(1)
    w = rng.standard_normal(A.shape[1])
    w *= top / np.abs(w).max()
    w[0], w[1] = 0.0, 1e-15 * top  # below the floor 1e-12 max |w_i|
    mu = 0.37
    s = A @ w - r
    g, H = model.derivatives(w, w, mu)
    floor = 1e-12 * top
    curv = (p - 1.0) * np.maximum(np.abs(w), floor) ** (p - 2.0)
    np.testing.assert_allclose(g, np.sign(w) * np.abs(w) ** (p - 1.0) - A.T @ (mu / s),
                               rtol=1e-12, atol=1e-12 * np.abs(g).max())
    np.testing.assert_allclose(H, A.T @ np.diag(mu / s**2) @ A + np.diag(curv), rtol=1e-10,
                               atol=1e-12 * np.abs(H).max())
    # at w = 0 the floor is 1e-300 (mu = 0: the curvature of the norm part alone)
    _, H0 = model.derivatives(np.zeros_like(w), w, 0.0)
    np.testing.assert_allclose(H0, np.eye(len(w)) * (p - 1.0) * 1e-300 ** (p - 2.0),
                               rtol=1e-12, atol=0.0)


def test_pnorm_value_by_hand():
    p = 3.0
    problem = _att(p=p)
    A, r, _ = _dense(problem)
    model = barrier._PNorm(barrier._Program(problem), p)
    w = _fro_start(problem)
    s = A @ w - r
    assert s.min() > 0
    mu = 0.25
    assert model.value(w, w, mu) == pytest.approx(
        np.sum(np.abs(w) ** p) / p - mu * np.sum(np.log(s)), rel=1e-13)
    assert model.value(0.25 * w, w, mu) == np.inf  # w_fro / 2: slack -1/2 on tight rows
    assert model.value(np.zeros_like(w), w, mu) == np.inf  # slacks -1 < 0


def test_spectral_value_by_hand():
    problem = _kq()
    A, r, _ = _dense(problem)
    P, Q = problem.shape
    model = barrier._Spectral(barrier._Program(problem), problem.shape)
    w = _fro_start(problem)
    W = w.reshape(P, Q)
    mu = 0.3
    for t in (1.2 * np.linalg.norm(W, 2), 3.0 * np.linalg.norm(W, 2)):
        S = np.block([[t * np.eye(P), W], [W.T, t * np.eye(Q)]])
        sign, logdet = np.linalg.slogdet(S)
        assert sign > 0
        ref = t - mu * logdet - mu * np.sum(np.log(A @ w - r))
        assert model.value(w, np.r_[t, w], mu) == pytest.approx(ref, rel=1e-12)
    # t below ||W||_2: S is not positive definite
    assert model.value(w, np.r_[0.9 * np.linalg.norm(W, 2), w], mu) == np.inf


def test_certificate_violation_counts_both_sides_of_equalities():
    problem = _ntp()
    A, r, eq = _dense(problem)
    assert eq.any() and (~eq).any()
    prog = barrier._Program(problem)
    model = barrier._PNorm(prog, 3.0)
    rng = np.random.default_rng(2)
    for _ in range(5):
        w = rng.standard_normal(A.shape[1])
        vals = A @ w - r
        ref = max(np.abs(vals[eq]).max(), np.maximum(-vals[~eq], 0.0).max())
        _, _, _, viol = barrier._certificate(problem, prog, model, w, w, 0.1)
        assert viol == pytest.approx(ref, rel=1e-12)
    # an equality exceeded (or short) with every inequality satisfied
    problem = _linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [1.0, 1.0], equality=[1, 0])
    prog = barrier._Program(problem)
    model = barrier._PNorm(prog, 3.0)
    for w, ref in [([1.5, 2.0, 0.0], 0.5), ([0.7, 2.0, 0.0], 0.3), ([1.0, 0.8, 0.0], 0.2)]:
        viol = barrier._certificate(problem, prog, model, np.array(w), None, 0.1)[3]
        assert viol == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------
# the path: verbose lines, callback, n_iter, the schedule of mu
# --------------------------------------------------------------------------
def _run(problem, method, monkeypatch, capsys, **kwargs):
    calls = []
    real = barrier._newton_direction

    def counted(g, H):
        calls.append(1)
        return real(g, H)

    monkeypatch.setattr(barrier, "_newton_direction", counted)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = solve_max_margin(problem, method=method, verbose=1,
                               callback=lambda *a: seen.append(a), **kwargs)
    lines = [LINE.match(s) for s in capsys.readouterr().out.splitlines()]
    lines = [m for m in lines if m]
    return res, seen, lines, len(calls)


def _check_report(res, seen, lines, n_calls):
    # one line and one callback per centering, and the final callback of solve_max_margin
    assert len(seen) == len(lines) + 1 and len(lines) >= 2
    assert seen[-1] == (res.n_iter, res.gap, res.max_violation)
    assert [int(m[2]) for m in lines] == list(range(1, len(lines) + 1))
    newton = [s[0] for s in seen[:-1]]
    assert [int(m[4]) for m in lines] == newton
    assert all(isinstance(k, int) for k in newton) and np.all(np.diff(newton) > 0)
    assert res.n_iter == newton[-1] == n_calls
    assert [m[5] for m in lines] == [f"{s[1]:.2e}" for s in seen[:-1]]
    assert [m[6] for m in lines] == [f"{s[2]:.1e}" for s in seen[:-1]]
    # the best centering's answer, its gap recomputed by solve_max_margin's certificate
    assert res.gap == pytest.approx(min(s[1] for s in seen[:-1]), rel=1e-5)


def _check_mu(lines, mu0):
    mus = [float(m[3]) for m in lines]
    np.testing.assert_allclose(mus, mu0 / 10.0 ** np.arange(len(mus)), rtol=6e-3)


def test_pnorm_barrier_reports_each_centering(monkeypatch, capsys):
    p = 3.0
    problem = _att(p=p)
    res, seen, lines, n_calls = _run(problem, "pnorm-barrier", monkeypatch, capsys)
    assert res.status == "optimal" and {m[1] for m in lines} == {"pnorm"}
    _check_report(res, seen, lines, n_calls)
    w0 = _fro_start(problem)
    # mu starts at f(w0) / m: the objective per constraint at the start
    _check_mu(lines, np.sum(np.abs(w0) ** p) / p / len(problem.constraints))


def test_spectral_barrier_reports_each_centering(monkeypatch, capsys):
    problem = _kq()
    res, seen, lines, n_calls = _run(problem, "spectral-barrier", monkeypatch, capsys)
    assert {m[1] for m in lines} == {"spectral"}
    _check_report(res, seen, lines, n_calls)
    P, Q = problem.shape
    t0 = 1.5 * np.linalg.norm(_fro_start(problem).reshape(P, Q), 2)
    # mu starts at t0 / (P + Q + m): t0 = 1.5 ||W0||_2 over the barrier's weight
    _check_mu(lines, t0 / (P + Q + len(problem.constraints)))


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_one_constraint_in_closed_form(p, monkeypatch, capsys):
    # min ||w||_p s.t. a.w >= 1: w = sign(a) |a|^(q-1) / ||a||_q^q (Hoelder)
    a = np.array([0.5, -1.5, 2.0])
    q = p / (p - 1.0)
    problem = _linear(a[None, :], [1.0], norm=("lp", p))
    res, seen, lines, n_calls = _run(problem, "pnorm-barrier", monkeypatch, capsys)
    ref = np.sign(a) * np.abs(a) ** (q - 1.0) / np.sum(np.abs(a) ** q)
    np.testing.assert_allclose(res.primal, ref, rtol=1e-7)
    _check_report(res, seen, lines, n_calls)
    w0 = 2.0 * a / (a @ a)  # twice the Frobenius solution
    _check_mu(lines, np.sum(np.abs(w0) ** p) / p)  # one constraint: f(w0) / 1


@pytest.mark.parametrize("method,problem", [("pnorm-barrier", _att), ("spectral-barrier", _kq)])
def test_max_iter_is_the_number_of_newton_steps(method, problem, monkeypatch, capsys):
    problem = problem()
    with pytest.warns(ConvergenceWarning, match="certified relative duality gap"):
        res = solve_max_margin(problem, method=method, max_iter=3)
    assert res.n_iter == 3 and res.status == "max_iter" and res.gap > 1e-8
    res, seen, lines, n_calls = _run(problem, method, monkeypatch, capsys, max_iter=5)
    assert res.n_iter == n_calls == 5 and seen[-2][0] == 5


@pytest.mark.parametrize("patch", [
    (barrier, "_newton_direction", lambda g, H: None),
    (barrier._PNorm, "value", lambda self, w, x, mu: np.inf),
], ids=["singular", "no-decrease"])
def test_no_newton_step_keeps_the_start(patch, monkeypatch):
    """A Newton system that cannot be solved, or no step that decreases ``F_mu``:
    the point stays the start, and the method returns its certificate (warned,
    ``status="max_iter"``)."""
    problem = _att()
    w0 = _fro_start(problem)
    monkeypatch.setattr(*patch)
    seen = []
    with pytest.warns(ConvergenceWarning):
        res = solve_max_margin(problem, method="pnorm-barrier",
                               callback=lambda *a: seen.append(a))
    np.testing.assert_array_equal(res.primal, w0)
    # one Newton attempt per centering; the certificate does not change (to
    # roundoff), so the method stops after two centerings without improvement
    n = res.n_iter
    assert res.status == "max_iter" and 3 <= n <= 5
    assert [s[0] for s in seen] == list(range(1, n + 1)) + [n]
    np.testing.assert_allclose([s[1] for s in seen], seen[0][1], rtol=1e-12)


# --------------------------------------------------------------------------
# equalities: the rank that eliminates them, and a fully determined program
# --------------------------------------------------------------------------
@pytest.mark.parametrize("tiny,rank", [(1e-14, 2), (1e-11, 3)])
def test_equality_rank_is_numpys_default(tiny, rank):
    # rank of A_E: singular values above max(shape) eps sv_max (numpy's matrix_rank)
    A_E = np.diag([1e3, 1.0, tiny, 0.0])[:3]
    assert np.linalg.matrix_rank(A_E) == rank
    A = np.vstack([A_E, [[1.0, 1.0, 1.0, 1.0]]])
    problem = _linear(A, [1.0, 1.0, 0.0, 1.0], equality=[1, 1, 1, 0])
    prog = barrier._Program(problem)
    assert prog.N.shape == (4, 4 - rank)
    np.testing.assert_allclose(A_E[:rank] @ prog.N, 0.0, atol=1e-15)


def test_equalities_that_fix_w_give_their_solution():
    # three equalities fix w; the inequality holds strictly there
    A = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 0.0, 4.0], [1.0, 1.0, 1.0]])
    r = np.array([1.0, 1.0, 2.0, 0.5])
    problem = _linear(A, r, equality=[1, 1, 1, 0])
    res = solve_max_margin(problem, method="pnorm-barrier")
    np.testing.assert_allclose(res.primal, [1.0, 0.5, 0.25], rtol=1e-12)
    assert res.status == "optimal" and res.max_violation <= 1e-12


def test_nonzero_equality_rhs_with_a_tight_inequality_is_solved():
    # the Frobenius solution (1/3, 1/3, 2/3) makes the second row tight; the start
    # A_E^+ r_E + 2 v is strictly feasible (a program no builder makes: theirs have
    # r_E = 0).  The 3-norm solution: w1 + w3 = 1 = w2 + w3 with w1 = w2 = a minimizes
    # 2 a^3 + (1 - a)^3, so a = 1 / (1 + sqrt 2)
    A = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, -1.0, 0.5]])
    r = np.array([1.0, 1.0, -2.0])
    problem = _linear(A, r, equality=[1, 0, 0], norm=("lp", 3.0))
    w_fro = solve_max_margin(replace(problem, norm="fro")).primal
    np.testing.assert_allclose(w_fro, [1 / 3, 1 / 3, 2 / 3], rtol=1e-12)
    res = solve_max_margin(problem, method="pnorm-barrier")
    a = np.sqrt(2.0) - 1.0
    assert res.status == "optimal" and res.max_violation <= 1e-9
    np.testing.assert_allclose(res.primal, [a, a, 1.0 - a], rtol=1e-7)


# --------------------------------------------------------------------------
# the stopping rules, on scripted certificates
# --------------------------------------------------------------------------
def _scripted(monkeypatch, gaps, viols=None):
    """Replace each centering's certified gap (and violation) by the next scripted one."""
    gaps, viols = list(gaps), list(viols if viols is not None else [0.0] * len(gaps))
    real, k = barrier._certificate, [0]

    def certificate(*args):
        W, y, _, _ = real(*args)
        i = min(k[0], len(gaps) - 1)
        k[0] += 1
        return W, y, gaps[i], viols[i]

    monkeypatch.setattr(barrier, "_certificate", certificate)
    return k


def _method(problem, tol=1e-8, max_iter=100_000, callback=None):
    """The barrier method itself, with its own figures (``solve_max_margin`` replaces
    them by the certificate it recomputes from the program)."""
    return barrier.solve_pnorm(problem, tol, max_iter, get_backend("numpy"), 0, callback,
                               frobenius=frobenius_solution)


def _scripted_run(problem, **kwargs):
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = _method(problem, callback=lambda *a: seen.append(a), **kwargs)
    return res, seen


def test_stops_after_two_centerings_without_a_lower_gap(monkeypatch):
    problem = _att()
    # best 0.4 at centering 2; a tie and a higher gap do not lower it: 4 centerings
    k = _scripted(monkeypatch, [0.5, 0.4, 0.4, 0.45, 0.1])
    with pytest.warns(ConvergenceWarning, match="4.00e-01"):
        res = _method(problem)
    assert k[0] == 4 and res.gap == 0.4 and res.status == "max_iter"
    # a lower gap resets the count
    k = _scripted(monkeypatch, [0.5, 0.6, 0.4, 0.45, 0.45, 0.1])
    with pytest.warns(ConvergenceWarning, match="4.00e-01"):
        res = _method(problem)
    assert k[0] == 5 and res.gap == 0.4


def test_optimal_at_the_tolerances(monkeypatch):
    problem = _att()
    tol = 1e-10
    # gap = tol and violation = max(tol, 1e-9): optimal, no warning
    k = _scripted(monkeypatch, [0.5, tol], [0.0, 1e-9])
    res, _ = _scripted_run(problem, tol=tol)
    assert k[0] == 2 and res.status == "optimal" and res.gap == tol
    # a gap at tol with a larger violation goes on
    # a gap at tol with a larger violation goes on; it is not certified ("max_iter"),
    # though its gap needs no warning
    k = _scripted(monkeypatch, [0.5, tol, tol, tol], [0.0, 2e-9, 2e-9, 2e-9])
    res, _ = _scripted_run(problem, tol=tol)
    assert k[0] == 4 and res.status == "max_iter" and res.gap == tol
    assert res.max_violation == 2e-9
    # a large tol accepts a violation up to tol
    k = _scripted(monkeypatch, [0.5, 0.3, 0.2], [0.0, 1e-6, 1e-6])
    res, _ = _scripted_run(problem, tol=0.25)
    assert k[0] == 3 and res.status == "optimal" and res.gap == 0.2


def test_stops_when_mu_falls_below_1e30(monkeypatch):
    problem = _att(p=3.0)
    w0 = _fro_start(problem)
    mu, expected = np.sum(np.abs(w0) ** 3) / 3 / len(problem.constraints), 0
    while True:
        expected += 1
        mu /= 10.0
        if mu < 1e-30:
            break
    # a zero Newton direction ends each centering at once (decrement 0)
    monkeypatch.setattr(barrier, "_newton_direction", lambda g, H: np.zeros_like(g))
    k = _scripted(monkeypatch, 1.0 - 1e-3 * np.arange(1, 100))  # always lower, never tol
    with pytest.warns(ConvergenceWarning):
        res = _method(problem, tol=0.0)
    assert k[0] == expected == res.n_iter and res.status == "max_iter"
    assert res.gap == pytest.approx(1.0 - 1e-3 * expected)


def test_newton_steps_per_centering_and_in_all(monkeypatch):
    # tol = 0 and ever lower gaps: near the precision of float64 a centering takes
    # its 50 Newton steps, and the method stops after 600 in all
    problem = _att(p=3.0)
    _scripted(monkeypatch, 1.0 - 1e-3 * np.arange(1, 100))
    seen = []
    with pytest.warns(ConvergenceWarning):
        res = solve_max_margin(problem, method="pnorm-barrier", tol=0.0,
                               callback=lambda *a: seen.append(a))
    steps = np.diff([0] + [s[0] for s in seen[:-1]])
    assert res.n_iter == 600 and steps.max() == 50 and (steps == 50).sum() >= 5
    for max_iter, n_iter in [(700, 600), (120, 120)]:
        with pytest.warns(ConvergenceWarning):
            res = solve_max_margin(problem, method="pnorm-barrier", tol=0.0,
                                   max_iter=max_iter)
        assert res.n_iter == n_iter


# --------------------------------------------------------------------------
# the size limits
# --------------------------------------------------------------------------
def test_max_variables_is_the_largest_parameter_taken(monkeypatch):
    problem = _att(k=6)
    monkeypatch.setattr(barrier, "MAX_VARIABLES", 6)
    assert solve_max_margin(problem, method="pnorm-barrier").method == "pnorm-barrier"
    monkeypatch.setattr(barrier, "MAX_VARIABLES", 5)
    with pytest.raises(ValueError, match="no max-margin method accepts"):
        solve_max_margin(problem, method="pnorm-barrier")
    assert solve_max_margin(problem).method == "cvxpy"  # auto: the next method


def test_program_too_large_names_the_program_and_its_memory(monkeypatch):
    from skntp.svm import ProgramTooLargeError

    problem = _att(k=6)
    m, n = len(problem.constraints), 6
    monkeypatch.setattr(_problem, "available_memory", lambda: 100.0)
    with pytest.raises(ProgramTooLargeError) as err:
        solve_max_margin(problem, method="pnorm-barrier")
    msg = str(err.value)
    assert msg.startswith(f"{problem.name}: the program has {m} constraints")
    assert f"needs about {m * 16 * n / 2**30:.3g} GiB" in msg
    assert msg.endswith("the barrier method forms dense n x n systems; use method='cvxpy'.")


def test_a_start_on_the_boundary_is_declined():
    # a relaxed input (rhs 0) whose two tokens have the same key: its row is zero and
    # tight at every w, so no start is strictly feasible; "auto" goes on to cvxpy,
    # whose answer is that of the program without the input
    rng = np.random.default_rng(4)
    K = rng.standard_normal((6, 2, 5))
    sel = np.argmax(K @ rng.standard_normal(5), axis=1)
    K[1, 1 - sel[1]] = K[1, sel[1]]
    relaxed = np.arange(6) == 1
    problem = att_svm_problem(K, sel, relaxed, norm=("lp", 3.0))
    with pytest.raises(ValueError, match="no max-margin method accepts"):
        solve_max_margin(problem, method="pnorm-barrier")
    res = solve_max_margin(problem)
    assert res.method == "cvxpy"
    keep = np.arange(6) != 1
    ref = solve_max_margin(att_svm_problem(K[keep], sel[keep], norm=("lp", 3.0)),
                           method="pnorm-barrier")
    # Clarabel's power cones: the norm to 1e-6, the point to about 1e-5
    norm3 = np.sum(np.abs(ref.primal) ** 3) ** (1 / 3)
    assert np.sum(np.abs(res.primal) ** 3) ** (1 / 3) == pytest.approx(norm3, rel=1e-6)
    np.testing.assert_allclose(res.primal, ref.primal, atol=1e-4 * np.abs(ref.primal).max())
