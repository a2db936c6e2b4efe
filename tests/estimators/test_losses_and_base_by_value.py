"""The attention losses (``skntp/losses/attention.py``) and the estimator base
(``skntp/_base.py``), value by value.

Each test checks a value against an independent reference (a closed form, the
plain-domain risk, a hand computation, a direct fit) and kills the survivors of
the run named in its comment; see ``docs/mutation.md``, "Run 2".
"""

import warnings

import numpy as np
import pytest
from scipy.special import expit

from skntp import AttentionSelector, NTPDecoderClassifier
from skntp._backend import get_backend, to_numpy
from skntp._base import _exp_loss, atomic_fit, default_radii, saturation_radius, unit
from skntp.datasets import make_ntp_data
from skntp.losses.attention import (
    AttentionObjective,
    attention_loss_grad,
    loss_and_derivative,
)
from skntp.sweeps import fit_ntp_trials


def _softmax_rows(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _problem(seed, n=5, T=3, d=2, batch=()):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(batch + (n, T, d))
    y = rng.choice([-1.0, 1.0], size=batch + (n,))
    v = rng.standard_normal(batch + (d,))
    p = rng.standard_normal(batch + (d,))
    return X, y, v, p


def _reference_risk(X, y, v, p, w, loss):
    """``sum_i w_i l(y_i f_i) / sum_i w_i`` by hand (keys = tokens)."""
    s = _softmax_rows(X @ p)
    f = np.einsum("nt,ntd,d->n", s, X, v)
    w = np.broadcast_to(np.asarray(w, dtype=float), y.shape)
    values = {"exponential": np.exp(-y * f), "logistic": np.log1p(np.exp(-y * f))}[loss]
    return float(np.sum(w * values) / np.sum(w))


# ------------------------------------------------------- models/attention.py


def test_correlation_loss_derivative_is_shaped_like_the_margins():
    # loss_and_derivative_47: the derivative must be an array shaped like ``u``
    u = np.array([[-2.0, 0.5], [3.0, 0.0]])
    value, deriv = loss_and_derivative(np, "correlation", u)
    np.testing.assert_array_equal(value, -u)
    assert deriv.shape == u.shape and deriv.dtype == u.dtype
    np.testing.assert_array_equal(deriv, -np.ones_like(u))


def test_saturated_query_gradient_with_tied_top_tokens():
    # _anchored_forward_50, attention_loss_grad_125: the keys relative to the mean
    # key of the most attended tokens.  W = [[1, 0]]: tokens 1 and 2 share the top
    # key 1 (tied attention, different values h = 0, 1); token 3 has key 1/2.
    # With e = exp(-P/2): s1 = s2 = 1/(2+e), s3 = e/(2+e), f = s1 and
    # dL/dp = c * sum_t s_t (h_t - f) k_t = c * s1 * s3 / 2, c = -sigmoid(-f).
    X = np.array([[[1.0, 0.0], [1.0, 1.0], [0.5, 0.0]]])
    W = np.array([[1.0, 0.0]])
    v, y = np.array([0.0, 1.0]), np.array([1.0])
    for P in (4.0, 100.0):  # mild and saturated beyond float64 (e ~ 2e-22)
        e = np.exp(-P / 2)
        s1, s3 = 1 / (2 + e), e / (2 + e)
        c = -expit(-s1)
        risk, (gp,) = attention_loss_grad(np, X, X @ W.T, y, v, np.array([P]))
        assert risk == pytest.approx(np.log1p(np.exp(-s1)), rel=1e-14)
        np.testing.assert_allclose(gp, [c * s1 * s3 / 2], rtol=1e-9)


def test_saturated_key_query_gradient_with_duplicate_top_tokens():
    # _anchored_forward_38: ``h`` relative to the mean ``h`` of the top tokens.
    # Tokens 1 and 2 are equal (tied top, h = 1), token 3 = (1/2, 0) (h = 0);
    # W = I, p = (P, 0), v = (0, 1).  f = 2 s1, h_top - f = s3, h_3 - f = -2 s1, so
    # g = sum_t s_t (h_t - f) x_t = 2 s1 s3 (x_1 - x_3), dL/dp = c g, dL/dW = c p g^T.
    X = np.array([[[1.0, 1.0], [1.0, 1.0], [0.5, 0.0]]])
    v, y = np.array([0.0, 1.0]), np.array([1.0])
    for P in (4.0, 100.0):
        e = np.exp(-P / 2)
        s1, s3 = 1 / (2 + e), e / (2 + e)
        c = -expit(-2 * s1)
        g = 2 * s1 * s3 * np.array([0.5, 1.0])
        p = np.array([P, 0.0])
        _, (gp, gW) = attention_loss_grad(np, X, X, y, v, p, wrt=("p", "W"))
        np.testing.assert_allclose(gp, c * g, rtol=1e-9)
        np.testing.assert_allclose(gW, c * np.outer(p, g), rtol=1e-9)


def test_log_logistic_risk_follows_its_asymptotic_series():
    # _log_loss_terms_38, _41: for u > 30, log l(u) = log log1p(e^-u) = -u - e^-u / 2 + ...
    # log1p(exp(-u)) is still a normal number at u ~ 30, so the plain formula is an
    # accurate reference (the two differ by e^-2u / 8).
    for u in (30.0625, 31.5):
        X, v, p, y = np.ones((1, 1, 1)), np.array([u]), np.zeros(1), np.array([1.0])
        log_risk, _ = attention_loss_grad(np, X, X, y, v, p, log=True)
        assert abs(float(log_risk) - np.log(np.log1p(np.exp(-u)))) < 3e-14


def _plain_and_log(xp, X, y, v, p, loss, sw=None):
    plain = attention_loss_grad(xp, X, X, y, v, p, loss=loss, sample_weight=sw,
                                wrt=("p", "v"))
    logd = attention_loss_grad(xp, X, X, y, v, p, loss=loss, sample_weight=sw,
                               wrt=("p", "v"), log=True)
    return plain, logd


def test_log_domain_exponential_risk():
    # _log_loss_terms_58 to _63: log=True with the exponential loss is log L, grad L / L
    X, y, v, p = _problem(0)
    (risk, grads), (log_risk, log_grads) = _plain_and_log(np, X, y, v, p, "exponential")
    assert float(risk) == pytest.approx(_reference_risk(X, y, v, p, 1.0, "exponential"),
                                        rel=1e-12)
    assert float(log_risk) == pytest.approx(np.log(float(risk)), rel=1e-12)
    for g, lg in zip(grads, log_grads):
        assert lg.dtype == np.float64 and lg.shape == g.shape
        np.testing.assert_allclose(lg, g / risk, rtol=1e-10)


def test_log_domain_exponential_risk_on_torch():
    pytest.importorskip("torch")
    be = get_backend("torch")
    X, y, v, p = (be.asarray(a) for a in _problem(0))
    (risk, grads), (log_risk, log_grads) = _plain_and_log(be.xp, X, y, v, p, "exponential")
    assert float(log_risk) == pytest.approx(np.log(float(risk)), rel=1e-12)
    for g, lg in zip(grads, log_grads):
        np.testing.assert_allclose(to_numpy(lg), to_numpy(g / risk), rtol=1e-10)


def test_log_domain_risk_with_weights_below_one_and_zero():
    # attention_loss_grad_50, _52, _60, _61, _67: log sum_i w_i l_i with weights in
    # (0, 1), above 1 and 0 (a zero weight drops the input, without a log(0) warning)
    X, y, v, p = _problem(1, n=4)
    sw = np.array([0.5, 2.0, 0.0, 1.5])
    for loss in ("logistic", "exponential"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (risk, grads), (log_risk, log_grads) = _plain_and_log(np, X, y, v, p, loss, sw)
        assert float(risk) == pytest.approx(_reference_risk(X, y, v, p, sw, loss), rel=1e-12)
        assert float(log_risk) == pytest.approx(np.log(float(risk)), rel=1e-12)
        for g, lg in zip(grads, log_grads):
            np.testing.assert_allclose(lg, g / risk, rtol=1e-10)


def test_log_domain_risk_of_a_batch_is_per_problem():
    # attention_loss_grad_74: the log-sum-exp runs over the inputs of each problem
    X, y, v, p = _problem(2, batch=(3,))
    risks, (g,) = attention_loss_grad(np, X, X, y, v, p, log=True)
    assert risks.shape == (3,) and g.shape == (3, 2)
    for b in range(3):
        rb, (gb,) = attention_loss_grad(np, X[b], X[b], y[b], v[b], p[b], log=True)
        assert float(risks[b]) == pytest.approx(float(rb), rel=1e-12)
        np.testing.assert_allclose(g[b], gb, rtol=1e-10)
        assert float(rb) == pytest.approx(
            np.log(_reference_risk(X[b], y[b], v[b], p[b], 1.0, "logistic")), rel=1e-12)


def test_objective_batched_sums_the_risks_and_keeps_each_gradient():
    # AttentionObjective.__init___4, _16; __call___76, _77, _78
    X, y, v, p = _problem(3, batch=(2,))
    per = AttentionObjective(np, X, y, v=v)
    risks, (g,) = per((p,))
    ref = [attention_loss_grad(np, X[b], X[b], y[b], v[b], p[b]) for b in range(2)]
    assert np.shape(risks) == (2,)
    np.testing.assert_allclose(risks, [float(r) for r, _ in ref], rtol=1e-12)
    total, (gt,) = AttentionObjective(np, X, y, v=v, batched=True)((p,))
    assert np.ndim(total) == 0
    assert float(total) == pytest.approx(sum(float(r) for r, _ in ref), rel=1e-12)
    np.testing.assert_allclose(gt, np.stack([gb for _, (gb,) in ref]), rtol=1e-12)
    np.testing.assert_allclose(g, gt, rtol=1e-12)


def test_objective_scales_gradients_and_refuses_mismatched_blocks():
    # AttentionObjective.__call___68 (a scale of 2), _6, _9, _10, _71, _74, _75 (zip strict)
    X, y, v, p = _problem(4)
    _, (g,) = AttentionObjective(np, X, y, v=v)((p,))
    for scale in (2.0, 0.5):
        _, (gs,) = AttentionObjective(np, X, y, v=v, grad_scale=scale)((p,))
        np.testing.assert_allclose(gs, scale * g, rtol=1e-15)
    with pytest.raises(ValueError):
        AttentionObjective(np, X, y, v=v)((p, p))
    with pytest.raises(ValueError):
        AttentionObjective(np, X, y, v=v, grad_scale=(1.0, 2.0))((p,))


def test_selector_saturation_history_ignores_padding():
    # QueryProblem.__init___33: the recorded saturation uses the padding mask
    X = [np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]),
         np.array([[0.0, 1.0], [1.0, 1.0]]),
         np.array([[1.0, 1.0]]),
         np.array([[-1.0, 0.0], [0.5, -1.0], [0.0, 0.0]])]
    y = [1, -1, 1, -1]
    est = AttentionSelector(head=np.array([1.0, -1.0]), solver="gd", lr=0.5, max_iter=4,
                            record_every=1, compute_limits=False, init="random",
                            random_state=0).fit(X, y)
    q = est.query_
    ref = np.mean([_softmax_rows(x @ q).max() for x in X])
    assert est.history_["saturation"][-1] == pytest.approx(ref, rel=1e-12)


