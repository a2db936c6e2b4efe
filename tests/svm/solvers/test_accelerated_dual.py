"""The accelerated dual max-margin method ('accelerated-dual') against the cvxpy reference path.

Random feasible programs of every kind (NTP-SVM, ATT-SVM, relaxed ATT-SVM,
head SVM, Graph-SVM, and a general mix) are solved by both methods; the
answers must agree (relative error <= 1e-5) and satisfy the KKT conditions.
Infeasible programs must raise NotSeparableError with the program's message.
"""

import warnings
import zlib

import numpy as np
import pytest
from helpers import (
    assert_kkt,
    rel_err,
    tight_cvxpy,
)
from sklearn.exceptions import ConvergenceWarning

from skntp.svm import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    ntp_svm_problem,
    solve_max_margin,
)
from skntp.svm.solvers.accelerated_dual import anchored_structure, solve_accelerated_dual


# --------------------------------------------------------------------------
# random programs
# --------------------------------------------------------------------------
def ntp_problem(rng, m, d, V, smax=3):
    H = rng.standard_normal((m, d))
    k = rng.integers(1, smax + 1, size=m)
    ranks = np.argsort(np.argsort(rng.random((m, V)), axis=1), axis=1)
    problem = ntp_svm_problem(H, ranks < k[:, None])
    problem.info["by_hand"] = (H, ranks < k[:, None])  # for tight_cvxpy
    return problem


def att_problem(rng, n, T, d, relaxed_frac=0.0, teacher=True):
    K = rng.standard_normal((n, T, d))
    sel = np.argmax(K @ rng.standard_normal(d), axis=1) if teacher else rng.integers(0, T, n)
    i, t = np.nonzero(np.arange(T)[None, :] != sel[:, None])
    relaxed = rng.random(n) < relaxed_frac
    if relaxed_frac < 1:  # rhs all 0 is the zero program, answered before any method
        relaxed[0] &= not relaxed.all()
    rhs = np.where(relaxed, 0.0, 1.0)[i]
    return MaxMarginProblem(
        KeyScores(K), Constraints(i, sel[i], t, rhs, np.zeros(i.size, bool)),
        name="ATT-SVM", infeasible_message="the selected tokens are not separable",
    )


def head_problem(rng, n, d, separable=True):
    R = rng.standard_normal((n, d))
    y = np.sign(R @ rng.standard_normal(d)) if separable else rng.choice([-1.0, 1.0], n)
    return MaxMarginProblem(
        KeyScores((y[:, None] * R)[:, None, :]),
        Constraints(np.arange(n), np.zeros(n), -np.ones(n), np.ones(n), np.zeros(n, bool)),
        name="head SVM", infeasible_message="the labels are not linearly separable",
    )


def graph_problem(rng, K, d, n_edges, n_eq=0):
    """Edges oriented by a teacher W0 (feasible); the first n_eq become ties.

    With fewer constraints than the d*d unknowns the equalities keep it
    feasible (generic full row rank).
    """
    E = rng.standard_normal((K, d))
    S0 = (E @ rng.standard_normal((d, d)) @ E.T).T  # S0[k, i] = e_i^T W0 e_k
    k, i, j = rng.integers(0, K, (3, n_edges))
    keep = i != j
    key = np.unique(np.stack([k, np.minimum(i, j), np.maximum(i, j)], 1)[keep], axis=0)
    k, a, b = key.T
    flip = S0[k, a] < S0[k, b]
    i, j = np.where(flip, b, a), np.where(flip, a, b)
    eq = np.arange(k.size) < n_eq
    return MaxMarginProblem(
        BilinearScores(E, E), Constraints(k, i, j, np.where(eq, 0.0, 1.0), eq),
        name="Graph-SVM", infeasible_message="the graphs are not separable",
    )


def general_problem(rng):
    """Random mixed constraints (= and >=, rhs in {0, 1}, some against 0)."""
    B, T, d = 4, 5, 12
    keys = rng.standard_normal((B, T, d))
    n = int(rng.integers(3, 10))
    b, p = rng.integers(0, B, n), rng.integers(0, T, n)
    r = (p + rng.integers(1, T, n)) % T
    r = np.where(rng.random(n) < 0.2, -1, r)
    eq = rng.random(n) < 0.3
    rhs = np.where(eq & (rng.random(n) < 0.5), 0.0, 1.0)
    return MaxMarginProblem(KeyScores(keys), Constraints(b, p, r, rhs, eq), name="mixed")


