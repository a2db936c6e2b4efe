"""``skntp.metrics``: alignment, the subspace projector (dense and LSQR) and the
per-iteration metrics, against their definitions."""

import numpy as np
import pytest
import scipy.sparse as sp

from skntp._backend import get_backend
from skntp.metrics import SubspaceProjector, alignment, history_metrics


def orthogonal_projection(A, w):
    """``P w`` onto the row space of ``A``, by the pseudo-inverse."""
    return np.linalg.pinv(A) @ (A @ w)


def test_alignment_is_the_cosine_and_zero_for_zero():
    a, b = np.array([[1.0, 2.0], [0.0, -1.0]]), np.array([[2.0, 0.0], [1.0, 1.0]])
    assert alignment(a, b) == pytest.approx(np.sum(a * b) / np.linalg.norm(a)
                                            / np.linalg.norm(b), rel=1e-15)
    assert alignment(a, -2.0 * a) == pytest.approx(-1.0)
    assert alignment(np.zeros(3), np.ones(3)) == 0.0
    assert alignment(np.ones(3), np.zeros(3)) == 0.0


@pytest.mark.parametrize("max_dense", [30_000_000, 1])  # dense basis, then LSQR
def test_projector_is_the_orthogonal_projection_on_the_row_space(max_dense):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 12))
    A[4] = A[0] + 2 * A[1]  # rank 4
    proj = SubspaceProjector(sp.csr_matrix(A), (3, 4), max_dense=max_dense)
    W = rng.standard_normal((3, 4))
    ref = orthogonal_projection(A, W.ravel()).reshape(3, 4)
    np.testing.assert_allclose(proj.project(W), ref, atol=1e-10)
    assert proj.rank == (4 if max_dense > 1 else None)
    assert (proj.to_backend(get_backend()) is None) == (max_dense == 1)
    assert not proj.is_zero


def test_zero_subspace_projects_to_zero():
    for matrix in (None, sp.csr_matrix((0, 6))):
        proj = SubspaceProjector(matrix, (2, 3))
        assert proj.is_zero and proj.rank == 0
        np.testing.assert_array_equal(proj.project(np.ones((2, 3))), np.zeros((2, 3)))


@pytest.mark.parametrize("max_dense", [30_000_000, 1])
def test_history_metrics_follow_their_definitions(max_dense):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((3, 6))
    proj = SubspaceProjector(sp.csr_matrix(A), (2, 3), max_dense=max_dense)
    direction = rng.standard_normal((2, 3))
    direction /= np.linalg.norm(direction)
    finite = orthogonal_projection(A, rng.standard_normal(6)).reshape(2, 3)
    W = rng.standard_normal((2, 3))
    metrics = history_metrics(get_backend(), 1, direction, finite, proj, prefix="w_")
    row = metrics((np.zeros(1), W))
    assert row["w_norm"] == pytest.approx(np.linalg.norm(W), rel=1e-14)
    assert row["w_alignment_uncorrected"] == pytest.approx(alignment(W, direction), rel=1e-13)
    # with a finite part the alignment is that of w - finite (the estimators' alignment_)
    assert row["w_alignment"] == pytest.approx(alignment(W - finite, direction), rel=1e-13)
    P = orthogonal_projection(A, W.ravel()).reshape(2, 3)
    assert row["w_finite_distance"] == pytest.approx(np.linalg.norm(P - finite), rel=1e-8)
    # at the origin and at the finite component the cosines are 0 by convention
    zero = metrics((np.zeros(1), np.zeros((2, 3))))
    assert zero["w_alignment_uncorrected"] == 0.0 and zero["w_norm"] == 0.0
    assert metrics((np.zeros(1), finite))["w_alignment"] == 0.0
    # without a direction or a projector only the norm (and what can be computed)
    assert set(history_metrics(get_backend())((W,))) == {"norm"}
    assert set(history_metrics(get_backend(), direction=direction)((W,))) == {
        "norm", "alignment"}
