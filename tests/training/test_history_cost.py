"""What the history costs: record_every's default and the cheap finite-distance metric."""

import numpy as np
import scipy.sparse as sp

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    KeyQuerySelector,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
)
from skntp.datasets import make_ntp_data, make_token_priority_data
from skntp.graphs import cyclic_subspace_basis
from skntp.metrics import SubspaceProjector


def test_record_every_defaults_to_ten_and_keeps_first_and_last():
    for cls in (NTPDecoderClassifier, NTPAttentionClassifier, AttentionSelector,
                JointAttentionSVM, KeyQuerySelector):
        assert cls().get_params()["record_every"] == 10, cls.__name__
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=10, n_tokens=5,
                         support_size=2, random_state=0)
    est = NTPDecoderClassifier(max_iter=35, random_state=0).fit(X, y)
    np.testing.assert_array_equal(est.history_["iteration"], [0, 10, 20, 30, 35])
    every = NTPDecoderClassifier(max_iter=35, record_every=1, random_state=0).fit(X, y)
    np.testing.assert_array_equal(every.coef_, est.coef_)  # recording never changes a fit
    np.testing.assert_allclose(every.history_["finite_distance"][[0, 10, 20, 30, 35]],
                               est.history_["finite_distance"], rtol=1e-12)


def test_coordinates_through_the_sparse_rows_match_the_basis():
    rng = np.random.default_rng(0)
    A = sp.random(40, 300, density=0.02, random_state=1, format="csr")
    A = sp.vstack([A, A[:5] * 2.0]).tocsr()  # dependent rows: rank 40 at most
    proj = SubspaceProjector(A, (300,))
    assert proj._from_rows is not None and proj.basis.shape[1] <= 40
    w = rng.standard_normal(300)
    np.testing.assert_allclose(proj.coordinates(w), proj.basis.T @ w, atol=1e-12)
    # the basis spans the row space of A, orthonormally
    np.testing.assert_allclose(proj.basis.T @ proj.basis, np.eye(proj.basis.shape[1]),
                               atol=1e-12)
    dense_rows = A.toarray()
    np.testing.assert_allclose(proj.project(dense_rows[3]), dense_rows[3], atol=1e-12)


def test_finite_distance_equals_the_projection_distance():
    X, y = make_ntp_data(n_samples=500, n_contexts=10, n_features=12, n_tokens=6,
                         support_size=3, random_state=0)
    est = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=300, random_state=0).fit(X, y)
    # F of eq. (5): spanned by vec((e_z - e_z') h_j^T) for z, z' in the support S_j
    H, P = est.contexts_, est.next_token_probs_
    rows = []
    for j in range(H.shape[0]):
        support = np.flatnonzero(P[j])
        for z in support[1:]:
            rows.append(np.outer(np.eye(P.shape[1])[z] - np.eye(P.shape[1])[support[0]],
                                 H[j]).ravel())
    direct = np.linalg.norm(_project(np.array(rows), est.coef_) - est.finite_component_)
    np.testing.assert_allclose(est.history_["finite_distance"][-1], direct, rtol=1e-10)
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=500).fit(X, y)
    rows = cyclic_subspace_basis(clf.embeddings_, clf.sccs_)  # S_cyc of Def. 3
    direct = np.linalg.norm(_project(rows, clf.coef_) - clf.finite_component_)
    np.testing.assert_allclose(clf.history_["finite_distance"][-1], direct, rtol=1e-10)


def _project(rows, W):
    """The orthogonal projection of ``W`` onto the span of ``rows`` (least squares)."""
    coef = np.linalg.lstsq(rows.T, W.ravel(), rcond=None)[0]
    return (rows.T @ coef).reshape(W.shape)
