"""NTP limits on data that are not NTP-separable (``d < m``): the separable rows,
``W^mm_I`` and ``W_fin``, against programs written here and against the
regularization path of the loss (the theorem's measured form)."""

import warnings

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import (
    finite_side_rows,
    partially_separable_instance,
    projector_onto_rows,
    python_text_40,
    regularized_ntp_fit,
    separable_rows_by_lp,
)
from sklearn.exceptions import ConvergenceWarning

from skntp.svm import (
    NotSeparableError,
    NTPSeparability,
    ProgramTooLargeError,
    complete_stationary_split,
    finite_component,
    no_row_is_separable,
    ntp_separability,
    ntp_svm,
    partial_finite_component,
    partial_ntp_svm_problem,
    solve_max_margin,
    spanning_proof,
    stationary_separability,
)
from skntp.svm._ntp import positively_spans


def _partial_svm_by_hand(H, S, separable):
    """``min ||W||^2`` s.t. equal logits on supports, ``>= 1`` on ``I``, ``= 0`` on ``N``."""
    m, d = H.shape
    W = cp.Variable((S.shape[1], d))
    L = H @ W.T
    cons = []
    for j in range(m):
        z = np.flatnonzero(S[j])[0]
        for v in range(S.shape[1]):
            if v == z:
                continue
            gap = L[j, z] - L[j, v]
            cons.append(gap >= 1 if separable[j, v] else gap == 0)
    cp.Problem(cp.Minimize(cp.sum_squares(W)), cons).solve(solver=cp.CLARABEL)
    return W.value


def _finite_by_hand(H, P, separable):
    """A minimizer of the loss with the separable tokens dropped from each softmax."""
    m, d = H.shape
    W = cp.Variable((P.shape[1], d))
    L = H @ W.T
    if not separable.any():  # one atom for all contexts: cvxpy compiles it in 1/3 the time
        loss = cp.sum(cp.log_sum_exp(L, axis=1)) - cp.sum(cp.multiply(P, L))
    else:
        loss = cp.sum(cp.hstack([cp.log_sum_exp(L[j, np.flatnonzero(~separable[j])])
                                 - P[j] @ L[j] for j in range(m)]))
    cp.Problem(cp.Minimize(loss / m)).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return W.value


@pytest.mark.parametrize("seed", range(3))
def test_the_separable_rows_are_those_of_the_lp_of_their_definition(seed):
    H, P = partially_separable_instance(seed)
    S = P > 0
    found = ntp_separability(H, P)
    assert found.method == "highs" and H.shape[0] > H.shape[1]
    np.testing.assert_array_equal(found.separable, separable_rows_by_lp(H, S))
    assert 0 < found.fraction < 1 and not found.is_separable
    # the program's point is in the recession cone and positive on I
    L = H @ found.direction.T
    anchor = L[np.arange(len(H)), S.argmax(axis=1)]
    gaps = anchor[:, None] - L
    assert np.all(np.abs(np.where(S, gaps, 0)) < 1e-7)
    assert np.all(gaps[found.separable] > 0.5) and np.all(gaps[~S] > -1e-7)
    # group A's contexts (on their own coordinates) are wholly separable
    assert found.separable_contexts[:3].all() and not found.separable_contexts[3:].all()


def test_random_supports_on_few_dimensions_have_no_separable_row():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((40, 4))
    S = np.zeros((40, 5), bool)
    S[np.arange(40), rng.integers(0, 5, 40)] = True
    found = ntp_separability(H, S)
    np.testing.assert_array_equal(found.separable, separable_rows_by_lp(H, S))
    assert found.n_separable == 0 and found.fraction == 0.0
    assert found.method == "positive spanning"
    assert no_row_is_separable(H, S)


@pytest.mark.parametrize("seed", range(6))
def test_the_stationary_point_proof_never_claims_a_separable_row(seed):
    rng = np.random.default_rng(seed)
    if seed % 2:  # partly separable: no proof
        H, P = partially_separable_instance(seed)
        S = P > 0
    else:  # random supports on few dimensions
        m, d, V = int(rng.integers(10, 30)), int(rng.integers(2, 5)), int(rng.integers(3, 6))
        H = rng.standard_normal((m, d))
        S = rng.random((m, V)) < 0.3
        S[np.arange(m), rng.integers(0, V, m)] = True
    by_lp = separable_rows_by_lp(H, S)
    assert no_row_is_separable(H, S) == (not by_lp.any())
    assert spanning_proof(H, S) == (not by_lp.any())
    assert ntp_separability(H, S).method == ("highs" if by_lp.any() else "positive spanning")


def _on_circle(degrees):
    angles = np.radians(degrees)
    return np.column_stack([np.cos(angles), np.sin(angles)])


def test_the_spanning_proof_merges_tokens_whose_contexts_interleave():
    # token 0 after contexts at 30 and 150 degrees, token 1 at 90 and 270, token 2
    # never next: w_0 - w_1 is >= 0 at 30, 150 and <= 0 at 90, 270, hence zero
    H = _on_circle([30, 150, 90, 270])
    S = np.zeros((4, 3), bool)
    S[[0, 1], 0] = S[[2, 3], 1] = True
    assert not positively_spans(H[S[:, 0]]) and not positively_spans(H[S[:, 1]])
    assert spanning_proof(H, S)
    assert not separable_rows_by_lp(H, S).any()
    assert ntp_separability(H, S).method == "positive spanning"


def test_the_spanning_proof_does_not_merge_separated_tokens():
    # token 0 after the upper half-plane, token 1 after the lower: w_0 - w_1 = e_2
    # separates every row, although both sets together span the plane
    H = _on_circle([20, 90, 160, 200, 270, 340])
    S = np.zeros((6, 2), bool)
    S[:3, 0] = S[3:, 1] = True
    assert positively_spans(np.vstack([H[S[:, 0]], H[S[:, 1]]]))
    assert not spanning_proof(H, S)
    assert separable_rows_by_lp(H, S)[~S].all()
    assert ntp_separability(H, S).is_separable


def _spans_by_lp(C):
    """``cone(C) = R^d``: rank ``d`` and some ``lam >= 1`` with ``C^T lam = 0``, in cvxpy."""
    lam = cp.Variable(len(C))
    prob = cp.Problem(cp.Minimize(0), [C.T @ lam == 0, lam >= 1])
    prob.solve(solver=cp.HIGHS)
    return prob.status == cp.OPTIMAL and np.linalg.matrix_rank(C) == C.shape[1]


