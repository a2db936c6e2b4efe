"""Certified both ways (issue #47): a negative answer carries a Farkas certificate that
the dispatcher checked, or it is "undecided"; never a solver's status, never an
unchecked proof.  Every certificate is re-verified here from the program's own rows,
and every separability count is compared with an LP on the well-conditioned twin of
the data (``separable_rows_by_lp``, written in the test helpers from the definition):
separability does not change under ``H -> H A``, ``A`` invertible.
"""

import warnings

import numpy as np
import pytest
from helpers import partially_separable_instance, separable_rows_by_lp
from sklearn.exceptions import ConvergenceWarning

from skntp import NTPDecoderClassifier
from skntp.svm import (
    MaxMarginResult,
    NotSeparableError,
    UndecidedError,
    ntp_separability,
    ntp_svm,
    ntp_svm_problem,
    solve_max_margin,
)
from skntp.svm import solvers as solver_registry


def ill_conditioned(d, cond, rng):
    """A random ``d x d`` matrix with singular values log-spaced from 1 to ``1 / cond``."""
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return U @ np.diag(np.logspace(0, -np.log10(cond), d)) @ V.T


def random_ntp(rng, m, d, V, density=0.3):
    H = rng.standard_normal((m, d))
    S = rng.random((m, V)) < density
    S[np.arange(m), rng.integers(0, V, m)] = True
    return H, S


def reverify_farkas(problem, dual):
    """The Farkas certificate of an infeasible program, checked from its sparse rows:
    ``lam >= 0`` on inequalities, ``A^T lam`` at the rounding of ``|A|^T |lam|``,
    ``r^T lam > 0``."""
    c = problem.constraints
    A = problem.constraint_matrix()
    lam = np.asarray(dual, dtype=float)
    assert np.all(lam[~c.equality] >= 0)
    image = A.T @ lam
    scale = abs(A).T @ np.abs(lam)
    assert c.rhs @ lam > 0
    assert np.linalg.norm(image) <= 1e-10 * np.linalg.norm(scale) * (c.rhs @ lam) / (
        np.abs(c.rhs).max() * np.abs(lam).sum())


# --------------------------------------------------------------- the dispatcher


def _tiny_margin_instance():
    """Four contexts in d = 3, NTP-separable, times a matrix of condition 1e7: a
    feasible NTP-SVM of norm ~1e7 (the issue's first finding)."""
    rng = np.random.default_rng(2)
    while True:
        H0, S = random_ntp(rng, 4, 3, 4, density=0.4)
        if not S.all() and separable_rows_by_lp(H0, S)[~S].all():
            return H0 @ ill_conditioned(3, 1e7, rng), S


@pytest.mark.parametrize("method", ["cvxpy", "dcd", "accelerated-dual", "auto"])
def test_a_solver_that_calls_a_feasible_program_infeasible_is_not_believed(method):
    # Clarabel answers "infeasible" on this feasible program: a claim without a
    # certificate, so "undecided" (or a point), never NotSeparableError
    H, S = _tiny_margin_instance()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            # (the iterative methods end uncertified: 2,000 iterations are enough to show
            # that they do not call it infeasible)
            W, res = ntp_svm(H, S, method=method, return_result=True, max_iter=2000)
        except UndecidedError as exc:
            assert exc.results and all(r.status == "undecided" for r in exc.results)
            return
    if method == "auto":  # the exact least-distance method certifies it
        assert res.status == "optimal" and res.method == "graph-ldp"
        assert np.linalg.norm(W) > 1e5
        values = ntp_svm_problem(H, S).constraint_matrix() @ W.ravel()
        c = ntp_svm_problem(H, S).constraints
        assert np.all(values[~c.equality] >= 1 - 1e-6)


def test_auto_goes_on_past_an_infeasibility_claim_that_does_not_verify(monkeypatch):
    rng = np.random.default_rng(0)
    H, S = random_ntp(rng, 8, 12, 5)  # m < d: NTP-separable
    problem = ntp_svm_problem(H, S)

    def claims_infeasible(p, *args, **kwargs):
        exc = NotSeparableError("the data are not separable, says this method")
        exc.ray = np.ones(len(p.constraints))  # not a Farkas certificate
        raise exc

    monkeypatch.setitem(solver_registry.METHODS, "claims",
                        solver_registry.Method(claims_infeasible))
    monkeypatch.setitem(solver_registry.AUTO_ORDER, "decoder", ("claims", "dcd"))
    res = solve_max_margin(problem)
    assert res.status == "optimal" and res.method == "dcd"
    with pytest.raises(UndecidedError, match="'claims': the data are not separable"):
        solve_max_margin(problem, method="claims")


