"""Attention with one query per input and a factored key-query matrix.

The theorems of "Transformers as Support Vector Machines" (Tarzanagh, Li,
Thrampoulidis, Oymak, 2023) on the setup of its public code (n = 6 inputs,
T = 8 unit tokens, d = 10, a fixed unit head, normalized GD with step 0.1):
gradient descent on ``W`` converges in direction to the Frobenius-norm
ATT-SVM of the selected tokens (Thm. 1), on the factors of ``W = Q K^T`` to the
nuclear-norm one (Thm. 2).
"""

import functools
import warnings

import numpy as np
import pytest
from helpers import key_query_setup, relu_setup
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skntp import AttentionSelector, KeyQuerySelector
from skntp.svm import att_svm_w


def _fit(seed, attention, parameterization, solver="ngd", max_iter=2000, **kw):
    X, y, Z, v = key_query_setup(seed)
    if attention == "cross":
        X, query_index = np.concatenate([X, Z[:, None]], axis=1), "extra-row"
    else:
        query_index = 0
    est = KeyQuerySelector(head=v, query_index=query_index,
                           parameterization=parameterization, solver=solver, lr=0.1,
                           max_iter=max_iter, classes=[-1, 1], random_state=seed, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y), X, y


@functools.cache
def _alignments(seed, attention, parameterization, solver="ngd", max_iter=2000):
    """``limit_alignments_`` of :func:`_fit`, computed once per worker: the slow tier's
    100- and 30-seed goals begin with the seeds of the default tier's tests."""
    return dict(_fit(seed, attention, parameterization, solver=solver,
                     max_iter=max_iter)[0].limit_alignments_)


def _corr(seeds, attention, parameterization, **kw):
    own = "fro" if parameterization == "W" else "nuclear"
    other = "nuclear" if own == "fro" else "fro"
    rows = [_alignments(seed, attention, parameterization, **kw) for seed in seeds]
    return np.array([r[own] for r in rows]), np.array([r[other] for r in rows])


@pytest.mark.parametrize("attention", ["cross", "self"])
def test_gd_on_W_converges_to_the_frobenius_limit(attention):
    # the authors' code: mean correlation 0.9962 with W^fro, 0.859 with W^nuc
    own, other = _corr(range(8), attention, "W")
    assert own.mean() >= 0.9962 and own.min() >= 0.995
    assert (own > other).all() and other.mean() < 0.95


@pytest.mark.parametrize("attention", ["cross", pytest.param("self", marks=pytest.mark.slow)])
def test_regularization_path_of_the_factors_converges_to_the_nuclear_limit(attention):
    own, other = _corr(range(4), attention, "KQ", solver="regpath", max_iter=200)
    assert own.mean() >= 0.99 and own.min() >= 0.985
    assert (own > other).all()


@pytest.mark.parametrize("attention", ["cross", "self"])
def test_normalized_gd_on_the_factors_goes_to_the_nuclear_limit(attention):
    # normalized GD on (Q, K) approaches W^nuc slowly (the correlation still grows
    # at 2000 steps); the authors' 0.9964 is helped by an eps ||.||^2 term of their
    # loss, which holds the factors at the edge of float64 saturation
    own, other = _corr(range(8), attention, "KQ")
    assert np.median(own) >= 0.98 and own.mean() >= 0.95
    assert (own > other).sum() >= 7 and own.mean() > other.mean() + 0.08


