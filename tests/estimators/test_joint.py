"""JointAttentionSVM and the joint programs (Tarzanagh et al. 2023, Sec. 3, Thms. 5-6)."""

import pickle
import warnings

import numpy as np
import pytest
from helpers import joint_instance
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC

from skntp._backend import get_backend
from skntp.attention import JointAttentionSVM
from skntp.datasets import make_joint_fig3
from skntp.losses.attention import AttentionObjective
from skntp.svm import (
    NotSeparableError,
    UndecidedError,
    head_svm,
    head_svm_problem,
    joint_svm,
    relaxed_att_svm,
    relaxed_att_svm_problem,
    solve_max_margin,
    support_vectors,
)
from skntp.svm._problem import constraint_violation


def cos(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------
# The explicit programs
# --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["a", "b"])
def test_fig3_limits_exact(variant):
    X, y, P = make_joint_fig3(variant, return_params=True)
    for method in ("auto", "cvxpy"):
        res = joint_svm(X, y, method=method)
        np.testing.assert_array_equal(res.selected, P.selected)
        np.testing.assert_array_equal(res.support, P.support)
        np.testing.assert_allclose(res.head, P.head_mm, atol=1e-7)
        np.testing.assert_allclose(res.relaxed, P.relaxed, atol=1e-7)
        np.testing.assert_allclose(res.att_svm, P.att_svm, atol=1e-7)
        assert res.exhaustive and res.n_candidates == 8
        assert res.label_margin == pytest.approx(1.0, abs=1e-7)
    # Fig. 3(b): p^relax and p^mm are distinguishable directions.
    if variant == "b":
        assert cos(P.relaxed, P.att_svm) == pytest.approx(1.25 / np.sqrt(1.625))
        assert cos(P.relaxed, P.att_svm) < 0.99


@pytest.mark.parametrize("seed", range(6))
def test_head_svm_matches_cvxpy_and_linearsvc(seed):
    rng = np.random.default_rng(seed)
    n, d = 30, 5
    w = rng.standard_normal(d)
    R = rng.standard_normal((n, d))
    y = np.where(R @ w > 0, 1.0, -1.0)
    R += 0.3 * y[:, None] * w / np.linalg.norm(w)  # a positive margin
    v_auto, res = head_svm(R, y, return_result=True)
    v_cvx = head_svm(R, y, method="cvxpy")
    np.testing.assert_allclose(v_auto, v_cvx, rtol=1e-5, atol=1e-7)
    assert constraint_violation(head_svm_problem(R, y), v_auto) <= 1e-7
    svc = LinearSVC(loss="hinge", fit_intercept=False, C=1e6, tol=1e-10,
                    max_iter=1_000_000, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svc.fit(R, y)
    assert cos(svc.coef_.ravel(), v_auto) > 0.9999
    sv = support_vectors(R, y, v_auto)
    assert sv.any()
    margins = y * (R @ v_auto)
    np.testing.assert_allclose(margins[sv], 1.0, atol=1e-6)
    assert np.all(margins[~sv] > 1.0)
    # The dual is positive only on support vectors (complementary slackness).
    assert np.all(res.dual[~sv] <= 1e-8)


@pytest.mark.parametrize("seed", range(6))
def test_relaxed_att_svm_matches_cvxpy(seed):
    X, y, pos, _, support = joint_instance(seed, n=5, T=4, relax=True)
    auto = relaxed_att_svm(X, pos, support)
    ref = relaxed_att_svm(X, pos, support, method="cvxpy")
    np.testing.assert_allclose(auto, ref, rtol=1e-5, atol=1e-7)
    problem = relaxed_att_svm_problem(X, pos, support)
    assert constraint_violation(problem, auto) <= 1e-7
    # rhs: 1 on support vectors, 0 on the others (eq. (10))
    c = problem.constraints
    np.testing.assert_array_equal(c.rhs, support[c.block].astype(float))
    # the relaxed program is a relaxation: ||p^relax|| <= ||p^mm||
    full = relaxed_att_svm(X, pos)
    assert np.linalg.norm(auto) <= np.linalg.norm(full) + 1e-9
    np.testing.assert_allclose(relaxed_att_svm(X, pos, np.ones(5, bool)), full, atol=1e-9)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("relax", [False, True])
def test_joint_svm_recovers_planted_tokens(seed, relax):
    X, y, pos, v_dir, support = joint_instance(seed, relax=relax)
    res = joint_svm(X, y)
    assert res.exhaustive
    np.testing.assert_array_equal(res.selected, pos)
    np.testing.assert_array_equal(res.support, support)
    assert cos(res.head, v_dir) > 1 - 1e-9
    if not relax:
        np.testing.assert_allclose(res.relaxed, res.att_svm)
    # The heuristic finds the same tokens here (its ascent starts at Y_i x_it).
    heur = joint_svm(X, y, max_enumeration=1)
    assert not heur.exhaustive
    np.testing.assert_array_equal(heur.selected, pos)


def test_heuristic_never_beats_enumeration():
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        X = rng.standard_normal((4, 3, 4))
        y = np.array([1.0, -1.0, 1.0, -1.0])
        try:
            full = joint_svm(X, y)
        except NotSeparableError:
            continue
        try:
            heur = joint_svm(X, y, max_enumeration=1)
        except UndecidedError:
            continue
        assert heur.label_margin <= full.label_margin + 1e-9


def test_joint_not_separable_message():
    # Two identical inputs with opposite labels: attention selects the same
    # token in both, which no head can then separate.
    X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    y = np.array([1.0, -1.0])
    with pytest.raises(NotSeparableError, match="joint problem is not separable"):
        joint_svm(X, y)
    # the heuristic searches some choices only: its failure is no proof
    with pytest.raises(UndecidedError, match="joint problem may still be separable"):
        joint_svm(X, y, max_enumeration=1)
    with pytest.raises(NotSeparableError, match="not separable"):
        JointAttentionSVM(solver="svm").fit(X, y)
    with pytest.warns(UserWarning, match="head SVM"):
        est = JointAttentionSVM(max_iter=50, random_state=0).fit(X, y)
    assert est.head_mm_direction_ is None and est.mm_direction_ is None
    assert np.isnan(est.alignment_) and np.all(np.isfinite(est.head_))


# --------------------------------------------------------------------------
# The objective
# --------------------------------------------------------------------------
@pytest.mark.parametrize("log", [False, True])
def test_gradient_matches_finite_differences(log):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 4, 3))
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    mask = np.ones((5, 4), dtype=bool)
    mask[1, 3] = mask[2, 2:] = False
    obj = AttentionObjective(get_backend().xp, X, y, mask=mask, train=("v", "p"), log=log)
    v, p = rng.standard_normal(3), rng.standard_normal(3)
    _, (gv, gp) = obj((v, p))
    eps = 1e-6
    for i in range(3):
        e = np.eye(3)[i]
        num_v = (float(obj((v + eps * e, p))[0]) - float(obj((v - eps * e, p))[0])) / (2 * eps)
        num_p = (float(obj((v, p + eps * e))[0]) - float(obj((v, p - eps * e))[0])) / (2 * eps)
        assert num_v == pytest.approx(gv[i], rel=1e-6, abs=1e-9)
        assert num_p == pytest.approx(gp[i], rel=1e-6, abs=1e-9)


