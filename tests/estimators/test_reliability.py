"""Reliability: bad input, extreme norms, solver failures, determinism, pickling.

The bad-input matrix tries every estimator and every ``skntp.svm`` function
on malformed data (NaN/inf, wrong dimensions, ragged and empty input, one
class, labels outside the vocabulary, bad soft labels, mismatched
``sample_weight``, infeasible data with ``solver="svm"``, parameters out of
range) and requires a clear exception whose message names the problem.
"""

import dataclasses
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from skntp import NTPDecoderClassifier
from skntp.attention import AttentionSelector, JointAttentionSVM
from skntp.datasets import (
    make_attention_fig1c,
    make_attention_random,
    make_joint_fig3,
    make_ntp_data,
    make_token_priority_data,
)
from skntp.graphs import token_priority_graphs
from skntp.self_attention import NTPAttentionClassifier
from skntp.svm import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    UndecidedError,
    att_svm,
    att_svm_prime,
    att_svm_problem,
    finite_component,
    graph_svm,
    head_svm,
    joint_svm,
    log_odds_problem,
    ntp_svm,
    ntp_svm_problem,
    relaxed_att_svm,
    solve_max_margin,
    solve_min_norm,
    support_vectors,
    svm_neighbors,
)

NAN = np.nan
INF = np.inf


def _ntp_data(seed=0, support_size=(1, 3), n=120, m=6, d=8, V=5):
    return make_ntp_data(n_samples=n, n_contexts=m, n_features=d, n_tokens=V,
                         support_size=support_size, random_state=seed)


def _with(X, i, j, value):
    X = np.array(X, dtype=float)
    X[i, j] = value
    return X


# --------------------------------------------------------------------------
# The bad-input matrix: estimators
# --------------------------------------------------------------------------
_X, _Y = _ntp_data()
_SOFT = np.abs(np.random.default_rng(0).standard_normal((6, 4)))
_XS = np.random.default_rng(1).standard_normal((6, 3))
# d = 1 and three contexts on a line with alternating next tokens: not NTP-separable
_X_NONSEP, _Y_NONSEP = np.array([[1.0], [2.0], [3.0]]), np.array([0, 1, 0])

# (id, estimator parameters, X, y, fit keywords, exception, message pattern)
DECODER_FIT_CASES = [
    ("X-nan", {}, _with(_X, 3, 2, NAN), _Y, {}, ValueError, "Input X contains NaN"),
    ("X-inf", {}, _with(_X, 0, 0, INF), _Y, {}, ValueError, "Input X contains infinity"),
    ("X-neg-inf", {}, _with(_X, 5, 1, -INF), _Y, {}, ValueError,
     "Input X contains infinity"),
    ("X-3d", {}, _X[:, :, None], _Y, {}, ValueError, "Found array with dim 3, while dim <= 2"),
    ("X-1d", {}, _X[:, 0], _Y, {}, ValueError, "Expected 2D array, got 1D array"),
    ("X-ragged", {}, [[1.0, 2.0], [1.0]], [0, 1], {}, ValueError,
     "got sequences of different lengths.*ntp_from_sequences"),
    ("X-empty", {}, np.zeros((0, 3)), np.zeros(0, int), {}, ValueError, "0 sample"),
    ("X-no-features", {}, np.zeros((4, 0)), [0, 1, 0, 1], {}, ValueError, "0 feature"),
    ("X-strings", {}, [["a", "b"], ["c", "d"]], [0, 1], {}, ValueError,
     "could not convert string to float"),
    ("X-complex", {}, np.ones((2, 2)) * 1j, [0, 1], {}, ValueError, "omplex"),
    ("X-sparse", {}, sp.csr_matrix(_X), _Y, {}, TypeError, "[Ss]parse"),
    ("y-length", {}, _X, _Y[:-1], {}, ValueError, "X has 120 samples but y has 119"),
    ("y-nan", {}, _X[:3], np.array([0.0, NAN, 1.0]), {}, ValueError, "Input y contains NaN"),
    ("y-continuous", {}, _X[:3], np.array([0.1, 0.7, 1.3]), {}, ValueError,
     "Unknown label type: continuous"),
    ("y-one-class", {}, _X, np.zeros_like(_Y), {}, ValueError, "at least 2 classes"),
    ("y-3d", {}, _X[:2], np.zeros((2, 2, 2)), {}, ValueError, "Found array with dim 3"),
    ("y-outside-vocabulary-int", {"vocabulary": 3}, _X[:4], [0, 1, 2, 7], {}, ValueError,
     "outside the vocabulary"),
    ("y-outside-vocabulary-array", {"vocabulary": ["a", "b"]}, _X[:3], ["a", "b", "c"], {},
     ValueError, "outside the vocabulary"),
    ("y-negative-token", {"vocabulary": 4}, _X[:3], [0, -1, 2], {}, ValueError,
     "outside the vocabulary"),
    ("soft-negative", {}, _XS, _SOFT * [1, -1, 1, 1], {}, ValueError, "non-negative"),
    ("soft-zero-row", {}, _XS, _SOFT * (np.arange(6) != 2)[:, None], {}, ValueError,
     "sums to 0"),
    ("soft-nan", {}, _XS, _with(_SOFT, 0, 0, NAN), {}, ValueError, "soft labels y contain NaN"),
    ("soft-inf", {}, _XS, _with(_SOFT, 1, 2, INF), {}, ValueError,
     "soft labels y contain NaN or infinity"),
    ("soft-rows", {}, _XS, _SOFT[:-1], {}, ValueError, "X has 6 samples but y has 5"),
    ("soft-vocabulary-size", {"vocabulary": 3}, _XS, _SOFT, {}, ValueError,
     "columns.*vocabulary"),
    ("sw-length", {}, _X, _Y, {"sample_weight": np.ones(len(_Y) - 1)}, ValueError,
     r"sample_weight\.shape == \(119,\), expected \(120,\)"),
    ("sw-2d", {}, _X, _Y, {"sample_weight": np.ones((len(_Y), 2))}, ValueError,
     "Sample weights must be 1D array or scalar, got 2D array"),
    ("sw-negative", {}, _X, _Y, {"sample_weight": -np.ones(len(_Y))}, ValueError,
     "Negative values in data passed to `sample_weight`"),
    ("sw-nan", {}, _X, _Y, {"sample_weight": _with(np.ones((1, len(_Y))), 0, 4, NAN)[0]},
     ValueError, "Input sample_weight contains NaN"),
    ("sw-all-zero", {}, _X, _Y, {"sample_weight": np.zeros(len(_Y))}, ValueError,
     "Sample weights must contain at least one non-zero number"),
    ("param-solver", {"solver": "sgd"}, _X, _Y, {}, ValueError, "'solver' parameter"),
    ("param-lr-zero", {"lr": 0.0}, _X, _Y, {}, ValueError, "'lr' parameter"),
    ("param-lr-negative", {"lr": -1.0}, _X, _Y, {}, ValueError, "'lr' parameter"),
    ("param-lr-string", {"lr": "big"}, _X, _Y, {}, ValueError, "'lr' parameter"),
    ("param-max-iter", {"max_iter": 0}, _X, _Y, {}, ValueError, "'max_iter' parameter"),
    ("param-max-iter-float", {"max_iter": 1.5}, _X, _Y, {}, ValueError,
     "'max_iter' parameter"),
    ("param-tol", {"tol": -1e-3}, _X, _Y, {}, ValueError, "'tol' parameter"),
    ("param-record-every", {"record_every": 0}, _X, _Y, {}, ValueError,
     "'record_every' parameter"),
    ("param-backend", {"backend": "jax"}, _X, _Y, {}, ValueError, "'backend' parameter"),
    ("param-dtype", {"dtype": "float16"}, _X, _Y, {}, ValueError, "'dtype' parameter"),
    ("param-svm-radius", {"solver": "svm", "svm_radius": -2.0}, _X, _Y, {}, ValueError,
     "'svm_radius' parameter"),
    ("param-vocabulary-one", {"vocabulary": 1}, _X, _Y, {}, ValueError,
     "'vocabulary' parameter"),
    ("param-vocabulary-fraction", {"vocabulary": 4.5}, _X, _Y, {}, ValueError,
     "integer"),
    ("param-path-radii-negative", {"solver": "regpath", "path_radii": [1.0, -2.0]}, _X, _Y,
     {}, ValueError, "path_radii"),
    ("param-path-radii-decreasing", {"solver": "regpath", "path_radii": [3.0, 1.0]}, _X,
     _Y, {}, ValueError, "increasing"),
    ("param-svm-method", {"solver": "svm", "svm_method": "magic"}, _X, _Y, {}, ValueError,
     "unknown max-margin method 'magic'"),
    ("param-device-numpy", {"device": "cuda"}, _X, _Y, {}, ValueError,
     "device='cuda' needs backend='torch'"),
]


