"""AttentionSelector, ATT-SVM and the attention data recipes (Tarzanagh et al. 2023)."""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline

from skntp._backend import get_backend
from skntp._optim import minimize
from skntp.attention import AttentionSelector, diagnose_selection
from skntp.datasets import (
    make_attention_fig1a,
    make_attention_fig1b,
    make_attention_fig1c,
    make_attention_fig8,
    make_attention_random,
)
from skntp.losses.attention import (
    AttentionObjective,
    attention_loss_grad,
    attention_weights,
    compute_keys,
)
from skntp.metrics import alignment
from skntp.svm import (
    NotSeparableError,
    att_svm,
    att_svm_prime,
    is_locally_optimal,
    svm_neighbors,
)
from skntp.sweeps import attention_trials

C = [-1.0, 1.0]  # name both labels for single-input data


def _unit(w):
    return w / np.linalg.norm(w)


def _random_problem(rng, n=5, T=4, d=3, k=2, ragged=True):
    X = rng.standard_normal((n, T, d))
    mask = np.ones((n, T), bool)
    if ragged:
        mask[1, T - 1] = False
        mask[2, T - 2:] = False
    X[~mask] = 0.0
    return (X, mask, rng.choice([-1.0, 1.0], n), rng.standard_normal(d),
            rng.standard_normal((k, d)), rng.standard_normal(k), rng.random(n))


# --------------------------------------------------------------------- model math
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_gradients_match_finite_differences(loss):
    rng = np.random.default_rng(0)
    X, mask, y, v, W, p, sw = _random_problem(rng)
    xp = get_backend().xp

    def risk(v_, p_, W_):
        K = compute_keys(xp, X, W_)
        return float(attention_loss_grad(xp, X, K, y, v_, p_, mask=mask, loss=loss,
                                         sample_weight=sw)[0])

    _, (gp, gv, gW) = attention_loss_grad(xp, X, X @ W.T, y, v, p, mask=mask, loss=loss,
                                          sample_weight=sw, wrt=("p", "v", "W"))
    eps = 1e-6

    def num(f, x):
        e = np.eye(x.size)
        return np.array([(f(x + eps * e[j].reshape(x.shape)) - f(x - eps * e[j].reshape(
            x.shape))) / (2 * eps) for j in range(x.size)]).reshape(x.shape)

    np.testing.assert_allclose(gp, num(lambda q: risk(v, q, W), p), atol=1e-8)
    np.testing.assert_allclose(gv, num(lambda q: risk(q, p, W), v), atol=1e-8)
    np.testing.assert_allclose(gW, num(lambda q: risk(v, p, q), W), atol=1e-8)


def test_padding_gets_zero_attention_and_batches_match():
    rng = np.random.default_rng(1)
    X, mask, y, v, W, p, _ = _random_problem(rng)
    s = attention_weights(np, X @ W.T, p, mask)
    assert np.all(s[~mask] == 0) and np.allclose(s.sum(1), 1)
    # batched (leading trial axis) equals one call per trial
    Xb = rng.standard_normal((3, 4, 5, 2))
    yb = rng.choice([-1.0, 1.0], (3, 4))
    vb, pb = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    rb, (gb,) = attention_loss_grad(np, Xb, Xb, yb, vb, pb)
    for b in range(3):
        r1, (g1,) = attention_loss_grad(np, Xb[b], Xb[b], yb[b], vb[b], pb[b])
        assert np.isclose(rb[b], r1) and np.allclose(gb[b], g1)


def test_gradient_accurate_when_saturated():
    """At large ||p|| the gradient is a sum of e^{-gap} terms; it must not be noise."""
    D = make_attention_fig1a()
    K, X = D.K, D.X
    p = 30.0 * np.array([-0.1, 1.0, 0.0]) / np.linalg.norm([-0.1, 1.0])
    _, (g,) = attention_loss_grad(np, X, K, D.y, D.head, p, loss="correlation")
    # reference: h_t - f = sum_tau s_tau (h_t - h_tau), computed pairwise
    s = attention_weights(np, K, p)[0]
    h = X[0] @ D.head
    diff = (s[None, :] * (h[:, None] - h[None, :])).sum(1)
    ref = -(K[0].T @ (s * diff))
    assert np.linalg.norm(ref) > 0
    np.testing.assert_allclose(g, ref, rtol=1e-10, atol=0)


