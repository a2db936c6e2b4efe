"""Reliability, second round (#16): inputs and settings that used to pass silently.

Each case here was a silent wrong answer, a raw NumPy warning or a crash
before: complex values (their real part was taken), token ids beyond int64,
a torch device string that does not exist, an attention threshold outside
(0, 1), embeddings whose squares leave float64, a step size that makes the
loss rise or leaves it untouched, and a start where the gradient is zero.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skntp import NTPDecoderClassifier
from skntp._backend import get_backend
from skntp._base import unit
from skntp.attention import AttentionSelector
from skntp.datasets import make_attention_random, make_ntp_data, make_token_priority_data
from skntp.graphs import check_token_labels, check_token_sequences, token_priority_graphs
from skntp.self_attention import NTPAttentionClassifier
from skntp.svm import graph_svm


@pytest.fixture(scope="module")
def ntp_data():
    X, y = make_ntp_data(random_state=0)[:2]
    return X[:600], y[:600]


@pytest.fixture(scope="module")
def priority_data():
    return make_token_priority_data(random_state=0)


def test_complex_sequences_are_rejected(ntp_data):
    X, y = ntp_data
    with pytest.raises(ValueError, match="Complex data not supported"):
        NTPDecoderClassifier(max_iter=1, compute_limits=False).fit(X + 1j, y)
    Xa, ya = make_attention_random(random_state=0)[:2]
    with pytest.raises(ValueError, match="Complex data not supported"):
        AttentionSelector(max_iter=1, compute_limits=False).fit(Xa.astype(complex), ya)


@pytest.mark.parametrize("param", ["head", "fixed_query"])
def test_complex_attention_parameters_are_rejected(param):
    X, y = make_attention_random(random_state=0)[:2]
    d = np.asarray(X).shape[-1]
    value = np.ones(d, dtype=complex)
    extra = {"train": "W"} if param == "fixed_query" else {}
    est = AttentionSelector(max_iter=1, compute_limits=False, **{param: value}, **extra)
    with pytest.raises(ValueError, match=f"{param} must be real"):
        est.fit(X, y)


def test_complex_embeddings_are_rejected(priority_data):
    X, y, E = priority_data
    with pytest.raises(ValueError, match="embeddings must be real"):
        NTPAttentionClassifier(embeddings=E * (1 + 1j), max_iter=1).fit(X, y)


def test_token_ids_beyond_int64_are_rejected():
    big = np.array([[0, 2**63 + 5]], dtype=np.uint64)
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        check_token_sequences(big)
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        check_token_sequences(np.array([[0.0, 1e19]]))
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        check_token_labels(np.array([1e30]), 1)


def test_sparse_large_ids_warn_about_the_vocabulary(priority_data):
    X, y, _ = priority_data
    X = np.array(X, copy=True)
    X[0, 0] = 400  # one stray id makes K = 401 drawn embeddings
    with pytest.warns(UserWarning, match="only .* distinct ids occur"):
        NTPAttentionClassifier(max_iter=1, compute_limits=False).fit(X, y)


@pytest.mark.parametrize("device", ["cdua", "cpu:x", "meta"])
def test_torch_device_strings_are_checked(device):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="device="):
        get_backend("torch", device=device)


def test_numpy_with_cpu_device_says_it_does_nothing():
    with pytest.warns(UserWarning, match="no effect with backend='numpy'"):
        get_backend("numpy", device="cpu")


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.5, 2.0])
def test_pseudo_graph_threshold_lies_in_the_open_unit_interval(priority_data, threshold):
    X, y, E = priority_data
    est = NTPAttentionClassifier(embeddings=E, max_iter=5, compute_limits=False).fit(X, y)
    with pytest.raises(ValueError, match="threshold must lie in \\(0, 1\\)"):
        est.pseudo_graphs(X, y, threshold=threshold)


@pytest.mark.parametrize("scale", [1e160, 1e-160, 1e300, 1e-300])
def test_embeddings_whose_squares_leave_float64(priority_data, scale):
    X, y, E = priority_data
    with pytest.raises(FloatingPointError, match="leave float64"):
        NTPAttentionClassifier(embeddings=E * scale, max_iter=1).fit(X, y)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_scores_beyond_float64_raise_a_clear_error(priority_data, scale):
    # E E^T leaves float64 (1e400 or 1e-400): before, the underflow read as an
    # empty map and the program was called infeasible
    X, y, E = priority_data
    graphs = token_priority_graphs(X, y, n_tokens=E.shape[0])
    with pytest.raises(FloatingPointError, match="beyond float64"):
        graph_svm(E * scale, graphs)


def test_unit_direction_of_an_overflowing_norm():
    w = np.array([1.5e308, 1.5e308, -1.5e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        direction, norm = unit(w)
    np.testing.assert_allclose(direction, np.array([1, 1, -1]) / np.sqrt(3))
    assert norm == np.inf
    assert unit(np.zeros(3))[1] == 0.0
    with pytest.raises(FloatingPointError, match="undefined"):
        unit(np.array([1.0, np.inf]))


def test_a_rising_loss_warns_that_lr_is_too_large(ntp_data):
    X, y = ntp_data
    with pytest.warns(ConvergenceWarning, match="loss rose .* lr=50 is too large"):
        NTPDecoderClassifier(max_iter=20, lr=50, compute_limits=False).fit(X, y)


def test_an_unmoved_loss_warns_that_lr_is_too_small(ntp_data):
    X, y = ntp_data
    with pytest.warns(ConvergenceWarning, match="did not change .* far too small"):
        NTPDecoderClassifier(max_iter=20, lr=1e-14, compute_limits=False).fit(X, y)


def test_a_good_lr_does_not_warn(ntp_data):
    X, y = ntp_data
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        NTPDecoderClassifier(max_iter=20, lr=0.5, compute_limits=False).fit(X, y)


@pytest.mark.parametrize("lr, said", [(1e4, "loss rose"), (1.5e308, "non-finite")])
def test_divergence_is_one_warning_not_raw_numpy_warnings(ntp_data, lr, said):
    # the loss stays finite as long as W does (its log-partition in the log domain);
    # a step past float64's range stops on the last finite iterate
    X, y = ntp_data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NTPDecoderClassifier(max_iter=50, lr=lr, compute_limits=False).fit(X, y)
    messages = [str(w.message) for w in caught]
    assert not [w for w in caught if w.category is RuntimeWarning], messages
    assert len(messages) == 1
    assert said in messages[0] and f"lr={lr} is too large" in messages[0]


def test_tiny_embeddings_warn_to_rescale(priority_data):
    # embeddings of 1e-100 give a gradient of about 1e-200: not zero (its norm is
    # computed without squaring it away), but far too small for lr = 0.5
    X, y, E = priority_data
    with pytest.warns(ConvergenceWarning, match="did not change .* rescale the data"):
        NTPAttentionClassifier(embeddings=E * 1e-100, max_iter=20,
                               compute_limits=False).fit(X, y)