@pytest.mark.parametrize(
    "params, X, y, fit_kw, exc, match",
    [pytest.param(*case[1:], id=case[0]) for case in DECODER_FIT_CASES],
)
def test_decoder_fit_rejects_bad_input(params, X, y, fit_kw, exc, match):
    est = NTPDecoderClassifier(**{"max_iter": 5, **params})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(exc, match=match):
            est.fit(X, y, **fit_kw)


@pytest.fixture(scope="module")
def fitted_decoder():
    return NTPDecoderClassifier(solver="svm").fit(_X, _Y)


DECODER_PREDICT_CASES = [
    ("n-features", _X[:, :-1], ValueError, "X has 7 features, but NTPDecoderClassifier is "
     "expecting 8 features"),
    ("nan", _with(_X, 1, 1, NAN), ValueError, "Input X contains NaN"),
    ("inf", _with(_X, 1, 1, INF), ValueError, "Input X contains infinity"),
    ("3d", _X[:, :, None], ValueError, "Found array with dim 3, while dim <= 2"),
    ("empty", np.zeros((0, _X.shape[1])), ValueError, "0 sample"),
]


@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_log_proba",
                                    "decision_function"])
@pytest.mark.parametrize(
    "X, exc, match", [pytest.param(*c[1:], id=c[0]) for c in DECODER_PREDICT_CASES]
)
def test_decoder_predict_rejects_bad_input(fitted_decoder, method, X, exc, match):
    with pytest.raises(exc, match=match):
        getattr(fitted_decoder, method)(X)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "decision_function"])
def test_decoder_unfitted(method):
    with pytest.raises(NotFittedError):
        getattr(NTPDecoderClassifier(), method)(_X)


# --------------------------------------------------------------------------
# The bad-input matrix: the attention estimators (sequences of token vectors)
# --------------------------------------------------------------------------
_XA, _YA, _VA = make_attention_random(n_samples=6, seq_len=4, n_features=3, random_state=0)
_YA[:2] = [1.0, -1.0]  # both classes
# every input is the same two tokens, with both labels: no head separates them
_XA_NONSEP = np.tile(np.eye(2, 3), (2, 1, 1))
_YA_NONSEP = np.array([1.0, -1.0])

SEQUENCE_ESTIMATORS = {
    "selector": lambda **kw: AttentionSelector(**{"head": _VA, "max_iter": 5, **kw}),
    "joint": lambda **kw: JointAttentionSVM(**{"max_iter": 5, **kw}),
}

# (id, estimator parameters, X, y, exception, message pattern)
SEQUENCE_FIT_CASES = [
    ("X-nan", {}, _XA * np.where(np.arange(3) == 1, NAN, 1.0), _YA, ValueError,
     "Input X contains NaN or infinity"),
    ("X-inf", {}, _XA + np.where(np.arange(3) == 0, INF, 0.0), _YA, ValueError,
     "Input X contains NaN or infinity"),
    ("X-4d", {}, _XA[..., None], _YA, ValueError, r"X must be 3-D .*got shape \(6, 4, 3, 1\)"),
    ("X-1d", {}, _XA[:, 0, 0], _YA, ValueError, "got a 1-D array"),
    ("X-ragged-dims", {}, [np.ones((3, 3)), np.ones((2, 2))], [1, -1], ValueError,
     r"sequences have different token dimensions \[2, 3\]"),
    ("X-empty", {}, np.zeros((0, 4, 3)), np.zeros(0), ValueError,
     r"X is empty: found 0 sequences"),
    ("X-empty-sequence", {}, [np.ones((2, 3)), np.zeros((0, 3))], [1, -1], ValueError,
     "X contains an empty sequence"),
    ("X-strings", {}, np.full((2, 2, 3), "a"), [1, -1], ValueError,
     "X must be numeric: could not convert string to float"),
    ("y-length", {}, _XA, _YA[:-1], ValueError, "X has 6 sequences but y has 5 labels"),
    ("y-one-class", {}, _XA, np.ones(6), ValueError,
     r"needs 2 classes in y; got 1 class|but y has 1 class\(es\)"),
    ("y-three-classes", {}, _XA, [0, 1, 2, 0, 1, 2], ValueError,
     "Only binary classification is supported"),
    ("y-nan", {}, _XA, np.where(np.arange(6) == 3, NAN, _YA), ValueError,
     "Input y contains NaN"),
    ("y-continuous", {}, _XA, np.linspace(-1, 1, 6) + 0.01, ValueError,
     "Unknown label type: continuous"),
    ("svm-not-separable", {"solver": "svm"}, _XA_NONSEP, _YA_NONSEP, NotSeparableError,
     "joint SVM is infeasible: no choice of one token per input|"
     "solver='svm' needs the ATT-SVM \\(GMM\\) solution: ATT-SVM is infeasible"),
    ("param-solver", {"solver": "sgd"}, _XA, _YA, ValueError, "'solver' parameter"),
    ("param-lr", {"lr": 0.0}, _XA, _YA, ValueError, "'lr' parameter"),
    ("param-max-iter", {"max_iter": 0}, _XA, _YA, ValueError, "'max_iter' parameter"),
    ("param-tol", {"tol": -1.0}, _XA, _YA, ValueError, "'tol' parameter"),
    ("param-dtype", {"dtype": "float16"}, _XA, _YA, ValueError, "'dtype' parameter"),
    ("param-backend", {"backend": "jax"}, _XA, _YA, ValueError, "'backend' parameter"),
    ("param-svm-radius", {"solver": "svm", "svm_radius": -0.5}, _XA, _YA, ValueError,
     "'svm_radius' parameter"),
    ("param-path-radii", {"solver": "regpath", "path_radii": [-1.0, 2.0]}, _XA, _YA,
     ValueError, "path_radii must be a non-empty array of positive numbers"),
    ("param-key-query-shape", {"key_query": np.eye(2)}, _XA, _YA, ValueError,
     r"key_query must have shape \(k, 3\)"),
    ("param-key-query-nan", {"key_query": np.eye(3) * NAN}, _XA, _YA, ValueError,
     "key_query contains NaN or infinity"),
    ("param-svm-method", {"solver": "svm", "svm_method": "magic"}, _XA, _YA, ValueError,
     "unknown max-margin method 'magic'"),
]


