"""Attention (Sec. 2) and joint head/attention (Sec. 3) against references written here.

Tarzanagh et al. (2023), ``max-margin-token-selection.md``: the risk (ERM) of
``f(X) = v^T X^T softmax(X W^T p)``, (ATT-SVM), the relaxed program (10), the
head SVM and the joint choice of Sec. 3.1, each written directly with NumPy or
cvxpy from the paper's equations, one unpadded sequence at a time; gradients
against central finite differences of those hand-written risks; the
estimators' runs against textbook GD/NGD on them.
"""

import itertools
import warnings

import cvxpy as cp
import numpy as np
import pytest
from helpers import att_svm_by_hand, numerical_grad
from sklearn.svm import LinearSVC

from skntp import AttentionSelector, JointAttentionSVM
from skntp._backend import get_backend
from skntp.datasets import make_attention_fig1c, make_joint_fig3
from skntp.losses.attention import AttentionObjective, attention_loss_grad, compute_keys
from skntp.svm import (
    att_svm,
    att_svm_prime,
    head_svm,
    joint_svm,
    relaxed_att_svm,
    support_vectors,
    svm_neighbors,
)

LOSSES = {
    "logistic": lambda u: np.logaddexp(0.0, -u),
    "exponential": lambda u: np.exp(-u),
    "correlation": lambda u: -u,
}


def outputs(seqs, v, p, W=None):
    """``f_i = v^T X_i^T softmax(X_i W^T p)`` for each unpadded sequence."""
    f = []
    for x in seqs:
        logits = (x if W is None else x @ W.T) @ p
        s = np.exp(logits - logits.max())
        f.append(v @ (x.T @ (s / s.sum())))
    return np.array(f)


def risk(seqs, y, v, p, W=None, loss="logistic", weights=None):
    """(ERM): ``sum_i w_i l(Y_i f_i) / sum_i w_i``."""
    w = np.ones(len(seqs)) if weights is None else np.asarray(weights, float)
    return float(np.sum(w * LOSSES[loss](y * outputs(seqs, v, p, W))) / w.sum())


def padded(seqs):
    T = max(len(s) for s in seqs)
    X = np.zeros((len(seqs), T, seqs[0].shape[1]))
    mask = np.zeros((len(seqs), T), bool)
    for i, s in enumerate(seqs):
        X[i, :len(s)], mask[i, :len(s)] = s, True
    return X, mask


def head_svm_by_hand(tokens, y):
    """Sec. 3 (SVM): ``min ||v||^2`` s.t. ``Y_i v^T r_i >= 1``."""
    v = cp.Variable(tokens.shape[1])
    prob = cp.Problem(cp.Minimize(cp.sum_squares(v)), [cp.multiply(y, tokens @ v) >= 1])
    prob.solve(solver=cp.CLARABEL)
    return None if prob.status != cp.OPTIMAL else v.value


def ragged_problem(seed, n=6, d=4, k=3):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal((int(t), d)) for t in rng.integers(2, 6, n)]
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return seqs, y, rng.standard_normal(d), rng.standard_normal((k, d)), \
        rng.standard_normal(k), rng.random(n) + 0.5