# ------------------------------------------------------------------ _base.py


def test_default_radii_grid_and_validation():
    # default_radii_1, _2, _3, _10 (the documented grid), _18, _20, _22, _27, _34
    np.testing.assert_allclose(default_radii(None), np.geomspace(0.5, 200.0, 24))
    np.testing.assert_array_equal(default_radii(2.0), [2.0])
    np.testing.assert_array_equal(default_radii([3.0]), [3.0])
    np.testing.assert_array_equal(default_radii([1.0, 1.0, 4.0]), [1.0, 1.0, 4.0])
    for bad in ([], [1.0, np.inf], [1.0, np.nan], [0.0, 1.0], [-1.0, 2.0], [2.0, 1.0]):
        with pytest.raises(ValueError, match="path_radii"):
            default_radii(bad)


def test_saturation_radius_ignores_gaps_the_direction_does_not_separate():
    # saturation_radius_17, _18, _19: zero and negative direction gaps are ignored
    assert saturation_radius([2.0, 0.0]) == pytest.approx(10.0)
    assert saturation_radius([2.0, -1.0], [0.0, 40.0]) == pytest.approx(10.0)
    assert saturation_radius([4.0, 1.0], [0.0, 10.0]) == pytest.approx(10.0)
    assert saturation_radius([0.0, -2.0]) == 0.0