@pytest.mark.parametrize("name", sorted(SEQUENCE_ESTIMATORS))
@pytest.mark.parametrize(
    "params, X, y, exc, match", [pytest.param(*c[1:], id=c[0]) for c in SEQUENCE_FIT_CASES]
)
def test_sequence_estimators_reject_bad_input(name, params, X, y, exc, match):
    est = SEQUENCE_ESTIMATORS[name](**params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(exc, match=match):
            est.fit(X, y)


@pytest.mark.parametrize("sample_weight, match", [
    pytest.param(np.ones(3), r"sample_weight\.shape == \(3,\), expected \(6,\)",
                 id="length"),
    pytest.param(-np.ones(6), "Negative values in data passed to `sample_weight`",
                 id="negative"),
    pytest.param(np.full(6, NAN), "Input sample_weight contains NaN", id="nan"),
    pytest.param(np.zeros(6), "Sample weights must contain at least one non-zero number",
                 id="all-zero"),
])
def test_selector_rejects_bad_sample_weight(sample_weight, match):
    with pytest.raises(ValueError, match=match):
        SEQUENCE_ESTIMATORS["selector"]().fit(_XA, _YA, sample_weight=sample_weight)


@pytest.mark.parametrize("params, match", [
    ({"head": np.ones(2)}, r"head must have shape \(3,\)"),
    ({"head": np.full(3, NAN)}, "head contains NaN or infinity"),
    ({"train": "v"}, "'train' parameter"),
    ({"loss": "hinge"}, "'loss' parameter"),
    # without the limit: fit solves ATT-SVM (infeasible here: a UserWarning) before it
    # checks init's shape (issue #48)
    ({"init": np.ones(5), "compute_limits": False},
     r"init must have shape \(3,\), got \(5,\)"),
    ({"max_enumeration": 0}, "'max_enumeration' parameter"),
])
def test_selector_rejects_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        SEQUENCE_ESTIMATORS["selector"](**params).fit(_XA, _YA)


@pytest.mark.parametrize("params, match", [
    ({"init": (np.ones(2), None)},
     r"init\[0\] \(the head\) must have shape \(3,\), got \(2,\)"),
    ({"init": (None, np.full(3, INF))}, r"init\[1\] \(the query\) contains NaN or infinity"),
    ({"max_enumeration": 0}, "'max_enumeration' parameter"),
])
def test_joint_rejects_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        SEQUENCE_ESTIMATORS["joint"](**params).fit(_XA, _YA)


SEQUENCE_PREDICT_CASES = [
    ("n-features", _XA[:, :, :2], ValueError,
     "X has tokens of dimension 2, but the estimator was fitted with 3 features"),
    ("nan", _XA * NAN, ValueError, "Input X contains NaN or infinity"),
    ("4d", _XA[..., None], ValueError, r"X must be 3-D .*got shape \(6, 4, 3, 1\)"),
]


@pytest.mark.parametrize("name", sorted(SEQUENCE_ESTIMATORS))
@pytest.mark.parametrize("method", ["predict", "decision_function", "transform"])
@pytest.mark.parametrize(
    "X, exc, match", [pytest.param(*c[1:], id=c[0]) for c in SEQUENCE_PREDICT_CASES]
)
def test_sequence_estimators_predict_rejects_bad_input(name, method, X, exc, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SEQUENCE_ESTIMATORS[name](max_iter=20).fit(_XA, _YA)
    with pytest.raises(exc, match=match):
        getattr(est, method)(X)


@pytest.mark.parametrize("name", sorted(SEQUENCE_ESTIMATORS))
def test_sequence_estimators_unfitted(name):
    with pytest.raises(NotFittedError):
        SEQUENCE_ESTIMATORS[name]().predict(_XA)


# --------------------------------------------------------------------------
# The bad-input matrix: NTPAttentionClassifier (sequences of token ids)
# --------------------------------------------------------------------------
_XI = np.array([[0, 1, 2], [2, 1, 3], [1, 3, 0], [3, 2, 1]])
_YI = np.array([1, 2, 3, 2])
_EI = np.linalg.qr(np.random.default_rng(5).standard_normal((4, 4)))[0]

# (id, estimator parameters, X, y, exception, message pattern)
TOKEN_FIT_CASES = [
    ("X-fraction", {}, _XI + 0.5, _YI, ValueError, "X must hold integer token ids"),
    ("X-negative", {}, _XI - 1, _YI, ValueError,
     "token ids must be non-negative; found -1"),
    ("X-out-of-vocabulary", {}, np.where(_XI == 3, 9, _XI), _YI, ValueError,
     r"out of range: found id 9 but the vocabulary has 4 tokens \(ids 0..3\)"),
    ("X-nan", {}, np.where(_XI == 3, NAN, _XI), _YI, ValueError,
     "Input X contains NaN or infinity"),
    ("X-inf", {}, np.where(_XI == 3, INF, _XI), _YI, ValueError,
     "Input X contains NaN or infinity"),
    ("X-3d", {}, _XI[:, :, None], _YI, ValueError,
     r"X must be a 2-D array .*got an array of shape \(4, 3, 1\)"),
    ("X-empty", {}, np.zeros((0, 3), int), np.zeros(0, int), ValueError,
     "X is empty: found 0 sequences"),
    ("X-empty-sequence", {}, [[0, 1], []], [1, 0], ValueError,
     r"X contains an empty sequence \(sample 1\)"),
    ("X-strings", {}, [["a", "b"], ["c", "d"]], [0, 1], ValueError,
     r"X\[0\] must hold integer token ids, got dtype <U1"),
    ("y-length", {}, _XI, _YI[:-1], ValueError, "X has 4 sequences but y has 3 labels"),
    ("y-out-of-vocabulary", {}, _XI, [1, 2, 3, 7], ValueError,
     "out of range: found id 7 but the vocabulary has 4 tokens"),
    ("y-negative", {}, _XI, [1, -2, 3, 2], ValueError,
     "y: token ids must be non-negative; found -2"),
    ("y-fraction", {}, _XI, [1, 2.5, 3, 2], ValueError,
     "y must hold integer next-token ids"),
    ("y-nan", {}, _XI, [1, NAN, 3, 2], ValueError, "Input y contains NaN or infinity"),
    ("embeddings-nan", {"embeddings": _EI * NAN}, _XI, _YI, ValueError,
     "embeddings contain NaN or infinity"),
    ("embeddings-1d", {"embeddings": _EI[0]}, _XI, _YI, ValueError,
     r"embeddings must be a 2-D \(K, d\) array with K >= 2 tokens, got shape \(4,\)"),
    ("embeddings-n-tokens", {"n_tokens": 5}, _XI, _YI, ValueError,
     "n_tokens=5 but embeddings has 4 rows"),
    ("head-shape", {"head": np.ones((4, 2))}, _XI, _YI, ValueError, "head must have shape"),
    ("head-nan", {"head": _EI * NAN}, _XI, _YI, ValueError, "head contains NaN or infinity"),
    ("identity-head-dependent", {"embeddings": np.ones((4, 4))}, _XI, _YI, ValueError,
     r"needs C E\^T = I_K \(Assumption 4\).*embeddings are linearly dependent"),
    ("svm-not-separable", {"embeddings": np.eye(3)[[0, 0, 1]], "head": "embeddings",
                           "solver": "svm"}, [[1, 2], [0, 2]], [0, 2], NotSeparableError,
     "Graph-SVM is infeasible"),
    ("param-loss", {"loss": "hinge"}, _XI, _YI, ValueError, "'loss' parameter"),
    ("param-solver", {"solver": "sgd"}, _XI, _YI, ValueError, "'solver' parameter"),
    ("param-init", {"init": "ones"}, _XI, _YI, ValueError, "'init' parameter"),
    ("param-lr", {"lr": -0.1}, _XI, _YI, ValueError, "'lr' parameter"),
    ("param-max-iter", {"max_iter": 0}, _XI, _YI, ValueError, "'max_iter' parameter"),
    ("param-threshold", {"selection_threshold": 1.0}, _XI, _YI, ValueError,
     "'selection_threshold' parameter"),
    ("param-dtype", {"dtype": "int8"}, _XI, _YI, ValueError, "'dtype' parameter"),
    ("param-svm-radius", {"solver": "svm", "svm_radius": -1.0}, _XI, _YI, ValueError,
     "'svm_radius' parameter"),
]


@pytest.mark.parametrize(
    "params, X, y, exc, match", [pytest.param(*c[1:], id=c[0]) for c in TOKEN_FIT_CASES]
)
def test_token_estimator_rejects_bad_input(params, X, y, exc, match):
    est = NTPAttentionClassifier(**{"embeddings": _EI, "max_iter": 5, **params})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(exc, match=match):
            est.fit(X, y)


@pytest.mark.parametrize("X, match", [
    pytest.param(np.where(_XI == 3, 9, _XI), "out of range: found id 9 but the vocabulary has 4",
                 id="out-of-vocabulary"),
    pytest.param(_XI + 0.5, "X must hold integer token ids", id="fraction"),
    pytest.param(np.zeros((0, 3), int), "X is empty: found 0 sequences", id="empty"),
])
def test_token_estimator_predict_rejects_bad_input(X, match):
    est = NTPAttentionClassifier(_EI, max_iter=5).fit(_XI, _YI)
    for method in ("predict", "predict_proba"):
        with pytest.raises(ValueError, match=match):
            getattr(est, method)(X)


# --------------------------------------------------------------------------
# The bad-input matrix: skntp.svm functions
# --------------------------------------------------------------------------
_H = np.random.default_rng(2).standard_normal((4, 3))
_S = np.eye(4, 5, dtype=bool)
_P = np.eye(4, 5) * 0.5 + np.eye(4, 5, 1) * 0.5
_K = np.random.default_rng(3).standard_normal((3, 4, 2))
_SEL = np.array([0, 1, 2])
_R = np.random.default_rng(4).standard_normal((4, 3))
_YPM = np.array([1.0, -1.0, 1.0, -1.0])


def _toy_problem(rhs=(1.0,), equality=(False,), method="cvxpy"):
    scores = KeyScores(np.array([[[1.0, 0.0], [0.0, 1.0]]]))
    cons = Constraints([0] * len(rhs), [0] * len(rhs), [1] * len(rhs), rhs, equality)
    return MaxMarginProblem(scores, cons, name="toy program",
                            infeasible_message="the toy data are not separable")


def _contradictory_problem():
    # k_0 - k_1 >= 1 and k_1 - k_0 >= 1 cannot both hold
    keys = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    cons = Constraints([0, 0], [0, 1], [1, 0], [1.0, 1.0], [False, False])
    return MaxMarginProblem(KeyScores(keys), cons, name="toy program",
                            infeasible_message="the toy data are not separable")


_E_DUP = np.eye(3)[[0, 0, 1]]  # tokens 0 and 1 share an embedding
_G_DUP = token_priority_graphs([[1, 2], [0, 2]], [0, 2], n_tokens=3)  # needs 0 => 1

# (id, call, exception, message pattern)
SVM_FUNCTION_CASES = [
    ("graph_svm-nan", lambda: graph_svm(_E_DUP * NAN, _G_DUP), ValueError,
     "embeddings contain NaN or infinity"),
    ("graph_svm-1d", lambda: graph_svm(_E_DUP[0], _G_DUP), ValueError,
     r"embeddings must be a 2-D \(K, d\) array, got shape \(3,\)"),
    ("graph_svm-not-separable", lambda: graph_svm(_E_DUP, _G_DUP), NotSeparableError,
     "Graph-SVM is infeasible"),
    ("graph_svm-not-separable-cvxpy", lambda: graph_svm(_E_DUP, _G_DUP, method="cvxpy"),
     NotSeparableError, "Graph-SVM is infeasible.*'infeasible'"),
    ("token_priority_graphs-range", lambda: token_priority_graphs([[0, 5]], [1], n_tokens=3),
     ValueError, "out of range: found id 5 but the vocabulary has 3 tokens"),
    ("token_priority_graphs-negative", lambda: token_priority_graphs([[0, -1]], [1]),
     ValueError, "token ids must be non-negative; found -1"),
    ("ntp_svm-nan", lambda: ntp_svm(_with(_H, 0, 0, NAN), _S), ValueError,
     "contexts must be finite; it contains NaN or infinity"),
    ("ntp_svm-inf", lambda: ntp_svm(_with(_H, 0, 0, INF), _S), ValueError,
     "contexts must be finite; it contains NaN or infinity"),
    ("ntp_svm-3d", lambda: ntp_svm(_H[:, :, None], _S), ValueError,
     r"contexts must be 2-D \(m, d\), got shape \(4, 3, 1\)"),
    ("ntp_svm-1d", lambda: ntp_svm(_H[0], _S), ValueError,
     r"contexts must be 2-D \(m, d\), got shape \(3,\)"),
    ("ntp_svm-support-rows", lambda: ntp_svm(_H, _S[:-1]), ValueError,
     r"support must be 2-D \(m, V\) with m=4 rows, got shape \(3, 5\)"),
    ("ntp_svm-support-1d", lambda: ntp_svm(_H, _S[0]), ValueError,
     r"support must be 2-D \(m, V\) with m=4 rows, got shape \(5,\)"),
    ("ntp_svm-empty-support", lambda: ntp_svm(_H, _S & (np.arange(4) != 1)[:, None]),
     ValueError, "at least one in-support token"),
    ("ntp_svm-not-separable",
     lambda: ntp_svm(_X_NONSEP, np.eye(2, dtype=bool)[_Y_NONSEP], method="cvxpy"),
     NotSeparableError, "NTP-SVM.*not NTP-separable"),
    ("ntp_svm-not-separable-auto",
     lambda: ntp_svm(_X_NONSEP, np.eye(2, dtype=bool)[_Y_NONSEP]),
     NotSeparableError, "not NTP-separable"),
    ("ntp_svm-method", lambda: ntp_svm(_H, _S, method="magic"), ValueError,
     "unknown max-margin method"),
    ("ntp_svm_problem-nan", lambda: ntp_svm_problem(_with(_H, 1, 1, NAN), _S),
     ValueError, "contexts must be finite; it contains NaN or infinity"),
    ("finite_component-negative", lambda: finite_component(_H, _P * [1, -1, 1, 1, 1]),
     ValueError, "next_token_probs must be finite and non-negative"),
    ("finite_component-zero-row", lambda: finite_component(_H, _P * [[1], [0], [1], [1]]),
     ValueError, "every row of next_token_probs needs a positive entry"),
    ("finite_component-nan-probs", lambda: finite_component(_H, _with(_P, 0, 0, NAN)),
     ValueError, "next_token_probs must be finite; it contains NaN or infinity"),
    ("finite_component-nan-contexts", lambda: finite_component(_with(_H, 0, 0, NAN), _P),
     ValueError, "contexts must be finite; it contains NaN or infinity"),
    ("finite_component-rows", lambda: finite_component(_H, _P[:-1]), ValueError,
     r"next_token_probs must be 2-D \(m, V\) with m=4 rows, got shape \(3, 5\)"),
    ("log_odds_problem-3d", lambda: log_odds_problem(_H[None], _P), ValueError,
     r"contexts must be 2-D \(m, d\), got shape \(1, 4, 3\)"),
    ("solve_max_margin-method", lambda: solve_max_margin(_toy_problem(), method="magic"),
     ValueError, "unknown max-margin method 'magic'"),
    ("solve_max_margin-infeasible-cvxpy",
     lambda: solve_max_margin(_contradictory_problem(), method="cvxpy"),
     NotSeparableError, "toy program is infeasible.*toy data are not separable"),
    ("solve_max_margin-infeasible-auto",
     lambda: solve_max_margin(_contradictory_problem()),
     NotSeparableError, "toy program is infeasible.*toy data are not separable"),
    ("solve_max_margin-backend", lambda: solve_max_margin(_toy_problem(), backend="jax"),
     ValueError, "backend must be 'numpy' or 'torch', got 'jax'"),
    ("solve_min_norm-inequalities", lambda: solve_min_norm(_toy_problem()), ValueError,
     "equality constraints only"),
    ("Constraints-shapes", lambda: Constraints([0, 0], [0], [1, 1], [1.0, 1.0], [0, 0]),
     ValueError, "'pos' must have shape"),
    ("BilinearScores-n-outputs", lambda: BilinearScores(_H), ValueError, "n_outputs"),
    ("att_svm-nan", lambda: att_svm(_with(_K.reshape(3, -1), 0, 0, NAN).reshape(_K.shape),
                                    _SEL), ValueError,
     "keys must be finite; it contains NaN or infinity"),
    ("att_svm-4d", lambda: att_svm(_K[..., None], _SEL), ValueError,
     r"keys must be 3-D \(n, T, k\), got shape \(3, 4, 2, 1\)"),
    ("att_svm-selected-range", lambda: att_svm(_K, [0, 1, 4]), ValueError, r"\[0, 4\)"),
    ("att_svm-selected-negative", lambda: att_svm(_K, [0, -1, 2]), ValueError,
     r"\[0, 4\)"),
    ("att_svm-selected-float", lambda: att_svm(_K, [0.0, 1.5, 2.0]), ValueError,
     r"selected must be an integer array of shape \(3,\)"),
    ("att_svm-selected-length", lambda: att_svm(_K, [0, 1]), ValueError, r"shape \(3,\)"),
    ("att_svm-selected-padding",
     lambda: att_svm(_K, _SEL, mask=np.arange(4) < np.array([[4], [1], [4]])),
     ValueError, r"selected tokens of inputs \[1\] are padding"),
    ("att_svm-mask-shape", lambda: att_svm(_K, _SEL, mask=np.ones((3, 3), bool)),
     ValueError, "mask must have shape"),
    ("att_svm-relaxed-shape", lambda: att_svm(_K, _SEL, relaxed=[True]), ValueError,
     r"relaxed must be a boolean array of shape \(3,\)"),
    ("att_svm-duplicate-key",
     lambda: att_svm(np.repeat(_K[:, :1], 2, axis=1), [0, 0, 0]), NotSeparableError,
     "ATT-SVM is infeasible.*same key"),
    ("att_svm-not-separable-cvxpy",
     lambda: att_svm(np.array([[[0.0], [1.0], [2.0]]]), [1], method="cvxpy"),
     NotSeparableError, "ATT-SVM is infeasible"),
    ("att_svm-not-separable-auto",
     lambda: att_svm(np.array([[[0.0], [1.0], [2.0]]]), [1]),
     NotSeparableError, "ATT-SVM is infeasible"),
    ("att_svm_problem-inf", lambda: att_svm_problem(_K * INF, _SEL), ValueError,
     "keys must be finite; it contains NaN or infinity"),
    ("att_svm_prime-no-optimal",
     lambda: att_svm_prime(_K, np.zeros((3, 4), bool)), ValueError,
     "at least one real token"),
    ("att_svm_prime-too-many",
     lambda: att_svm_prime(_K, np.ones((3, 4), bool) & (np.arange(4) < 3),
                           max_combinations=5), ValueError, "max_combinations"),
    ("att_svm_prime-not-separable",
     lambda: att_svm_prime(np.array([[[0.0], [1.0], [2.0]]]), np.array([[0, 1, 0]], bool)),
     NotSeparableError, r"ATT-SVM' \(App. D\) is infeasible: for no choice"),
    ("svm_neighbors-nan", lambda: svm_neighbors(_K * NAN, _SEL, np.ones(2)), ValueError,
     "keys must be finite; it contains NaN or infinity"),
    ("head_svm-labels", lambda: head_svm(_R, [0, 1, 0, 1]), ValueError, "-1 and \\+1"),
    ("head_svm-length", lambda: head_svm(_R, _YPM[:-1]), ValueError,
     r"y must have shape \(4,\), got \(3,\)"),
    ("head_svm-nan", lambda: head_svm(_with(_R, 0, 0, NAN), _YPM), ValueError,
     "tokens must be finite; it contains NaN or infinity"),
    ("head_svm-3d", lambda: head_svm(_R[None], _YPM), ValueError,
     r"tokens must be 2-D \(n, d\), got shape \(1, 4, 3\)"),
    ("head_svm-not-separable",
     lambda: head_svm(np.array([[1.0], [2.0]]), [1.0, -1.0]), NotSeparableError,
     "head SVM is infeasible.*not linearly separable"),
    ("head_svm-not-separable-cvxpy",
     lambda: head_svm(np.array([[1.0], [2.0]]), [1.0, -1.0], method="cvxpy"),
     NotSeparableError, "head SVM is infeasible.*not linearly separable"),
    ("support_vectors-labels", lambda: support_vectors(_R, [2, 1, 1, 1], np.ones(3)),
     ValueError, "-1 and \\+1"),
    ("relaxed_att_svm-nan", lambda: relaxed_att_svm(_K * NAN, _SEL), ValueError,
     "keys must be finite; it contains NaN or infinity"),
    ("relaxed_att_svm-4d", lambda: relaxed_att_svm(_K[..., None], _SEL), ValueError,
     r"keys must be 3-D \(n, T, k\)"),
    ("relaxed_att_svm-selected", lambda: relaxed_att_svm(_K, [0, 9, 1]), ValueError,
     r"selected token indices must lie in \[0, 4\)"),
    ("relaxed_att_svm-support-shape", lambda: relaxed_att_svm(_K, _SEL, [True]),
     ValueError, r"relaxed must be a boolean array of shape \(3,\)"),
    ("relaxed_att_svm-not-separable",
     lambda: relaxed_att_svm(np.array([[[0.0], [1.0], [2.0]]]), [1]), NotSeparableError,
     "ATT-SVM is infeasible"),
    ("joint_svm-nan", lambda: joint_svm(_K * NAN, [1, -1, 1]), ValueError,
     "tokens must be finite; it contains NaN or infinity"),
    ("joint_svm-labels", lambda: joint_svm(_K, [0, 1, 0]), ValueError, "-1 and \\+1"),
    ("joint_svm-length", lambda: joint_svm(_K, [1, -1]), ValueError,
     r"y must have shape \(3,\), got \(2,\)"),
]


@pytest.mark.parametrize(
    "call, exc, match", [pytest.param(*c[1:], id=c[0]) for c in SVM_FUNCTION_CASES]
)
def test_svm_functions_reject_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------------
# Extreme norms: normalized GD far into the large-norm regime
# --------------------------------------------------------------------------
_X1, _Y1 = _ntp_data(seed=3, support_size=1)  # one-hot: ||W|| grows linearly under NGD
_XJ, _YJ = make_joint_fig3("a")
_FIG1C = make_attention_fig1c()
_SELECTOR = {"head": _FIG1C.head, "key_query": _FIG1C.key_query, "classes": [-1, 1]}
_XT, _YT, _ET = make_token_priority_data(6, 6, 5, 4, acyclic=True, random_state=0)

# name -> (factory(dtype, max_iter, record_every), X, y, smallest final norm).  lr is
# large to reach big norms fast; with soft labels NGD's constant steps keep
# oscillating in the finite subspace F, so the norm grows slowly there.
EXTREME_MODELS = {
    "decoder-one-hot": (lambda dt, it, re: NTPDecoderClassifier(
        solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re, random_state=0),
        _X1, _Y1, 30.0),
    "decoder-soft": (lambda dt, it, re: NTPDecoderClassifier(
        solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re, random_state=0),
        _X, _Y, 10.0),
    "selector": (lambda dt, it, re: AttentionSelector(
        **_SELECTOR, solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re,
        random_state=0), _FIG1C.X, _FIG1C.y, 30.0),
    "selector-W": (lambda dt, it, re: AttentionSelector(
        **_SELECTOR, train="W", solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re,
        random_state=0), _FIG1C.X, _FIG1C.y, 30.0),
    "joint": (lambda dt, it, re: JointAttentionSVM(
        solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re, random_state=0),
        _XJ, _YJ, 30.0),
    "self-attention": (lambda dt, it, re: NTPAttentionClassifier(
        _ET, solver="ngd", lr=1.0, max_iter=it, dtype=dt, record_every=re, random_state=0),
        _XT, _YT, 30.0),
}


def _param_norm(est):
    """Norm of the largest trained block (W, p, v or the key-query matrix)."""
    return max(float(np.linalg.norm(getattr(est, name)))
               for name in ("coef_", "query_", "head_", "key_query_") if hasattr(est, name))


def _check_extreme_norms(name, dtype, max_iter):
    factory, X, y, min_norm = EXTREME_MODELS[name]
    est = factory(dtype, max_iter, max(1, max_iter // 100))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    for key, values in est.history_.items():
        assert np.all(np.isfinite(values)), f"history_[{key!r}] is not finite"
    for attr, value in vars(est).items():
        if attr.endswith("_") and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.all(np.isfinite(value)), f"{attr} is not finite"
    for method in ("predict_proba", "predict_log_proba", "decision_function"):
        if not hasattr(est, method):
            continue
        out = getattr(est, method)(X)
        assert np.all(np.isfinite(out)), f"{method} is not finite"
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(np.isfinite(est.predict(X).astype(float)))
    # the run went far into the large-norm regime
    assert _param_norm(est) > min_norm, _param_norm(est)
    saturation = [w for w in caught if issubclass(w.category, ConvergenceWarning)
                  and "underflowed to exactly zero" in str(w.message)]
    if est.n_iter_ < max_iter:  # stopped early: only with a clear warning
        assert saturation, [str(w.message) for w in caught]
        assert dtype in str(saturation[0].message)
    else:
        assert not saturation
    assert not [w for w in caught if "non-finite" in str(w.message)]
    return est


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(EXTREME_MODELS))
def test_extreme_norms(name, dtype):
    _check_extreme_norms(name, dtype, 10_000)


def test_ngd_stops_only_when_the_gradient_itself_underflows():
    # one-hot data: the loss and the gradient decay like exp(-margin ||W||).  The
    # gradient norm was once taken as sqrt(sum g^2), which is 0 from |g| ~ 1e-162 on:
    # NGD stopped at iteration 791 with a loss of 1.6e-162, reporting a zero gradient
    # that was not.  Now it stops where the loss is 0 in float64, twice as far.
    est = NTPDecoderClassifier(solver="ngd", lr=1.0, max_iter=10_000, record_every=1,
                               compute_limits=False, random_state=0)
    with pytest.warns(ConvergenceWarning, match="underflowed to exactly zero"):
        est.fit(_X1, _Y1)
    assert est.n_iter_ < 10_000 and est.history_["loss"][-1] < 1e-300
    assert np.isfinite(est.coef_).all() and _param_norm(est) > 700


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(EXTREME_MODELS))
def test_extreme_norms_1e5(name, dtype):
    _check_extreme_norms(name, dtype, 100_000)


HUGE_RADIUS_MODELS = {
    "decoder": (NTPDecoderClassifier, {}, _X, _Y),
    "selector": (AttentionSelector, _SELECTOR, _FIG1C.X, _FIG1C.y),
    "joint": (JointAttentionSVM, {}, _XJ, _YJ),
    "self-attention": (NTPAttentionClassifier, {"embeddings": _ET}, _XT, _YT),
}


@pytest.mark.parametrize("radius", [1e6, 1e12, 1e150])
@pytest.mark.parametrize("name", sorted(HUGE_RADIUS_MODELS))
def test_explicit_limit_at_huge_norm_is_finite(name, radius):
    cls, params, X, y = HUGE_RADIUS_MODELS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow/invalid RuntimeWarning either
        est = cls(**params, solver="svm", svm_radius=radius).fit(X, y)
        assert _param_norm(est) >= 0.5 * radius
        for method in ("predict_proba", "predict_log_proba", "decision_function",
                       "transform"):
            if hasattr(est, method):
                out = getattr(est, method)(X)
                assert np.all(np.isfinite(out)), method
        for key, values in est.history_.items():
            assert np.all(np.isfinite(values)), key
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0, rtol=1e-9)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_extreme_norms_torch(dtype):
    pytest.importorskip("torch")
    X, y = _X1, _Y1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(solver="ngd", lr=1.0, max_iter=10_000, dtype=dtype,
                                   backend="torch", record_every=100,
                                   random_state=0).fit(X, y)
    assert all(np.all(np.isfinite(v)) for v in est.history_.values())
    assert np.all(np.isfinite(est.coef_)) and np.linalg.norm(est.coef_) > 30
    assert np.all(np.isfinite(est.predict_log_proba(X)))
    if est.n_iter_ < 10_000:
        assert any("underflowed to exactly zero" in str(w.message) for w in caught)


def test_float32_saturation_stops_with_warning():
    factory, X, y, _ = EXTREME_MODELS["decoder-one-hot"]
    with pytest.warns(ConvergenceWarning, match="underflowed to exactly zero.*float32"):
        est = factory("float32", 100_000, 1000).fit(X, y)
    assert est.n_iter_ < 100_000
    assert est.history_["grad_norm"][-1] == 0.0
    assert est.history_["iteration"][-1] == est.n_iter_


# At large norms the in-support residual q_z - p_z must keep the tiny
# out-of-support mass that a plain subtraction would round away.
def test_decoder_gradient_direction_at_large_norm():
    factory, X, y, _ = EXTREME_MODELS["decoder-one-hot"]
    # at lr 500 the softmax saturates in float64 too, as it does in float32 above
    with pytest.warns(ConvergenceWarning, match="underflowed to exactly zero"):
        est = factory("float64", 10_000, 500).fit(X, y)
    assert est.alignment_ > 0.9


# --------------------------------------------------------------------------
# Solver failures
# --------------------------------------------------------------------------
def _force_cvxpy_status(monkeypatch, status):
    """Make every cvxpy solve end with ``status`` (after a real solve)."""
    import cvxpy as cp

    original = cp.Problem.solve

    def solve(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        self._status = status
        return out

    monkeypatch.setattr(cp.Problem, "solve", solve)


def _feasible_problem():
    return ntp_svm_problem(_H, _S)


@pytest.mark.parametrize("status", ["infeasible", "infeasible_inaccurate"])
def test_cvxpy_infeasible_status_on_a_feasible_program_is_undecided(monkeypatch, status):
    # a solver's status is a claim: on a feasible program no Farkas certificate
    # verifies it, so the answer is "undecided", never NotSeparableError
    _force_cvxpy_status(monkeypatch, status)
    with pytest.raises(UndecidedError, match=f"NTP-SVM: undecided.*'cvxpy'.*'{status}'"):
        solve_max_margin(_feasible_problem(), method="cvxpy")


@pytest.mark.parametrize("status", ["unbounded", "unbounded_inaccurate", "user_limit",
                                    "solver_error"])
def test_cvxpy_other_status_raises(monkeypatch, status):
    _force_cvxpy_status(monkeypatch, status)
    with pytest.raises(RuntimeError, match=f"NTP-SVM: cvxpy returned status '{status}'"):
        solve_max_margin(_feasible_problem(), method="cvxpy")


def test_cvxpy_inaccurate_status_gives_way_to_the_certificate(monkeypatch):
    # the solver's own word is not the status: an accurate answer that Clarabel calls
    # "optimal_inaccurate" is certified from the program, and nothing warns
    _force_cvxpy_status(monkeypatch, "optimal_inaccurate")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solve_max_margin(_feasible_problem(), method="cvxpy")
    assert res.status == "optimal" and abs(res.gap) <= 1e-8
    assert np.all(np.isfinite(res.primal))


def test_cvxpy_solver_crash_raises(monkeypatch):
    import cvxpy as cp

    def crash(self, *args, **kwargs):
        raise cp.error.SolverError("Clarabel ran out of patience")

    monkeypatch.setattr(cp.Problem, "solve", crash)
    with pytest.raises(RuntimeError, match="NTP-SVM: Clarabel failed.*out of patience"):
        solve_max_margin(_feasible_problem(), method="cvxpy")


def test_cvxpy_status_reaches_estimator(monkeypatch):
    _force_cvxpy_status(monkeypatch, "infeasible")
    with pytest.raises(UndecidedError, match="solver='svm' needs the NTP-SVM solution: "
                       "NTP-SVM: undecided"):
        NTPDecoderClassifier(solver="svm", svm_method="cvxpy").fit(_X, _Y)


def test_float32_max_margin_solve_does_not_spin():
    # tol=1e-8 is below float32 precision: the core solves explicit programs in float64,
    # so a float32 request runs the very same solve (same iterations, same answer)
    rng = np.random.default_rng(1)
    support = rng.random((20, 8)) < 0.4
    support[np.arange(20), rng.integers(8, size=20)] = True
    H = rng.standard_normal((20, 30))  # d > m: NTP-separable
    ref = ntp_svm(H, support, method="cvxpy")
    problem = ntp_svm_problem(H, support)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = solve_max_margin(problem, dtype="float32")
    res64 = solve_max_margin(problem)
    assert res.status == "optimal"
    assert res.n_iter == res64.n_iter < 1000  # measured: 40 iterations
    np.testing.assert_array_equal(res.primal, res64.primal)
    assert res.primal.dtype == np.float64
    assert res.gap <= 1e-8 and res.max_violation <= 1e-8
    cos = float(np.sum(res.primal * ref) / np.linalg.norm(res.primal) / np.linalg.norm(ref))
    assert cos > 1 - 1e-7


def test_accelerated_dual_non_convergence_warns_with_gap():
    rng = np.random.default_rng(0)
    support = rng.random((20, 8)) < 0.4
    support[np.arange(20), rng.integers(8, size=20)] = True
    problem = ntp_svm_problem(rng.standard_normal((20, 12)), support)
    with pytest.warns(ConvergenceWarning, match=r"duality gap \d\.\d+e[-+]\d+"):
        res = solve_max_margin(problem, method="accelerated-dual", max_iter=3)
    assert res.status != "optimal"
    assert np.isfinite(res.gap) and np.isfinite(res.max_violation)
    assert max(res.gap, res.max_violation) > 1e-8
    assert np.all(np.isfinite(res.primal))


# --------------------------------------------------------------------------
# Determinism, clone and pickling
# --------------------------------------------------------------------------
def _same(a, b, path="model"):
    """Bit-for-bit equality of fitted state (history times excepted)."""
    import networkx as nx

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, path
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), path
    elif sp.issparse(a):
        assert sp.issparse(b) and (a != b).nnz == 0, path
    elif isinstance(a, dict):
        assert set(a) == set(b), path
        for key in a:
            if key != "time":
                _same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, nx.Graph):
        assert sorted(a.nodes) == sorted(b.nodes), path
        assert sorted(a.edges) == sorted(b.edges), path
    elif isinstance(a, float):
        assert (np.isnan(a) and np.isnan(b)) or a == b, path
    elif dataclasses.is_dataclass(a):
        _same(dataclasses.asdict(a), dataclasses.asdict(b), path)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _fitted_state(est):
    return {k: v for k, v in vars(est).items()
            if k.endswith("_") and not k.startswith("_") and k != "svm_result_"}