# --------------------------------------------------------------------------
# the risk (ERM) and its gradients
# --------------------------------------------------------------------------
@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("weighted", [False, True])
def test_attention_risk_and_gradients_match_the_hand_written_risk(loss, weighted):
    seqs, y, v, W, p, w = ragged_problem(0)
    w = w if weighted else None
    X, mask = padded(seqs)
    xp = np
    value, (gp, gv, gW) = attention_loss_grad(
        xp, X, compute_keys(xp, X, W), y, v, p, mask=mask, loss=loss,
        sample_weight=w, wrt=("p", "v", "W"))
    assert float(value) == pytest.approx(risk(seqs, y, v, p, W, loss, w), rel=1e-12)
    np.testing.assert_allclose(gp, numerical_grad(lambda q: risk(seqs, y, v, q, W, loss, w), p),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gv, numerical_grad(lambda q: risk(seqs, y, q, p, W, loss, w), v),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(gW, numerical_grad(lambda q: risk(seqs, y, v, p, q, loss, w), W),
                               rtol=1e-6, atol=1e-9)
    # the objective wrapper: fixed blocks stay fixed, gradients scaled as asked
    obj = AttentionObjective(xp, X, y, mask=mask, loss=loss, v=v, W=W, train=("p",),
                             sample_weight=w, grad_scale=0.5)
    val2, (g2,) = obj((p,))
    assert float(val2) == pytest.approx(float(value), rel=1e-14)
    np.testing.assert_allclose(g2, 0.5 * gp, rtol=1e-14)


def test_joint_objective_matches_the_hand_written_risk_and_its_log():
    seqs, y, v, _, _, _ = ragged_problem(1, d=3)
    p = np.random.default_rng(1).standard_normal(3)
    X, mask = padded(seqs)
    be = get_backend()
    for log in (False, True):
        obj = AttentionObjective(be.xp, X, y, mask=mask, train=("v", "p"), log=log)
        value, (gv, gp) = obj((v, p))

        def f(v_, p_, log=log):
            r = risk(seqs, y, v_, p_)
            return np.log(r) if log else r

        assert float(value) == pytest.approx(f(v, p), rel=1e-12)
        np.testing.assert_allclose(gv, numerical_grad(lambda q: f(q, p), v), rtol=1e-6,
                                   atol=1e-9)
        np.testing.assert_allclose(gp, numerical_grad(lambda q: f(v, q), p), rtol=1e-6,
                                   atol=1e-9)


def test_joint_log_objective_is_exact_where_the_risk_underflows():
    # Fig. 3 data at a huge norm: L ~ e^-900 underflows; log L = logsumexp of the
    # per-input log-losses minus log n, each log(log(1 + e^-u)) = -u + O(e^-u)
    X, y, P = make_joint_fig3("a", return_params=True)
    v = 900.0 * P.head_mm
    p = 900.0 * P.att_svm / np.linalg.norm(P.att_svm)
    obj = AttentionObjective(get_backend().xp, X, y, mask=np.ones(X.shape[:2], bool),
                             train=("v", "p"), log=True)
    value, _ = obj((v, p))
    u = y * outputs(X, v, p)
    assert np.all(u > 700)
    ref = np.logaddexp.reduce(-u) - np.log(len(u))
    assert float(value) == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------
# the explicit programs, by hand with cvxpy
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_att_svm_and_relaxation_match_hand_written_programs(seed):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal((int(t), 5)) for t in rng.integers(2, 6, 5)]
    selected = np.array([int(np.argmax(s @ rng.standard_normal(5))) for s in seqs])
    X, mask = padded(seqs)
    ref = att_svm_by_hand(seqs, selected)
    got = att_svm(X, selected, mask=mask)
    np.testing.assert_allclose(got, ref, atol=1e-6 * max(1, np.linalg.norm(ref)))
    relaxed = np.arange(5) % 2 == 1
    ref_r = att_svm_by_hand(seqs, selected, rhs=np.where(relaxed, 0.0, 1.0))
    np.testing.assert_allclose(att_svm(X, selected, relaxed, mask=mask), ref_r, atol=1e-6)
    np.testing.assert_allclose(relaxed_att_svm(X, selected, ~relaxed, mask=mask), ref_r,
                               atol=1e-6)
    # SVM-neighbors (Def. 2): the constraints active at the solution
    nb = svm_neighbors(X, selected, got, mask=mask)
    for i, s in enumerate(seqs):
        gaps = (s[selected[i]] - s) @ ref
        expected = np.abs(gaps - 1.0) <= 1e-5
        expected[selected[i]] = False
        np.testing.assert_array_equal(nb[i, :len(s)], expected)
        assert not nb[i, len(s):].any()


def test_att_svm_prime_is_the_best_choice_by_enumeration():
    rng = np.random.default_rng(11)
    keys = [rng.standard_normal((4, 3)) for _ in range(3)]
    optimal = np.zeros((3, 4), bool)
    optimal[:, :2] = True
    best = None
    for alpha in itertools.product(range(2), repeat=3):
        p = cp.Variable(3)
        cons = [(K[a] - K[t]) @ p >= 1 for K, a in zip(keys, alpha) for t in (2, 3)]
        prob = cp.Problem(cp.Minimize(cp.sum_squares(p)), cons)
        prob.solve(solver=cp.CLARABEL)
        if prob.status == cp.OPTIMAL and (best is None or prob.value < best[0]):
            best = (prob.value, p.value, alpha)
    p, alpha, n_best = att_svm_prime(np.stack(keys), optimal)
    assert np.linalg.norm(p) ** 2 == pytest.approx(best[0], rel=1e-6)
    np.testing.assert_allclose(p, best[1], atol=1e-5)
    np.testing.assert_array_equal(alpha, best[2])
    assert n_best == 1