def test_attributes_of_the_factored_model():
    est, X, y = _fit(0, "cross", "KQ", max_iter=300, rank=4)
    Q, K = est.query_factor_, est.key_factor_
    assert Q.shape == (10, 4) and K.shape == (10, 4)
    np.testing.assert_allclose(est.key_query_, Q @ K.T)
    assert est.mm_direction_.shape == (10, 10)
    np.testing.assert_allclose(est.mm_direction_, est.limit_directions_["nuclear"])
    assert est.limit_ranks_["nuclear"] < est.limit_ranks_["fro"]
    assert est.alignment_ == pytest.approx(est.limit_alignments_["nuclear"])
    h = est.history_
    assert {"alignment", "alignment_fro", "alignment_nuclear", "log_grad_scale"} <= set(h)
    np.testing.assert_allclose(h["alignment"], h["alignment_nuclear"])
    assert est.trajectory_["key_query"].shape == (len(h["loss"]), 10, 10)
    np.testing.assert_allclose(est.trajectory_["key_query"][-1], est.key_query_)
    assert est.query_ is None
    # the explicit limit of the selected tokens, solved here directly
    Z, tokens = X[:, -1], X[:, :-1]
    W = att_svm_w(tokens, Z, est.selected_tokens_, norm="nuclear")
    np.testing.assert_allclose(est.limit_directions_["nuclear"], W / np.linalg.norm(W),
                               atol=1e-4)


def test_predictions_use_each_inputs_own_query():
    est, X, y = _fit(1, "self", "W", max_iter=200)
    W = est.key_query_
    logits = np.einsum("itd,kd,ik->it", X, W, X[:, 0])
    s = np.exp(logits - logits.max(1, keepdims=True))
    s /= s.sum(1, keepdims=True)
    np.testing.assert_allclose(est.attention_weights(X), s, atol=1e-12)
    np.testing.assert_allclose(est.decision_function(X), np.einsum("it,itd,d->i", s, X,
                                                                    est.head_))
    # cross-attention: the extra row is the query, never a token
    est, X, y = _fit(1, "cross", "W", max_iter=200)
    assert np.all(est.attention_weights(X)[:, -1] == 0)
    assert est.transform(X).shape == (6, 10)


def test_svm_solver_sets_the_scaled_limit():
    X, y, Z, v = key_query_setup(3)
    Xc = np.concatenate([X, Z[:, None]], axis=1)
    for parameterization, norm in (("W", "fro"), ("KQ", "nuclear")):
        est = KeyQuerySelector(head=v, query_index="extra-row",
                               parameterization=parameterization, solver="svm",
                               classes=[-1, 1]).fit(Xc, y)
        W = att_svm_w(X, Z, np.argmax(y[:, None] * (X @ v), axis=1), norm=norm)
        np.testing.assert_allclose(est.key_query_, (20 + np.log(8)) * W, rtol=1e-4,
                                   atol=1e-4 * np.abs(W).max())
        assert est.convergence_ == "global" and est.alignment_ > 1 - 1e-8