def _check_same_models(a, b, X):
    _same(_fitted_state(a), _fitted_state(b))
    for method in ("predict", "predict_proba", "decision_function", "transform"):
        if hasattr(a, method):
            _same(getattr(a, method)(X), getattr(b, method)(X), method)


_XJB, _YJB = make_joint_fig3("b")

# (id, estimator, X, y)
DETERMINISM_CASES = [
    ("decoder-gd", NTPDecoderClassifier(solver="gd", max_iter=50, random_state=7), _X, _Y),
    ("decoder-ngd-f32", NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=50,
                                             dtype="float32", random_state=7), _X, _Y),
    ("decoder-adam", NTPDecoderClassifier(solver="adam", lr=0.05, max_iter=50,
                                          random_state=7), _X, _Y),
    ("decoder-regpath", NTPDecoderClassifier(solver="regpath", max_iter=30,
                                             path_radii=[0.5, 2.0, 8.0], random_state=7),
     _X, _Y),
    ("decoder-svm", NTPDecoderClassifier(solver="svm"), _X, _Y),
    ("decoder-soft", NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=40, random_state=3),
     _XS, _SOFT),
    ("decoder-torch", NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=50,
                                           backend="torch", random_state=7), _X, _Y),
    ("joint-ngd", JointAttentionSVM(solver="ngd", max_iter=60, random_state=7), _XJB, _YJB),
    ("joint-gd", JointAttentionSVM(solver="gd", max_iter=60, random_state=7), _XJB, _YJB),
    ("joint-regpath", JointAttentionSVM(solver="regpath", max_iter=30,
                                        path_radii=[0.5, 2.0], random_state=7), _XJB, _YJB),
    ("joint-svm", JointAttentionSVM(solver="svm"), _XJB, _YJB),
    ("joint-torch", JointAttentionSVM(solver="ngd", max_iter=60, backend="torch",
                                      random_state=7), _XJB, _YJB),
    ("selector-ngd", AttentionSelector(_VA, max_iter=60, init="random",
                                       random_state=7), _XA, _YA),
    ("selector-W-gd", AttentionSelector(_VA, train="W", solver="gd", max_iter=60,
                                        fixed_query="random", random_state=7), _XA, _YA),
    ("selector-regpath", AttentionSelector(**_SELECTOR, solver="regpath", max_iter=30,
                                           path_radii=[0.5, 2.0]), _FIG1C.X, _FIG1C.y),
    ("selector-svm", AttentionSelector(**_SELECTOR, solver="svm"), _FIG1C.X, _FIG1C.y),
    ("selector-torch", AttentionSelector(_VA, max_iter=60, init="random",
                                         backend="torch", random_state=7), _XA, _YA),
    ("self-attention-ngd", NTPAttentionClassifier(solver="ngd", lr=0.05, max_iter=60,
                                                  init="random", n_tokens=6,
                                                  random_state=7), _XT, _YT),
    ("self-attention-gd", NTPAttentionClassifier(_ET, solver="gd", max_iter=60,
                                                 random_state=7), _XT, _YT),
    ("self-attention-svm", NTPAttentionClassifier(_ET, solver="svm"), _XT, _YT),
    ("self-attention-torch", NTPAttentionClassifier(_ET, solver="ngd", lr=0.05, max_iter=60,
                                                    backend="torch", init="random",
                                                    random_state=7), _XT, _YT),
]


