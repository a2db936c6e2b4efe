"""``skntp.reading``: a trained model's decoder against the NTP limits predicted from its
own hidden states, on models whose answer is known (decoders trained by the package)."""

import numpy as np
import pytest
from helpers import partially_separable_instance

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_data
from skntp.decoder import ntp_cross_entropy
from skntp.reading import DecoderGeometry, decoder_geometry, torch_decoder_arrays


@pytest.fixture(scope="module")
def separable():
    """NTP-separable data (d > m) and the decoder at its limit."""
    X, y = make_ntp_data(n_samples=300, n_contexts=8, n_features=12, n_tokens=6,
                         support_size=3, random_state=0)
    return X, y, NTPDecoderClassifier(solver="svm", vocabulary=6).fit(X, y)


def test_the_limit_itself_reads_as_the_limit(separable):
    X, y, svm = separable
    geo = decoder_geometry(X, svm.coef_, y)
    assert isinstance(geo, DecoderGeometry)
    assert geo.alignment >= 0.999 and geo.alignment == pytest.approx(1.0, abs=1e-9)
    assert geo.finite_distance < 1e-9 * geo.finite_norm
    assert geo.finite_norm == pytest.approx(np.linalg.norm(svm.finite_component_))
    assert geo.mm_coordinate == pytest.approx(svm.svm_radius_, rel=1e-9)
    assert geo.norm == pytest.approx(np.linalg.norm(svm.coef_))
    assert geo.invisible_fraction < 1e-12
    # W* is not along W^mm: the uncorrected cosine is below one, as the estimator's
    assert geo.alignment_uncorrected == pytest.approx(svm.history_["alignment_uncorrected"][-1])
    assert geo.alignment_uncorrected < 1 - 1e-6
    # the limit at 20 nats: the loss is the entropy to within exp(-20) per row
    assert geo.is_ntp_separable is True and geo.separable_fraction == 1.0
    assert geo.loss_infimum == geo.entropy == svm.entropy_
    assert 0 < geo.excess_loss < 1e-6
    assert geo.estimator.mm_direction_ == pytest.approx(svm.mm_direction_)


def test_what_no_softmax_sees_is_left_out(separable):
    """A row added to every token (the same logit for all) and, with d > m, a direction
    no context has change no probability: the readings stay, and the share is reported."""
    X, y, svm = separable
    rng = np.random.default_rng(0)
    _, _, vt = np.linalg.svd(svm.contexts_)
    outside = vt[svm.contexts_.shape[0]:]  # (d - m, d): orthogonal to every context
    W = svm.coef_ + 30 * (rng.standard_normal(X.shape[1])
                          + rng.standard_normal((6, len(outside))) @ outside)
    geo, ref = decoder_geometry(X, W, y), decoder_geometry(X, svm.coef_, y)
    for field in ("alignment", "alignment_uncorrected", "finite_distance", "mm_coordinate",
                  "loss"):
        assert getattr(geo, field) == pytest.approx(getattr(ref, field), rel=1e-9, abs=1e-9)
    assert geo.norm == pytest.approx(np.linalg.norm(W))
    assert geo.invisible_fraction == pytest.approx(
        np.linalg.norm(W - svm.coef_) / np.linalg.norm(W), rel=1e-9)
    # the raw cosine, which the reading leaves out, is far from one
    raw = np.sum((W - svm.finite_component_) * svm.mm_direction_) / np.linalg.norm(
        W - svm.finite_component_)
    assert raw < 0.9


def test_a_gradient_descent_decoder_far_along(separable):
    """Read back, GD's decoder gives the estimator's own history, and is near the limit."""
    X, y, _ = separable
    gd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=3000, vocabulary=6,
                              init="zeros").fit(X, y)
    geo = decoder_geometry(X, gd.coef_, y)
    assert geo.alignment == pytest.approx(gd.alignment_, abs=1e-9)
    assert geo.alignment_uncorrected == pytest.approx(
        gd.history_["alignment_uncorrected"][-1], abs=1e-9)
    assert geo.finite_distance == pytest.approx(gd.history_["finite_distance"][-1], rel=1e-6)
    assert geo.loss == pytest.approx(gd.history_["loss"][-1], rel=1e-12)
    assert geo.alignment > 0.97 and geo.finite_distance < 0.05 * geo.finite_norm
    assert geo.mm_coordinate > 10
    # from a random start, GD never moves what no softmax sees: the reading removes it
    rnd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=3000, vocabulary=6,
                               random_state=0).fit(X, y)
    geo_rnd = decoder_geometry(X, rnd.coef_, y)
    assert geo_rnd.invisible_fraction > 1e-3
    assert geo_rnd.alignment > rnd.alignment_ and geo_rnd.alignment > 0.97