@pytest.mark.parametrize("method", ["auto", "cvxpy", "dcd", "accelerated-dual", "graph-ldp"])
@pytest.mark.parametrize("seed", range(3))
def test_every_infeasible_answer_carries_a_certificate_checked_here(seed, method):
    rng = np.random.default_rng(seed)
    H, S = random_ntp(rng, 30, 3, 5)  # m >> d: not NTP-separable
    assert not separable_rows_by_lp(H, S)[~S].all()
    problem = ntp_svm_problem(H, S)
    if method != "auto":  # the methods' own claims, without the program's proof
        problem.infeasibility_proof = None
    with pytest.raises(NotSeparableError, match="Certified by Farkas multipliers") as info:
        solve_max_margin(problem, method=method)
    res = info.value.result
    assert res.status == "infeasible" and res.margin_bound <= 1e-11
    reverify_farkas(problem, res.dual)


def test_merged_exchangeable_tokens_report_the_full_programs_objective_and_bound():
    rng = np.random.default_rng(3)
    H, S = random_ntp(rng, 6, 10, 4)
    S = np.hstack([S, np.zeros((6, 3), bool)])  # three tokens never next: exchangeable
    W, res = ntp_svm(H, S, return_result=True)
    assert res.objective == pytest.approx(np.linalg.norm(W), rel=1e-12)
    assert np.isfinite(res.bound) and res.bound <= res.objective * (1 + 1e-12)
    assert res.bound == pytest.approx(res.objective, rel=1e-8)


def test_an_uncertified_direction_is_never_scaled_into_coef(monkeypatch):
    rng = np.random.default_rng(1)
    H, S = random_ntp(rng, 8, 12, 5)
    X, y = np.repeat(H, S.sum(axis=1), axis=0), np.nonzero(S)[1]

    def rough(problem, tol, max_iter, be, verbose, callback=None):
        exact = solve_max_margin(problem, method="cvxpy")
        return MaxMarginResult(primal=1.1 * exact.primal, dual=exact.dual, method="rough",
                               status="max_iter")

    monkeypatch.setitem(solver_registry.METHODS, "rough", solver_registry.Method(rough))
    est = NTPDecoderClassifier(solver="svm", svm_method="rough")
    with pytest.warns(ConvergenceWarning, match="NTP-SVM: no certified answer \\(status "
                      "'max_iter'.*so it is not used"):
        est.fit(X, y)
    assert est.mm_direction_ is None and est.svm_radius_ == 0.0
    np.testing.assert_array_equal(est.coef_, est.finite_component_)


# ------------------------------------------------------- the separability diagnosis


def _instance(seed):
    """Generic random supports (some rows separable when m is close to d), or the
    partly separable construction of the helpers."""
    rng = np.random.default_rng(seed)
    if seed % 2:
        H, P = partially_separable_instance(seed)
        return H, P > 0, rng
    m, d, V = int(rng.integers(5, 30)), int(rng.integers(2, 8)), int(rng.integers(3, 7))
    H, S = random_ntp(rng, m, d, V)
    return H, S, rng


def _diagnose(seeds, conditions):
    """``(wrong, undecided, total)`` over the instances and conditions."""
    wrong, undecided, total = [], 0, 0
    for seed in seeds:
        H0, S, rng = _instance(seed)
        if S.all():
            continue
        truth = separable_rows_by_lp(H0, S)
        for cond in conditions:
            H = H0 @ ill_conditioned(H0.shape[1], cond, rng)
            total += 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "undecided" warns
                try:
                    found = ntp_separability(H, S)
                except RuntimeError:  # no linear-program solver solved it: no answer
                    undecided += 1
                    continue
            if found.status == "undecided":
                undecided += 1
            elif not np.array_equal(found.separable, truth):
                wrong.append((seed, cond, found.method, found.n_separable, int(truth.sum())))
    return wrong, undecided, total


def test_the_separable_rows_do_not_depend_on_the_conditioning_of_the_contexts():
    # the stationary-point proof took pinv(H^T H), which drops directions below 1e-8 of
    # the largest: on seed 48's contexts at condition 1e8 it proved "no row separable"
    # where 10 are; the HiGHS path failed or undercounted at 1e10
    wrong, undecided, total = _diagnose([11, 31, 48, 49, 51] + list(range(8)),
                                        [1.0, 1e4, 1e8])
    assert not wrong, wrong
    assert undecided <= 1, (undecided, total)


def test_an_undecided_split_says_so_and_the_rows_it_certified():
    rng = np.random.default_rng(48)
    H0, S = random_ntp(rng, int(rng.integers(5, 12)), int(rng.integers(2, 5)),
                       int(rng.integers(3, 6)))
    found = ntp_separability(H0, S)
    assert found.status == "certified" and found.n_undecided == 0
    assert found.certified is not None and found.certified[~S].all()


@pytest.mark.slow
def test_three_hundred_instances_up_to_condition_1e8_and_none_wrong_at_1e10():
    # the goal: no wrong count over >= 300 instances at condition up to 1e8,
    # at most 1 % undecided; at 1e10 "undecided" is allowed, a wrong count is not
    wrong, undecided, total = _diagnose(range(100, 200), [1.0, 1e4, 1e8])
    assert total >= 300 and not wrong, wrong
    assert undecided <= 0.01 * total, (undecided, total)
    wrong, _, _ = _diagnose(range(200, 240), [1e10])
    assert not wrong, wrong