def test_torch_backend_matches_numpy():
    pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    X, mask, y, v, W, p, sw = _random_problem(rng)
    be = get_backend("torch")
    r, g = attention_loss_grad(np, X, X @ W.T, y, v, p, mask=mask, sample_weight=sw,
                               wrt=("p", "v"))
    rt, gt = attention_loss_grad(be.xp, be.asarray(X), be.asarray(X @ W.T), be.asarray(y),
                                 be.asarray(v), be.asarray(p), mask=be.asbool(mask),
                                 sample_weight=be.asarray(sw), wrt=("p", "v"))
    assert np.isclose(float(rt), r)
    for a, b in zip(g, gt, strict=True):
        np.testing.assert_allclose(b.numpy(), a, atol=1e-12)
    D = make_attention_fig8()
    a = AttentionSelector(D.head, max_iter=50, init=D.starts["lmm"]).fit(D.X, D.y)
    b = AttentionSelector(D.head, max_iter=50, init=D.starts["lmm"],
                          backend="torch").fit(D.X, D.y)
    np.testing.assert_allclose(b.query_, a.query_, atol=1e-10)


# ------------------------------------------------------------------------ ATT-SVM
@pytest.mark.parametrize("seed", range(4))
def test_att_svm_matches_cvxpy(seed):
    rng = np.random.default_rng(seed)
    n, T, d = 4, 5, int(rng.choice([6, 12]))
    K = rng.standard_normal((n, T, d))
    sel = rng.integers(0, T, n)
    mask = np.ones((n, T), bool)
    mask[0, -1] = mask[0, sel[0]] or mask[0, -1]
    p1, r1 = att_svm(K, sel, mask=mask, method="nnls", return_result=True)
    p2, r2 = att_svm(K, sel, mask=mask, method="cvxpy", return_result=True)
    np.testing.assert_allclose(p1, p2, atol=1e-6 * max(1.0, np.linalg.norm(p2)))
    np.testing.assert_allclose(r1.dual, r2.dual, atol=1e-5)
    assert r1.max_violation < 1e-9
    # relaxed program (10): inputs 0 and 2 only need a non-negative margin
    relaxed = np.array([True, False, True, False])
    q1 = att_svm(K, sel, relaxed, mask=mask, method="nnls")
    q2 = att_svm(K, sel, relaxed, mask=mask, method="cvxpy")
    np.testing.assert_allclose(q1, q2, atol=1e-6 * max(1.0, np.linalg.norm(q2)))
    assert np.linalg.norm(q1) <= np.linalg.norm(p1) + 1e-9


def test_att_svm_infeasible_both_methods():
    rng = np.random.default_rng(5)
    K = rng.standard_normal((6, 5, 2))  # d = 2, 6 inputs, random selections
    sel = rng.integers(0, 5, 6)
    for method in ("nnls", "cvxpy"):
        with pytest.raises(NotSeparableError, match="ATT-SVM"):
            att_svm(K, sel, method=method)
    K = rng.standard_normal((2, 3, 3))
    K[1, 2] = K[1, 0]  # the selected token's key equals another token's key
    with pytest.raises(NotSeparableError, match="same key as token 2"):
        att_svm(K, [1, 0])


def test_att_svm_prime_enumeration():
    # App. D: n = d = 1, optimal keys 1 and -1, non-optimal 0: p^mm in {-1, 1}
    K = np.array([[[1.0], [-1.0], [0.0]]])
    p, alpha, n_best = att_svm_prime(K, np.array([[True, True, False]]))
    assert abs(abs(p[0]) - 1) < 1e-9 and n_best == 2
    # a random instance: the enumeration's optimum is the best single choice
    rng = np.random.default_rng(3)
    K = rng.standard_normal((3, 4, 5))
    opt = np.zeros((3, 4), bool)
    opt[:, :2] = True
    p, alpha, _ = att_svm_prime(K, opt)
    norms = []
    for a in np.ndindex(2, 2, 2):
        against = ~opt
        from skntp.svm import att_svm_problem, solve_max_margin

        pr = att_svm_problem(K, np.array(a), against=against)
        norms.append(np.linalg.norm(solve_max_margin(pr, method="cvxpy").primal))
    assert np.isclose(np.linalg.norm(p), min(norms), rtol=1e-6)
    with pytest.raises(ValueError, match="max_combinations"):
        att_svm_prime(K, opt, max_combinations=4)