def test_grid_search_over_the_parameterization_in_a_pipeline():
    X, y, Z, v = key_query_setup(0, n=12)
    Xc = np.concatenate([X, Z[:, None]], axis=1)
    pipe = make_pipeline(FunctionTransformer(lambda a: a),
                         KeyQuerySelector(head=v, query_index="extra-row",
                                          max_iter=100, classes=[-1, 1], random_state=0))
    grid = GridSearchCV(pipe, {"keyqueryselector__parameterization": ["W", "KQ"]}, cv=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid.fit(Xc, y)
    assert set(grid.cv_results_["param_keyqueryselector__parameterization"]) == {"W", "KQ"}
    assert grid.best_estimator_[-1].key_query_.shape == (10, 10)


def test_factors_start_where_asked_and_keep_the_previous_fit_on_error():
    X, y, Z, v = key_query_setup(2)
    rng = np.random.default_rng(0)
    Q0, K0 = rng.standard_normal((10, 3)), rng.standard_normal((10, 3))
    with pytest.warns(ConvergenceWarning, match="lr=1e-12 is far too small"):  # stay at init
        est = KeyQuerySelector(head=v, query_index=0, parameterization="KQ", rank=3,
                               init=(Q0, K0), solver="gd", lr=1e-12, max_iter=1,
                               compute_limits=False, classes=[-1, 1]).fit(X, y)
    np.testing.assert_allclose(est.key_query_, Q0 @ K0.T, rtol=1e-9)
    before = est.key_query_.copy()
    with pytest.raises(ValueError, match="shape"):
        est.set_params(init=(Q0, K0[:, :2])).fit(X, y)
    np.testing.assert_array_equal(est.key_query_, before)


@pytest.mark.parametrize("name, value", [
    ("query_index", 0), ("parameterization", "KQ"), ("rank", 2), ("value", np.eye(3)),
    ("activation", "relu"), ("selection_threshold", 0.1),
])
def test_query_model_has_no_key_query_options(name, value):
    # the key-query model is its own estimator: AttentionSelector does not take its options
    with pytest.raises(TypeError, match=name):
        AttentionSelector(**{name: value})


@pytest.mark.parametrize("params, X_shape, match", [
    (dict(rank=2), None, "needs parameterization='KQ'"),
    (dict(parameterization="KQ", init="zeros"), None, "saddle point"),
    (dict(parameterization="KQ", init=np.eye(3)), None, "pair"),
    (dict(query_index=5), None, "not a token of inputs"),
    (dict(query_index=-6), None, "not a token of inputs"),
    (dict(query_index="extra-row"), (4, 1, 3), "fewer than 2 rows"),
    (dict(query_index=0, key_query=np.ones((2, 3))), None, "must be \\(3, 3\\)"),
    (dict(query_index=0, fixed_query=np.ones(3)), None, "query_index gives every input"),
])
def test_bad_configurations(params, X_shape, match):
    rng = np.random.default_rng(0)
    X = rng.standard_normal(X_shape or (4, 5, 3))
    y = np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=match):
        KeyQuerySelector(**params).fit(X, y)


def test_ragged_inputs_take_their_query_from_their_own_end():
    rng = np.random.default_rng(4)
    X = [rng.standard_normal((T, 3)) for T in (3, 5, 4, 6)]
    y = np.array([0, 1, 0, 1])
    est = KeyQuerySelector(query_index="extra-row", max_iter=20,
                           random_state=0).fit(X, y)
    s = est.attention_weights(X)
    for i, x in enumerate(X):
        assert s[i, len(x) - 1] == 0 and np.isclose(s[i, : len(x) - 1].sum(), 1)
        assert np.all(s[i, len(x):] == 0)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["cross", "self"])
@pytest.mark.parametrize("parameterization", ["W", "KQ"])
def test_goal_over_100_seeds(attention, parameterization):
    # the authors' figures over 100 seeds: W, 0.9962 with W^fro (own limit closer in
    # 100 of 100); the factors' regularization path (30 seeds) stands for their KQ run
    # (two items, which pytest-xdist can run on two workers)
    if parameterization == "W":
        own, other = _corr(range(100), attention, "W")
        assert own.mean() >= 0.9962 and (own > other).all()
    else:
        own, other = _corr(range(30), attention, "KQ", solver="regpath", max_iter=200)
        assert own.mean() >= 0.99 and (own > other).all()


