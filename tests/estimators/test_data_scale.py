"""Every estimator at any units of its data (issue #47, item 4).

Multiplying the data by ``s`` (the tokens of the attention models, the embeddings
of self-attention, the contexts of the decoder) rescales the model: the limits and
the parameters scale as ``1/s`` (``1/s^2`` where a score multiplies two data
factors: the key-query model with per-input queries, self-attention), while their
directions, the selected tokens and the predictions do not.  Each estimator is
fitted at scale 1 and at scales up to 1e-150 and 1e150, by ``solver="svm"`` and
by normalized GD, and must select and predict the same, with the same alignment.

Normalized GD is scale-equivariant when started at the scaled start with the step
scaled as the parameters, and, where the data also scale the output ``f`` (the
fixed-head attention models), with the correlation loss ``-u``, whose gradient
does not weigh the inputs by their margins: its iterates at scale ``s`` are then
those at scale 1 divided by ``s`` (``s^2``), up to rounding.  Where a score
multiplies two data factors, scales of 1e+-150 put the scores at 1e+-300, beyond
float64's room for the inverse-scaled limits: the fit is refused with
``FloatingPointError``, as the estimators' docstrings say.
"""

import functools
import warnings

import numpy as np
import pytest
from helpers import key_query_setup

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    KeyQuerySelector,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
    NTPEmbeddingClassifier,
)
from skntp._base import saturation_radius
from skntp.datasets import make_ntp_2d_example, make_token_priority_data
from skntp.metrics import alignment

ITERATIONS = 20
#: scales of the models linear in the data, and of those quadratic in it (refused at
#: 1e+-150, where their scores are 1e+-300)
LINEAR = (1e-150, 1e-80, 1e100, 1e150)
QUADRATIC = (1e-140, 1e-80, 1e100, 1e140)


def _tokens():
    X, y, _, v = key_query_setup(0, n=3, T=3, d=8)
    return X, y, v


def _attention(s, solver):
    X, y, _ = _tokens()
    kw = {} if solver == "svm" else {"loss": "correlation", "lr": 0.1 / s}
    est = AttentionSelector(solver=solver, max_iter=ITERATIONS, classes=[-1, 1], **kw)
    return est.fit(X * s, y), X * s


def _joint(s, solver):
    X, y, _ = _tokens()
    rng = np.random.default_rng(1)
    v0, p0 = rng.standard_normal(8) / 3, rng.standard_normal(8) / 3
    kw = {} if solver == "svm" else {"lr": 0.1 / s, "init": (v0 / s, p0 / s)}
    est = JointAttentionSVM(solver=solver, max_iter=ITERATIONS, classes=[-1, 1], **kw)
    return est.fit(X * s, y), X * s


def _key_query(s, solver):
    X, y, v = _tokens()
    W0 = np.random.default_rng(1).standard_normal((8, 8)) / 5
    kw = ({} if solver == "svm" else
          {"loss": "correlation", "lr": 0.1 / s**2, "init": W0 / s**2})
    est = KeyQuerySelector(head=v, query_index=0, solver=solver, max_iter=ITERATIONS,
                           classes=[-1, 1], **kw)
    return est.fit(X * s, y), X * s


def _self_attention(s, solver):
    X, y, E = make_token_priority_data(random_state=0)
    kw = {} if solver == "svm" else {"lr": 1.0 / s**2}
    return NTPAttentionClassifier(embeddings=E * s, solver=solver, max_iter=ITERATIONS,
                                  **kw).fit(X, y), X


def _decoder(s, solver):
    X, y, sw = make_ntp_2d_example()
    W0 = np.random.default_rng(1).standard_normal((5, 2)) / 2
    kw = {} if solver == "svm" else {"lr": 0.5 / s, "init": W0 / s}
    est = NTPDecoderClassifier(solver=solver, max_iter=ITERATIONS, **kw)
    return est.fit(X * s, y, sample_weight=sw), X * s


def _embeddings(s, solver):
    # the contexts are identities only (each gets a free embedding)
    X = np.repeat(np.arange(6.0), 3)[:, None]
    y = np.array([0, 1, 1, 2, 2, 2, 0, 3, 3, 1, 1, 4, 4, 4, 0, 2, 3, 4])
    est = NTPEmbeddingClassifier(solver, max_iter=ITERATIONS, random_state=0)
    return est.fit(X * s, y), X * s