def test_svm_neighbors_and_local_optimality():
    D = make_attention_fig1b()
    lmm = att_svm(D.K, [1])
    np.testing.assert_allclose(lmm, [1.0, 0.0, 0.0], atol=1e-9)
    nb = svm_neighbors(D.K, [1], lmm)
    assert nb.tolist() == [[True, False, False]]  # (0, 0) is the only neighbor
    assert is_locally_optimal(D.scores, [1], nb)
    D = make_attention_fig8()
    p = att_svm(D.K, [0, 1])
    nb = svm_neighbors(D.K, [0, 1], p)
    assert nb.tolist() == [[False, True], [False, False]]  # no neighbor in input 2
    assert is_locally_optimal(D.scores, [0, 1], nb)
    np.testing.assert_allclose(att_svm(D.K, [0, 0]), [1.0, 3.0], atol=1e-9)


# ----------------------------------------------------------------------- theorems
def _assumption_b_instance(rng, T=5, d=4):
    """n = 1, W = diag(1..1, 0), v = e_d: scores 1 (optimal) and 0 (Assumption B)."""
    X = np.zeros((1, T, d))
    X[0, :, :-1] = rng.standard_normal((T, d - 1))
    opt = int(rng.integers(T))
    X[0, opt, -1] = 1.0
    W = np.diag(np.r_[np.ones(d - 1), 0.0])
    v = np.zeros(d)
    v[-1] = 1.0
    return X, W, v, opt


@pytest.mark.parametrize("seed", range(3))
def test_thm2_gd_single_input_reaches_gmm_from_any_start(seed):
    rng = np.random.default_rng(seed)
    X, W, v, opt = _assumption_b_instance(rng)
    gmm = _unit(att_svm(X @ W.T, [opt]))
    for _ in range(3):
        p0 = 3.0 * rng.standard_normal(X.shape[-1]) * np.r_[np.ones(X.shape[-1] - 1), 0]
        est = AttentionSelector(v, W, solver="ngd", lr=0.1, max_iter=2000, init=p0,
                                classes=C).fit(X, [1.0])
        assert est.convergence_ == "global"
        assert est.selected_tokens_[0] == opt
        assert alignment(est.query_, gmm) > 0.999
        np.testing.assert_allclose(est.gmm_direction_, gmm, atol=1e-8)


@pytest.mark.parametrize("seed", range(2))
def test_thm1_regularization_path_reaches_gmm(seed):
    rng = np.random.default_rng(seed + 10)
    n, T, d = 3, 4, 8  # d > n: the optimal tokens are separable (cf. Lemma 2)
    X = rng.standard_normal((n, T, d))
    y = np.array([1.0, -1.0, 1.0])
    v = _unit(rng.standard_normal(d))
    est = AttentionSelector(v, solver="regpath", max_iter=300).fit(X, y)
    h = est.history_
    pmm = att_svm(X, est.optimal_tokens_, method="cvxpy")
    np.testing.assert_allclose(h["radius"], np.geomspace(0.1, 30, 16) * np.linalg.norm(pmm),
                               rtol=1e-6)
    np.testing.assert_allclose(h["norm"], h["radius"], rtol=1e-6)  # on the boundary
    al = h["gmm_alignment"]
    assert al[-1] > 0.995 and al[-1] > al[0] and np.all(al[-4:] > 0.98)
    assert est.convergence_ == "global"
    np.testing.assert_array_equal(est.selected_tokens_, est.optimal_tokens_)