# --------------------------------------------------------------- nonlinear heads
@functools.cache
def _relu_run(seed, d):
    """``(limit_alignment_, limit_alignments_["fro"])`` of the run ``seed`` at ``d``, or
    ``None`` where the public code drops it (computed once per worker: the slow tier's
    runs at d = 4 begin with the default tier's)."""
    X, y, V = relu_setup(seed, d=d)
    if len(set(y)) < 2:
        return None
    est = KeyQuerySelector(head=np.ones(d), value=V, activation="relu",
                           query_index="extra-row", lr=0.1, max_iter=2000,
                           classes=[-1, 1], random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    s = est.attention_weights(X)[:, :-1]
    if ((s > 1e-6) & (s <= 1e-3)).any() or not (s <= 1e-6).any() or (
            est.mm_direction_ is None):
        return None
    return est.limit_alignment_, est.limit_alignments_["fro"]


def _drawn_seeds(d, n_runs):
    """The first ``n_runs`` seeds 1, 2, ... whose runs the public code keeps: every
    attention either above 1e-3 (kept) or below 1e-6, some below, and a feasible limit."""
    seeds, seed = [], 0
    while len(seeds) < n_runs:
        seed += 1
        assert seed < 50 * n_runs, "too few runs qualify"
        if _relu_run(seed, d) is not None:
            seeds.append(seed)
    return seeds


#: ``_drawn_seeds(d, 20)``: the draw fits every seed up to the last (97 runs at d = 4,
#: 427 at d = 8); the default tier checks the first eight at d = 4
_KEPT_SEEDS = {4: (6, 8, 11, 15, 24, 31, 40, 42, 50, 64, 68, 71, 72, 74, 80, 82, 83, 90, 92, 97),
               8: (7, 17, 35, 37, 77, 137, 154, 161, 197, 222, 225, 261, 290, 311, 353, 356,
                   359, 379, 386, 427)}


def _relu_runs(d, n_runs):
    """``_relu_run`` of the first ``n_runs`` kept seeds at ``d``; each must still qualify."""
    rows = [_relu_run(seed, d) for seed in _KEPT_SEEDS[d][:n_runs]]
    assert all(row is not None for row in rows), "a kept run no longer qualifies"
    return np.array(rows)


def _check_eight_runs(rows):
    # W^fin + R W^dir of the kept tokens predicts the trained W better than the
    # single-token W^mm (the public code's comparison, n = 3, T = 4)
    # (a few runs keep a token whose attention still decays at 2000 steps: there
    # neither limit fits, hence medians)
    fin_dir, single = rows.T
    assert np.median(fin_dir) > np.median(single) + 0.02 and np.median(fin_dir) > 0.95
    assert fin_dir.mean() > single.mean() and (fin_dir >= single - 1e-6).mean() >= 0.6


def test_relu_head_limit_is_finite_part_plus_direction(request):
    # d = 4; 20 runs at d = 4 and 8 in the slow tier below, on the kept seeds
    if request.config.getoption("--runslow"):
        pytest.skip("--runslow: test_relu_head_limit_over_many_runs[4] checks the draw and "
                    "these eight runs the same way, among its twenty")
    assert _drawn_seeds(4, 8) == list(_KEPT_SEEDS[4][:8])
    _check_eight_runs(_relu_runs(4, 8))


@pytest.mark.slow
@pytest.mark.parametrize("d", [4, 8])
def test_relu_head_limit_over_many_runs(d):
    # (d = 6 lies between the two and took two minutes of CI; at d = 10 about one run in
    # forty qualifies: left to benchmarks)
    rows = _relu_runs(d, 20)
    if d == 4:  # the default-tier test, which --runslow skips
        assert _drawn_seeds(4, 8) == list(_KEPT_SEEDS[4][:8])
    _check_eight_runs(rows[:8])  # the runs of the default-tier test, at this d
    fin_dir, single = rows.T
    assert fin_dir.mean() > single.mean() + 0.03 and (fin_dir >= single - 1e-6).mean() >= 0.7


def test_relu_head_attributes_and_predictions():
    X, y, V = relu_setup(2, n=4, T=4, d=6)
    est = KeyQuerySelector(head=np.ones(6), value=V, activation="relu",
                           query_index="extra-row", max_iter=300, classes=[-1, 1],
                           random_state=0).fit(X, y)
    W, fin = est.key_query_, est.finite_component_
    assert est.kept_tokens_.shape == (4, 5) and not est.kept_tokens_[:, -1].any()
    assert est.mm_direction_ is not None and est.kept_tokens_.sum() > 4
    s = est.attention_weights(X)
    np.testing.assert_array_equal(est.kept_tokens_, s >= 1e-3)
    f = np.maximum(np.einsum("it,itd->id", s, X) @ V.T, 0) @ np.ones(6)
    np.testing.assert_allclose(est.decision_function(X), f)
    np.testing.assert_array_equal(est.predict(X), np.where(f > 0, 1, -1))
    # W^fin reproduces the trained log-odds of the kept tokens
    Z = X[:, -1]
    logits = np.einsum("itd,kd,ik->it", X, fin, Z)
    log_s = np.log(np.where(est.kept_tokens_, s, 1.0))  # the kept tokens' (s >= 1e-3)
    for i in range(4):
        kept = np.flatnonzero(est.kept_tokens_[i])
        for o in kept[1:]:
            assert np.isclose(logits[i, o] - logits[i, kept[0]],
                              log_s[i, o] - log_s[i, kept[0]], atol=1e-6)
    assert est.limit_alignment_ == pytest.approx(
        np.sum(W * (fin + est.mm_radius_ * est.mm_direction_))
        / (np.linalg.norm(W) * np.linalg.norm(fin + est.mm_radius_ * est.mm_direction_)))
    assert est.alignment_ == pytest.approx(
        np.sum((W - fin) * est.mm_direction_) / np.linalg.norm(W - fin))


@pytest.mark.parametrize("params, match", [
    (dict(value=np.eye(2)), "value must have shape"),
    (dict(value=np.ones((2, 3)), head=np.ones(3)), "head must have shape \\(2,\\)"),
    (dict(activation="relu", solver="svm"), "not available with a value"),
])
def test_bad_value_heads(params, match):
    X = np.random.default_rng(0).standard_normal((4, 5, 3))
    with pytest.raises(ValueError, match=match):
        KeyQuerySelector(**params).fit(X, np.array([0, 1, 0, 1]))


@pytest.mark.parametrize("activation", ["relu", "identity"])
def test_value_head_gradient_matches_finite_differences(activation):
    from skntp.losses.attention import attention_decision, attention_loss_grad
    from skntp.losses.key_query import value_head

    rng = np.random.default_rng(3)
    X = rng.standard_normal((5, 4, 3))
    V, v = rng.standard_normal((2, 3)), rng.standard_normal(2)
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    p = rng.standard_normal(3)
    risk, (g,) = attention_loss_grad(np, X, X, y, v, p, forward=value_head(V, activation))
    f = attention_decision(np, X, X, v, p, forward=value_head(V, activation))
    s = np.exp(X @ p)
    s /= s.sum(1, keepdims=True)
    a = np.einsum("it,itd->id", s, X) @ V.T
    np.testing.assert_allclose(f, (np.maximum(a, 0) if activation == "relu" else a) @ v)
    assert np.isclose(risk, np.mean(np.log1p(np.exp(-y * f))))
    eps, fd = 1e-6, np.zeros(3)
    for j in range(3):
        e = np.eye(3)[j] * eps
        fd[j] = (attention_loss_grad(np, X, X, y, v, p + e, forward=value_head(V, activation),
                                     wrt=())[0]
                 - attention_loss_grad(np, X, X, y, v, p - e, forward=value_head(V, activation),
                                       wrt=())[0]) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="linear head"):
        attention_loss_grad(np, X, X, y, v, p, forward=value_head(V, activation), wrt=("v",))