def _fit_quiet(est, X, y):
    with warnings.catch_warnings():  # short runs: no direction yet, max_iter reached
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        return est.fit(X, y)


@pytest.mark.parametrize("est, X, y",
                         [pytest.param(*c[1:], id=c[0]) for c in DETERMINISM_CASES])
def test_same_random_state_bit_identical(est, X, y):
    if est.get_params().get("backend") == "torch":
        pytest.importorskip("torch")
    first = _fit_quiet(clone(est), X, y)
    second = _fit_quiet(clone(est), X, y)
    _check_same_models(first, second, X)
    # clone + fit twice (refit of the same instance) gives the same model
    again = clone(first)
    _fit_quiet(again, X, y)
    _fit_quiet(again, X, y)
    _check_same_models(first, again, X)


@pytest.mark.parametrize("est, X, y",
                         [pytest.param(*c[1:], id=c[0]) for c in DETERMINISM_CASES])
def test_pickle_round_trip(est, X, y):
    if est.get_params().get("backend") == "torch":
        pytest.importorskip("torch")
    fitted = _fit_quiet(clone(est), X, y)
    loaded = pickle.loads(pickle.dumps(fitted))
    _check_same_models(fitted, loaded, X)
    _same(loaded.get_params(), fitted.get_params(), "params")


def test_different_random_state_differs():
    # guards the determinism tests: the seed does reach the initialization
    a = _fit_quiet(NTPDecoderClassifier(solver="gd", max_iter=5, random_state=1), _X, _Y)
    b = _fit_quiet(NTPDecoderClassifier(solver="gd", max_iter=5, random_state=2), _X, _Y)
    assert not np.array_equal(a.coef_, b.coef_)
    a = _fit_quiet(JointAttentionSVM(max_iter=5, random_state=1), _XJB, _YJB)
    b = _fit_quiet(JointAttentionSVM(max_iter=5, random_state=2), _XJB, _YJB)
    assert not np.array_equal(a.query_, b.query_)