@pytest.mark.parametrize("make", [make_attention_fig1b, make_attention_fig8])
def test_thm3_starts_in_different_cones_reach_different_directions(make):
    D = make()
    found = {}
    for name in ("lmm", "gmm"):
        est = AttentionSelector(D.head, D.key_query, solver="ngd", lr=0.1, max_iter=2000,
                                init=D.starts[name], classes=C).fit(D.X, D.y)
        np.testing.assert_array_equal(est.selected_tokens_, D.expected[name])
        assert est.convergence_ == ("local" if name == "lmm" else "global")
        assert est.is_locally_optimal_
        target = att_svm(D.K, D.expected[name])
        assert alignment(est.query_, target) > 0.999
        assert est.alignment_ > 0.999
        found[name] = est.mm_direction_
    assert alignment(found["lmm"], found["gmm"]) < 0.9


@pytest.mark.parametrize("make", [make_attention_fig1a, make_attention_fig1c])
def test_global_examples_reach_gmm_from_every_start(make):
    D = make()
    for name, p0 in D.starts.items():
        est = AttentionSelector(D.head, D.key_query, max_iter=1500, init=p0,
                                classes=C).fit(D.X, D.y)
        np.testing.assert_array_equal(est.selected_tokens_, D.expected[name])
        assert est.convergence_ == "global" and est.alignment_ > 0.999