def test_data_that_are_not_ntp_separable():
    """``d < m``: the loss infimum is above the entropy, the limits are W^mm_I and W_fin,
    and GD's decoder reads as the estimator's own history says."""
    H, P = partially_separable_instance(3)
    gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=4000, vocabulary=P.shape[1],
                              init="zeros").fit(H, P)
    geo = decoder_geometry(H, gd.coef_, P)
    assert geo.is_ntp_separable is False and 0 < geo.separable_fraction < 1
    assert geo.loss_infimum > geo.entropy + 0.01
    assert geo.loss == pytest.approx(gd.history_["loss"][-1], rel=1e-12)
    assert 0 < geo.excess_loss < 1e-2
    assert geo.alignment == pytest.approx(gd.alignment_, abs=1e-9)
    assert geo.finite_distance == pytest.approx(gd.history_["finite_distance"][-1], rel=1e-6)
    assert geo.alignment > 0.9
    limit = decoder_geometry(H, geo.estimator.coef_, P)
    assert limit.alignment == pytest.approx(1.0, abs=1e-9)
    assert limit.finite_distance < 1e-6 * limit.finite_norm
    assert limit.loss == pytest.approx(limit.loss_infimum, abs=1e-6)


def test_no_separable_row_has_no_direction():
    # d = 1, three contexts on a line, alternating next tokens: the loss has a minimizer
    X, y = np.array([[1.0], [2.0], [3.0]]), np.array([0, 1, 0])
    fin = NTPDecoderClassifier(solver="svm").fit(X, y).finite_component_
    geo = decoder_geometry(X, fin + 0.5, y)  # + a common row: no softmax changes
    assert np.isnan(geo.alignment) and np.isnan(geo.mm_coordinate)
    assert np.isnan(geo.alignment_uncorrected)
    assert geo.finite_distance == pytest.approx(0.0, abs=1e-9)
    assert geo.loss == pytest.approx(geo.loss_infimum, abs=1e-12)
    assert geo.separable_fraction == 0.0 and geo.is_ntp_separable is False


def test_the_zero_decoder(separable):
    """``W = 0``: the uniform prediction, ``W_fin`` away, and no cosine with ``W^mm``
    (``W_fin`` lies in ``F``, ``W^mm`` in its complement)."""
    X, y, svm = separable
    geo = decoder_geometry(X, np.zeros((6, X.shape[1])), y)
    assert geo.loss == pytest.approx(np.log(6), rel=1e-12)
    assert geo.norm == 0.0 and geo.invisible_fraction == 0.0
    assert geo.finite_distance == pytest.approx(geo.finite_norm, rel=1e-12)
    assert geo.alignment == pytest.approx(0.0, abs=1e-9) and geo.alignment_uncorrected == 0.0
    assert geo.mm_coordinate == pytest.approx(0.0, abs=1e-9)


def test_a_bias_is_a_constant_feature(separable):
    X, y, _ = separable
    rng = np.random.default_rng(1)
    W, b = rng.standard_normal((6, X.shape[1])), rng.standard_normal(6)
    geo = decoder_geometry(X, W, y, bias=b)
    folded = decoder_geometry(np.hstack([X, np.ones((len(X), 1))]), np.hstack([W, b[:, None]]),
                              y)
    for field in ("loss", "loss_infimum", "alignment", "finite_distance", "norm"):
        assert getattr(geo, field) == pytest.approx(getattr(folded, field), rel=1e-12)
    assert geo.estimator.coef_.shape == (6, X.shape[1] + 1)
    # the loss is the model's: logits H W^T + b
    logits = X @ W.T + b
    logq = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1,
                                                                              keepdims=True))
    logq -= logits.max(1, keepdims=True)
    assert geo.loss == pytest.approx(-np.mean(logq[np.arange(len(y)), y]), rel=1e-10)


def test_soft_labels_with_context_weights_are_the_samples():
    """Distinct contexts with counts (soft labels and sample_weight) read as every
    position with its next token."""
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=10, n_tokens=5,
                         support_size=2, random_state=2)
    contexts, inverse = np.unique(X, axis=0, return_inverse=True)
    counts = np.zeros((len(contexts), 5))
    np.add.at(counts, (inverse.ravel(), y), 1.0)
    W = np.random.default_rng(0).standard_normal((5, 10))
    a = decoder_geometry(X, W, y)
    b = decoder_geometry(contexts, W, counts, sample_weight=counts.sum(axis=1))
    for field in ("loss", "entropy", "loss_infimum", "alignment", "finite_distance"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9)
    est = a.estimator
    assert a.loss == pytest.approx(ntp_cross_entropy(W, est.contexts_, est.context_weights_,
                                                     est.next_token_probs_))


