"""One vocabulary over the four estimators, and the atomic fit.

Every estimator runs on :class:`skntp._base.ImplicitBiasEstimator`: the same
solvers, ``init``, ``sample_weight``, ``history_`` whose ``alignment`` ends at
``alignment_``, and a fit that either completes or leaves the previous fit as
it was.
"""

import warnings

import numpy as np
import pytest

import skntp.losses.attention as attention_model
import skntp.losses.decoder as decoder_model
import skntp.losses.self_attention as self_attention_model
from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
)
from skntp.datasets import (
    make_attention_fig1a,
    make_attention_fig1c,
    make_joint_fig3,
    make_ntp_data,
    make_token_priority_data,
)


def _data():
    Xd, yd = make_ntp_data(200, 6, 10, 4, 2, random_state=0)
    a = make_attention_fig1c()  # three inputs
    Xj, yj, P = make_joint_fig3("b", return_params=True)
    Xs, ys, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    return {
        "decoder": (lambda **kw: NTPDecoderClassifier(random_state=0, **kw), Xd, yd),
        "selector": (lambda **kw: AttentionSelector(a.head, a.key_query, classes=[-1, 1],
                                                    **kw), a.X, a.y),
        "joint": (lambda **kw: JointAttentionSVM(init=kw.pop("init", (P.head_init,
                                                                      P.query_init)), **kw),
                  Xj, yj),
        "self-attention": (lambda **kw: NTPAttentionClassifier(E, **kw), Xs, ys),
    }


DATA = _data()


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("solver", ["gd", "ngd", "adam"])
def test_every_solver_and_the_history_vocabulary(name, solver):
    make, X, y = DATA[name]
    est = make(solver=solver, lr=0.05, max_iter=30, record_every=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short fits: no direction for some solvers
        est.fit(X, y)
    h = est.history_
    assert all(np.ndim(v) == 1 and len(v) == len(h["iteration"]) for v in h.values())
    np.testing.assert_array_equal(h["iteration"], [0, 7, 14, 21, 28, 30])
    assert est.n_iter_ == 30
    if est.mm_direction_ is not None:
        assert h["alignment"][-1] == pytest.approx(est.alignment_, rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("name", sorted(DATA))
def test_sample_weight_everywhere(name):
    make, X, y = DATA[name]
    n = len(y)
    kw = dict(solver="gd", lr=0.05, max_iter=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = make(**kw).fit(X, y)
        b = make(**kw).fit(X, y, sample_weight=np.full(n, 3.0))
        w = np.linspace(0.5, 2.0, n)
        c = make(**kw).fit(X, y, sample_weight=w)
    params = {"decoder": "coef_", "selector": "query_", "joint": "query_",
              "self-attention": "coef_"}[name]
    # uniform weights are no weights; others change the fit
    np.testing.assert_allclose(getattr(b, params), getattr(a, params), rtol=1e-10,
                               atol=1e-13)
    assert np.abs(getattr(c, params) - getattr(a, params)).max() > 1e-8


def _fit_quiet(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return est.fit(X, y, **kw)


def test_attributes_and_methods():
    X, y, P = make_joint_fig3("a", return_params=True)
    est = JointAttentionSVM(solver="svm").fit(X, y)
    assert est.head_mm_margin_ > 0
    assert est.attention_weights(X).shape == X.shape[:2]
    with pytest.raises(AttributeError, match="no attribute 'nothing_'"):
        est.nothing_  # noqa: B018
    a = make_attention_fig1a()
    sel = AttentionSelector(a.head, a.key_query, classes=[-1, 1], max_iter=20).fit(a.X, a.y)
    assert sel.attention_weights(a.X).shape == a.X.shape[:2]
    assert sel.trajectory_["query"].shape == (len(sel.history_["iteration"]), a.X.shape[2])


# --------------------------------------------------------------------------
# atomic fit
# --------------------------------------------------------------------------
class _Interrupt(BaseException):
    """Stands for a KeyboardInterrupt without stopping pytest."""


_OBJECTIVES = {"decoder": (decoder_model, "CrossEntropy"),
               "selector": (attention_model, "AttentionObjective"),
               "joint": (attention_model, "AttentionObjective"),
               "self-attention": (self_attention_model, "SelfAttentionRisk")}


@pytest.mark.parametrize("exc", [_Interrupt, ValueError])
@pytest.mark.parametrize("name", sorted(DATA))
def test_interrupted_fit_keeps_the_previous_one(name, exc, monkeypatch):
    make, X, y = DATA[name]
    est = make(solver="ngd", lr=0.05, max_iter=40)
    _fit_quiet(est, X, y)
    before = {k: v for k, v in vars(est).items()}
    snapshot = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in before.items()}
    prediction = est.predict(X)
    module, cls = _OBJECTIVES[name]
    original = getattr(module, cls).__call__
    calls = []

    def flaky(self, params):
        calls.append(1)
        if len(calls) == 15:  # mid-training of the refit
            raise exc("stop")
        return original(self, params)

    monkeypatch.setattr(getattr(module, cls), "__call__", flaky)
    with pytest.raises(exc):
        est.set_params(max_iter=60, lr=0.02)
        _fit_quiet(est, X, y)
    monkeypatch.setattr(getattr(module, cls), "__call__", original)
    assert set(vars(est)) == set(before)
    for key, value in snapshot.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(getattr(est, key), value)
        elif key not in ("max_iter", "lr"):
            assert getattr(est, key) is before[key]
    np.testing.assert_array_equal(est.predict(X), prediction)


def test_failed_refit_on_bad_data_keeps_the_fit():
    X, y = make_ntp_data(200, 6, 10, 4, 2, random_state=0)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    coef = est.coef_.copy()
    with pytest.raises(ValueError, match="NaN"):
        est.fit([[1.0], [np.nan], [3.0]], [0, 1, 0])
    assert est.n_features_in_ == 10 and est.svm_radius_ > 0
    np.testing.assert_array_equal(est.coef_, coef)
    est.predict(X[:3])


def test_a_refit_leaves_no_attribute_of_the_former_fit():
    X, y = make_ntp_data(200, 6, 10, 4, 2, random_state=0)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert hasattr(est, "svm_radius_")
    est.set_params(solver="gd", max_iter=5).fit(X, y)
    assert not hasattr(est, "svm_radius_")
    a = make_attention_fig1a()
    sel = AttentionSelector(a.head, a.key_query, classes=[-1, 1], solver="svm").fit(a.X, a.y)
    sel.set_params(solver="ngd", max_iter=10).fit(a.X, a.y)
    assert not hasattr(sel, "svm_radius_")