@pytest.mark.parametrize("solver", ["gd", "ngd"])
def test_lemma1_training_W_gives_the_same_iterates(solver):
    rng = np.random.default_rng(4)
    n, T, d = 4, 3, 3
    X = rng.standard_normal((n, T, d))
    y = np.array([1, 0, 1, 0])
    v = rng.standard_normal(d)
    p0 = rng.standard_normal(d)
    u = rng.standard_normal(d) * 2.0
    # the iterates only: no limit (ATT-SVM is infeasible on these inputs, and would warn)
    common = {"head": v, "solver": solver, "lr": 0.3, "max_iter": 60, "compute_limits": False}
    a = AttentionSelector(train="p", init=p0, **common).fit(X, y)
    b = AttentionSelector(train="W", key_query=np.outer(u, p0) / (u @ u), fixed_query=u,
                          **common).fit(X, y)
    np.testing.assert_allclose(b.key_query_, np.outer(u, a.query_) / (u @ u),
                               rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(b.history_["loss"], a.history_["loss"], rtol=1e-12)
    np.testing.assert_allclose(b.decision_function(X), a.decision_function(X), rtol=1e-10)


def test_solver_svm_sets_query_to_radius_times_gmm():
    D = make_attention_fig1c()
    est = AttentionSelector(D.head, D.key_query, solver="svm", classes=C).fit(D.X, D.y)
    pmm = att_svm(D.K, [2, 2, 2], method="cvxpy")
    np.testing.assert_allclose(est.gmm_direction_, _unit(pmm), atol=1e-7)
    R = (20 + np.log(3)) * np.linalg.norm(pmm)
    np.testing.assert_allclose(est.query_, R * _unit(pmm), rtol=1e-7)
    assert est.attention_saturation_ >= 1 - np.exp(-20)
    assert est.convergence_ == "global" and est.alignment_ == pytest.approx(1.0)
    # train="W": the Lemma 1 form u (R p^mm*)^T / ||u||^2
    u = np.array([1.0, 2.0, 0.5])
    w = AttentionSelector(D.head, D.key_query, train="W", solver="svm", fixed_query=u,
                          classes=C).fit(D.X, D.y)
    pmm_x = att_svm(D.X, [2, 2, 2])  # W trained: the effective query W^T u acts on X
    np.testing.assert_allclose(w.key_query_.T @ u,
                               (20 + np.log(3)) * np.linalg.norm(pmm_x) * _unit(pmm_x),
                               rtol=1e-6)
    assert w.convergence_ == "global"


def test_tied_optimal_tokens_use_att_svm_prime():
    X = np.array([[[1.0, 1.0], [-1.0, 1.0], [0.0, 0.0]]])  # v = e_2: two optimal tokens
    v = np.array([0.0, 1.0])
    W = np.array([[1.0, 0.0]])  # keys 1, -1, 0 (App. D's example)
    with pytest.warns(UserWarning, match="ATT-SVM'.*not unique"):
        est = AttentionSelector(v, W, solver="svm", classes=C).fit(X, [1.0])
    assert abs(abs(est.gmm_direction_[0]) - 1) < 1e-12
    assert est.selected_tokens_[0] in (0, 1) and est.convergence_ == "global"
    with pytest.warns(UserWarning, match="ATT-SVM'"):
        ngd = AttentionSelector(v, W, max_iter=500, init=[0.5],
                                classes=C).fit(X, [1.0])
    assert ngd.selected_tokens_[0] == 0 and ngd.convergence_ == "global"


# ------------------------------------------------------------------ estimator API
def _forward_by_hand(seqs, head, key_query, query):
    """``s_i = softmax(X_i W^T p)`` and ``f_i = v^T X_i^T s_i``, one sequence at a time."""
    att, feats = [], []
    for x in seqs:
        logits = x @ key_query.T @ query
        e = np.exp(logits - logits.max())
        att.append(e / e.sum())
        feats.append(x.T @ att[-1])
    return att, np.array(feats), np.array(feats) @ head


def test_ragged_input_transform_attention_predict():
    rng = np.random.default_rng(7)
    seqs = [rng.standard_normal((t, 3)) for t in (2, 5, 3, 4)]
    y = ["a", "b", "a", "b"]
    est = AttentionSelector(max_iter=100).fit(seqs, y)
    att, feats, f = _forward_by_hand(seqs, est.head_, est.key_query_, est.query_)
    A = est.attention_weights(seqs)
    assert A.shape == (4, 5)
    for i, a in enumerate(att):  # padding gets exactly zero attention
        np.testing.assert_allclose(A[i, :len(a)], a, rtol=1e-12)
        assert np.all(A[i, len(a):] == 0)
    np.testing.assert_allclose(est.transform(seqs), feats, rtol=1e-12)
    np.testing.assert_allclose(est.decision_function(seqs), f, rtol=1e-12)
    np.testing.assert_array_equal(est.predict(seqs), np.where(f > 0, "b", "a"))
    np.testing.assert_allclose(est.predict_proba(seqs)[:, 1], 1 / (1 + np.exp(-f)),
                               rtol=1e-12)
    # a 3-D array of equal-length sequences needs no padding: the same per-sequence math
    full = np.stack([s[:2] for s in seqs])
    _, feats2, f2 = _forward_by_hand(list(full), est.head_, est.key_query_, est.query_)
    np.testing.assert_allclose(est.transform(full), feats2, rtol=1e-12)
    np.testing.assert_allclose(est.decision_function(full), f2, rtol=1e-12)
    assert not hasattr(AttentionSelector(loss="correlation"), "predict_proba")


def test_bad_inputs_give_clear_errors():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((6, 4, 3))
    y = np.array([0, 1] * 3)
    est = AttentionSelector(max_iter=20, compute_limits=False).fit(X, y)  # ATT-SVM infeasible
    with pytest.raises(ValueError, match="dimension 2.*3 features"):
        est.predict([rng.standard_normal((3, 2)), rng.standard_normal((2, 2))])
    with pytest.raises(ValueError, match="different token dimensions"):
        AttentionSelector().fit([np.ones((2, 3)), np.ones((2, 2))], [0, 1])
    Xn = X.copy()
    Xn[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        AttentionSelector().fit(Xn, y)
    with pytest.raises(ValueError, match="needs 2 classes.*1 class"):
        AttentionSelector().fit(X, np.zeros(6))
    with pytest.raises(ValueError, match="Only binary"):
        AttentionSelector().fit(X, np.arange(6) % 3)
    with pytest.raises(ValueError, match="head must have shape"):
        AttentionSelector(head=np.ones(2)).fit(X, y)
    with pytest.raises(ValueError, match="key_query must have shape"):
        AttentionSelector(key_query=np.eye(2)).fit(X, y)
    with pytest.raises(ValueError, match="non-zero fixed query"):
        AttentionSelector(train="W", fixed_query=np.zeros(3)).fit(X, y)
    # infeasible ATT-SVM: the optimal token's key equals another token's key
    D = make_attention_fig1a()
    Xi = D.X.copy()
    Xi[0, 0, :2] = Xi[0, 2, :2]
    with pytest.raises(NotSeparableError, match="same key"):
        AttentionSelector(D.head, D.key_query, solver="svm", classes=C).fit(Xi, D.y)
    with pytest.warns(UserWarning, match="gmm_direction_ is None"):
        e = AttentionSelector(D.head, D.key_query, max_iter=20, classes=C).fit(Xi, D.y)
    assert e.gmm_direction_ is None


def test_pipeline_and_grid_search_over_solver():
    rng = np.random.default_rng(9)
    n, T, d = 40, 4, 6
    X = np.clip(rng.standard_normal((n, T, d)), -2, 2)
    X[:, :, 1] = 0.0
    y = rng.integers(0, 2, n)
    key = rng.integers(0, T, n)  # a planted token, optimal and separable along e_2
    X[np.arange(n), key, 0] = np.where(y == 1, 3.0, -3.0)
    X[np.arange(n), key, 1] = 4.0
    head = np.eye(d)[0]
    pipe = make_pipeline(AttentionSelector(head, max_iter=200), LogisticRegression())
    assert pipe.fit(X, y).score(X, y) > 0.8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gs = GridSearchCV(AttentionSelector(head, max_iter=200),
                          {"solver": ["gd", "ngd", "svm"]}, cv=2, error_score="raise")
        gs.fit(X, y)
    # the search's scores are each solver refitted by hand on the same folds
    manual = {}
    for solver in ("gd", "ngd", "svm"):
        scores = []
        for train, test in StratifiedKFold(n_splits=2).split(X.reshape(n, -1), y):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = AttentionSelector(head, max_iter=200, solver=solver).fit(X[train],
                                                                              y[train])
            _, _, f = _forward_by_hand(X[test], head, np.eye(d), est.query_)
            scores.append(np.mean(np.where(f > 0, 1, 0) == y[test]))
        manual[solver] = np.mean(scores)
    got = dict(zip(gs.cv_results_["param_solver"], gs.cv_results_["mean_test_score"]))
    assert got == pytest.approx(manual, rel=1e-12)
    assert gs.best_params_["solver"] == max(manual, key=manual.get)  # first of ties
    assert gs.best_score_ > 0.8


# ------------------------------------------------------------------------ Fig. 9
def test_attention_trials_span_reduction_is_exact_and_classifies():
    X, y, v = make_attention_random(4, 6, 40, n_trials=12, random_state=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = attention_trials(X, y, v, max_iter=300)
        b = attention_trials(X, y, v, max_iter=300, reduce=False)
    np.testing.assert_allclose(a["norm"], b["norm"], rtol=1e-10)
    np.testing.assert_array_equal(a["convergence"], b["convergence"])
    # each trial agrees with a single AttentionSelector fit of the same data
    for t in range(3):
        est = AttentionSelector(v[t], solver="ngd", lr=1.0, max_iter=300,
                                record_every=300).fit(X[t], y[t])
        assert est.convergence_ == b["convergence"][t]
        assert np.isclose(np.linalg.norm(est.query_), b["norm"][t], rtol=1e-9)
    sat = a["convergence"] != "not-saturated"
    assert sat.all() and np.nanmean(a["correlation"][sat]) > 0.99


def test_attention_trials_takes_the_selector_loss_names():
    X, y, v = make_attention_random(2, 3, 4, n_trials=2, random_state=0)
    a = attention_trials(X, y, v, max_iter=5)
    b = attention_trials(X, y, v, loss="log_loss", max_iter=5)
    np.testing.assert_array_equal(a["norm"], b["norm"])
    with pytest.raises(ValueError, match="loss must be one of"):
        attention_trials(X, y, v, loss="logistic", max_iter=5)


def test_diagnose_selection_not_saturated():
    D = make_attention_fig1a()
    rep = diagnose_selection(D.K, D.scores, np.zeros(3))
    assert rep["convergence"] == "not-saturated" and rep["saturation"] == pytest.approx(1 / 3)


def _fig9_rows(dims, n_trials, max_iter):
    """Fig. 9's shares per d (App. E): NGD lr 1 on p from 0, one batched run per d."""
    rows = {}
    for d in dims:
        X, y, v = make_attention_random(4, 6, d, n_trials=n_trials, random_state=d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # saturation stops some trials early
            r = attention_trials(X, y, v, solver="ngd", lr=1.0, max_iter=max_iter)
        conv = r["convergence"]
        sat = conv != "not-saturated"
        rows[d] = {"not_saturated": np.mean(~sat),
                   "lmm": np.mean((conv == "local") | (conv == "global")),
                   "gmm": np.mean(conv == "global"),
                   "corr": r["correlation"][sat], "gap": r["min_score_gap"][sat]}
    return rows


def test_fig9_small():
    by_d = _fig9_rows((2, 100), 40, 300)
    assert by_d[2]["not_saturated"] > by_d[100]["not_saturated"]
    assert by_d[100]["lmm"] > 0.95 and np.nanmean(by_d[100]["corr"]) > 0.99


@pytest.mark.slow
def test_fig9_reproduction_full():
    by_d = _fig9_rows((2, 5, 10, 100, 300, 500), 1000, 1000)
    assert by_d[2]["not_saturated"] > 0.5
    for d in (10, 100, 300, 500):
        assert by_d[d]["lmm"] > 0.98
    gmm = [by_d[d]["gmm"] for d in (5, 10, 100, 300, 500)]
    assert gmm == sorted(gmm)  # GMM becomes more likely with d
    gaps = np.concatenate([r["gap"] for r in by_d.values()])
    assert np.mean(gaps < 0) < 0.01
    corr = np.concatenate([r["corr"] for r in by_d.values()])
    assert np.nanmean(corr) > 0.99


def test_minimize_batched_objective_matches_single():
    """The batched objective used by the sweep runs each trial as alone."""
    X, y, v = make_attention_random(3, 4, 5, n_trials=3, random_state=0)
    obj = AttentionObjective(np, X, y, v=v, train=("p",))
    res = minimize(obj, (np.zeros((3, 5)),), xp=np, solver="ngd", lr=1.0, max_iter=40,
                   batched=True)
    for t in range(3):
        one = AttentionObjective(np, X[t], y[t], v=v[t], train=("p",))
        r1 = minimize(one, (np.zeros(5),), xp=np, solver="ngd", lr=1.0, max_iter=40)
        np.testing.assert_allclose(res.params[0][t], r1.params[0], rtol=1e-12)


def test_fig8_lmm_and_gmm_starts():
    data = make_attention_fig8()
    fits = {name: AttentionSelector(data.head, data.key_query, solver="ngd", lr=0.1,
                                    max_iter=1000, init=p0, classes=[-1, 1],
                                    record_every=10).fit(data.X, data.y)
            for name, p0 in data.starts.items()}
    assert fits["lmm"].convergence_ == "local" and fits["gmm"].convergence_ == "global"
    assert fits["lmm"].trajectory_["query"].shape == (101, 2)


@pytest.mark.parametrize("how", ["undecided", "max_iter"])
def test_an_uncertified_att_svm_leaves_the_selection_undecided(monkeypatch, how):
    # Def. 2 needs the tight rows of a certified solution: where the selected tokens'
    # ATT-SVM is undecided, or ends with a point no method certified, the diagnosis
    # says neither "locally optimal" nor "not": None, convergence "undecided"
    from skntp import attention
    from skntp.svm import MaxMarginResult, UndecidedError

    D = make_attention_fig1c()
    solved = attention.att_svm

    def uncertified(*args, return_result=False, **kwargs):
        if not return_result:  # (the GMM of the optimal tokens: unchanged)
            return solved(*args, **kwargs)
        if how == "undecided":
            raise UndecidedError("ATT-SVM: undecided (by this test)")
        p, res = solved(*args, return_result=True, **kwargs)
        return p, MaxMarginResult(primal=p, dual=res.dual, method=res.method,
                                  status="max_iter")

    est = AttentionSelector(D.head, D.key_query, solver="svm", classes=C).fit(D.X, D.y)
    assert est.convergence_ == "global" and est.is_locally_optimal_ is True
    monkeypatch.setattr(attention, "att_svm", uncertified)
    est = AttentionSelector(D.head, D.key_query, solver="svm", classes=C).fit(D.X, D.y)
    assert est.attention_saturation_ >= 1 - np.exp(-20)
    assert est.convergence_ == "undecided" and est.is_locally_optimal_ is None
    assert est.svm_neighbors_ is None