KINDS = {
    "ntp": lambda rng: ntp_problem(rng, int(rng.integers(3, 9)), 10, int(rng.integers(3, 7))),
    "ntp-onehot": lambda rng: ntp_problem(rng, 8, 10, 5, smax=1),
    "att": lambda rng: att_problem(rng, int(rng.integers(2, 12)), 4, 6),
    "att-random-selection": lambda rng: att_problem(rng, 3, 4, 12, teacher=False),
    "relaxed-att": lambda rng: att_problem(rng, 4, 4, 14, relaxed_frac=0.5, teacher=False),
    "head": lambda rng: head_problem(rng, int(rng.integers(5, 40)), 5),
    "graph": lambda rng: graph_problem(rng, 5, 3, 30, n_eq=int(rng.integers(0, 3))),
    "general": general_problem,
}


def is_feasible_reference(problem):
    try:
        with warnings.catch_warnings():
            # an uncertified answer (gap a little above tol) is expected of the reference:
            # the comparison allows for its reported gap
            warnings.simplefilter("ignore", ConvergenceWarning)
            return solve_max_margin(problem, method="cvxpy")
    except NotSeparableError:
        return None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_matches_cvxpy_and_kkt(kind, n_instances=30):
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    n_checked = n_tight = 0
    for _ in range(n_instances):
        problem = KINDS[kind](rng)
        ref = is_feasible_reference(problem)
        if ref is None:
            with pytest.raises(NotSeparableError):
                solve_max_margin(problem, method="accelerated-dual")
            continue
        # at tol=1e-10 a program of tiny margin (||w|| ~ 30) can end 1.6e-10 from a row:
        # the recomputed certificate then says so (with its ConvergenceWarning), and the
        # answer still meets 1e-9
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Graph-SVM: no answer could be certified",
                                    ConvergenceWarning)
            res = solve_max_margin(problem, method="accelerated-dual", tol=1e-10)
        assert res.method == "accelerated-dual" and res.status in ("optimal", "infeasible_point")
        assert abs(res.gap) <= 1e-10 and res.max_violation <= 1e-9
        # the core's cvxpy path, up to its own reported accuracy ...
        assert rel_err(res.primal, ref.primal) <= max(1e-5, 3 * np.sqrt(2 * abs(ref.gap)))
        # ... and the same program solved by Clarabel to tight tolerances
        tight = tight_cvxpy(problem)
        if tight is not None:
            assert rel_err(res.primal, tight) <= 1e-5
            n_tight += 1
        assert_kkt(problem, res)
        n_checked += 1
    assert n_checked >= n_instances // 2
    assert n_tight >= n_checked // 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_matches_cvxpy_many(kind):
    test_matches_cvxpy_and_kkt(kind, n_instances=300)


def test_anchored_detection():
    rng = np.random.default_rng(0)
    assert anchored_structure(ntp_problem(rng, 5, 6, 4)) is not None
    assert anchored_structure(att_problem(rng, 5, 4, 6)) is not None
    assert anchored_structure(head_problem(rng, 5, 4)) is not None
    # edges of a token-priority graph from several labels share no anchor: the
    # general path of the method, which must still reach the reference solution
    p = graph_problem(rng, 4, 3, 40)
    assert anchored_structure(p) is None
    res = solve_accelerated_dual(p, tol=1e-10)
    assert res.status == "optimal"
    ref = solve_max_margin(p, method="cvxpy")
    assert rel_err(res.primal, ref.primal) <= 1e-5
    assert_kkt(p, res)