@pytest.mark.parametrize("seed", range(8))
def test_positive_spanning_is_that_of_its_linear_program(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 30)), int(rng.integers(1, 6))
    C = rng.standard_normal((n, d))
    if seed % 2:  # into an open halfspace, or a closed one with points on its boundary
        C[:, 0] = np.abs(C[:, 0]) + 0.1
        if seed % 4 == 3:
            C[: n // 2, 0] = 0.0
    if seed == 6:  # rank deficient but balanced
        C = np.vstack([C, -C])[:, :1] @ np.ones((1, 3))
    assert positively_spans(C) == _spans_by_lp(C)


@pytest.mark.parametrize("seed", range(3))
def test_both_limits_match_programs_written_from_their_equations(seed):
    H, P = partially_separable_instance(seed)
    S = P > 0
    sep = ntp_separability(H, P)
    res = solve_max_margin(partial_ntp_svm_problem(H, sep), tol=1e-9)
    assert res.status == "optimal"
    ref = _partial_svm_by_hand(H, S, sep.separable)
    np.testing.assert_allclose(res.primal, ref, atol=1e-5 * np.abs(ref).max())
    fin = partial_finite_component(H, P, sep)
    assert fin.converged and fin.grad_norm <= 1e-9 and fin.min_prob > 0
    # any minimizer has the same logit differences on the allowed tokens
    other = _finite_by_hand(H, P, sep.separable)
    rows = finite_side_rows(H, S, sep.separable)
    np.testing.assert_allclose(rows @ fin.W.ravel(), rows @ other.ravel(), atol=1e-5)
    # W_fin lies in F_I, W^mm_I in its complement
    proj = projector_onto_rows(rows)
    np.testing.assert_allclose(proj @ fin.W.ravel(), fin.W.ravel(), atol=1e-9)
    assert np.linalg.norm(proj @ res.primal.ravel()) < 1e-6 * np.linalg.norm(res.primal)


def _regpath_check(seed, lam, random_sizes=False):
    sizes = {}
    if random_sizes:  # m, d and V drawn per instance, d < m always
        rng = np.random.default_rng(seed)
        d_a = int(rng.integers(3, 7))
        sizes = dict(d_a=d_a, m_a=int(rng.integers(1, d_a)), d_b=int(rng.integers(2, 4)),
                     m_b=int(rng.integers(15, 31)), t_a=int(rng.integers(2, 5)),
                     t_b=int(rng.integers(2, 5)), t_0=int(rng.integers(0, 3)))
    H, P = partially_separable_instance(seed, **sizes)
    assert H.shape[0] > H.shape[1]
    S = P > 0
    sep = ntp_separability(H, P)
    assert 0 < sep.fraction < 1
    direction = solve_max_margin(partial_ntp_svm_problem(H, sep), tol=1e-10).primal
    fin = partial_finite_component(H, P, sep, tol=1e-11)
    proj = projector_onto_rows(finite_side_rows(H, S, sep.separable))
    W = None
    for step in np.geomspace(1e-4, lam, 5):  # warm starts down the path
        W = regularized_ntp_fit(H, P, step, W0=W)
    w = W.ravel()
    finite_part = proj @ w
    diverging = w - finite_part
    cos = diverging @ direction.ravel() / np.linalg.norm(diverging) / np.linalg.norm(direction)
    dist = np.linalg.norm(finite_part - fin.W.ravel()) / np.linalg.norm(fin.W)
    Z = H @ W.T
    Z = Z - Z.max(axis=1, keepdims=True)
    loss = np.mean(np.log(np.exp(Z).sum(axis=1)) - np.sum(P * Z, axis=1))
    entropy = -np.mean(np.sum(np.where(S, P * np.log(np.where(S, P, 1)), 0), axis=1))
    return cos, dist, loss, fin.loss, entropy


@pytest.mark.parametrize("seed", range(2))
def test_the_regularization_path_follows_both_limits(seed):
    cos, dist, loss, floor, entropy = _regpath_check(seed, 1e-12)
    assert cos >= 0.99 and dist <= 1e-2
    # the loss tends to the minimum of the non-separable part, above the entropy
    assert abs(loss - floor) < 1e-6 and floor > entropy + 1e-2


def test_the_regularization_path_follows_both_limits_on_twenty_fresh_instances():
    for seed in range(100, 120):
        cos, dist, loss, floor, entropy = _regpath_check(seed, 1e-12, random_sizes=True)
        assert cos >= 0.99 and dist <= 1e-2, (seed, cos, dist)
        assert abs(loss - floor) < 1e-6 and floor > entropy


def test_on_separable_data_the_limits_are_those_of_theorem_4_1():
    rng = np.random.default_rng(4)
    m, d, V = 30, 6, 4
    H = rng.standard_normal((m, d))
    W0 = rng.standard_normal((V, d))
    P = np.zeros((m, V))
    for j in range(m):
        a, b, c = np.argsort(-(W0 @ H[j]))[:3]
        if j < 4:  # two tokens tied by W0 above the others: a support of two
            u = W0[a] - W0[b]
            h = H[j] - (u @ H[j]) / (u @ u) * u
            L = W0 @ h
            if L[a] > np.delete(L, [a, b]).max() + 0.1:
                H[j] = h
                P[j, [a, b]] = [0.3, 0.7]
                continue
        P[j, a] = 1.0
    assert np.count_nonzero(P.sum(axis=0) < 2) < V and (np.count_nonzero(P, axis=1) == 2).any()
    S = P > 0
    sep = ntp_separability(H, P)  # W0 is in the recession cone, positive on every row
    assert sep.method == "highs" and sep.is_separable and sep.fraction == 1.0
    W_mm = ntp_svm(H, S, tol=1e-10)
    res = solve_max_margin(partial_ntp_svm_problem(H, sep), tol=1e-10)
    np.testing.assert_allclose(res.primal, W_mm, atol=1e-8 * np.abs(W_mm).max())
    fin = partial_finite_component(H, P, sep, tol=1e-12)
    assert np.abs(fin.W).max() > 0.1
    np.testing.assert_allclose(fin.W, finite_component(H, P), atol=1e-8)


def test_the_separability_program_falls_back_to_the_interior_point(monkeypatch):
    # HiGHS's simplex stopped with "Not Set" (75 s) on a 19,600-row program that its
    # interior point solved (26 s): a failed method hands over; both failing is an error
    import scipy.optimize

    H, P = partially_separable_instance(0)
    S = P > 0
    real, tried = scipy.optimize.linprog, []

    def simplex_fails(*args, method, **kwargs):
        tried.append(method)
        res = real(*args, method=method, **kwargs)
        if method == "highs":
            res.status, res.message = 4, "(HiGHS Status 0: Not Set)"
        return res

    monkeypatch.setattr(scipy.optimize, "linprog", simplex_fails)
    found = ntp_separability(H, S, method="highs")
    # (a failure at 1e-10 is retried at HiGHS's defaults, boxed and not, first)
    assert tried == ["highs", "highs", "highs", "highs-ipm"]
    np.testing.assert_array_equal(found.separable, separable_rows_by_lp(H, S))

    def both_fail(*args, method, **kwargs):
        res = real(*args, method=method, **kwargs)
        res.status, res.message = 4, "(HiGHS Status 0: Not Set)"
        return res

    monkeypatch.setattr(scipy.optimize, "linprog", both_fail)
    # (Clarabel takes over where HiGHS fails; only when it fails too is there no answer)
    assert np.array_equal(ntp_separability(H, S, method="highs").separable,
                          separable_rows_by_lp(H, S))
    from skntp.svm import _ntp_partial

    # (Clarabel is not tried where its conic form would not fit in memory: past it,
    # Clarabel aborts the process)
    monkeypatch.setattr(_ntp_partial, "available_memory", lambda: 1000.0)
    with pytest.raises(RuntimeError, match="did not solve the separability program"):
        ntp_separability(H, S, method="highs")


def test_linearly_independent_contexts_need_no_program():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((5, 8))
    S = np.eye(5, 3, dtype=bool) | np.eye(5, 3, -3, dtype=bool)
    sep = ntp_separability(H, S)
    assert sep.method == "rank" and sep.is_separable and sep.direction is None


def test_bad_input_and_too_large_programs():
    H, P = partially_separable_instance(0)
    with pytest.raises(ProgramTooLargeError, match="max_rows=10"):
        ntp_separability(H, P, max_rows=10)
    bad = P.copy()
    bad[0] = 0
    with pytest.raises(ValueError, match="at least one in-support"):
        ntp_separability(H, bad)
    sep = ntp_separability(H, P)
    other = np.roll(P, 1, axis=1)
    with pytest.raises(ValueError, match="supports of the separability"):
        partial_finite_component(H, other, sep)
    with pytest.raises(ValueError, match="non-negative"):
        partial_finite_component(H, -P, sep)
    # the full NTP-SVM says what the data are, and the diagnosis is the way on
    with pytest.raises(NotSeparableError):
        ntp_svm(H, P > 0, method="cvxpy")


def test_the_diagnosis_refuses_what_it_cannot_hold_and_unknown_methods(monkeypatch):
    from skntp.svm import _ntp_partial

    H, P = partially_separable_instance(0)
    with pytest.raises(ValueError, match="method must be 'auto' or 'highs'"):
        ntp_separability(H, P, method="simplex")
    monkeypatch.setattr(_ntp_partial, "MAX_MASK_ENTRIES", 10)
    with pytest.raises(ProgramTooLargeError, match="m \\* V = 196 is above 10"):
        ntp_separability(H, P)


def test_full_supports_leave_no_row():
    H = np.random.default_rng(0).standard_normal((6, 2))
    sep = ntp_separability(H, np.ones((6, 3), bool))
    assert sep.n_rows == 0 and sep.is_separable and sep.fraction == 1.0


def test_highs_by_name_gives_the_rows_of_the_automatic_path():
    H, P = partially_separable_instance(1)
    np.testing.assert_array_equal(ntp_separability(H, P, method="highs").separable,
                                  ntp_separability(H, P).separable)
    rng = np.random.default_rng(0)
    H = rng.standard_normal((20, 3))
    S = np.eye(4, dtype=bool)[rng.integers(0, 4, 20)]
    by_lp = ntp_separability(H, S, method="highs")
    assert by_lp.method == "highs" and by_lp.n_separable == 0


@pytest.mark.parametrize("scale", [1e-150, 1e150])
def test_the_separable_rows_do_not_depend_on_the_units(scale):
    H, P = partially_separable_instance(2)
    np.testing.assert_array_equal(ntp_separability(H * scale, P).separable,
                                  ntp_separability(H, P).separable)
    rng = np.random.default_rng(0)
    H = rng.standard_normal((40, 4))
    S = np.eye(5, dtype=bool)[rng.integers(0, 5, 40)]
    assert ntp_separability(H * scale, S).method == "positive spanning"
    assert positively_spans(H * scale) and not positively_spans(np.abs(H) * scale)


def test_zero_contexts_separate_nothing():
    S = np.eye(5, 4, dtype=bool) | np.eye(5, 4, -4, dtype=bool)
    sep = ntp_separability(np.zeros((5, 3)), S)
    assert sep.method == "stationary point" and sep.n_separable == 0


def test_ntp_svm_refuses_real_text_with_no_separable_row_before_any_solve():
    from skntp.datasets import load_text_ntp
    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets

    b = load_text_ntp(corpus="python", n_words=60, embedding="words", n_features=4)
    _, Y = next_token_targets(b.target, len(b.target), None)
    H, _, P, _ = aggregate_contexts(b.data, Y, np.ones(len(b.target)))
    assert spanning_proof(H, P > 0) and spanning_proof(H, (P > 0).toarray())
    for norm in ("fro", "max"):
        with pytest.raises(NotSeparableError, match="positively span") as info:
            ntp_svm(H, P > 0, norm=norm, max_iter=1)  # one iteration could not tell
        assert "ntp_separability" in str(info.value)


def test_the_dispatcher_runs_the_programs_own_proof_before_any_method(monkeypatch):
    # solve_max_margin on the NTP-SVM of real text with m > d: the builder's spanning
    # proof answers before any method runs (a method would run for minutes before its
    # dual ray proves infeasibility), in every unit of the data
    from skntp.datasets import load_text_ntp
    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets
    from skntp.svm import _solve, ntp_svm_problem, solve_max_margin
    from skntp.svm.solvers import METHODS, Method

    b = load_text_ntp(corpus="python", n_words=60, embedding="words", n_features=4)
    _, Y = next_token_targets(b.target, len(b.target), None)
    H, _, P, _ = aggregate_contexts(b.data, Y, np.ones(len(b.target)))

    def refused(*args, **kwargs):
        raise AssertionError("a method ran")

    monkeypatch.setattr(_solve, "METHODS", {name: Method(refused, m.norms, m.frobenius)
                                            for name, m in METHODS.items()})
    # (each method at unit scale, "auto" in every unit: each call polishes the proof's
    # multipliers, seconds here)
    for scale, methods in ((1.0, ("auto", "dcd", "cvxpy")), (1e-150, ("auto",)),
                           (1e150, ("auto",))):
        problem = ntp_svm_problem(scale * H, P > 0)
        assert problem.infeasibility_proof() is not None
        for method in methods:
            with pytest.raises(NotSeparableError, match="NTP-SVM is infeasible.*positively "
                               "span"):
                solve_max_margin(problem, method=method)
    # a program the proof cannot decide: no proof when m <= d, and an inconclusive one
    assert ntp_svm_problem(H[: H.shape[1]], (P > 0)[: H.shape[1]]).infeasibility_proof is None
    Hs, Ps = partially_separable_instance(0)
    assert Hs.shape[0] > Hs.shape[1]
    assert ntp_svm_problem(Hs, Ps > 0).infeasibility_proof() is None


def test_the_finite_component_stops_at_its_budget_and_says_so(monkeypatch):
    from skntp import NTPDecoderClassifier
    from skntp.svm import _ntp_partial

    H, P = partially_separable_instance(3)
    sep = ntp_separability(H, P)
    full = partial_finite_component(H, P, sep, max_products=None)
    short = partial_finite_component(H, P, sep, max_products=3)
    assert full.converged and not short.converged and short.grad_norm > full.grad_norm
    assert short.loss > full.loss
    # the estimator warns at the user's line, with the last iterate as W_fin
    original = _ntp_partial.partial_finite_component
    monkeypatch.setattr("skntp.decoder.partial_finite_component",
                        lambda *a, **k: original(*a, **{**k, "max_products": 3}))
    X = np.repeat(H, 3, axis=0)
    y = np.concatenate([np.random.default_rng(0).choice(P.shape[1], 3, p=p) for p in P])
    with pytest.warns(ConvergenceWarning, match="upper bound") as record:
        est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert record[0].filename == __file__
    assert not est.is_ntp_separable_ and est.loss_infimum_ > 0


def test_a_cone_test_that_runs_out_of_iterations_proves_nothing(monkeypatch):
    import scipy.optimize

    def give_up(*args, **kwargs):
        raise RuntimeError("Maximum number of iterations reached.")

    C = np.vstack([np.eye(3), -np.eye(3)])
    assert positively_spans(C)
    monkeypatch.setattr(scipy.optimize, "nnls", give_up)
    assert not positively_spans(C)


@pytest.mark.parametrize("seed", range(3))
def test_the_preconditioned_finite_component_is_the_minimizer_in_f(seed, monkeypatch):
    # no row separable (d << m): Newton-CG runs preconditioned by the Hessian's
    # per-token blocks; W_fin is the cvxpy minimizer's logit differences, lies in F
    # (1^T W = 0 in the span of the contexts) and is the same point as the plain CG's,
    # with fewer Hessian products
    from skntp.svm import _ntp_partial

    # each context near its next token's direction: close to separable, tiny
    # probabilities at the minimizer, an ill-conditioned Hessian
    rng = np.random.default_rng(seed)
    m, d, V = 300, 6, 25
    token = rng.integers(0, V, m)
    H = rng.standard_normal((V, d))[token] + 0.5 * rng.standard_normal((m, d))
    P = np.zeros((m, V))
    P[np.arange(m), token] = 1.0
    extra = np.flatnonzero(rng.random(m) < 0.3)
    P[extra, rng.integers(0, V, extra.size)] += 0.5
    P /= P.sum(axis=1, keepdims=True)
    sep = ntp_separability(H, P)
    assert sep.n_separable == 0
    counted, original = {}, _ntp_partial.newton_cg

    def counting(name):
        def run(fun, hess_at, *args, **kwargs):
            if name == "plain":  # (x, gtol, max_iter, cg_iter, report, max_products,
                args = (*args[:6], None, *args[7:])  # precondition_at, ...)
                kwargs["single_above"] = None

            def counted_hess(x, **options):
                product = hess_at(x, **options)

                def one(v):
                    counted[name] = counted.get(name, 0) + 1
                    return product(v)
                return one
            return original(fun, counted_hess, *args, **kwargs)
        return run

    monkeypatch.setattr(_ntp_partial, "newton_cg", counting("preconditioned"))
    fin = partial_finite_component(H, P, sep, tol=1e-11)
    assert fin.converged and fin.grad_norm <= 1e-11
    np.testing.assert_allclose(fin.W.sum(axis=0), 0.0, atol=1e-9 * np.abs(fin.W).max())
    # the loss at cvxpy's minimizer (Clarabel's exponential cones are accurate to
    # about 1e-6 here, close to separable): W_fin is as low, to its accuracy
    other = _finite_by_hand(H, P, sep.separable)
    Z = H @ other.T
    top = Z.max(axis=1, keepdims=True)
    loss = np.mean(top.ravel() + np.log(np.exp(Z - top).sum(axis=1)) - np.sum(P * Z, axis=1))
    assert fin.loss <= loss + 1e-12 and loss - fin.loss <= 1e-6 * loss
    monkeypatch.setattr(_ntp_partial, "newton_cg", counting("plain"))  # no preconditioner
    plain = partial_finite_component(H, P, sep, tol=1e-11, max_products=None)
    np.testing.assert_allclose(fin.W, plain.W, atol=1e-8 * np.abs(plain.W).max())
    assert counted["preconditioned"] < counted["plain"], counted


def _restricted_loss_data(rng, m, d, V, density, kept):
    """Contexts, soft next-token probabilities (each row's support about ``density`` of
    the tokens), context weights and the allowed tokens (``kept`` of the rest)."""
    H = rng.standard_normal((m, d))
    P = rng.random((m, V)) * (rng.random((m, V)) < density)
    P[np.arange(m), rng.integers(0, V, m)] += 1.0
    P /= P.sum(axis=1, keepdims=True)
    allowed = (P > 0) | (rng.random((m, V)) < kept)
    pi = rng.random(m)
    return H, P, pi / pi.sum(), allowed


@pytest.mark.parametrize("masked", [False, True])
def test_the_restricted_loss_is_that_of_its_equations(masked):
    # value, gradient, Hessian products and the loss along a line of the buffered
    # evaluator against the loss (2) over the allowed tokens, written here
    from skntp.svm._ntp_partial import _RestrictedLoss

    rng = np.random.default_rng(7)
    m, d, V = 40, 5, 9
    H, P, pi, allowed = _restricted_loss_data(rng, m, d, V, 0.4, 0.6 if masked else 1.0)

    def by_hand(w):
        Z = H @ w.reshape(V, d).T
        Z = np.where(allowed, Z, -np.inf)
        lse = np.log(np.exp(Z - Z.max(axis=1, keepdims=True)).sum(axis=1)) + Z.max(axis=1)
        return float(pi @ (lse - np.sum(P * np.where(allowed, Z, 0.0), axis=1)))

    loss = _RestrictedLoss(H, P, pi, allowed)
    w, v = rng.standard_normal(V * d), rng.standard_normal(V * d)
    value, grad = loss.value_and_gradient(w)
    assert value == pytest.approx(by_hand(w), rel=1e-13)
    h = 1e-6
    numeric = [(by_hand(w + h * e) - by_hand(w - h * e)) / (2 * h) for e in np.eye(V * d)]
    np.testing.assert_allclose(grad, numeric, atol=1e-8)
    product = loss.hessian_at(w)(v)
    difference = (loss.value_and_gradient(w + h * v)[1]
                  - loss.value_and_gradient(w - h * v)[1]) / (2 * h)
    np.testing.assert_allclose(product, difference, atol=1e-7)
    # single precision, its tables in the work buffer: the same product, as often as
    # CG asks, until the buffer's next use
    single = loss.hessian_at(w, single=True)
    for _ in range(2):
        np.testing.assert_allclose(single(v), product, rtol=0,
                                   atol=1e-5 * np.abs(product).max())
    line = loss.along(w, v)
    for t in (0.0, 0.3, 1.0):
        assert line(t) == pytest.approx(by_hand(w + t * v), rel=1e-13)
    with pytest.raises(RuntimeError, match="buffer was reused"):
        single(v)


@pytest.mark.parametrize("sparse_probs", [False, True])
def test_the_loss_entry_by_entry_is_the_restricted_loss(sparse_probs):
    # where few tokens are allowed per context the loss is computed on the allowed
    # entries only: value, gradient, Hessian products, the loss along a line and the
    # softmax table are those of the loss over (m, V) tables
    from skntp.svm._ntp_partial import _RestrictedLoss
    from skntp.svm._ntp_sparse import SparseRestrictedLoss, sparse_enough

    rng = np.random.default_rng(5)
    m, d, V = 300, 6, 80
    H, P, pi, allowed = _restricted_loss_data(rng, m, d, V, 0.01, 0.01)
    assert sparse_enough(allowed)
    dense = _RestrictedLoss(H, P, pi, allowed)
    entries = SparseRestrictedLoss(H, sp.csr_matrix(P) if sparse_probs else P, pi, allowed)
    w, u = 3.0 * rng.standard_normal(V * d), rng.standard_normal(V * d)
    (a, ga), (b, gb) = dense.value_and_gradient(w), entries.value_and_gradient(w)
    assert b == pytest.approx(a, rel=1e-13)
    np.testing.assert_allclose(gb, ga, rtol=0, atol=1e-13 * np.abs(ga).max())
    np.testing.assert_allclose(entries.S, np.asarray(dense.S), rtol=0, atol=1e-14)
    hv = dense.hessian_at(w)(u)
    np.testing.assert_allclose(entries.hessian_at(w)(u), hv, rtol=0,
                               atol=1e-13 * np.abs(hv).max())
    line, other = dense.along(w, u), entries.along(w, u)
    for t in (0.0, 0.4, 1.0):
        assert other(t) == pytest.approx(line(t), rel=1e-13)
    # (its Hessian at another point recomputes the softmax there)
    np.testing.assert_allclose(entries.hessian_at(-w)(u), dense.hessian_at(-w)(u),
                               rtol=0, atol=1e-13 * np.abs(hv).max())
    with pytest.raises(ValueError, match="every context"):
        SparseRestrictedLoss(H, P, pi, allowed & (np.arange(m) > 0)[:, None])


@pytest.mark.parametrize("masked", [False, True])
def test_the_restricted_loss_on_torch_is_the_numpy_one(masked):
    # the one loss module on the array layer: value, gradient, Hessian products (double
    # and single precision) and the line search agree between NumPy and CPU torch
    pytest.importorskip("torch")
    from skntp._backend import get_backend
    from skntp.svm._ntp_partial import _RestrictedLoss

    rng = np.random.default_rng(11)
    m, d, V = 60, 7, 12
    H, P, pi, allowed = _restricted_loss_data(rng, m, d, V, 0.3, 0.5 if masked else 1.0)
    ours, theirs = (_RestrictedLoss(H, P, pi, allowed, be)
                    for be in (get_backend(), get_backend("torch")))
    w, v = rng.standard_normal(V * d), rng.standard_normal(V * d)
    (a, ga), (b, gb) = ours.value_and_gradient(w), theirs.value_and_gradient(w)
    assert isinstance(gb, np.ndarray) and b == pytest.approx(a, rel=1e-14)
    np.testing.assert_allclose(gb, ga, rtol=0, atol=1e-14 * np.abs(ga).max())
    for single, rtol in ((False, 1e-13), (True, 1e-6)):
        hv = ours.hessian_at(w, single)(v)
        np.testing.assert_allclose(theirs.hessian_at(w, single)(v), hv, rtol=0,
                                   atol=rtol * np.abs(hv).max())
    line, other = ours.along(w, v), theirs.along(w, v)
    for t in (0.0, 0.4, 1.0):
        assert other(t) == pytest.approx(line(t), rel=1e-14)


@pytest.mark.parametrize("woodbury", [False, True])
def test_the_finite_component_on_torch_is_the_numpy_one(woodbury, monkeypatch):
    # W_fin's Newton-CG with its products on CPU torch: the same minimizer to 1e-8, with
    # the exact per-token blocks and with their low-memory approximation (where the
    # early products run in single precision)
    pytest.importorskip("torch")
    from skntp.svm import _ntp_partial

    rng = np.random.default_rng(5)
    m, d, V = 300, 8, 25
    token = rng.integers(0, V, m)
    H = rng.standard_normal((V, d))[token] + 0.7 * rng.standard_normal((m, d))
    P = np.zeros((m, V))
    P[np.arange(m), token] = 1.0
    extra = np.flatnonzero(rng.random(m) < 0.4)
    P[extra, rng.integers(0, V, extra.size)] += 1.0
    P /= P.sum(axis=1, keepdims=True)
    sep = NTPSeparability(np.zeros_like(P, dtype=bool), P > 0, "stationary point")
    if woodbury:
        monkeypatch.setattr(_ntp_partial, "available_memory", lambda: 8.0 * V * d * d)
    ours = partial_finite_component(H, P, sep, tol=1e-10)
    theirs = partial_finite_component(H, P, sep, tol=1e-10, backend="torch", device="cpu")
    assert ours.converged and theirs.converged
    np.testing.assert_allclose(theirs.W, ours.W, rtol=0, atol=1e-8 * np.abs(ours.W).max())
    assert theirs.loss == pytest.approx(ours.loss, rel=1e-12)
    assert theirs.min_prob == pytest.approx(ours.min_prob, rel=1e-6)


def test_newton_minimizes_along_an_overshooting_step():
    # sum_i sqrt(1 + x_i^2): the Newton step from x overshoots to -x^3, so halving
    # alone needs many steps from far out; with the loss along the line the
    # minimum is found in fewer steps, at the same point
    from skntp.svm._newton import newton_cg

    def fun(x):
        r = np.sqrt(1 + x * x)
        return float(r.sum()), x / r

    def hess_at(x):
        return lambda v: v / (1 + x * x) ** 1.5

    def line_at(x, step):
        return lambda t: fun(x + t * step)[0]

    steps = {}
    for name, line in (("halving", None), ("line", line_at)):
        x, n = newton_cg(fun, hess_at, np.array([30.0, -12.0, 5.0]), 1e-12, 200,
                         line_at=line)
        np.testing.assert_allclose(x, 0.0, atol=1e-12)
        steps[name] = n
    assert steps["line"] < steps["halving"], steps


def _near_vocabulary_sized(seed, m, d, V, sort=True):
    # one next token per context among V, some never next: the minimizer (if any)
    # puts probabilities near the precision of float64 on the tokens never seen;
    # the contexts in the estimators' (np.unique's) order
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((m, d))
    S = np.zeros((m, V), bool)
    S[np.arange(m), rng.integers(0, V, m)] = True
    order = np.lexsort(H.T[::-1]) if sort else np.arange(m)
    return H[order] / np.abs(H).max(), S[order]


def test_the_stationary_point_proof_gives_up_once_newton_stalls(monkeypatch):
    # the gradient stalls near 5e-12 (the loss's precision), far above the 1e-13
    # the proof asks of Newton; it stopped after 100 steps (5 s), and now stops once
    # five steps near the minimizer have not halved the gradient
    from skntp.svm import _ntp_partial

    steps, original = [], _ntp_partial.newton_cg

    def counting(*args, **kwargs):
        x, n = original(*args, **kwargs)
        steps.append(n)
        return x, n

    monkeypatch.setattr(_ntp_partial, "newton_cg", counting)
    H, S = _near_vocabulary_sized(7, 300, 8, 200)
    assert not no_row_is_separable(H, S)
    assert steps and steps[0] <= 25, steps
    # where the proof holds, it stops at the first step near the minimizer that
    # proves it, far before the 1e-13 of its Newton stop
    steps.clear()
    H, S = _near_vocabulary_sized(3, 400, 20, 50)
    assert no_row_is_separable(H, S)
    assert steps[0] < 8, steps


def test_newton_ends_its_step_at_a_breakdown_of_cg_without_a_warning():
    # at a gradient of 1e-13 the residual is round-off that the single-precision
    # preconditioner maps to nothing, or a direction without curvature: scipy's CG
    # divided by that zero (RuntimeWarning) and went on with NaN
    H, S = _near_vocabulary_sized(0, 300, 8, 200, sort=False)
    P = S / S.sum(axis=1, keepdims=True)
    sep = NTPSeparability(np.zeros_like(S), S, "stationary point")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fin = partial_finite_component(H, P, sep, tol=1e-13, cg_iter=200)
    assert np.all(np.isfinite(fin.W)) and fin.grad_norm < 1e-11


def test_the_block_inverses_run_on_one_blas_thread_each(monkeypatch):
    # many small factorizations: BLAS's own threads stall next to a busy process
    # (70 s against 1.2 s on one thread, benchmarks/README.md), so each share of the
    # blocks runs on one BLAS thread; the blocks are those of their definition
    from threadpoolctl import threadpool_info

    from skntp.svm._ntp_partial import _context_products, _inverse_blocks

    seen, inv = [], np.linalg.inv

    def recording(A):
        seen.append({lib["num_threads"] for lib in threadpool_info()
                     if lib["user_api"] == "blas"})
        return inv(A)

    monkeypatch.setattr(np.linalg, "inv", recording)
    rng = np.random.default_rng(3)
    H = rng.standard_normal((400, 6))
    weights = rng.random((400, 200))
    blocks = _inverse_blocks(list(_context_products(H)), weights, 6)
    assert seen and all(threads <= {1} for threads in seen), seen
    B = np.einsum("ja,jd,je->ade", weights / weights.max(), H, H) / np.abs(H).max() ** 2
    np.testing.assert_allclose(blocks @ B, np.broadcast_to(np.eye(6), B.shape), atol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_the_low_memory_preconditioner_reaches_the_same_minimizer(seed, monkeypatch):
    # where the per-token blocks (V d^2 numbers) do not fit, Newton-CG runs on their
    # Woodbury approximation with single-precision products far from the minimizer:
    # the same W_fin as with the exact blocks, to the stopping tolerance
    import skntp._backend as backend_module
    from skntp.svm import _ntp_partial

    rng = np.random.default_rng(seed)
    m, d, V = 400, 8, 30
    token = rng.integers(0, V, m)
    H = 1e3 * (rng.standard_normal((V, d))[token] + 0.7 * rng.standard_normal((m, d)))
    P = np.zeros((m, V))
    P[np.arange(m), token] = 1.0
    extra = np.flatnonzero(rng.random(m) < 0.4)
    P[extra, rng.integers(0, V, extra.size)] += 1.0
    P /= P.sum(axis=1, keepdims=True)
    sep = NTPSeparability(np.zeros_like(P, dtype=bool), P > 0, "stationary point")
    exact = partial_finite_component(H, P, sep, tol=1e-10)
    used = {}
    real_at = _ntp_partial._WoodburyPreconditioner.at

    def at(self, S, pi):
        used["woodbury"] = used.get("woodbury", 0) + 1
        return real_at(self, S, pi)

    real_hess = _ntp_partial._RestrictedLoss.hessian_at

    def hessian_at(self, w, single=False):
        used["single"] = used.get("single", 0) + bool(single)
        return real_hess(self, w, single=single)

    monkeypatch.setattr(_ntp_partial, "available_memory", lambda: 8.0 * V * d * d)
    # (its weights by chunks of 7 tokens, as at corpus size by chunks of the table)
    monkeypatch.setattr(backend_module, "CHUNK_ELEMENTS", 7 * m)
    monkeypatch.setattr(_ntp_partial._WoodburyPreconditioner, "at", at)
    monkeypatch.setattr(_ntp_partial._RestrictedLoss, "hessian_at", hessian_at)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        low = partial_finite_component(H, P, sep, tol=1e-10)
    assert used.get("woodbury", 0) >= 1 and used.get("single", 0) >= 1, used
    assert exact.converged and low.converged and low.grad_norm <= 1e-10
    np.testing.assert_allclose(low.W, exact.W, rtol=0,
                               atol=1e-6 * np.abs(exact.W).max())


@pytest.mark.parametrize("n, d", [(3000, 16), (20000, 128)])
def test_the_robust_spanning_proof_holds_for_many_spread_points(n, d):
    # the tolerance the proof survives does not shrink with the number of points
    # (real text: thousands of contexts per frequent word, d = 128)
    C = np.random.default_rng(n).standard_normal((n, d))
    assert positively_spans(C, robustness=1e5)


def test_the_robust_spanning_proof_fails_where_a_direction_meets_the_cone_by_rounding():
    # +-e_1..e_5, and e_6 reached only through points whose e_6 part is 1e-5 of their
    # norm: u = e_6 meets every point to 1e-5 of its norm, so no tolerance above that
    # is survived; the exact proof (no tolerance) holds
    d = 6
    base = np.vstack([np.eye(d)[:d - 1], -np.eye(d)[:d - 1]])
    tilt = np.zeros((2, d))
    tilt[:, 0], tilt[:, d - 1] = 1.0, [1e-5, -1e-5]
    C = np.vstack([base, tilt])
    assert positively_spans(C)
    assert not positively_spans(C, robustness=1e5)
    assert positively_spans(C, robustness=1e7)
    u = np.eye(d)[d - 1]
    assert np.all(C @ u >= -1.001e-5 * np.linalg.norm(C, axis=1))


def test_the_programs_own_proof_is_computed_once(monkeypatch):
    # every solve of the same NTP-SVM asks for its proof (a stationary point of the
    # loss): computed at the first, and each caller gets its own multipliers
    from skntp.svm import _ntp_partial, ntp_svm_problem, solve_max_margin

    calls, real = [], _ntp_partial._stationary_table

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_ntp_partial, "_stationary_table", counted)
    H, S = _near_vocabulary_sized(0, 300, 8, 20)
    problem = ntp_svm_problem(H, S)
    first, second = problem.infeasibility_proof(), problem.infeasibility_proof()
    assert first is not None and len(calls) == 1
    assert first[1] is not second[1]
    np.testing.assert_array_equal(first[1], second[1])
    for method in ("auto", "dcd"):
        with pytest.raises(NotSeparableError):
            solve_max_margin(problem, method=method)
    assert len(calls) == 1


@pytest.mark.parametrize("perturbation", [0.0, 1e-9])
def test_the_farkas_bounds_by_chunks_of_rows_are_those_of_their_formula(perturbation,
                                                                        monkeypatch):
    # farkas_row_bounds and image_vanishes pass over the table by chunks of rows (at
    # corpus size a table is gigabytes): three rows per chunk give the bound of the
    # docstring, computed here on the whole table
    import skntp._backend as backend_module
    from skntp.svm import farkas_row_bounds
    from skntp.svm._ntp_partial import _refuted_rows, image_vanishes

    H, P = partially_separable_instance(1)
    S = P > 0
    farkas = ntp_separability(H, S).farkas
    m, V = S.shape
    # (some positive entries off the supports, which count against every row)
    table = farkas.copy()
    table[~S & (np.random.default_rng(0).random((m, V)) < 0.1)] += 1e-3 * np.abs(farkas).max()
    Hs = H / np.abs(H).max()
    T = table.astype(float).copy()
    anchor = S.argmax(axis=1)
    T[np.arange(m), anchor] -= T.sum(axis=1)
    hn = np.linalg.norm(Hs, axis=1)
    a = np.sqrt(2.0) * hn
    against = np.sum(np.where(~S & (T > 0), T, 0.0), axis=1) @ a
    rounding = (np.finfo(float).eps * np.linalg.norm(np.abs(T).T @ np.abs(Hs))
                + np.abs(T.sum(axis=1)) @ hn)
    numerator = (np.linalg.norm(T.T @ Hs) + against + rounding
                 + perturbation * np.linalg.norm(T, axis=1) @ hn)
    expected = np.full((m, V), np.inf)
    negative = ~S & (T < 0)
    expected[negative] = numerator / (-T * a[:, None])[negative]
    whole = farkas_row_bounds(H, S, table, perturbation=perturbation)
    monkeypatch.setattr(backend_module, "CHUNK_ELEMENTS", 3 * V)
    chunked = farkas_row_bounds(H, S, table, perturbation=perturbation)
    # (the image's norm is at rounding level: summed in another order it moves by up
    # to the rounding allowance)
    allowance = rounding / (-T * a[:, None])[negative]
    for bounds in (whole, chunked):
        np.testing.assert_array_equal(np.isinf(bounds), np.isinf(expected))
        assert np.all(np.abs(bounds[negative] - expected[negative])
                      <= 1e-12 * expected[negative] + allowance)
    margin = float(np.median(expected[negative]))
    np.testing.assert_array_equal(_refuted_rows(H, S, table, margin, perturbation),
                                  ~S & (chunked <= margin))
    assert image_vanishes(H, S, farkas)
    assert not image_vanishes(H, S, table)


def test_the_finite_part_and_its_check_hold_a_bounded_number_of_tables(monkeypatch):
    # at corpus size an (m, V) table is gigabytes: W_fin keeps the loss's three
    # buffers (its single-precision tables in the work buffer's halves) and chunks
    # of the rest; the stationary point's check keeps its table and chunks.  (4.5
    # tables here while the Woodbury weights' argpartition kept views of its whole
    # chunks: a table of indices in all)
    import tracemalloc

    import skntp._backend as backend_module
    from skntp.svm import _ntp_partial
    from skntp.svm._ntp_partial import stationary_separability

    rng = np.random.default_rng(5)
    m, d, V = 40000, 6, 200  # (m far above the Woodbury rank's square, as on corpora)
    token = rng.integers(0, V, m)
    H = rng.standard_normal((V, d))[token] + 0.5 * rng.standard_normal((m, d))
    P = np.zeros((m, V))
    P[np.arange(m), token] = 1.0
    P[np.arange(m), rng.integers(0, V, m)] += 0.5
    P = sp.csr_matrix(P / P.sum(axis=1, keepdims=True))
    support = P.toarray() > 0
    sep = NTPSeparability(np.zeros_like(support), support, "stationary point")
    table = 8.0 * m * V
    monkeypatch.setattr(_ntp_partial, "available_memory", lambda: 8.0 * V * d * d)  # Woodbury
    monkeypatch.setattr(backend_module, "CHUNK_ELEMENTS", m * V // 16)
    used = {}
    real_hess = _ntp_partial._RestrictedLoss.hessian_at
    monkeypatch.setattr(_ntp_partial._RestrictedLoss, "hessian_at", lambda self, w, single=False: (
        used.__setitem__("single", used.get("single", 0) + bool(single))
        or real_hess(self, w, single=single)))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fin = partial_finite_component(H, P, sep, max_iter=4)
        fin_peak = (tracemalloc.get_traced_memory()[1] - base) / table
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        stationary_separability(H, support, fin, P)
        check_peak = (tracemalloc.get_traced_memory()[1] - base) / table
    finally:
        tracemalloc.stop()
    assert used.get("single", 0) >= 1
    assert fin_peak <= 4.0, fin_peak
    assert check_peak <= 2.0, check_peak  # (with its (m, V) bool masks)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [1.0, 1e-8])
def test_the_far_stationary_table_and_the_open_rows_program_give_the_split(seed, scale):
    # partly separable data: the loss over every row has no minimizer; Newton stops far
    # out, where its table certifies the rows that are not separable, and the NTP-SVM of
    # the rows it leaves open proves them separable: the split of the LP of the
    # definition (written in cvxpy), certified both ways, in any units
    H, P = partially_separable_instance(100 + seed, m_b=30 + 5 * seed)
    H = scale * H
    support = P > 0
    truth = separable_rows_by_lp(H / scale, support)
    assert 0 < truth.sum() < (~support).sum()
    everything = NTPSeparability(np.zeros_like(support), support, "stationary point")
    fin = partial_finite_component(H, P, everything)
    found = stationary_separability(H, support, fin, P)
    assert found.status == "undecided" and not found.certified[truth].any()
    split = complete_stationary_split(H, found)
    assert split.status == "certified" and split.n_undecided == 0
    np.testing.assert_array_equal(split.separable, truth)
    np.testing.assert_array_equal(split.farkas, found.farkas)
    # nothing to complete: a certified split is returned as it is
    assert complete_stationary_split(H, split) is split


@pytest.mark.parametrize("seed", range(3))
def test_a_margin_below_its_rounding_error_certifies_no_row(seed):
    # a row off I given a margin of 1e-11 by logits of size 1e4: its sign is below the
    # rounding of the products (about 1e-9 there), so the direction certifies nothing;
    # the same direction without that row certifies I
    from skntp.svm._ntp import _anchors
    from skntp.svm._ntp_partial import (
        _separable_rows_certified,
        _separable_side,
        orthonormal_contexts,
    )

    H, P = partially_separable_instance(seed)
    S = P > 0
    I = separable_rows_by_lp(H, S)
    Q = orthonormal_contexts(H / np.abs(H).max())
    D = 1e4 * _separable_side(Q, S, I)
    np.testing.assert_array_equal(_separable_rows_certified(Q, S, I, D), I)
    j, v = np.argwhere(~S & ~I)[0]
    a = _anchors(S)[j]
    nudged = D.copy()
    step = Q[j] / (Q[j] @ Q[j])
    gap = (D[a] - D[v]) @ Q[j]
    nudged[a] += 0.5 * (1e-11 - gap) * step
    nudged[v] -= 0.5 * (1e-11 - gap) * step
    assert 0 < (nudged[a] - nudged[v]) @ Q[j] < 1e-10
    widened = I.copy()
    widened[j, v] = True
    assert not _separable_rows_certified(Q, S, widened, nudged).any()


def _far_iterate(H, P, steps=60):
    """Newton's iterate on the loss over every row after ``steps`` steps (far out on
    partly separable data, where the loss has no minimizer) and its table's split."""
    S = P > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fin = partial_finite_component(
            H, P, NTPSeparability(np.zeros_like(S), S, "stationary point"), max_iter=steps,
            max_products=None)
    return fin, stationary_separability(H, S, fin, P)


@pytest.mark.parametrize("entrywise", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e-8])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_far_point_split_is_that_of_the_lp_of_the_definition(seed, scale, entrywise,
                                                                 monkeypatch):
    # (entrywise: the side N's loss on its allowed entries only, as where few tokens
    # are allowed per context)
    from skntp.svm import _ntp_sparse, far_point_split

    H, P = partially_separable_instance(seed)
    H = scale * H
    S = P > 0
    fin, found = _far_iterate(H, P)
    assert found.status == "undecided"
    used = []
    real = _ntp_sparse.SparseRestrictedLoss.value_and_gradient
    monkeypatch.setattr(_ntp_sparse.SparseRestrictedLoss, "value_and_gradient",
                        lambda self, w: used.append(1) or real(self, w))
    monkeypatch.setattr(_ntp_sparse, "SPARSE_BELOW", 1.0 if entrywise else 0.0)
    split = far_point_split(H, found, fin.W, P)
    assert bool(used) == entrywise
    truth = separable_rows_by_lp(H, S)
    assert split.status == "certified" and split.method == "stationary point"
    assert 0 < truth.sum() < (~S).sum()
    np.testing.assert_array_equal(split.separable, truth)
    # both certificates, recomputed here on the contexts divided by their largest entry:
    # the direction is 0 on the supports and the rows off I and positive on I; the
    # table's image vanishes and it is negative on every row off I
    Hs = H / np.abs(H).max()
    L = Hs @ split.direction.T
    top = np.where(S, L, -np.inf).max(axis=1, keepdims=True)
    low = np.where(S, L, np.inf).min(axis=1, keepdims=True)
    gaps = top - L
    smallest = gaps[truth].min()
    assert smallest > 0
    assert np.all((top - low) / smallest <= 1e-8)
    assert np.all(np.abs(gaps[~S & ~truth]) / smallest <= 1e-8)
    T = split.farkas
    assert np.abs(T.T @ Hs).max() <= 1e-8 * (np.abs(T).T @ np.abs(Hs)).max()
    assert np.all(T[~S & ~truth] < 0)


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_the_far_point_split_falls_back_on_the_center_of_the_held_rows(seed, monkeypatch):
    # where the side N's loss table certifies nothing (its check refused here), the
    # analytic center of the held rows certifies them: the same split as the LP's
    from skntp.svm import _ntp_center, _ntp_partial, far_point_split

    H, P = partially_separable_instance(seed)
    S = P > 0
    fin, found = _far_iterate(H, P)
    calls = []
    real = _ntp_center.analytic_center_of_rows
    monkeypatch.setattr(_ntp_partial, "image_vanishes", lambda *args: False)
    monkeypatch.setattr(_ntp_center, "analytic_center_of_rows",
                        lambda *args, **kw: calls.append(1) or real(*args, **kw))
    split = far_point_split(H, found, fin.W, P)
    assert calls and split.status == "certified"
    np.testing.assert_array_equal(split.separable, separable_rows_by_lp(H, S))
    T = split.farkas
    Hs = H / np.abs(H).max()
    assert np.abs(T.T @ Hs).max() <= 1e-8 * (np.abs(T).T @ np.abs(Hs)).max()
    assert np.all(T[~S & ~split.separable] < 0)


def _lp_split(H, S):
    """The LP's separable rows and a point of the cone positive on them (the sum of
    each row's maximizer would do; the LP of the helper gives the mask, this finds the
    point), written here from Def. 3.2 in cvxpy."""
    separable = separable_rows_by_lp(H, S)
    m, d = H.shape
    V = S.shape[1]
    W = cp.Variable((V, d))
    L = H @ W.T
    a = np.argmax(S, axis=1)
    top = cp.hstack([L[j, a[j]] for j in range(m)])
    cons = [cp.abs(W) <= 10.0]
    for j in range(m):
        for v in range(V):
            if S[j, v]:
                cons.append(L[j, v] == top[j])
            elif separable[j, v]:
                cons.append(top[j] - L[j, v] >= 1.0)
            else:
                cons.append(top[j] - L[j, v] == 0.0)
    cp.Problem(cp.Minimize(0), cons).solve(solver=cp.CLARABEL)
    return separable, W.value


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_split_found_elsewhere_is_certified_both_ways(seed):
    # the LP's split, its point perturbed off the cone (the projection and the lift of
    # certify_split restore it): certified, with the center's table on the rows off I;
    # one separable row claimed not separable, or one row of N claimed separable, and
    # nothing is certified
    from skntp.svm import certify_split

    H, P = partially_separable_instance(seed)
    S = P > 0
    separable, W = _lp_split(H, S)
    held = ~S & ~separable
    rng = np.random.default_rng(seed)
    noisy = W + 1e-3 * np.abs(W).max() * rng.standard_normal(W.shape)
    split = certify_split(H, P, held, noisy)
    assert split is not None and split.status == "certified"
    np.testing.assert_array_equal(split.separable, separable)
    Hs = H / np.abs(H).max()
    L = Hs @ split.direction.T
    top = np.where(S, L, -np.inf).max(axis=1, keepdims=True)
    gaps = top - L
    smallest = gaps[separable].min()
    assert smallest > 0 and np.all(np.abs(gaps[held]) <= 1e-8 * smallest)
    T = split.farkas
    assert np.all(T[held] < 0)
    assert np.abs(T.T @ Hs).max() <= 1e-8 * (np.abs(T).T @ np.abs(Hs)).max()
    wrong = held.copy()
    wrong[tuple(np.argwhere(separable)[0])] = True
    assert certify_split(H, S, wrong, W) is None
    short = held.copy()
    short[tuple(np.argwhere(held)[0])] = False
    assert certify_split(H, S, short, W) is None


def test_a_token_below_its_rounding_is_lifted(monkeypatch, seed=2):
    # the LP's point with one token's row raised until some of its margins are negative:
    # the lift in the complement of its tied contexts restores them (and only it moves)
    from skntp.svm import _ntp_partial, certify_split

    H, P = partially_separable_instance(seed)
    S = P > 0
    separable, W = _lp_split(H, S)
    held = ~S & ~separable
    v = int(np.argmax((separable & ~S).sum(axis=0) * ~S.any(axis=0)))
    assert not S[:, v].any() and separable[:, v].any()  # (a token never next)
    lifted = []
    real = _ntp_partial._raise_token_margins

    def lift(Q, support, held, D, tokens):
        out = real(Q, support, held, D, tokens)
        lifted.append((list(tokens), np.flatnonzero(np.any(out != D, axis=1))))
        return out
    monkeypatch.setattr(_ntp_partial, "_raise_token_margins", lift)
    raised = W.copy()
    raised[v] += 3.0 * np.abs(W).max() * _unit_vector(H.shape[1], seed)
    Hs = H / np.abs(H).max()
    L = Hs @ raised.T
    assert np.any((L[:, np.argmax(S, axis=1)].diagonal() - L[:, v])[separable[:, v]] < 0)
    split = certify_split(H, S, held, raised)
    assert split is not None
    np.testing.assert_array_equal(split.separable, separable)
    assert len(lifted) == 1 and v in lifted[0][0] and set(lifted[0][1]) <= set(lifted[0][0])


def _unit_vector(d, seed):
    x = np.random.default_rng(seed).standard_normal(d)
    return x / np.linalg.norm(x)


def test_certify_split_refuses_bad_input():
    from skntp.svm import certify_split

    H, P = partially_separable_instance(1)
    S = P > 0
    with pytest.raises(ValueError, match="off the supports"):
        certify_split(H, S, S, np.zeros((S.shape[1], H.shape[1])))
    with pytest.raises(ValueError, match="shape"):
        certify_split(H, S, ~S, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        certify_split(H, S, ~S, np.full((S.shape[1], H.shape[1]), np.nan))


def test_a_far_point_that_marks_the_wrong_rows_certifies_nothing():
    # the far iterate reversed: the rows that keep their probability there are not
    # those off I; whatever the rounds find, nothing uncertified is reported
    from skntp.svm import far_point_split

    H, P = partially_separable_instance(2)
    fin, found = _far_iterate(H, P)
    assert far_point_split(H, found, -fin.W, P) is found
    certified = NTPSeparability(found.separable, found.support, "stationary point")
    assert far_point_split(H, certified, fin.W, P) is certified


def test_the_stationary_table_certifies_with_the_better_of_its_two_forms():
    # real text (the first 40 sentences of the Python documentation, d = 16 < m): at
    # W_fin over every row, converged, the table -pi (softmax - p) as computed has the
    # gradient for image, while its projection off the contexts' basis spreads its
    # rounding over every entry: the tiny probabilities' rows are certified by the
    # first, and the check keeps whichever certifies more (each checked in full)
    from skntp.svm import farkas_row_bounds, orthonormal_contexts
    from skntp.svm._ntp_partial import image_vanishes

    _, _, H, pi, P = python_text_40()
    S = P > 0
    fin = partial_finite_component(H, P, NTPSeparability(np.zeros_like(S), S,
                                                         "stationary point"), pi)
    assert fin.converged
    found = stationary_separability(H, S, fin, P, pi)
    # the two tables from the definition, checked here
    Z = H @ fin.W.T
    soft = np.exp(Z - Z.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    T = -pi[:, None] * (soft - P)
    Q = orthonormal_contexts(H / np.abs(H).max())
    projected = T - Q @ (Q.T @ T)
    counts = []
    for table in (T, projected):
        assert image_vanishes(H, S, table)
        counts.append(int(np.count_nonzero(~S & (farkas_row_bounds(Q, S, table) <= 1e-5))))
    assert counts[0] > 1.2 * counts[1]
    certified = found.n_rows - found.n_undecided
    assert abs(certified - max(counts)) <= 0.01 * max(counts)
    # the rows it reports are certified by the table it reports
    bounds = farkas_row_bounds(Q, S, found.farkas)
    assert np.all(bounds[found.certified & ~S] <= 1e-5)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_projection_by_lsqr_is_the_dense_one(seed, monkeypatch):
    # above MAX_PROJECTION_ROWS the direction is projected by LSQR on the rows as an
    # operator: the same projection as the dense Gram matrix's, every held row and
    # in-support equality 0 afterwards, and the change orthogonal to the subspace
    # (D - P(D) in the span of the rows: P(D) is the closest point)
    from skntp.svm import _ntp_partial
    from skntp.svm._ntp import _anchors

    rng = np.random.default_rng(seed)
    m, V, d = 40, 9, 6
    H = rng.standard_normal((m, d))
    S = rng.random((m, V)) < 0.3
    S[np.arange(m), rng.integers(V, size=m)] = True
    held = ~S & (rng.random((m, V)) < 0.2)
    Q = _ntp_partial.orthonormal_contexts(H)
    D = 10.0 * rng.standard_normal((V, Q.shape[1]))
    dense = _ntp_partial._project_onto_rows(Q, S, held, D)
    monkeypatch.setattr(_ntp_partial, "MAX_PROJECTION_ROWS", 0)
    monkeypatch.setattr(_ntp_partial, "PROJECTION_CHUNK", 7)
    by_lsqr = _ntp_partial._project_onto_rows(Q, S, held, D)
    np.testing.assert_allclose(by_lsqr, dense, atol=1e-10 * np.abs(D).max())
    L = Q @ by_lsqr.T
    a = _anchors(S)
    gaps = L[np.arange(m), a][:, None] - L
    assert np.abs(gaps[S | held]).max() <= 1e-12 * np.abs(L).max()
    # written here from the rows: the Gram system of (e_v - e_a) q_j^T, by least squares
    j, v = np.nonzero((S | held) & (np.arange(V) != a[:, None]))
    rows = np.zeros((j.size, V, Q.shape[1]))
    rows[np.arange(j.size), v] = Q[j]
    rows[np.arange(j.size), a[j]] -= Q[j]
    rows = rows.reshape(j.size, -1)
    y = np.linalg.lstsq(rows.T, (D - by_lsqr).ravel(), rcond=None)[0]
    np.testing.assert_allclose(rows.T @ y, (D - by_lsqr).ravel(), atol=1e-9 * np.abs(D).max())


@pytest.mark.parametrize("seed", [1, 3])
def test_the_far_point_split_projects_by_lsqr_above_the_dense_limit(seed, monkeypatch):
    from skntp.svm import _ntp_partial, far_point_split

    H, P = partially_separable_instance(seed)
    S = P > 0
    fin, found = _far_iterate(H, P)
    monkeypatch.setattr(_ntp_partial, "MAX_PROJECTION_ROWS", 0)
    split = far_point_split(H, found, fin.W, P)
    assert split.status == "certified"
    np.testing.assert_array_equal(split.separable, separable_rows_by_lp(H, S))
