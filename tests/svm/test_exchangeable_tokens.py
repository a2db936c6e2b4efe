"""The exact reduction of the NTP-SVM over exchangeable tokens.

Tokens with identical support columns share their row of ``W^mm``; the
program is solved over the classes of such tokens with scaled scores and
mapped back.  The answer (and its multipliers) must be the full program's:
checked against the full program solved by cvxpy/Clarabel and by the fast
method, and by the KKT conditions of the full program.
"""

import numpy as np
import pytest
from helpers import assert_kkt, rel_err, tight_ntp_svm

from skntp import NTPDecoderClassifier
from skntp.svm import (
    BilinearScores,
    NotSeparableError,
    exchangeable_tokens,
    ntp_svm,
    ntp_svm_problem,
    solve_max_margin,
    solve_ntp_svm,
)


def grouped_supports(rng, m, d, V, smax=3, n_unseen=0):
    """Tokens in groups sharing a teacher row: each support is one whole group.

    ``n_unseen`` extra tokens never occur in a support (one more class).
    """
    sizes = []
    while sum(sizes) < V:
        sizes.append(int(rng.integers(1, smax + 1)))
    sizes[-1] -= sum(sizes) - V
    group = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(group)
    teacher = rng.standard_normal((len(sizes), d))
    H = rng.standard_normal((m, d))
    best = np.argmax(H @ teacher.T, axis=1)
    S = group[None, :] == best[:, None]
    return H, np.concatenate([S, np.zeros((m, n_unseen), bool)], axis=1)