def test_objective_agrees_with_attention_model_and_stays_accurate():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((6, 3, 4))
    y = np.resize([1.0, -1.0], 6)
    be = get_backend()
    v, p = rng.standard_normal(4), rng.standard_normal(4)
    ref = AttentionObjective(be.xp, X, y, loss="logistic", train=("v", "p"))
    mine = AttentionObjective(be.xp, X, y, mask=np.ones((6, 3), bool), train=("v", "p"))
    (l1, g1), (l2, g2) = ref((v, p)), mine((v, p))
    assert float(l1) == pytest.approx(float(l2), rel=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    # Saturated attention on Fig. 3 data: the p-gradient stays nonzero and
    # points along the theory's direction (the naive form is exactly 0 here).
    Xf, yf, P = make_joint_fig3("a", return_params=True)
    obj = AttentionObjective(be.xp, Xf, yf, mask=np.ones((3, 2), bool), train=("v", "p"))
    _, (_, gp) = obj((60.0 * P.head_mm, 50.0 * P.att_svm / np.linalg.norm(P.att_svm)))
    assert np.linalg.norm(gp) > 0
    assert cos(-gp, P.att_svm) > 0.9
    # log objective: same direction per block, finite where L underflows
    log_obj = AttentionObjective(be.xp, Xf, yf, mask=np.ones((3, 2), bool), train=("v", "p"),
                                 log=True)
    big = (900.0 * P.head_mm, 900.0 * P.att_svm / np.linalg.norm(P.att_svm))
    lval, (lgv, lgp) = log_obj(big)
    assert np.isfinite(float(lval)) and float(lval) < -800
    assert np.all(np.isfinite(lgv)) and np.all(np.isfinite(lgp))


# --------------------------------------------------------------------------
# Thms. 5 and 6 on the paper's Fig. 3 examples
# --------------------------------------------------------------------------
def fit_fig3(variant, **kw):
    X, y, P = make_joint_fig3(variant, return_params=True)
    est = JointAttentionSVM(init=(P.head_init, P.query_init), **kw).fit(X, y)
    return est, P


def test_fig3a_ngd_converges_to_pmm_and_vmm():
    # Paper's setting: normalized GD, step 0.1, 1000 iterations.
    est, P = fit_fig3("a", solver="ngd", lr=0.1, max_iter=1000, record_every=10)
    assert cos(est.query_, P.att_svm) > 0.99999      # measured 0.999994
    assert cos(est.head_, P.head_mm) > 0.99999       # measured 0.999998
    np.testing.assert_array_equal(est.selected_tokens_, P.selected)
    np.testing.assert_array_equal(est.support_, [0, 1, 2])
    np.testing.assert_allclose(est.mm_direction_, P.att_svm / np.linalg.norm(P.att_svm))
    np.testing.assert_allclose(est.mm_direction_, est.att_svm_direction_)
    np.testing.assert_allclose(est.head_mm_direction_, P.head_mm, atol=1e-8)
    assert est.alignment_ == pytest.approx(cos(est.query_, P.att_svm))
    # Fig. 3(c): softmax and logistic probabilities go to 1
    h = est.history_
    assert h["attention_saturation"][-1] > 1 - 1e-12
    assert h["label_probability"][-1] > 1 - 1e-12
    assert h["attention_saturation"][0] < 0.75  # 0.731 at p_0 = (0, -1)
    assert est.trajectory_["query"].shape == (h["iteration"].shape[0], 2)
    assert h["alignment"][-1] == pytest.approx(est.alignment_)
    assert h["head_alignment"][-1] == pytest.approx(est.head_alignment_)


def test_fig3b_ngd_converges_to_prelax_not_pmm():
    est, P = fit_fig3("b", solver="ngd", lr=0.1, max_iter=1000, record_every=10)
    assert cos(est.query_, P.relaxed) > 0.99999      # measured 0.999995
    assert cos(est.query_, P.att_svm) < 0.982        # measured 0.981178 (= cos(p^relax, p^mm))
    assert cos(est.head_, P.head_mm) > 0.999999
    np.testing.assert_array_equal(est.support_, [0, 1])
    np.testing.assert_allclose(est.mm_direction_, P.relaxed, atol=1e-8)
    assert est.history_["att_svm_alignment"][-1] < 0.982


@pytest.mark.parametrize("variant", ["a", "b"])
def test_fig3_regularization_path(variant):
    est, P = fit_fig3(variant, solver="regpath", max_iter=500)
    h = est.history_
    # the path reaches the boundary of both balls and its loss falls
    assert np.linalg.norm(est.head_) == pytest.approx(20.0, rel=1e-6)
    assert np.all(np.diff(h["loss"]) <= 1e-12)
    assert "radius_0" in h and "log_loss" in h
    assert cos(est.head_, P.head_mm) > 0.9999        # measured 0.99995 (a), 1.0 (b)
    if variant == "a":
        assert cos(est.query_, P.att_svm) > 0.9998   # measured 0.99986
    else:
        assert cos(est.query_, P.relaxed) > 0.9998   # measured 0.99988
        assert cos(est.query_, P.att_svm) < 0.985    # measured 0.9835
    # alignment improves along the path
    assert h["alignment"][-1] > h["alignment"][len(h["alignment"]) // 2]


def test_fig3b_gd_prefers_prelax():
    est, P = fit_fig3("b", solver="gd", lr=1.0, max_iter=5000, record_every=100)
    # constant-step GD is slow (logarithmic norm growth) but already closer to p^relax
    assert cos(est.query_, P.relaxed) > 0.996        # measured 0.99702
    assert cos(est.query_, P.relaxed) > cos(est.query_, P.att_svm)
    assert cos(est.head_, P.head_mm) > 0.9999


@pytest.mark.parametrize("relax", [False, True])
def test_theorems_on_random_instances(relax):
    hits = 0
    for seed in range(6):
        X, y, pos, v_dir, support = joint_instance(seed, relax=relax)
        est = JointAttentionSVM(max_iter=1500, random_state=seed, record_every=50).fit(X, y)
        if not np.array_equal(est.selected_tokens_, pos):
            continue  # attention converged locally to other tokens (Sec. 2.2)
        hits += 1
        res = joint_svm(X, y)
        assert est.attention_saturation_ > 1 - 1e-6
        assert cos(est.head_, v_dir) > 0.9998  # measured >= 0.99989
        # measured over seeds 0-5 at 1500 iterations: >= 0.99899 (Thm. 5),
        # >= 0.99977 (Thm. 6); the cosine keeps rising with more iterations
        assert cos(est.query_, res.relaxed) > (0.9995 if relax else 0.998)
        if cos(res.relaxed, res.att_svm) < 0.999:
            gap = 1 - cos(res.relaxed, res.att_svm)
            assert cos(est.query_, res.relaxed) - cos(est.query_, res.att_svm) > 0.5 * gap
        np.testing.assert_array_equal(est.support_, np.flatnonzero(support))
    assert hits >= 3


# --------------------------------------------------------------------------
# solver="svm", predictions, input handling
# --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["a", "b"])
def test_svm_solver(variant):
    X, y, P = make_joint_fig3(variant, return_params=True)
    est = JointAttentionSVM(solver="svm").fit(X, y)
    assert est.alignment_ == pytest.approx(1.0)
    assert est.head_alignment_ == pytest.approx(1.0)
    np.testing.assert_allclose(est.mm_direction_, P.relaxed / np.linalg.norm(P.relaxed),
                               atol=1e-8)
    assert est.attention_saturation_ > 1 - 1e-8
    np.testing.assert_array_equal(est.predict(X), y)
    proba = est.predict_proba(X)
    assert np.all(proba[np.arange(3), (y > 0).astype(int)] > 1 - 1e-8)
    np.testing.assert_allclose(est.transform(X), X[:, 1], atol=1e-8)
    est2 = JointAttentionSVM(solver="svm", svm_radius=3.0).fit(X, y)
    assert np.linalg.norm(est2.query_) == pytest.approx(3.0)
    assert np.linalg.norm(est2.head_) == pytest.approx(3.0)


def _risk_by_hand(seqs, y, v, p, W=None):
    """Mean logistic loss of ``f_i = v^T X_i^T softmax(X_i W^T p)``, one sequence at a time."""
    f = []
    for x in seqs:
        logits = (x if W is None else x @ W.T) @ p
        e = np.exp(logits - logits.max())
        f.append(v @ (x.T @ (e / e.sum())))
    f = np.array(f)
    return np.mean(np.logaddexp(0.0, -y * f)), f


def test_predictions_labels_and_ragged_input():
    X, y, P = make_joint_fig3("a", return_params=True)
    labels = np.where(y > 0, "yes", "no")
    est = JointAttentionSVM(max_iter=300, random_state=0).fit(X, labels)
    assert list(est.classes_) == ["no", "yes"]
    np.testing.assert_array_equal(est.predict(X), labels)
    risk, f = _risk_by_hand(X, y, est.head_, est.query_)
    np.testing.assert_allclose(est.decision_function(X), f, rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], 1 / (1 + np.exp(-f)), rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(est.predict_log_proba(X)), est.predict_proba(X))
    assert est.history_["loss"][-1] == pytest.approx(risk, rel=1e-12)
    # ragged: padding gets zero attention, and the recorded loss is the risk of the
    # unpadded sequences
    seqs = [X[0], X[1, 1:], X[2]]
    s = est.attention_weights(seqs)
    assert s.shape == (3, 2) and s[1, 1] == 0.0 and s[1, 0] == pytest.approx(1.0)
    est_r = JointAttentionSVM(max_iter=50, random_state=0).fit(seqs, y)
    risk_r, f_r = _risk_by_hand(seqs, y, est_r.head_, est_r.query_)
    assert est_r.history_["loss"][-1] == pytest.approx(risk_r, rel=1e-12)
    np.testing.assert_allclose(est_r.decision_function(seqs), f_r, rtol=1e-12)
    assert pickle.loads(pickle.dumps(est)).predict(X).tolist() == labels.tolist()
    # a Pipeline: attention features feed a downstream classifier
    pipe = make_pipeline(JointAttentionSVM(max_iter=100, random_state=0),
                         LinearSVC(fit_intercept=False, random_state=0))
    pipe.fit(X, y)
    features = JointAttentionSVM(max_iter=100, random_state=0).fit(X, y).transform(X)
    by_hand = LinearSVC(fit_intercept=False, random_state=0).fit(features, y)
    np.testing.assert_allclose(pipe[-1].coef_, by_hand.coef_, rtol=1e-12)
    np.testing.assert_array_equal(pipe.predict(X), by_hand.predict(features))
    np.testing.assert_array_equal(pipe.predict(X), y)


def test_bad_input_errors():
    X, y = make_joint_fig3("a")
    # no limits: after 5 steps the selected tokens admit no head SVM (a UserWarning)
    est = JointAttentionSVM(max_iter=5, random_state=0, compute_limits=False)
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.fit(bad, y)
    with pytest.raises(ValueError, match=r"binary classification.* y has 3 classes"):
        est.fit(X, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"needs 2 classes in y; got 1 class"):
        est.fit(X, np.ones(3))
    with pytest.raises(ValueError, match="X has 3 sequences but y has 2 labels"):
        est.fit(X, y[:2])
    with pytest.raises(ValueError,
                       match=r"init\[0\] \(the head\) must have shape \(2,\), got \(3,\)"):
        JointAttentionSVM(init=(np.ones(3), None)).fit(X, y)
    with pytest.raises(ValueError,
                       match=r"init\[1\] \(the query\) must have shape \(2,\), got \(1,\)"):
        JointAttentionSVM(init=(None, [1.0])).fit(X, y)
    with pytest.raises(ValueError, match=r"key_query must have shape \(k, 2\)"):
        JointAttentionSVM(key_query=np.ones((2, 3))).fit(X, y)
    with pytest.raises(ValueError, match="path_radii must be a non-empty array of positive"):
        JointAttentionSVM(solver="regpath", path_radii=[-1.0, 2.0]).fit(X, y)
    est.fit(X, y)
    with pytest.raises(ValueError, match="tokens of dimension 3, but the estimator was "
                       "fitted with 2 features"):
        est.predict(np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match=r"got a 1-D array .*\. Reshape your data"):
        est.predict(np.zeros(3))
    with pytest.raises(ValueError, match="X contains an empty sequence"):
        est.predict([np.zeros((0, 2))])


def test_key_query_matrix():
    # keys K = X W^T with a non-identity W: the directions live in key space.
    X, y, P = make_joint_fig3("a", return_params=True)
    W = np.array([[2.0, 0.0], [0.0, 0.5], [1.0, 1.0]])
    est = JointAttentionSVM(solver="svm", key_query=W).fit(X, y)
    K = X @ W.T
    ref = relaxed_att_svm(K, P.selected)
    np.testing.assert_allclose(est.mm_direction_, ref / np.linalg.norm(ref), atol=1e-8)
    assert est.query_.shape == (3,)
    est_g = JointAttentionSVM(key_query=W, max_iter=1000, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est_g.selected_tokens_, P.selected)
    assert est_g.alignment_ > 0.999


def test_torch_backend_parity():
    pytest.importorskip("torch")
    X, y, P = make_joint_fig3("b", return_params=True)
    kw = dict(init=(P.head_init, P.query_init), max_iter=100)
    a = JointAttentionSVM(**kw).fit(X, y)
    b = JointAttentionSVM(backend="torch", **kw).fit(X, y)
    np.testing.assert_allclose(a.query_, b.query_, rtol=1e-10)
    np.testing.assert_allclose(a.head_, b.head_, rtol=1e-10)
    np.testing.assert_allclose(a.history_["loss"], b.history_["loss"], rtol=1e-10)


def test_solve_max_margin_direct_head_problem():
    # the head SVM is the core's KeyScores program with T = 1
    X, y, P = make_joint_fig3("b", return_params=True)
    tokens = X[np.arange(3), P.selected]
    res = solve_max_margin(head_svm_problem(tokens, y), method="cvxpy")
    np.testing.assert_allclose(res.primal, P.head_mm, atol=1e-7)
    assert res.dual[2] == pytest.approx(0.0, abs=1e-7)  # not a support vector


# --------------------------------------------------------------------------
# scikit-learn compatibility
# --------------------------------------------------------------------------
def test_ngd_on_log_loss_equals_ngd_on_loss():
    # NGD normalizes each block, so grad log L = grad L / L gives the same steps.
    from skntp._optim import minimize

    X, y, P = make_joint_fig3("b", return_params=True)
    be = get_backend()
    plain = AttentionObjective(be.xp, X, y, mask=np.ones((3, 2), bool), train=("v", "p"))
    ref = minimize(plain, (P.head_init, P.query_init), xp=be.xp, solver="ngd", lr=0.1,
                   max_iter=200)
    est = JointAttentionSVM(init=(P.head_init, P.query_init),
                            max_iter=200, record_every=1).fit(X, y)
    np.testing.assert_allclose(est.head_, ref.params[0], rtol=1e-9)
    np.testing.assert_allclose(est.query_, ref.params[1], rtol=1e-9)
    np.testing.assert_allclose(est.history_["loss"], ref.history["loss"], rtol=1e-9)


@pytest.mark.slow
def test_fig3_with_10000_steps():
    """Fig. 3 as in the gallery, longer: NGD, the path and the limit (Thms. 5-6)."""

    def cos(a, b):
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))

    for variant in ("a", "b"):
        X, y, P = make_joint_fig3(variant, return_params=True)
        for solver in ("ngd", "regpath", "svm"):
            est = JointAttentionSVM(solver=solver, lr=0.1,
                                    max_iter=10_000 if solver == "ngd" else 500,
                                    init=(P.head_init, P.query_init)).fit(X, y)
            h = est.history_
            assert h["attention_saturation"][-1] > 0.9998
            assert h["label_probability"][-1] > 0.9999
            if solver == "ngd" and variant == "a":
                assert cos(est.query_, P.att_svm) > 0.999999
                assert cos(est.head_, P.head_mm) > 0.999999
            if solver == "ngd" and variant == "b":
                assert cos(est.query_, P.relaxed) > 0.999998
                assert cos(est.query_, P.att_svm) < 0.982


def test_regpath_with_separate_radii():
    X, y, P = make_joint_fig3("b", return_params=True)
    radii = np.column_stack([np.geomspace(0.5, 20, 8), np.geomspace(0.5, 10, 8)])
    est = JointAttentionSVM(solver="regpath", path_radii=radii,
                            init=(P.head_init, P.query_init), max_iter=300).fit(X, y)
    h = est.history_
    np.testing.assert_allclose(h["radius_0"], radii[:, 0])
    np.testing.assert_allclose(h["radius_1"], radii[:, 1])
    assert np.linalg.norm(est.head_) == pytest.approx(20.0, rel=1e-6)
    assert np.linalg.norm(est.query_) <= 10.0 + 1e-9
    assert est.n_iter_ == 8
    assert cos(est.query_, P.relaxed) > cos(est.query_, P.att_svm)
    with pytest.raises(ValueError, match=r"path_radii must have shape \(n_radii,\) or "
                       r"\(n_radii, 2\), got \(3, 3\)"):
        JointAttentionSVM(solver="regpath", path_radii=np.ones((3, 3))).fit(X, y)