MODELS = {"AttentionSelector": (_attention, LINEAR),
          "JointAttentionSVM": (_joint, LINEAR),
          "KeyQuerySelector": (_key_query, QUADRATIC),
          "NTPAttentionClassifier": (_self_attention, QUADRATIC),
          "NTPDecoderClassifier": (_decoder, LINEAR),
          "NTPEmbeddingClassifier": (_embeddings, LINEAR)}
CASES = [(name, solver, s) for name, (_, scales) in MODELS.items()
         for solver in ("svm", "ngd") for s in scales]


def _fit(name, s, solver):
    """The fit and its predictions; numerical RuntimeWarnings (an overflow, an
    invalid value) are errors, the package's own warnings are not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=".* encountered", category=RuntimeWarning)
        est, X = MODELS[name][0](s, solver)
        return est, est.predict(X)


@functools.cache
def _reference(name, solver):
    return _fit(name, 1.0, solver)


@pytest.mark.parametrize("name, solver, scale", CASES)
def test_predictions_do_not_depend_on_the_data_scale(name, solver, scale):
    ref, ref_pred = _reference(name, solver)
    est, pred = _fit(name, scale, solver)
    np.testing.assert_array_equal(pred, ref_pred)
    if hasattr(ref, "selected_tokens_"):
        np.testing.assert_array_equal(est.selected_tokens_, ref.selected_tokens_)
    assert np.isfinite(ref.alignment_)
    assert est.alignment_ == pytest.approx(ref.alignment_, rel=1e-6)
    for key, values in est.history_.items():
        assert np.all(np.isfinite(values)), key


@pytest.mark.parametrize("scale", [1e-150, 1e150])
@pytest.mark.parametrize("solver", ["svm", "ngd"])
@pytest.mark.parametrize("name", ["KeyQuerySelector", "NTPAttentionClassifier"])
def test_scores_beyond_float64_are_refused(name, solver, scale):
    # scores of 1e+-300: the limits' key-query matrices would be 1e-+300, their
    # radius and squares beyond float64 (before: W = 0, or inf and NaN logits)
    with pytest.raises(FloatingPointError, match="entries of magnitude .* leave float64"):
        MODELS[name][0](scale, solver)


@pytest.mark.parametrize("scale", [1e-160, 1e170])
def test_attention_limit_beyond_1e150(scale):
    # the margin-1 query has norm 1/scale: sum p_i^2 overflowed (R = inf, NaN logits)
    # at 1e-160 and underflowed (R = 0, p = 0) at 1e170
    ref, ref_pred = _reference("AttentionSelector", "svm")
    est, pred = _fit("AttentionSelector", scale, "svm")
    np.testing.assert_array_equal(pred, ref_pred)
    assert est.svm_radius_ * scale == pytest.approx(ref.svm_radius_, rel=1e-9)
    assert est.alignment_ == pytest.approx(1.0)


def test_the_key_query_model_at_1e_minus_170_is_refused_by_name():
    # before: LinAlgError from the gradient fit
    X, y, v = _tokens()
    with pytest.raises(FloatingPointError, match="leave float64"):
        KeyQuerySelector(head=v, query_index=0, max_iter=5, classes=[-1, 1]).fit(X * 1e-170, y)


def test_alignment_and_radius_at_extreme_magnitudes():
    ones = np.ones(4)
    for big in (1e160, 1e-170, 1e300):
        assert alignment(big * ones, ones) == pytest.approx(1.0)
        assert alignment(ones, -big * ones) == pytest.approx(-1.0)
    assert alignment(np.zeros(3), ones[:3]) == 0.0
    assert np.isnan(alignment(np.array([np.inf, 1.0]), np.ones(2)))
    # the fitted parameter at svm_radius=1e160 is still aligned with its direction
    X, y, _ = _tokens()
    est = AttentionSelector(solver="svm", svm_radius=1e160, classes=[-1, 1]).fit(X, y)
    assert est.alignment_ == pytest.approx(1.0)
    # a radius beyond float64 is an error, never inf
    assert saturation_radius([1e-300]) == pytest.approx(2e301)
    with pytest.raises(FloatingPointError, match="overflows float64"):
        saturation_radius([1e-308])