def test_exchangeable_tokens_groups_identical_columns():
    S = np.array([[1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [1, 0, 1, 0, 0]], bool)
    rep, cls, counts = exchangeable_tokens(S)
    np.testing.assert_array_equal(rep, [0, 1, 4])
    np.testing.assert_array_equal(cls, [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(counts, [2, 2, 1])
    # every token's column equals its representative's
    np.testing.assert_array_equal(S, S[:, rep[cls]])


def test_exchangeable_tokens_long_columns():
    """Columns longer than 8 contexts (bit packing) that differ only at the end."""
    S = np.zeros((21, 3), bool)
    S[:, 0] = S[:, 1] = S[:, 2] = True
    S[20, 2] = False
    _, cls, counts = exchangeable_tokens(S)
    np.testing.assert_array_equal(cls, [0, 0, 1])
    np.testing.assert_array_equal(counts, [2, 1])


def test_output_scale_matches_dense_diagonal():
    rng = np.random.default_rng(0)
    Q, W, C = rng.standard_normal((7, 4)), rng.standard_normal((5, 4)), rng.standard_normal((7, 5))
    scale = rng.random(5) + 0.5
    a = BilinearScores(Q, None, n_outputs=5, output_scale=scale)
    b = BilinearScores(Q, np.diag(scale))
    np.testing.assert_allclose(a.forward(np, W), b.forward(np, W), atol=1e-12)
    np.testing.assert_allclose(a.adjoint(np, C), b.adjoint(np, C), atol=1e-12)
    np.testing.assert_allclose(a.matrix().toarray(), b.matrix().toarray(), atol=1e-12)
    with pytest.raises(ValueError, match="output_scale"):
        BilinearScores(Q, np.eye(5), output_scale=scale)


@pytest.mark.parametrize("seed", range(12))
def test_reduced_solve_is_the_full_program(seed):
    check_reduced_solve(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 200))
def test_reduced_solve_is_the_full_program_many(seed):
    check_reduced_solve(seed)


def check_reduced_solve(seed):
    rng = np.random.default_rng(100 + seed)
    m, d = int(rng.integers(20, 70)), int(rng.integers(3, 9))
    H, S = grouped_supports(rng, m, d, int(rng.integers(6, 16)), n_unseen=seed % 3)
    assert exchangeable_tokens(S)[2].size < S.shape[1]  # something to merge
    problem, res = solve_ntp_svm(H, S, method="accelerated-dual", tol=1e-10)
    reference = tight_ntp_svm(H, S)
    if reference is None:
        pytest.skip("Clarabel did not reach its tight tolerances")
    assert rel_err(res.primal, reference) <= 1e-5
    # the mapped-back multipliers certify the full program
    assert_kkt(problem, res)
    # rows of exchangeable tokens are equal
    _, cls, _ = exchangeable_tokens(S)
    for c in np.unique(cls):
        rows = res.primal[cls == c]
        np.testing.assert_allclose(rows, rows[:1].repeat(len(rows), 0), atol=1e-9)


@pytest.mark.parametrize("method", ["cvxpy", "accelerated-dual"])
def test_reduced_matches_unreduced(method):
    rng = np.random.default_rng(7)
    H, S = grouped_supports(rng, 40, 6, 12, n_unseen=4)
    _, merged = solve_ntp_svm(H, S, method=method, tol=1e-10)
    _, plain = solve_ntp_svm(H, S, method=method, tol=1e-10, merge_exchangeable=False)
    assert rel_err(merged.primal, plain.primal) <= 1e-5
    np.testing.assert_allclose(ntp_svm(H, S, method=method, tol=1e-10), merged.primal)


def test_reduced_infeasible_raises():
    """Contexts h and -h with supports in the same token class pattern."""
    rng = np.random.default_rng(3)
    H = rng.standard_normal((6, 4))
    H[1] = -H[0] * 2.0
    S = np.zeros((6, 5), bool)
    S[:, 0] = S[:, 1] = True  # tokens 0, 1 always together: one class
    S[1, 2] = True  # context 1 also has token 2 in its support
    # h_0 needs (w_01 - w_2) . h_0 >= 1, h_1 = -2 h_0 needs (w_01 - w_2) . h_1 = 0
    with pytest.raises(NotSeparableError, match="not NTP-separable"):
        solve_ntp_svm(H, S, method="accelerated-dual")
    with pytest.raises(NotSeparableError, match="not NTP-separable"):
        solve_ntp_svm(H, S, method="cvxpy")


def test_estimator_uses_the_reduction():
    """Unseen vocabulary tokens (one class) share one row of the decoder's W^mm,
    which is the cvxpy answer of the full program."""
    rng = np.random.default_rng(5)
    H, S = grouped_supports(rng, 30, 5, 8)
    wide = np.concatenate([S / S.sum(axis=1, keepdims=True), np.zeros((30, 5))], axis=1)
    est = NTPDecoderClassifier(solver="svm").fit(H, wide)
    W = est.mm_direction_
    assert W.shape == (13, 5)
    np.testing.assert_allclose(W[8:], W[8:9].repeat(5, 0), atol=1e-8)
    reference = tight_ntp_svm(H, wide > 0)
    assert rel_err(W, reference / np.linalg.norm(reference)) <= 1e-5
    assert est.svm_result_.dual.shape == (len(ntp_svm_problem(H, wide > 0).constraints),)


def test_reduction_result_matches_problem_shape():
    rng = np.random.default_rng(9)
    H, S = grouped_supports(rng, 25, 4, 9, n_unseen=2)
    problem, res = solve_ntp_svm(H, S, method="accelerated-dual")
    assert res.primal.shape == problem.shape == (11, 4)
    assert res.dual.shape == (len(problem.constraints),)
    ref = solve_max_margin(problem, method="accelerated-dual")
    assert rel_err(res.primal, ref.primal) <= 1e-5


def test_reduction_torch_backend_same_answer():
    pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    H, S = grouped_supports(rng, 40, 5, 10, n_unseen=3)
    _, a = solve_ntp_svm(H, S, method="accelerated-dual", tol=1e-10)
    _, b = solve_ntp_svm(H, S, method="accelerated-dual", tol=1e-10, backend="torch")
    assert isinstance(b.primal, np.ndarray) and isinstance(b.dual, np.ndarray)
    assert rel_err(b.primal, a.primal) <= 1e-8
    np.testing.assert_allclose(b.dual, a.dual, atol=1e-6 * max(1.0, np.abs(a.dual).max()))