def test_wrong_shapes_are_refused(separable):
    X, y, svm = separable
    with pytest.raises(ValueError, match="12 features but the unembedding has 5 columns"):
        decoder_geometry(X, svm.coef_[:, :5], y)
    with pytest.raises(ValueError, match=r"bias must have shape \(V,\) = \(6,\)"):
        decoder_geometry(X, svm.coef_, y, bias=np.zeros(5))
    with pytest.raises(ValueError, match="unembedding contains NaN"):
        decoder_geometry(X, np.full_like(svm.coef_, np.nan), y)
    with pytest.raises(ValueError, match="hidden_states must have 2"):
        decoder_geometry(X[0], svm.coef_, y)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decoder_geometry(X, svm.coef_[:4], y)


# ------------------------------------------------------------------ torch helper
def _tiny_lm(torch, V=7, d=5, bias=True):
    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, d)
            self.mix = torch.nn.Linear(2 * d, d)
            self.drop = torch.nn.Dropout(0.5)
            self.lm_head = torch.nn.Linear(d, V, bias=bias)

        def hidden_states(self, x):  # (batch, 2) ids -> (batch, d)
            return self.drop(torch.tanh(self.mix(self.emb(x).flatten(1))))

        def forward(self, x):
            return self.lm_head(self.hidden_states(x))

    torch.manual_seed(0)
    return TinyLM().double()


def test_torch_helper_reads_the_model():
    torch = pytest.importorskip("torch")
    model = _tiny_lm(torch)
    ids = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]])
    H, W, b = torch_decoder_arrays(model, ids, batch_size=2)  # the hook on lm_head
    assert model.training  # restored
    assert H.shape == (5, 5) and W.shape == (7, 5) and b.shape == (7,)
    assert H.dtype == W.dtype == b.dtype == np.float64
    model.eval()
    with torch.no_grad():
        logits = model(ids).numpy()
    np.testing.assert_allclose(H @ W.T + b, logits, rtol=1e-12, atol=1e-12)  # no dropout
    H2, W2, b2 = torch_decoder_arrays(model, ids.numpy(), hidden_states="hidden_states")
    np.testing.assert_allclose(H2, H, rtol=1e-12, atol=1e-15)  # (other batches)
    # a tied (tensor) unembedding needs the hidden states' callable; 3-D: the last position
    H3, W3, b3 = torch_decoder_arrays(
        model, ids, unembedding=model.lm_head.weight,
        hidden_states=lambda x: torch.stack([torch.zeros_like(model.hidden_states(x)),
                                             model.hidden_states(x)], dim=1))
    np.testing.assert_allclose(H3, H, rtol=1e-12, atol=1e-15)
    assert b3 is None and np.array_equal(W3, W)
    with pytest.raises(TypeError, match="records the input of the unembedding module"):
        torch_decoder_arrays(model, ids, unembedding=model.lm_head.weight)
    with pytest.raises(TypeError, match=r"torch.nn.Linear\(d, V\)"):
        torch_decoder_arrays(model, ids, unembedding="emb.padding_idx")
    with pytest.raises(ValueError, match="one row per context"):
        torch_decoder_arrays(model, ids, hidden_states=lambda x: model.hidden_states(x)[:1])
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        torch_decoder_arrays(model, ids, batch_size=0)
    H0, W0, _ = torch_decoder_arrays(model, ids[:0])  # no context: no rows
    assert H0.shape == (0, 5) and W0.shape == (7, 5)


def test_torch_model_through_decoder_geometry():
    """The helper's arrays feed the reading, bias included: the loss is the model's."""
    torch = pytest.importorskip("torch")
    model = _tiny_lm(torch, d=8)  # d > m: the states are NTP-separable
    ids = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6]])
    P = np.random.default_rng(0).dirichlet(np.ones(7) * 0.3, size=6)
    P[P < 0.05] = 0.0
    H, W, b = torch_decoder_arrays(model, ids)
    geo = decoder_geometry(H, W, P, bias=b)
    model.eval()
    with torch.no_grad():
        logq = torch.log_softmax(model(ids), dim=1).numpy()
    Pn = P / P.sum(axis=1, keepdims=True)
    assert geo.loss == pytest.approx(-np.mean(np.sum(Pn * logq, axis=1)), rel=1e-10)
    assert geo.loss > geo.loss_infimum == pytest.approx(geo.entropy)