def test_unit_of_an_empty_array():
    # unit_8
    direction, norm = unit(np.array([]))
    assert direction.shape == (0,) and norm == 0.0


def test_exp_loss_shows_the_risk_and_closes_the_bar():
    # _exp_loss_4, _7, _9, _10, _15, _16
    calls = []

    class Bar:
        def __call__(self, k, loss, row=None):
            calls.append((k, loss, row))

        def close(self):
            calls.append("closed")

    assert _exp_loss(None) is None
    shown = _exp_loss(Bar())
    shown(3, np.log(2.5), {"norm": 1.0})
    shown.close()
    assert calls[0][0] == 3 and calls[0][1] == pytest.approx(2.5)
    assert calls[0][2] == {"norm": 1.0} and calls[1] == "closed"


def test_atomic_fit_keeps_dunder_attributes():
    # _is_fitted_name_7: like scikit-learn, names ``__x__`` are not fitted attributes
    est = AttentionSelector()
    est.coef_ = 1.0
    est.__note__ = "kept"
    with atomic_fit(est):
        assert not hasattr(est, "coef_")
        assert vars(est)["__note__"] == "kept"


def _selector_data():
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.3, 0.2]],
                  [[0.0, 1.0], [1.0, 0.0], [0.1, 0.1]],
                  [[1.0, 0.5], [0.2, 1.0], [0.0, 0.0]]])
    return X, np.array([1, -1, 1])


def test_fit_honours_tol_and_returns_float64():
    # _train_32 (tol reaches the loop), _fit_37, _39 (fitted parameters are float64)
    X, y = _selector_data()
    kw = {"head": np.array([1.0, -1.0]), "solver": "gd", "max_iter": 50,
          "compute_limits": False}
    assert AttentionSelector(**kw).fit(X, y).n_iter_ == 50
    assert AttentionSelector(tol=1e3, **kw).fit(X, y).n_iter_ == 0
    est = AttentionSelector(dtype="float32", **kw).fit(X, y)
    assert est.query_.dtype == np.float64


def test_unavailable_device_fails_the_fit():
    # backend_of_2: the estimator's device reaches the backend
    X, y = _selector_data()
    est = AttentionSelector(head=np.array([1.0, -1.0]), solver="gd", max_iter=2,
                            compute_limits=False, device="cuda")
    with pytest.raises(ValueError, match="device"):
        est.fit(X, y)


def test_complex_init_is_refused():
    # _initial_18
    X, y = _selector_data()
    est = AttentionSelector(head=np.array([1.0, -1.0]), solver="gd", max_iter=2,
                            compute_limits=False, init=np.array([1.0 + 1.0j, 0.0]))
    with pytest.raises(ValueError, match="real"):
        est.fit(X, y)