@pytest.mark.parametrize("seed", range(4))
def test_head_svm_matches_hand_program_and_linearsvc(seed):
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((25, 4))
    y = np.sign(R @ rng.standard_normal(4))
    R += 0.2 * y[:, None] * rng.standard_normal(4)
    y = np.sign(R @ np.linalg.lstsq(R, y, rcond=None)[0])
    ref = head_svm_by_hand(R, y)
    if ref is None:
        pytest.skip("not separable through the origin")  # pragma: no cover
    v = head_svm(R, y)
    np.testing.assert_allclose(v, ref, atol=1e-6 * max(1, np.linalg.norm(ref)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svc = LinearSVC(loss="hinge", fit_intercept=False, C=1e7, tol=1e-12,
                        max_iter=2_000_000, random_state=0).fit(R, y)
    w = svc.coef_.ravel()
    assert np.dot(w, v) / np.linalg.norm(w) / np.linalg.norm(v) > 0.9999
    margins = y * (R @ v)
    np.testing.assert_array_equal(support_vectors(R, y, v), margins <= 1 + 1e-6)


def test_joint_svm_choice_matches_brute_force_enumeration():
    # Sec. 3.1: the tokens that maximize the label margin among those attention can
    # select (feasible ATT-SVM); ties broken by the first choice in lexicographic order
    checked = 0
    for seed in range(4):
        rng = np.random.default_rng(40 + seed)
        X = rng.standard_normal((4, 3, 3))
        y = np.array([1.0, -1.0, 1.0, -1.0])
        scored = []
        for alpha in itertools.product(range(3), repeat=4):
            alpha = np.array(alpha)
            v = head_svm_by_hand(X[np.arange(4), alpha], y)
            if v is not None:
                scored.append((np.linalg.norm(v), len(scored), alpha, v))
        scored.sort(key=lambda s: (round(s[0], 7), s[1]))
        chosen = next((s for s in scored if att_svm_by_hand(list(X), s[2]) is not None),
                      None)
        if chosen is None:
            continue
        res = joint_svm(X, y)
        np.testing.assert_array_equal(res.selected, chosen[2])
        np.testing.assert_allclose(res.head, chosen[3], atol=1e-5)
        assert res.label_margin == pytest.approx(1 / chosen[0], rel=1e-5)
        margins = y * (X[np.arange(4), chosen[2]] @ chosen[3])
        np.testing.assert_array_equal(res.support, margins <= 1 + 1e-5)
        rhs = np.where(res.support, 1.0, 0.0)
        np.testing.assert_allclose(res.relaxed, att_svm_by_hand(list(X), chosen[2], rhs),
                                   atol=1e-5)
        np.testing.assert_allclose(res.att_svm, att_svm_by_hand(list(X), chosen[2]),
                                   atol=1e-5)
        checked += 1
    assert checked >= 2


# --------------------------------------------------------------------------
# the estimators: explicit limits and training runs
# --------------------------------------------------------------------------
def test_selector_svm_limit_keeps_the_promised_attention():
    # svm_radius="auto": R = (20 + log T) ||p^mm*||, so every non-optimal logit is at
    # least 20 + log T below the optimal one and attention on it is >= 1 - e^-20
    D = make_attention_fig1c()
    est = AttentionSelector(D.head, D.key_query, solver="svm", classes=[-1, 1]).fit(D.X, D.y)
    keys = [x @ D.key_query.T for x in D.X]
    scores = [yi * (x @ D.head) for x, yi in zip(D.X, D.y)]
    opt = [int(np.argmax(s)) for s in scores]
    pmm = att_svm_by_hand(keys, opt)
    T = D.X.shape[1]
    np.testing.assert_allclose(est.query_, (20 + np.log(T)) * pmm, rtol=1e-6)
    for K, a in zip(keys, opt):
        logits = K @ est.query_
        gaps = logits[a] - np.delete(logits, a)
        assert gaps.min() >= 20 + np.log(T) - 1e-6
        s = np.exp(logits - logits.max())
        assert s[a] / s.sum() >= 1 - np.exp(-20)
    assert est.history_["loss"][0] == pytest.approx(
        risk(list(D.X), D.y, D.head, est.query_, D.key_query), rel=1e-10)


@pytest.mark.parametrize("solver, lr", [("gd", 0.5), ("ngd", 0.1)])
@pytest.mark.parametrize("train", ["p", "W"])
def test_selector_runs_follow_textbook_updates(solver, lr, train):
    seqs, y, v, W, _, w = ragged_problem(2, n=5, d=3, k=3)
    u = np.array([0.5, -1.0, 2.0])
    p0 = np.array([0.1, 0.2, -0.3])
    kw = dict(head=v, key_query=W, solver=solver, lr=lr, max_iter=25, train=train)
    if train == "p":
        est = AttentionSelector(init=p0, **kw).fit(seqs, y, sample_weight=w)
        x = p0.copy()

        def f(q):
            return risk(seqs, y, v, q, W, "logistic", w)
    else:
        est = AttentionSelector(fixed_query=u, **kw).fit(seqs, y, sample_weight=w)
        x = W.copy()

        def f(M):
            return risk(seqs, y, v, u, M, "logistic", w)

    # train="W" scales the step as in Lemma 1: lr/||u||^2 (gd), lr/||u|| (ngd)
    step = lr if train == "p" else lr / (u @ u if solver == "gd" else np.linalg.norm(u))
    for _ in range(25):
        g = numerical_grad(f, x)
        x = x - step * (g if solver == "gd" else g / np.linalg.norm(g))
    fitted = est.query_ if train == "p" else est.key_query_
    np.testing.assert_allclose(fitted, x, rtol=1e-6, atol=1e-8)
    assert est.history_["loss"][-1] == pytest.approx(f(x), rel=1e-8)


@pytest.mark.parametrize("solver, lr", [("gd", 1.0), ("ngd", 0.1)])
def test_joint_runs_follow_textbook_updates(solver, lr):
    X, y, P = make_joint_fig3("b", return_params=True)
    est = JointAttentionSVM(solver=solver, lr=lr, max_iter=30,
                            init=(P.head_init, P.query_init)).fit(X, y)
    v, p = P.head_init.copy(), P.query_init.copy()
    for _ in range(30):
        gv = numerical_grad(lambda q, p=p: risk(X, y, q, p), v)
        gp = numerical_grad(lambda q, v=v: risk(X, y, v, q), p)
        if solver == "gd":
            v, p = v - lr * gv, p - lr * gp
        else:  # each block normalized (NGD on L and on log L take the same steps)
            v, p = v - lr * gv / np.linalg.norm(gv), p - lr * gp / np.linalg.norm(gp)
    np.testing.assert_allclose(est.head_, v, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(est.query_, p, rtol=1e-6, atol=1e-8)
    assert est.history_["loss"][-1] == pytest.approx(risk(X, y, v, p), rel=1e-8)


@pytest.mark.parametrize("variant", ["a", "b"])
def test_joint_svm_limit_keeps_the_promised_margins(variant):
    # svm_radius="auto": label margin min_i Y_i v^T r_i = 20 and, on the inputs whose
    # selected token must win, the smallest positive logit gap of p equals 20
    X, y, P = make_joint_fig3(variant, return_params=True)
    est = JointAttentionSVM(solver="svm").fit(X, y)
    rows = np.arange(len(y))
    tokens = X[rows, est.selected_tokens_]
    v_mm = head_svm_by_hand(tokens, y)
    np.testing.assert_allclose(est.head_mm_direction_, v_mm / np.linalg.norm(v_mm),
                               atol=1e-6)
    assert (y * (tokens @ est.head_)).min() == pytest.approx(20.0, rel=1e-6)
    gaps = (X[rows, est.selected_tokens_][:, None, :] - X) @ est.query_
    gaps = np.delete(gaps.ravel(), rows * X.shape[1] + est.selected_tokens_)
    assert gaps[gaps > 1e-6].min() == pytest.approx(20.0, rel=1e-6)
    assert est.history_["loss"][0] == pytest.approx(risk(X, y, est.head_, est.query_),
                                                    rel=1e-10)


def test_att_svm_prime_ties_padding_and_infeasible_choices():
    # App. D's example: keys 1 and -1 both optimal, 0 not: two minimizers of norm 1;
    # the first choice (token 0, p = +1) is returned and the tie is counted
    K = np.array([[[1.0], [-1.0], [0.0]]])
    p, alpha, n_best = att_svm_prime(K, np.array([[1, 1, 0]]))  # 0/1 flags are accepted
    np.testing.assert_allclose(p, [1.0], atol=1e-9)
    np.testing.assert_array_equal(alpha, [0])
    assert n_best == 2
    # a padded (masked) token is not a token: with it the program would be infeasible
    K = np.array([[[1.0], [-1.0], [5.0]]])
    mask = np.array([[True, True, False]])
    p, alpha, _ = att_svm_prime(K, np.array([[True, False, False]]), mask=mask)
    np.testing.assert_allclose(p, [0.5], atol=1e-9)
    # the first choice is infeasible (same key as a non-optimal token), the second not
    K = np.array([[[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]])
    p, alpha, n_best = att_svm_prime(K, np.array([[True, True, False, False]]))
    np.testing.assert_array_equal(alpha, [1])
    assert n_best == 1
    np.testing.assert_allclose(p, [1.0, 0.0], atol=1e-9)  # p_0 >= 1 and p_0 - p_1 >= 1
    # exactly max_combinations choices are enumerated; every input needs an optimal token
    opt = np.array([[True, True, False]] * 2)
    att_svm_prime(np.random.default_rng(0).standard_normal((2, 3, 3)), opt,
                  max_combinations=4)
    with pytest.raises(ValueError, match="at least one real token per input"):
        att_svm_prime(np.ones((2, 3, 1)), np.array([[True, False, False], [False] * 3]))
    with pytest.raises(ValueError, match="unknown max-margin method 'magic'"):
        att_svm_prime(K, np.array([[True, True, False, False]]), method="magic")


def _joint_by_enumeration(seqs, y):
    """Sec. 3.1 by brute force over the real tokens: ``(alpha, v^mm, margin)``."""
    best = None
    for alpha in itertools.product(*[range(len(s)) for s in seqs]):
        tokens = np.array([s[a] for s, a in zip(seqs, alpha)])
        v = head_svm_by_hand(tokens, y)
        if v is None or att_svm_by_hand(seqs, alpha) is None:
            continue
        margin = 1 / np.linalg.norm(v)
        if best is None or margin > best[2] + 1e-9:
            best = (np.array(alpha), v, margin)
    return best


def test_joint_svm_heuristic_needs_its_starts():
    # found by search: the class-mean start alone ends at a worse fixed point; the
    # starts at the largest tokens reach the exhaustive optimum
    rng = np.random.default_rng(17)
    X = rng.standard_normal((5, 3, 3))
    y = np.where(np.arange(5) % 2 == 0, 1.0, -1.0)
    alpha, v, margin = _joint_by_enumeration(list(X), y)
    full = joint_svm(X, y, max_enumeration=3**5)  # exactly the number of choices
    assert full.exhaustive and full.n_candidates == 3**5
    np.testing.assert_array_equal(full.selected, alpha)
    heur = joint_svm(X, y, max_enumeration=3**5 - 1)
    assert not heur.exhaustive and 1 <= heur.n_candidates < 3**5
    np.testing.assert_array_equal(heur.selected, alpha)
    assert heur.label_margin == pytest.approx(margin, rel=1e-6)
    np.testing.assert_allclose(heur.head, v, atol=1e-5)
    mean_only = joint_svm(X, y, max_enumeration=1, n_starts=0)
    assert mean_only.label_margin < margin - 0.1


@pytest.mark.parametrize("max_enumeration", [256, 1])
def test_joint_svm_on_padded_inputs(max_enumeration):
    # ragged inputs padded with large tokens: padding is never selected nor compared
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((t, 3)) for t in (3, 2, 3, 2)]
    y = np.array([1.0, -1.0, 1.0, -1.0])
    X = np.full((4, 3, 3), 50.0)
    mask = np.zeros((4, 3), bool)
    for i, s in enumerate(seqs):
        X[i, :len(s)], mask[i, :len(s)] = s, True
    alpha, v, margin = _joint_by_enumeration(seqs, y)
    res = joint_svm(X, y, mask=mask, max_enumeration=max_enumeration)
    np.testing.assert_array_equal(res.selected, alpha)
    assert res.label_margin == pytest.approx(margin, rel=1e-6)
    rhs = np.where(res.support, 1.0, 0.0)
    np.testing.assert_allclose(res.relaxed, att_svm_by_hand(seqs, alpha, rhs), atol=1e-5)
    # a loose support tolerance makes every input a support vector: p^relax = p^mm
    loose = joint_svm(X, y, mask=mask, support_tol=1e3, max_enumeration=max_enumeration)
    assert loose.support.all()
    np.testing.assert_array_equal(loose.relaxed, loose.att_svm)
    with pytest.raises(ValueError, match="backend must be 'numpy' or 'torch'"):
        joint_svm(X, y, mask=mask, max_enumeration=max_enumeration, backend="jax")