@pytest.mark.parametrize("params", [dict(parameterization="W"), dict(parameterization="KQ"),
                                    dict(activation="relu", value=np.eye(10))])
def test_numpy_and_torch_backends_agree(params):
    pytest.importorskip("torch")
    from skntp.datasets import make_key_query_data

    data = make_key_query_data(random_state=0)
    fits = [KeyQuerySelector(head=np.ones(10) if "value" in params else data.head,
                             query_index=data.query_index, max_iter=300,
                             backend=backend, random_state=0, classes=[-1, 1],
                             **params).fit(data.X, data.y)
            for backend in ("numpy", "torch")]
    np.testing.assert_allclose(fits[1].key_query_, fits[0].key_query_, rtol=1e-10,
                               atol=1e-10)
    assert fits[1].alignment_ == pytest.approx(fits[0].alignment_, abs=1e-10)


def test_fixed_query_with_factors_and_starts_from_key_query():
    # one query u for all inputs: the nuclear and Frobenius limits are both the
    # rank-one u p^T / ||u||^2 (the two programs coincide)
    X, y, Z, v = key_query_setup(1)
    W0 = np.random.default_rng(1).standard_normal((10, 10)) / 10
    # the optimal tokens are not separable by a common W: no GMM direction (the selected
    # tokens' limits exist)
    with pytest.warns(UserWarning, match=r"ATT-SVM \(nuclear norm.*gmm_direction_ is None"):
        est = KeyQuerySelector(head=v, parameterization="KQ", key_query=W0,
                               max_iter=400, classes=[-1, 1]).fit(X, y)
    assert est.query_.shape == (10,) and est.limit_ranks_ == {"fro": 1, "nuclear": 1}
    np.testing.assert_allclose(est.limit_directions_["fro"],
                               est.limit_directions_["nuclear"], atol=1e-4)
    s = est.attention_weights(X)
    logits = X @ est.key_query_.T @ est.query_
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(1, keepdims=True), atol=1e-12)
    # None starts from the balanced factors of key_query
    start = KeyQuerySelector(head=v, parameterization="KQ", key_query=W0,
                             solver="gd", lr=1e-14, max_iter=1, compute_limits=False,
                             classes=[-1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start.fit(X, y)
    np.testing.assert_allclose(start.key_query_, W0, atol=1e-10)
    Q, K = start.query_factor_, start.key_factor_
    np.testing.assert_allclose(np.linalg.norm(Q, axis=0), np.linalg.norm(K, axis=0))


def test_given_path_radii_and_low_rank_svm_warning():
    X, y, Z, v = key_query_setup(0)
    Xc = np.concatenate([X, Z[:, None]], axis=1)
    est = KeyQuerySelector(head=v, query_index="extra-row", solver="regpath",
                           path_radii=[1.0, 4.0, 16.0], max_iter=100,
                           classes=[-1, 1]).fit(Xc, y)
    assert np.allclose(est.history_["radius"], [1.0, 4.0, 16.0])
    assert np.linalg.norm(est.key_query_) <= 16.0 + 1e-9
    with pytest.warns(UserWarning, match="best rank-1 approximation"):
        est = KeyQuerySelector(head=v, query_index="extra-row",
                               parameterization="KQ", rank=1, solver="svm",
                               classes=[-1, 1]).fit(Xc, y)
    assert est.query_factor_.shape == (10, 1)


def test_an_undecided_att_svm_leaves_the_selection_undecided(monkeypatch):
    # the selected tokens' ATT-SVM with no certified answer (a warning says so): the
    # diagnosis reports neither "locally optimal" nor "not" (before: False, "other")
    from skntp import key_query
    from skntp.svm import UndecidedError

    X, y, Z, v = key_query_setup(3)
    Xc = np.concatenate([X, Z[:, None]], axis=1)
    options = dict(head=v, query_index="extra-row", solver="ngd", max_iter=3000,
                   classes=[-1, 1])
    est = KeyQuerySelector(**options).fit(Xc, y)
    assert est.convergence_ == "local" and est.is_locally_optimal_ is True

    def undecided(*args, **kwargs):
        raise UndecidedError("ATT-SVM: undecided (by this test)")

    monkeypatch.setattr(key_query, "att_svm_w", undecided)
    with pytest.warns(UserWarning, match="undecided"):
        est = KeyQuerySelector(**options).fit(Xc, y)
    assert est.attention_saturation_ >= 1 - 1e-5
    assert est.convergence_ == "undecided" and est.is_locally_optimal_ is None