def _ntp_datasets(k):
    return [make_ntp_data(n_samples=60, n_contexts=4, n_features=5, n_tokens=3,
                          support_size=2, random_state=s) for s in range(k)]


def test_batched_trials_match_single_fits():
    # _fit_trials_2 (one trial), _21 (compute_limits=False), _54 (tol), _63, _65
    # (float64 parameters), _81 (n_iter_)
    for tol, max_iter in ((0.0, 30), (1e3, 30)):
        template = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=max_iter, tol=tol,
                                        compute_limits=False, random_state=0)
        for datasets in (_ntp_datasets(1), _ntp_datasets(2)):
            trials = fit_ntp_trials(template, datasets, random_state=[0] * len(datasets))
            for est, (X, y) in zip(trials, datasets):
                single = NTPDecoderClassifier(**template.get_params()).fit(X, y)
                assert est.n_iter_ == single.n_iter_ == (0 if tol else max_iter)
                assert est.mm_direction_ is None and single.mm_direction_ is None
                np.testing.assert_allclose(est.coef_, single.coef_, rtol=1e-10, atol=1e-12)
    template = NTPDecoderClassifier(solver="gd", max_iter=3, compute_limits=False,
                                    dtype="float32", random_state=0)
    (est,) = fit_ntp_trials(template, _ntp_datasets(1))
    assert est.coef_.dtype == np.float64


def test_progress_bar_shows_the_solver_and_the_risk(capsys):
    # _train_48, _52, _55, _56, _57, _58, _61, Training.__init___2: the bar of the descent
    # is named after the solver, counts to max_iter and shows the risk L, also when the
    # loop runs on log L (JointAttentionSVM with "ngd")
    from skntp import JointAttentionSVM
    from skntp.datasets import make_joint_fig3

    X, y = _selector_data()
    est = AttentionSelector(head=np.array([1.0, -1.0]), solver="gd", max_iter=20,
                            compute_limits=False, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "gd [" in err and "20/20" in err
    assert f"loss {est.history_['loss'][-1]:.4g}" in err
    Xj, yj, P = make_joint_fig3("b", return_params=True)
    joint = JointAttentionSVM(max_iter=20, init=(P.head_init, P.query_init),
                              compute_limits=False, verbose=1).fit(Xj, yj)
    err = capsys.readouterr().err
    assert "ngd [" in err and "20/20" in err
    assert f"loss {joint.history_['loss'][-1]:.4g}" in err


def test_converged_trial_of_non_separable_data_does_not_warn():
    # _fit_trials_82: a trial that reached tol is converged (no ConvergenceWarning)
    from sklearn.exceptions import ConvergenceWarning

    X, y = make_ntp_data(n_samples=80, n_contexts=8, n_features=1, n_tokens=4,
                         support_size=2, random_state=0)
    template = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=3000, tol=1e-3,
                                    random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # NTP-SVM is infeasible
        warnings.simplefilter("error", ConvergenceWarning)
        single = NTPDecoderClassifier(**template.get_params()).fit(X, y)
        (trial,) = fit_ntp_trials(template, [(X, y)], random_state=[0])
    assert single.is_ntp_separable_ is False and trial.is_ntp_separable_ is False
    assert trial.n_iter_ == single.n_iter_ < 3000
    assert trial.history_["grad_norm"][-1] <= 1e-3


def test_saturated_key_query_gradient_with_distinct_tied_top_tokens():
    # the finding of run 2: tied top tokens that differ (equal keys, different
    # tokens).  dL/dW = p g^T with g = sum_t r_t x_t, r_t = c s_t (h_t - f): by hand,
    # g = (c s1 s3 / 2, c s1 (1 - s1)); its first component is of the order of the
    # non-selected attention s3 and must keep its sign when s3 ~ 1e-22.
    X = np.array([[[1.0, 0.0], [1.0, 1.0], [0.5, 0.0]]])
    W = np.array([[1.0, 0.0]])
    v, y = np.array([0.0, 1.0]), np.array([1.0])
    for P in (4.0, 100.0):
        e = np.exp(-P / 2)
        s1, s3 = 1 / (2 + e), e / (2 + e)
        c = -expit(-s1)
        _, (gW,) = attention_loss_grad(np, X, X @ W.T, y, v, np.array([P]), wrt=("W",))
        expected = P * np.array([[c * s1 * s3 / 2, c * s1 * (1 - s1)]])
        np.testing.assert_allclose(gW, expected, rtol=1e-9)


# ------------------------------------- run 6 (partial): skntp/losses/decoder.py


def test_next_token_targets_of_lists_columns_two_token_and_stored_zero_soft_labels():
    import scipy.sparse as sp

    from skntp.losses.decoder import next_token_targets

    # hard labels as a list, and as a column vector: the same one-hot rows
    classes, Y = next_token_targets([0, 2, 1, 2], 4)
    np.testing.assert_array_equal(classes, [0, 1, 2])
    want = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 1]], float)
    np.testing.assert_array_equal(Y.toarray(), want)
    classes_col, Y_col = next_token_targets(np.array([[0], [2], [1], [2]]), 4)
    np.testing.assert_array_equal(classes_col, classes)
    np.testing.assert_array_equal(Y_col.toarray(), want)
    # soft labels over two tokens are allowed (one token is not)
    classes, Y = next_token_targets(np.array([[0.25, 0.75], [1.0, 0.0]]), 2)
    np.testing.assert_array_equal(classes, [0, 1])
    np.testing.assert_array_equal(Y.toarray(), [[0.25, 0.75], [1.0, 0.0]])
    with pytest.raises(ValueError, match="at least 2 columns"):
        next_token_targets(sp.csr_matrix(np.ones((2, 1))), 2)
    # an explicitly stored zero of sparse soft labels is no negative weight
    stored = sp.csr_matrix((np.array([0.5, 0.0, 0.5, 1.0]), np.array([0, 1, 2, 1]),
                            np.array([0, 3, 4])), shape=(2, 3))
    assert stored.nnz == 4
    classes, Y = next_token_targets(stored, 2)
    np.testing.assert_array_equal(Y.toarray(), [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])