def test_auto_uses_dcd_for_ntp_and_the_accelerated_dual_on_torch(monkeypatch):
    from skntp.svm.solvers import least_distance

    rng = np.random.default_rng(1)
    problem = ntp_problem(rng, 6, 8, 5)
    # a small program goes to the exact least-distance NNLS, a larger one to dcd
    assert solve_max_margin(problem).method == "graph-ldp"
    monkeypatch.setattr(least_distance, "LDP_MAX_ENTRIES", 0)
    assert solve_max_margin(problem).method == "dcd"
    pytest.importorskip("torch")
    from skntp._backend import get_backend
    from skntp.svm.solvers.dual_coordinate_descent import solve_dcd

    # the compiled method runs on the CPU; a torch device other than the CPU
    # goes to the array-layer method (a fake device: only its name is read)
    be = get_backend("torch")
    gpu = type(be)(be.name, be.xp, "cuda", be.dtype)
    assert solve_dcd(problem, be=gpu) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: ntp_problem(rng, 30, 4, 6),  # m >> d, random supports
        lambda rng: att_problem(rng, 30, 4, 3, teacher=False),
        lambda rng: head_problem(rng, 40, 3, separable=False),
        # contradictory edges i => j and j => i in the same graph
        lambda rng: MaxMarginProblem(
            BilinearScores(rng.standard_normal((3, 3)), rng.standard_normal((4, 3))),
            Constraints([0, 0, 1], [1, 2, 0], [2, 1, 3], [1.0, 1.0, 1.0], [False] * 3),
            name="Graph-SVM", infeasible_message="the graphs are not separable"),
        # a tie and a strict priority between the same tokens
        lambda rng: MaxMarginProblem(
            BilinearScores(rng.standard_normal((2, 3)), rng.standard_normal((4, 3))),
            Constraints([0, 0], [1, 1], [2, 2], [0.0, 1.0], [True, False]),
            name="Graph-SVM", infeasible_message="the graphs are not separable"),
    ],
)
def test_infeasible_raises(make):
    rng = np.random.default_rng(3)
    problem = make(rng)
    with pytest.raises(NotSeparableError) as cv:
        solve_max_margin(problem, method="cvxpy")
    with pytest.raises(NotSeparableError) as fast:
        solve_max_margin(problem, method="accelerated-dual")
    msg = str(fast.value)
    assert msg.startswith(f"{problem.name} is infeasible")
    assert problem.infeasible_message in msg and problem.infeasible_message in str(cv.value)


def test_nonconvergence_warns():
    rng = np.random.default_rng(2)
    problem = ntp_problem(rng, 20, 25, 8)
    with pytest.warns(ConvergenceWarning, match="relative duality gap"):
        res = solve_max_margin(problem, method="accelerated-dual", max_iter=3, tol=1e-14)
    assert res.status == "max_iter" and res.n_iter == 3
    assert res.gap > 1e-14 or res.max_violation > 1e-14


def test_trivial_zero_solution():
    rng = np.random.default_rng(4)
    p = att_problem(rng, 3, 3, 8, relaxed_frac=1.0)  # all rhs = 0: w* = 0
    res = solve_max_margin(p, method="accelerated-dual")
    assert np.all(res.primal == 0) and res.status == "optimal"


def test_onehot_matches_linearsvc_crammer_singer():
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(5)
    m, d, V = 60, 8, 4
    H = rng.standard_normal((m, d))
    y = np.argmax(H @ rng.standard_normal((V, d)).T, axis=1)
    res = solve_max_margin(ntp_svm_problem(H, np.eye(V, dtype=bool)[y]), method="accelerated-dual")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc = LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6,
                        tol=1e-10, max_iter=200_000, random_state=0).fit(H, y)
    W = svc.coef_
    cos = np.sum(W * res.primal) / np.linalg.norm(W) / np.linalg.norm(res.primal)
    assert cos > 1 - 1e-6


def test_torch_backend_same_answer():
    pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    for problem in (ntp_problem(rng, 6, 8, 5), graph_problem(rng, 5, 4, 10, n_eq=1),
                    head_problem(rng, 20, 4)):
        a = solve_max_margin(problem, method="accelerated-dual", tol=1e-10)
        b = solve_max_margin(problem, method="accelerated-dual", tol=1e-10, backend="torch")
        assert isinstance(b.primal, np.ndarray)
        assert rel_err(b.primal, a.primal) <= 1e-8


