"""``skntp.metrics.logit_geometry``: a model's logits and embeddings against the
NTP-UFM theory (Zhao et al. 2024), on constructed cases whose answer is known."""

import numpy as np
import pytest
from helpers import random_supports

from skntp.metrics import logit_geometry
from skntp.svm import logit_finite_component, ntp_logit_svm, support_proxy


def _balanced(L):
    U, s, Vt = np.linalg.svd(L, full_matrices=False)
    k = s > 1e-9 * s[0]
    return U[:, k] * np.sqrt(s[k]), np.sqrt(s[k])[:, None] * Vt[k]


@pytest.fixture(scope="module")
def instance():
    S = random_supports(4, m=6, V=8)
    S = np.vstack([S, S[0], S[0], S[2]])  # three contexts repeat a support
    return S, ntp_logit_svm(S).primal


def test_the_limit_itself_scores_one(instance):
    S, Lmm = instance
    W, H = _balanced(Lmm)  # W (V, r), H (r, m)
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((W.shape[1] + 3,) * 2))
    Wd = np.hstack([W, np.zeros((W.shape[0], 3))]) @ Q  # embedded in d = r + 3, rotated
    Hd = np.hstack([H.T, np.zeros((H.shape[1], 3))]) @ Q
    g = logit_geometry(S, word_embeddings=5 * Wd, context_embeddings=2 * Hd, L_mm=Lmm)
    assert g["logit_alignment"] == pytest.approx(1.0, abs=1e-12)
    assert g["word_gram_alignment"] == pytest.approx(1.0, abs=1e-12)
    assert g["context_gram_alignment"] == pytest.approx(1.0, abs=1e-12)
    assert g["subspace_collapse"] == pytest.approx(0.0, abs=1e-12)
    assert g["logit_norm"] == pytest.approx(10 * np.linalg.norm(Lmm))
    g2 = logit_geometry(S, 3 * Lmm.T, L_mm=Lmm)
    assert g2["logit_alignment"] == pytest.approx(1.0, abs=1e-12)
    assert g2["word_gram_alignment"] == pytest.approx(1.0, abs=1e-9)
    assert g2["context_gram_alignment"] == pytest.approx(1.0, abs=1e-9)


def test_finite_part_and_proxy_by_hand(instance):
    S, Lmm = instance
    rng = np.random.default_rng(1)
    Lin = logit_finite_component(np.where(S, rng.random(S.shape) + 0.05, 0.0))
    L = (4 * Lmm + Lin).T
    g = logit_geometry(S, L, L_mm=Lmm)
    cos = np.sum(L.T * Lmm) / np.linalg.norm(L) / np.linalg.norm(Lmm)
    assert g["logit_alignment"] == pytest.approx(cos, rel=1e-12) and cos < 0.999
    # the finite part moves equal-support contexts only inside their support's
    # difference span: the projected logits collapse exactly
    assert g["subspace_collapse"] == pytest.approx(0.0, abs=1e-12)
    P = support_proxy(S)
    assert g["proxy_alignment"] == pytest.approx(
        np.sum(L.T * P) / np.linalg.norm(L) / np.linalg.norm(P), rel=1e-12)
    assert g["mm_proxy_alignment"] == pytest.approx(
        np.sum(Lmm * P) / np.linalg.norm(Lmm) / np.linalg.norm(P), rel=1e-12)
    d = np.linalg.norm(Lmm / np.linalg.norm(Lmm) - P / np.linalg.norm(P))
    assert g["proxy_distance"] == pytest.approx(d, rel=1e-12)
    assert g["proxy_distance"] ** 2 == pytest.approx(2 - 2 * g["mm_proxy_alignment"])
    assert "corrected_alignment" not in g


def test_corrected_alignment_removes_the_finite_part(instance):
    # logits L_in + R L_mm plus a constant per context (softmax ignores it): once L_in
    # is removed the cosine with L_mm is exactly 1; with a perturbation, the cosine
    # computed by hand from the centered logits
    S, Lmm = instance
    rng = np.random.default_rng(2)
    Lin = logit_finite_component(np.where(S, rng.random(S.shape) + 0.05, 0.0))
    shift = rng.standard_normal(S.shape[0])
    L = (Lin + 7 * Lmm).T + shift[:, None]
    g = logit_geometry(S, L, L_mm=Lmm, finite_component=Lin)
    assert g["corrected_alignment"] == pytest.approx(1.0, abs=1e-12)
    assert g["logit_alignment"] < 0.999
    E = rng.standard_normal(L.shape)
    C = (L + E).T - (L + E).T.mean(axis=0) - Lin
    g = logit_geometry(S, L + E, L_mm=Lmm, finite_component=Lin)
    assert g["corrected_alignment"] == pytest.approx(
        np.sum(C * Lmm) / np.linalg.norm(C) / np.linalg.norm(Lmm), rel=1e-12)
    with pytest.raises(ValueError, match="finite_component must be finite with shape"):
        logit_geometry(S, L, L_mm=Lmm, finite_component=Lin.T)
    with pytest.raises(ValueError, match="finite_component must be finite"):
        logit_geometry(S, L, L_mm=Lmm, finite_component=np.full(Lin.shape, np.nan))


def test_uncollapsed_contexts_and_unequal_supports():
    S = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 1]], dtype=bool)
    L = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 2.0, 2.0]])
    g = logit_geometry(S, L, L_mm=ntp_logit_svm(S).primal)
    # contexts 0 and 1 (support {0}): (1,0,0) and (0,1,0), mean (.5,.5,0):
    # within 1, total 2
    assert g["subspace_collapse"] == pytest.approx(0.5)
    distinct = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=bool)
    assert np.isnan(logit_geometry(distinct, L)["subspace_collapse"])
    z = logit_geometry(S, np.zeros((3, 3)))
    assert z["logit_alignment"] == 0.0 and z["word_gram_alignment"] == 0.0


def test_bad_input_is_refused(instance):
    S, Lmm = instance
    m, V = S.shape
    with pytest.raises(ValueError, match="either logits"):
        logit_geometry(S)
    with pytest.raises(ValueError, match="either logits"):
        logit_geometry(S, Lmm.T, word_embeddings=np.ones((V, 2)),
                       context_embeddings=np.ones((m, 2)))
    with pytest.raises(ValueError, match="both"):
        logit_geometry(S, word_embeddings=np.ones((V, 2)))
    with pytest.raises(ValueError, match="word_embeddings must be"):
        logit_geometry(S, word_embeddings=np.ones((V, 2)), context_embeddings=np.ones((m, 3)))
    with pytest.raises(ValueError, match="logits must be"):
        logit_geometry(S, Lmm)  # (V, m): the wrong orientation
    with pytest.raises(ValueError, match="logits must be"):
        logit_geometry(S, np.full((m, V), np.nan))
    with pytest.raises(ValueError, match="L_mm must"):
        logit_geometry(S, Lmm.T, L_mm=Lmm.T)