def _blas_pool_sizes():
    from threadpoolctl import threadpool_info

    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.mark.parametrize("batch", [(), (2,)])
def test_the_loop_runs_small_decoder_problems_on_one_blas_thread_and_keeps_the_pool(batch):
    # The loop decides the BLAS pool from the cross-entropy's largest product, the logits
    # H W^T: B * m * V * d multiply-adds (eq. (2)).  Below SMALL_PRODUCT one thread; at or
    # above it the pool, as the libraries have it (two threads where they can).
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    from skntp._backend import SMALL_PRODUCT
    from skntp._optim import minimize
    from skntp.losses.decoder import CrossEntropy

    class Spy(CrossEntropy):
        seen = set()

        def __call__(self, params):
            Spy.seen |= _blas_pool_sizes()
            return super().__call__(params)

    rng = np.random.default_rng(0)
    B = batch[0] if batch else 1
    # m * V * d = SMALL_PRODUCT exactly for the large shape, one eighth of it for the small
    for m, V, d, pool in [(64, 64, 2**11 // B, True), (64, 64, 2**8 // B, False)]:
        assert B * m * V * d == (SMALL_PRODUCT if pool else SMALL_PRODUCT // 8)
        H = rng.standard_normal((*batch, m, d))
        pi = np.full((*batch, m), 1.0 / m)
        P = sp.csr_matrix((np.ones(B * m), (np.arange(B * m), rng.integers(0, V, B * m))),
                          shape=(B * m, V))
        Spy.seen = set()
        with threadpool_limits(limits=2, user_api="blas"):
            outside = _blas_pool_sizes()
            if max(outside) < 2:
                pytest.skip("no BLAS here runs a pool of two threads")
            obj = Spy(get_backend(), H, pi, P)
            minimize(obj, [np.zeros((*batch, V, d))], xp=np, max_iter=2, batched=bool(batch))
        assert Spy.seen == (outside if pool else {1}), (m, V, d)


def test_the_chunk_budget_bounds_the_memory_of_a_cross_entropy_call():
    # max_elements bounds the logits held at once (the contexts in row chunks): the peak
    # of a call stays far below the m x V logits of an unchunked call, with the same values
    import tracemalloc

    import scipy.sparse as sp

    from skntp.losses.decoder import CrossEntropy

    rng = np.random.default_rng(1)
    m, V, d = 2000, 500, 3
    H = rng.standard_normal((m, d))
    pi = np.full(m, 1.0 / m)
    P = sp.csr_matrix((np.ones(m), (np.arange(m), rng.integers(0, V, m))), shape=(m, V))
    W = rng.standard_normal((V, d))
    logits_bytes = m * V * 8
    peaks, values = [], []
    for max_elements in (None, 20_000):
        obj = CrossEntropy(get_backend(), H, pi, P, max_elements=max_elements)
        tracemalloc.start()
        loss, (grad,) = obj((W,))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        values.append((loss, grad))
    assert peaks[0] >= logits_bytes  # one chunk: every logit at once
    assert peaks[1] < logits_bytes / 10  # chunks of 40 contexts: 20 000 logits at a time
    assert values[1][0] == pytest.approx(values[0][0], rel=1e-12)
    np.testing.assert_allclose(values[1][1], values[0][1], rtol=1e-10, atol=1e-14)
    # exactly two and three chunks (the smallest chunked cases) give the same values too
    for n_chunks in (2, 3):
        obj = CrossEntropy(get_backend(), H, pi, P, max_elements=-(-m // n_chunks) * V)
        assert len(obj.chunks) == n_chunks
        loss, (grad,) = obj((W,))
        assert loss == pytest.approx(values[0][0], rel=1e-12)
        np.testing.assert_allclose(grad, values[0][1], rtol=1e-10, atol=1e-14)


def test_aggregate_contexts_normalizes_soft_rows_and_drops_zero_weight_rows():
    # Sec. 2 by hand: rows (context, weight, next-token counts), normalized per row, then
    # pooled per distinct context; a row of weight 0 is dropped, even the only row of its
    # context (which would otherwise have mass 0 and NaN probabilities)
    import scipy.sparse as sp

    from skntp.losses.decoder import aggregate_contexts

    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    Y = np.array([[2.0, 0.0, 0.0],   # sums to 2: the row is [1, 0, 0]
                  [1.0, 1.0, 0.0],   # [1/2, 1/2, 0]
                  [0.0, 0.5, 0.0],   # sums to 1/2: [0, 1, 0]
                  [0.0, 0.0, 1.0]])  # weight 0: dropped with its context
    w = np.array([1, 2, 3, 0])  # integer weights
    contexts, pi, P, inverse = aggregate_contexts(X, sp.csr_matrix(Y), w)
    np.testing.assert_array_equal(contexts, [[0.0, 1.0], [1.0, 0.0]])
    # context [0, 1]: weight 1 + 3, counts 1 [1, 0, 0] + 3 [0, 1, 0]; context [1, 0]: 2
    np.testing.assert_allclose(pi, [4 / 6, 2 / 6], rtol=1e-15)
    np.testing.assert_allclose(P.toarray(), [[0.25, 0.75, 0.0], [0.5, 0.5, 0.0]],
                               rtol=1e-15)
    np.testing.assert_array_equal(inverse, [0, 1, 0])


# ----------------------------- run 7: skntp/losses/self_attention.py (Li et al. eq. (1))


def test_saturated_self_attention_gradient_with_tied_top_tokens():
    # The squared loss (Sec. 6) at a softmax saturated on two positions holding the same
    # token (an exact tie), E = I so the gradient is D itself.  With s_1 = e^-100 / 2 and
    # s_2 = e^-101 / 2 the masses of tokens 1 and 2, by hand:
    #   gamma_0 - u = 0.5 s_1 + 1.3 s_2,   1 - u = 0.2 (to 1e-44),
    #   D[x, k] = sum over positions of -2 (1 - u) s_t (gamma_t - u).
    # Computed as a difference of O(1) numbers, the top token's entry would be lost.
    from skntp.losses.self_attention import SelfAttentionRisk

    gamma = np.array([[0.8, 0.3, -0.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    ids = np.array([[0, 0, 1, 2]])
    W = np.zeros((3, 3))
    W[1, 2], W[2, 2] = -100.0, -101.0  # scores e_x^T W e_2: 0, 0, -100, -101
    risk = SelfAttentionRisk(get_backend(), np.eye(3), gamma, ids, np.ones((1, 4), bool),
                             np.array([2]), np.array([0]), loss="squared")
    loss, (grad,) = risk((W,))
    s1, s2 = np.exp(-100.0) / 2, np.exp(-101.0) / 2
    want = np.zeros((3, 3))
    want[:, 2] = [-0.4 * (0.5 * s1 + 1.3 * s2), 0.2 * s1, 0.52 * s2]
    assert loss == pytest.approx(0.04, rel=1e-14)
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=0)


def test_embedding_table_shapes_and_drawn_vocabulary():
    from skntp.losses.self_attention import embedding_table

    rng = np.random.RandomState(0)  # what the estimator passes (check_random_state)
    ids = np.array([0, 3, 1])
    for E in (np.ones((2, 3)), np.ones((3, 1))):  # two tokens; one dimension
        np.testing.assert_array_equal(embedding_table(E, None, None, ids, rng), E)
    for E in (np.ones((1, 3)), np.ones((3, 0)), np.ones(3)):
        with pytest.raises(ValueError, match=r"2-D \(K, d\) array with K >= 2"):
            embedding_table(E, None, None, ids, rng)
    assert embedding_table(np.ones((3, 5)), 3, None, ids, rng).shape == (3, 5)
    with pytest.raises(ValueError, match="n_tokens=5 but embeddings has 3 rows"):
        embedding_table(np.ones((3, 5)), 5, None, ids, rng)
    # drawn (App. D): ids 0..max, on the unit sphere, d = K unless given
    drawn = embedding_table(None, None, None, ids, rng)
    assert drawn.shape == (4, 4)
    np.testing.assert_allclose(np.linalg.norm(drawn, axis=1), 1.0, rtol=1e-14)
    assert embedding_table(None, None, 7, ids, rng).shape == (4, 7)
    assert embedding_table(None, 6, None, ids, rng).shape == (6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert embedding_table(None, None, 2, np.arange(200), rng).shape == (200, 2)
    with pytest.warns(UserWarning, match="largest token id is 500.*only 2 distinct"):
        embedding_table(None, None, 2, np.array([0, 500]), rng)


def test_identity_head_refuses_dependent_and_too_many_tokens():
    from skntp.losses.self_attention import identity_head

    E = np.array([[1.0, 0.0], [1.0, 1e-12]])  # two tokens, numerically dependent
    with pytest.raises(ValueError, match=r"linearly dependent \(E has rank < K\)"):
        identity_head(E)
    with pytest.raises(ValueError, match="K=3 tokens embedded in d=2"):
        identity_head(np.eye(3)[:, :2])
    E = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    C = identity_head(E)
    np.testing.assert_allclose(C @ E.T, np.eye(2), atol=1e-14)  # Assumption 4
    assert np.linalg.matrix_rank(np.vstack([E, C])) == 2  # minimum norm: in E's row space


def test_head_matrix_of_an_array_head_assumption_3_and_bad_embeddings():
    from skntp.losses.self_attention import head_matrix

    E = np.eye(4)
    C = 2.0 * np.eye(4) + 0.1  # Gamma = C E^T has its row maxima on the diagonal
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got_C, gamma, identity = head_matrix(C, E)
        np.testing.assert_array_equal(got_C, C)
        np.testing.assert_array_equal(gamma, C @ E.T)
        assert identity is False
        got_C, gamma, identity = head_matrix("embeddings", E)
        np.testing.assert_array_equal(gamma, E @ E.T)
        assert identity is False
        assert head_matrix("identity", E)[2] is True
    with pytest.warns(UserWarning, match="violates Assumption 3"):
        head_matrix(C[[1, 0, 2, 3]], E)  # tokens 0 and 1 swapped
    with pytest.raises(ValueError, match="head contains NaN"):
        head_matrix(np.where(np.eye(4) > 0, np.nan, C), E)
    with pytest.raises(ValueError, match="head must be real"):
        head_matrix(C + 1j, E)
    with pytest.raises(ValueError, match=r"head must have shape \(K, d\) = \(4, 4\)"):
        head_matrix(C[:, :3], E)
    # embeddings whose scores leave float64 are refused without an overflow warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for scale in (1e200, 1e-200):
            with pytest.raises(FloatingPointError, match="entries of magnitude"):
                head_matrix("embeddings", scale * E)
    with pytest.raises(ValueError, match="embeddings are all zero"):
        head_matrix("embeddings", 0.0 * E)


def test_realizable_samples_warning_names_the_samples_and_the_consequence():
    from skntp.losses.self_attention import realizable_samples

    ids = np.array([[0, 1, 2], [1, 2, 2]] + [[1, 1, 1]] * 7)
    mask = np.ones(ids.shape, bool)
    mask[0, 2] = False  # sample 0's label 2 sits at a padded position only
    y = np.array([2, 2] + [0] * 7)
    want = np.array([False, True] + [False] * 7)
    with pytest.warns(UserWarning) as rec:
        np.testing.assert_array_equal(realizable_samples(ids, mask, y, True), want)
    (msg,) = [str(w.message) for w in rec]
    assert "8 sample(s) (e.g. [0, 2, 3, 4, 5]) are not realizable" in msg
    assert "their prediction y_hat_y is 0 for every W" in msg
    assert "No sample is left" not in msg
    with pytest.warns(UserWarning) as rec:
        realizable_samples(ids, mask, y, False)
    (msg,) = [str(w.message) for w in rec]
    assert msg.endswith("(Assumption 2). The theory's limits do not describe them.")
    with pytest.warns(UserWarning, match="No sample is left: W stays at its initialization"):
        assert not realizable_samples(ids[2:], mask[2:], y[2:], True).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert realizable_samples(ids[1:2], mask[1:2], y[1:2], True).all()


def test_log_risk_with_the_label_mass_below_float64_is_exact_and_silent():
    # Sec. 5's log-loss with C E^T = I: attention puts e^-800 on the label (0 in float64),
    # so r = 1: the loss is lse(a) - a_label = 800 and the gradient D[0, 1] = -1,
    # D[1, 1] = +1, without a log(0) warning from the branch that is not taken.
    from skntp.losses.self_attention import SelfAttentionRisk

    W = np.zeros((2, 2))
    W[0, 1] = -800.0
    risk = SelfAttentionRisk(get_backend(), np.eye(2), np.eye(2), np.array([[0, 1]]),
                             np.ones((1, 2), bool), np.array([1]), np.array([0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss, (grad,) = risk((W,))
    assert loss == pytest.approx(800.0, rel=1e-15)
    np.testing.assert_array_equal(grad, [[0.0, -1.0], [0.0, 1.0]])


@pytest.mark.parametrize("ids, n_tokens, warns", [
    ([0, 101], None, False),                     # K = 102 = distinct + 100: not above it
    ([0, 102], None, True),                      # K = 103
    ([0, 49], None, False),                      # K = 50 <= max(4 * 2, 2 + 100)
    ([*range(49), 179], None, False),            # 50 distinct, K = 180 <= 4 * 50
    ([*range(49), 210], None, True),             # K = 211 > 4 * 50
    ([0, 1], 500, False),                        # n_tokens given: the user's vocabulary
])
def test_embedding_table_warns_only_for_a_vocabulary_far_above_the_ids(ids, n_tokens, warns):
    from skntp.losses.self_attention import embedding_table

    rng = np.random.RandomState(0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        E = embedding_table(None, n_tokens, 2, np.array(ids), rng)
    assert E.shape == (max(ids) + 1 if n_tokens is None else n_tokens, 2)
    assert [("largest token id" in str(w.message)) for w in rec] == ([True] if warns else [])


def test_embedding_table_draws_two_tokens_and_refuses_one():
    from skntp.losses.self_attention import embedding_table

    rng = np.random.RandomState(0)
    assert embedding_table(None, None, None, np.array([0, 1, 1]), rng).shape == (2, 2)
    with pytest.raises(ValueError, match="at least 2 tokens; got n_tokens=1"):
        embedding_table(None, None, None, np.array([0, 0]), rng)


def test_the_loop_runs_small_self_attention_problems_on_one_blas_thread():
    # The risk's largest products are E W (K d^2 multiply-adds) and (E W) E^T (K^2 d),
    # plus a gather of the n T scores: at K = 127, d = 256, n T = 65 536 they add up to
    # SMALL_PRODUCT exactly (the pool), with one sequence fewer they do not (one thread).
    from threadpoolctl import threadpool_limits

    from skntp._backend import SMALL_PRODUCT
    from skntp._optim import minimize
    from skntp.losses.self_attention import SelfAttentionRisk

    class Spy(SelfAttentionRisk):
        seen = set()

        def __call__(self, params):
            Spy.seen |= _blas_pool_sizes()
            return super().__call__(params)

    K, d, T = 127, 256, 4
    assert K * d * d + 16_384 * T == SMALL_PRODUCT
    E = np.random.default_rng(0).standard_normal((K, d)) / 16
    for n, pool in [(16_384, True), (16_383, False)]:
        ids = np.tile(np.arange(T), (n, 1))
        Spy.seen = set()
        with threadpool_limits(limits=2, user_api="blas"):
            outside = _blas_pool_sizes()
            if max(outside) < 2:
                pytest.skip("no BLAS here runs a pool of two threads")
            risk = Spy(get_backend(), E, np.eye(K), ids, np.ones(ids.shape, bool),
                       np.full(n, T - 1), np.zeros(n, int))
            minimize(risk, [np.zeros((d, d))], xp=np, max_iter=2)
        assert Spy.seen == (outside if pool else {1}), n


def test_log_risk_refuses_a_label_only_at_padding():
    # loss='log' is infinite on a sample none of whose real tokens has c_y^T e_x > 0;
    # a label at a padded position does not count
    from skntp.losses.self_attention import SelfAttentionRisk

    with pytest.raises(ValueError, match="no token x with c_y\\^T e_x > 0"):
        SelfAttentionRisk(get_backend(), np.eye(2), np.eye(2), np.array([[0, 1]]),
                          np.array([[True, False]]), np.array([0]), np.array([1]))


def test_log_risk_is_exact_for_the_identity_head_and_general_for_others():
    # Sec. 5's log-loss -log u, u = sum_t s_t gamma_t.  With C E^T = I, u is the mass on the
    # label, 1 - 1e-20 here: the loss is 1e-20 (computed as -log1p(-r)), which
    # log-sum-exp differences round to 0.  With a general positive head it is -log u.
    from skntp.losses.self_attention import SelfAttentionRisk

    W = np.zeros((2, 2))
    W[1, 1] = -20 * np.log(10.0)  # the other token's score: mass 1e-20 / (1 + 1e-20)
    args = (np.array([[0, 1]]), np.ones((1, 2), bool), np.array([1]), np.array([0]))
    loss, _ = SelfAttentionRisk(get_backend(), np.eye(2), np.eye(2), *args)((W,))
    assert loss == pytest.approx(1e-20, rel=1e-10, abs=0)
    gamma = np.array([[0.9, 0.2], [0.3, 0.6]])
    W = np.array([[0.0, 0.4], [0.0, -0.7]])
    loss, (grad,) = SelfAttentionRisk(get_backend(), np.eye(2), gamma, *args)((W,))
    s = np.exp([0.4, -0.7]) / np.exp([0.4, -0.7]).sum()
    u = s @ gamma[0]
    assert loss == pytest.approx(-np.log(u), rel=1e-14)
    # d(-log u)/da_t = -s_t (gamma_t - u) / u, at W[x_t, k = 1]
    np.testing.assert_allclose(grad[:, 1], -s * (gamma[0] - u) / u, rtol=1e-13)
    np.testing.assert_array_equal(grad[:, 0], 0.0)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype, gaps", [("float64", (700.0, 720.0, 740.0, 800.0)),
                                         ("float32", (80.0, 90.0, 100.0, 110.0))])
def test_the_ntp_loss_is_finite_where_the_supports_exponential_is_subnormal(backend, dtype,
                                                                         gaps):
    # the next token `gap` below the other one: -log softmax = gap + log1p(exp(-gap)),
    # also where exp(-gap) is subnormal (710 to 745 in float64, 88 to 103 in float32),
    # where the support's part of the partition function divided the other's overflowed
    if backend == "torch":
        pytest.importorskip("torch")
    import scipy.sparse as sp

    from skntp._backend import get_backend
    from skntp.losses.decoder import CrossEntropy

    be = get_backend(backend, dtype=dtype)
    P = sp.csr_matrix(np.array([[0.0, 1.0]]))
    for gap in gaps:
        ce = CrossEntropy(be, np.array([[1.0]]), np.array([1.0]), P)
        loss, (grad,) = ce((be.asarray(np.array([[0.0], [-gap]])),))
        assert float(loss) == pytest.approx(gap, rel=1e-6)
        np.testing.assert_allclose(np.asarray(grad, dtype=float).ravel(), [1.0, -1.0],
                                   atol=1e-6)