# --------------------------------------------------------------------------
# the working-set outer loop and the exact projection
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_working_set_matches_whole_program(seed):
    """Rounds of restricted solves end at the whole program's optimum."""
    from skntp._backend import get_backend
    from skntp.svm.solvers.accelerated_dual import _solve_working_set

    rng = np.random.default_rng(100 + seed)
    m, d, V = int(rng.integers(10, 40)), int(rng.integers(4, 30)), int(rng.integers(8, 30))
    problem = ntp_problem(rng, m, d, V, smax=int(rng.integers(1, 4)))
    ref = is_feasible_reference(problem)
    st = anchored_structure(problem)
    be = get_backend("numpy")
    if ref is None:
        with pytest.raises(NotSeparableError):
            _solve_working_set(problem, st, be, 1e-10, 100_000, 0, 10, True, initial=1, add=1)
        return
    res = _solve_working_set(problem, st, be, 1e-10, 100_000, 0, 10, True, initial=1, add=1)
    whole = solve_accelerated_dual(problem, tol=1e-10, working_set=False)
    assert res.status == "optimal" and res.max_violation <= 1e-9
    assert rel_err(res.primal, whole.primal) <= 1e-6
    assert rel_err(res.primal, ref.primal) <= max(1e-5, 3 * np.sqrt(2 * abs(ref.gap)))
    assert rel_err(res.primal, tight_cvxpy(problem)) <= 1e-5  # (4a)-(4b) from H, S
    assert res.dual.shape == (len(problem.constraints),)
    assert_kkt(problem, res)


def test_working_set_default_rounds_match_cvxpy():
    rng = np.random.default_rng(7)
    problem = ntp_problem(rng, 30, 40, 80)
    res = solve_accelerated_dual(problem, tol=1e-10, working_set=True)
    assert res.status == "optimal"
    assert_kkt(problem, res)
    tight = tight_cvxpy(problem)
    if tight is not None:
        assert rel_err(res.primal, tight) <= 1e-5


def partial_table_problem(rng, B, T):
    """Anchored blocks constraining a random subset of the positions only."""
    blk, ref = [], []
    for b in range(B):
        others = rng.choice(np.arange(1, T), size=int(rng.integers(1, T - 1)), replace=False)
        blk += [b] * len(others)
        ref += list(others)
    blk, ref = np.array(blk), np.array(ref)
    return MaxMarginProblem(
        BilinearScores(rng.standard_normal((B, 4)), None, n_outputs=T),
        Constraints(blk, np.zeros_like(blk), ref, np.ones(blk.size), np.zeros(blk.size, bool)))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("dense_passes_above", [0.0, 1.0])
def test_table_projection_is_exact(seed, partial, dense_passes_above, monkeypatch):
    """The row projection (cold, then warm-started from the last roots)
    against a brute-force bisection; tables with every position constrained
    and with some positions unconstrained (fixed at 0)."""
    from skntp._backend import get_backend
    from skntp.svm.solvers.accelerated_dual import _TableSpace

    rng = np.random.default_rng(8 + seed)
    problem = partial_table_problem(rng, 40, 12) if partial else ntp_problem(rng, 40, 5, 12)
    monkeypatch.setattr(_TableSpace, "dense_passes_above", dense_passes_above)
    space = _TableSpace(problem, get_backend("numpy"), anchored_structure(problem))
    assert space.all_allowed != partial
    allowed = space.free | space.neg
    u0 = rng.standard_normal((40, 12)) * 3
    # a small step keeps most roots valid warm starts, a big one invalidates them
    for u in (u0, u0 + 0.1 * rng.standard_normal(u0.shape),
              u0 + 5 * rng.standard_normal(u0.shape)):
        x = space.project(u)
        assert np.allclose(x.sum(axis=1), 0.0, atol=1e-12)
        assert np.all(x[space.neg] <= 0) and np.all(x[~allowed] == 0)
        for b in range(40):
            lo, hi = -100.0, 100.0
            for _ in range(200):  # f(theta) decreasing: bisection on the root
                th = 0.5 * (lo + hi)
                v = np.where(space.neg[b], np.minimum(u[b] - th, 0), u[b] - th)[allowed[b]]
                lo, hi = (th, hi) if v.sum() > 0 else (lo, th)
            v = np.where(space.neg[b], np.minimum(u[b] - lo, 0), u[b] - lo) * allowed[b]
            np.testing.assert_allclose(x[b], v, atol=1e-10)


def test_working_set_torch_backend_same_answer():
    pytest.importorskip("torch")
    from skntp._backend import get_backend

    rng = np.random.default_rng(9)
    problem = ntp_problem(rng, 12, 16, 20)
    a = solve_accelerated_dual(problem, tol=1e-10, working_set=True)
    b = solve_accelerated_dual(problem, tol=1e-10, working_set=True, be=get_backend("torch"))
    assert a.status == b.status == "optimal"
    assert rel_err(np.asarray(b.primal.cpu()), np.asarray(a.primal)) <= 1e-8
